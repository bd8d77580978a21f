//! bermd's MCP semantics over its Unix socket, driven as a client would:
//! served tool names, structured results, cancellation, program logs and
//! `tools/list` pagination.

mod common;

use std::collections::BTreeSet;
use std::io::BufRead;

use berm_control::{DeployRequest, LimitsSpec};
use berm_fixtures::tool_result as result_text;
use common::{Bermd, Session, block_on, wasm};
use serde_json::{Value, json};

/// What Claude Desktop and claude.ai accept, the strictest of the clients:
/// `^[a-zA-Z0-9_-]{1,64}$`.
fn portable(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Every tool on every page.
fn all_tools(session: &mut Session) -> Vec<Value> {
    let mut tools = Vec::new();
    let mut params = json!({});
    loop {
        let reply = session.request("tools/list", params);
        let result = &reply["result"];
        tools.extend(result["tools"].as_array().unwrap().iter().cloned());
        match result["nextCursor"].as_str() {
            Some(cursor) => params = json!({"cursor": cursor}),
            None => return tools,
        }
    }
}

/// The next message of any kind (notifications included).
fn next_message(session: &mut Session) -> Value {
    let mut line = String::new();
    let n = session.reader.read_line(&mut line).unwrap();
    assert!(n > 0, "bermd closed the session");
    serde_json::from_str(&line).unwrap()
}

#[test]
fn every_served_name_matches_the_strictest_client_pattern() {
    let bermd = Bermd::start(&[]);
    for app in ["echo", "notes", "files", "hostile", "compose"] {
        bermd.deploy(app, app, &[], LimitsSpec::default());
    }
    bermd.deploy("test", "conformance", &["log"], LimitsSpec::default());
    let mut session = bermd.session();
    let tools = all_tools(&mut session);
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert!(names.len() >= 30, "{names:?}");
    for name in &names {
        assert!(portable(name), "`{name}` is not a portable tool name");
        // The first `_` ends the program's name.
        let (program, tool) = name.split_once('_').unwrap();
        assert!(!program.is_empty() && !tool.is_empty(), "{name}");
    }
    for expected in [
        "echo_echo",
        "files_read_file",
        "test_simple_text",
        "notes_add",
    ] {
        assert!(
            names.contains(&expected),
            "{expected} missing from {names:?}"
        );
    }
    // The longest program name that still fits the longest entry name here
    // (`input_required_result_multiple_inputs`: 37 characters, so 64 - 38 = 26). The
    // conformance app serves resources, whose URIs have one server on an endpoint: `test`
    // goes first.
    let control = bermd.control();
    block_on(control.remove("test")).unwrap();
    let longest = "p".repeat(26);
    bermd.deploy(&longest, "conformance", &[], LimitsSpec::default());
    let tools = all_tools(&mut session);
    let prompts = session.request("prompts/list", json!({}));
    let prompts = prompts["result"]["prompts"].as_array().unwrap();
    let served: Vec<&str> = tools
        .iter()
        .chain(prompts)
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    for name in &served {
        assert!(portable(name), "`{name}` is not a portable name");
    }
    assert!(served.contains(&format!("{longest}_prompt_with_embedded_resource").as_str()));
    assert!(served.contains(&format!("{longest}_input_required_result_multiple_inputs").as_str()));
    assert!(served.contains(&format!("{longest}_multiple_content_types").as_str()));
    let (text, error) = result_text(&session.call("files_read_file", json!({"path": "x"})));
    assert!(error, "{text}");
    assert!(text.contains("not granted to `files`"), "{text}");
}

#[test]
fn deploy_refuses_names_clients_would_refuse_and_says_what_to_rename() {
    let bermd = Bermd::start(&[]);
    let control = bermd.control();
    let image = wasm("conformance");
    let refuse = |name: &str| {
        block_on(control.deploy(
            name,
            &DeployRequest::new(&image, vec![], LimitsSpec::default()),
        ))
        .unwrap_err()
        .to_string()
    };
    let long = "p".repeat(42);
    let message = refuse(&long);
    assert!(
        message.contains(&format!(
            "tool `multiple_content_types` of `{long}` would be served as `{long}_multiple_content_types`, 65 characters; \
             MCP clients accept at most 64: deploy under a program name of at most 41 characters, or shorten the tool's name"
        )),
        "{message}"
    );
    let message = refuse("my_notes");
    assert!(
        message.contains(
            "`my_notes` is not a valid program name: use 1-64 of a-z, 0-9, `-`, starting with a letter or digit \
             (no `_`: it separates program and tool in the names MCP clients see, e.g. `notes_add`)"
        ),
        "{message}"
    );
    assert!(block_on(control.list()).unwrap().is_empty());
}

#[test]
fn a_struct_result_is_structured_content_and_bad_arguments_name_the_field() {
    let bermd = Bermd::start(&[]);
    bermd.deploy("test", "conformance", &[], LimitsSpec::default());
    let mut session = bermd.session();
    let tools = all_tools(&mut session);
    let stats = tools
        .iter()
        .find(|t| t["name"] == "test_text_stats")
        .unwrap();
    assert_eq!(
        stats["outputSchema"]["required"],
        json!(["chars", "words", "lines"])
    );
    let plain = tools
        .iter()
        .find(|t| t["name"] == "test_simple_text")
        .unwrap();
    assert!(plain.get("outputSchema").is_none(), "{plain}");

    let reply = session.call("test_text_stats", json!({"text": "one two\nthree"}));
    let result = &reply["result"];
    let expected = json!({"chars": 13, "words": 3, "lines": 2, "longest": "three"});
    assert_eq!(result["structuredContent"], expected, "{reply}");
    let text: Value = serde_json::from_str(result["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(text, expected);
    // `None` is `null`, which the schema allows.
    let reply = session.call("test_text_stats", json!({"text": ""}));
    assert_eq!(reply["result"]["structuredContent"]["longest"], Value::Null);
    let reply = session.call("test_word_counts", json!({"text": "a b A"}));
    assert_eq!(
        reply["result"]["structuredContent"],
        json!({"a": 2, "b": 1})
    );
    let reply = session.call("test_measure", json!({"rect": {"width": 2, "height": 3}}));
    assert_eq!(
        reply["result"]["structuredContent"],
        json!({"area": 6.0, "perimeter": 10.0})
    );
    // A plain text result carries no structured content.
    let reply = session.call("test_simple_text", json!({}));
    assert!(
        reply["result"].get("structuredContent").is_none(),
        "{reply}"
    );

    // A bad field deep in an argument struct is named.
    let (text, error) = result_text(&session.call(
        "test_measure",
        json!({"rect": {"width": "wide", "height": 3}}),
    ));
    assert!(error);
    assert_eq!(
        text,
        r#"invalid arguments for `test_measure`: `rect.width`: "wide" is not of type "number""#
    );
    // The program's own failure on a result type with a schema.
    let (text, error) =
        result_text(&session.call("test_measure", json!({"rect": {"width": -1, "height": 3}})));
    assert_eq!(
        (text.as_str(), error),
        ("a rectangle's sides cannot be negative", true)
    );
}

/// A module whose manifest promises an object and whose tool returns `"7"`.
const LIAR: &str = r#"(module
  (import "berm" "done" (func $done (param i32 i32) (result i64)))
  (memory (export "memory") 1)
  (data (i32.const 16) "7")
  (func (export "berm_tool_count") (drop (call $done (i32.const 16) (i32.const 1))))
  (@custom "berm.manifest" "{\"abi\":1,\"tools\":[{\"name\":\"count\",\"input_schema\":{\"type\":\"object\"},\"output_schema\":{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\"}},\"required\":[\"n\"]}}]}")
)"#;

#[test]
fn a_result_that_breaks_its_output_schema_is_an_error_result() {
    let bermd = Bermd::start(&[]);
    let image = wat::parse_str(LIAR).unwrap();
    block_on(bermd.control().deploy(
        "liar",
        &DeployRequest::new(&image, vec![], LimitsSpec::default()),
    ))
    .unwrap();
    let mut session = bermd.session();
    let (text, error) = result_text(&session.call("liar_count", json!({})));
    assert!(error);
    assert_eq!(
        text,
        r#"the result of `liar_count` does not match its output schema: 7 is not of type "object""#
    );
}

#[test]
fn a_cancelled_call_stops_frees_its_instance_and_gets_no_answer() {
    // Four instances at most: spins that kept running after their
    // cancellation would fill the pool within four rounds. Calls running at
    // once are not capped below the hundred sent: a call refused for the cap
    // is answered before its cancellation arrives.
    let bermd = Bermd::start(&["--max-instances", "4", "--max-calls-per-program", "128"]);
    let spinning = LimitsSpec {
        deadline_ms: Some(60_000),
        memory_bytes: None,
    };
    bermd.deploy("hostile", "hostile", &[], spinning);
    bermd.deploy(
        "brief",
        "hostile",
        &[],
        LimitsSpec {
            deadline_ms: Some(300),
            memory_bytes: None,
        },
    );
    bermd.deploy("echo", "echo", &[], LimitsSpec::default());
    let mut session = bermd.session();
    for id in 1000..1100 {
        session.send(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "hostile_spin", "arguments": {}}}));
        session.send(
            &json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": id, "reason": "test"}}),
        );
    }
    // Nothing comes back for a cancelled id: the next answer is the ping's.
    let pong = session.request("ping", json!({}));
    assert!(pong["result"].is_object(), "{pong}");
    // The pool is whole: four calls at once all start, and run to their
    // deadline rather than failing for want of an instance. A cancelled call
    // is dropped on its call thread at its next epoch yield, which the
    // ping's answer does not wait for (on a loaded machine it comes tens of
    // ms later, and no fixed sleep covers it): a round that finds the pool
    // still full is tried again. A cancelled spin that kept running would
    // hold its instance to its 60 s deadline, past all these rounds.
    for round in 1.. {
        let spins = bermd.concurrently(4, |_, session| {
            result_text(&session.call("brief_spin", json!({})))
        });
        let pool_full = |text: &str| text.contains("maximum concurrent limit");
        if round < 10 && spins.iter().any(|(text, _)| pool_full(text)) {
            continue;
        }
        for (text, error) in spins {
            assert!(error);
            assert!(text.contains("ran past its deadline of 300ms"), "{text}");
        }
        break;
    }
    // And the session that cancelled answers as before, with nothing left
    // over in between.
    let (text, error) = result_text(&session.call("echo_echo", json!({"message": "after"})));
    assert_eq!((text.as_str(), error), ("after", false));
    let log = bermd.log_text();
    assert!(!log.contains("could not start"), "{log}");
}

#[test]
fn program_logs_reach_the_calling_session_capped_and_escaped() {
    let bermd = Bermd::start(&[]);
    bermd.deploy("test", "conformance", &["log"], LimitsSpec::default());
    let mut session = bermd.session();
    let mut other = bermd.session();
    let reply = session.request("logging/setLevel", json!({"level": "debug"}));
    assert_eq!(reply["result"], json!({}), "{reply}");

    // A forged line and a terminal escape arrive escaped, from logger
    // `test`, before the call's result.
    session.send(&json!({"jsonrpc": "2.0", "id": 77, "method": "tools/call",
        "params": {"name": "test_log_lines", "arguments": {"message": "ok\nINFO forged\u{1b}[31m", "count": 100}}}));
    let mut messages = Vec::new();
    let result = loop {
        let message = next_message(&mut session);
        if message["id"] == 77 {
            break message;
        }
        assert_eq!(message["method"], "notifications/message", "{message}");
        messages.push(message["params"].clone());
    };
    assert_eq!(result_text(&result), ("Logged 100 messages.".into(), false));
    // 64 messages, then one warning that the cap was reached.
    assert_eq!(messages.len(), 65, "{messages:?}");
    for message in &messages[..64] {
        assert_eq!(
            message,
            &json!({"level": "info", "logger": "test", "data": "ok\\nINFO forged\\u{1b}[31m"})
        );
    }
    assert_eq!(messages[64]["level"], "warning");
    assert!(
        messages[64]["data"]
            .as_str()
            .unwrap()
            .starts_with("log cap reached (64 messages or 65536 bytes per call)"),
        "{}",
        messages[64]
    );
    // bermd's own log has every line, escaped.
    let log = bermd.log_text();
    assert_eq!(
        log.matches("ok\\nINFO forged\\u{1b}[31m").count(),
        100,
        "{log}"
    );
    assert!(!log.contains("\nINFO forged"));

    // Above the level set, nothing is sent; another session hears nothing.
    let reply = session.request("logging/setLevel", json!({"level": "warning"}));
    assert_eq!(reply["result"], json!({}));
    session.send(&json!({"jsonrpc": "2.0", "id": 78, "method": "tools/call",
        "params": {"name": "test_tool_with_logging", "arguments": {}}}));
    let message = next_message(&mut session);
    assert_eq!(message["id"], 78, "{message}");
    other.send(&json!({"jsonrpc": "2.0", "id": 5, "method": "ping"}));
    let pong = next_message(&mut other);
    assert_eq!(pong["id"], 5, "{pong}");
}

#[test]
fn tools_list_pages_300_tools_each_listed_once() {
    let bermd = Bermd::start(&["--tools-page-size", "100"]);
    let control = bermd.control();
    let image = wasm("echo");
    // echo has three tools: 100 programs make 300.
    for i in 0..100 {
        block_on(control.deploy(
            &format!("echo{i:03}"),
            &DeployRequest::new(&image, vec![], LimitsSpec::default()),
        ))
        .unwrap();
    }
    let mut session = bermd.session();
    let mut pages = 0;
    let mut names = Vec::new();
    let mut params = json!({});
    loop {
        let reply = session.request("tools/list", params);
        let result = &reply["result"];
        let page = result["tools"].as_array().unwrap();
        assert!(page.len() <= 100, "{}", page.len());
        names.extend(page.iter().map(|t| t["name"].as_str().unwrap().to_string()));
        pages += 1;
        match result["nextCursor"].as_str() {
            Some(cursor) => params = json!({"cursor": cursor}),
            None => break,
        }
    }
    assert_eq!(pages, 3);
    assert_eq!(names.len(), 300);
    let distinct: BTreeSet<_> = names.iter().collect();
    assert_eq!(distinct.len(), 300);
    for i in 0..100 {
        for tool in ["echo", "reverse", "fail"] {
            assert!(distinct.contains(&format!("echo{i:03}_{tool}")));
        }
    }
    // A cursor bermd never gave out is invalid_params.
    let reply = session.request("tools/list", json!({"cursor": "not a cursor"}));
    assert_eq!(reply["error"]["code"], -32602, "{reply}");
}

#[test]
fn by_default_every_tool_is_on_one_page() {
    let bermd = Bermd::start(&[]);
    for app in ["echo", "notes", "files"] {
        bermd.deploy(app, app, &[], LimitsSpec::default());
    }
    let mut session = bermd.session();
    let reply = session.request("tools/list", json!({}));
    assert!(reply["result"].get("nextCursor").is_none(), "{reply}");
    assert_eq!(reply["result"]["tools"].as_array().unwrap().len(), 11);
}

#[test]
fn images_audio_and_resources_go_out_as_content_blocks_and_progress_as_notifications() {
    use base64::Engine as _;
    let bermd = Bermd::start(&[]);
    bermd.deploy("test", "conformance", &[], LimitsSpec::default());
    let mut session = bermd.session();
    session.initialize();
    let base64 = |data: &Value| {
        base64::engine::general_purpose::STANDARD
            .decode(data.as_str().unwrap())
            .unwrap()
    };

    // The blocks are the whole result: no empty text block before them.
    let image = &session.call("test_image_content", json!({}))["result"];
    assert_eq!(image["content"].as_array().unwrap().len(), 1, "{image}");
    assert_eq!(image["content"][0]["type"], "image");
    assert_eq!(image["content"][0]["mimeType"], "image/png");
    assert!(base64(&image["content"][0]["data"]).starts_with(b"\x89PNG\r\n"));
    let audio = &session.call("test_audio_content", json!({}))["result"];
    assert_eq!(audio["content"][0]["mimeType"], "audio/wav", "{audio}");
    assert!(base64(&audio["content"][0]["data"]).starts_with(b"RIFF"));

    // The text first, then the blocks in the order the program added them.
    let mixed = &session.call("test_multiple_content_types", json!({}))["result"];
    let types: Vec<&str> = mixed["content"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["text", "image", "resource"], "{mixed}");
    assert_eq!(
        mixed["content"][2]["resource"],
        json!({"uri": "test://mixed-content-resource", "mimeType": "application/json",
            "text": r#"{"test":"data","value":123}"#})
    );
    assert_eq!(mixed["isError"], false);

    // Progress goes to a request that carries a token, before its result, in order.
    session.send(&json!({"jsonrpc": "2.0", "id": 90, "method": "tools/call",
        "params": {"name": "test_tool_with_progress", "arguments": {},
            "_meta": {"progressToken": "p-1"}}}));
    let mut reports = Vec::new();
    let result = loop {
        let message = next_message(&mut session);
        if message["id"] == 90 {
            break message;
        }
        assert_eq!(message["method"], "notifications/progress", "{message}");
        reports.push(message["params"].clone());
    };
    assert_eq!(
        result_text(&result),
        ("Progress reported three times.".into(), false)
    );
    assert_eq!(
        reports,
        [
            json!({"progressToken": "p-1", "progress": 0.0, "total": 100.0, "message": "started"}),
            json!({"progressToken": "p-1", "progress": 50.0, "total": 100.0, "message": "half way"}),
            json!({"progressToken": "p-1", "progress": 100.0, "total": 100.0, "message": "done"}),
        ]
    );
    // Without a token, nothing but the result.
    session.send(&json!({"jsonrpc": "2.0", "id": 91, "method": "tools/call",
        "params": {"name": "test_tool_with_progress", "arguments": {}}}));
    let message = next_message(&mut session);
    assert_eq!(message["id"], 91, "{message}");
}

/// Item 8 of "Boundaries, round 3": a template's variable is checked after it is
/// percent-decoded, as the program gets it: one path segment, never `.` or `..`, with no `/`,
/// `?`, `#` or NUL, however it was encoded. Such a URI matches nothing, and nothing runs.
#[test]
fn template_variables_are_checked_as_they_decode() {
    let bermd = Bermd::start(&[]);
    bermd.deploy("test", "conformance", &[], LimitsSpec::default());
    let mut session = bermd.session();
    session.initialize();
    for uri in [
        "test://template/..%2F..%2Fetc/data",
        "test://template/%2e%2e%2f%2e%2e%2fetc/data",
        "test://template/../data",
        "test://template/%2E%2E/data",
        "test://template/./data",
        "test://template/%2e/data",
        "test://template/a%2Fb/data",
        "test://template/a%3Fb/data",
        "test://template/a%23b/data",
        "test://template/a%00b/data",
    ] {
        let refused = session.request("resources/read", json!({"uri": uri}));
        assert_eq!(refused["error"]["code"], -32002, "{uri}: {refused}");
        assert_eq!(refused["error"]["data"]["uri"], uri, "{refused}");
        let message = refused["error"]["message"].as_str().unwrap();
        assert!(message.contains("one path segment"), "{message}");
    }
    // A segment that only looks like one of those is read, decoded.
    for (uri, id) in [
        ("test://template/..a/data", "..a"),
        ("test://template/%2e%2e%2e/data", "..."),
        ("test://template/caf%C3%A9/data", "café"),
    ] {
        let data = session.request("resources/read", json!({"uri": uri}));
        let text = data["result"]["contents"][0]["text"]
            .as_str()
            .unwrap_or_else(|| panic!("{uri}: {data}"));
        let body: Value = serde_json::from_str(text).unwrap();
        assert_eq!(body["id"], id, "{data}");
    }
}

#[test]
fn resources_and_prompts_come_from_the_tools_that_serve_them() {
    use base64::Engine as _;
    let bermd = Bermd::start(&[]);
    bermd.deploy("test", "conformance", &[], LimitsSpec::default());
    let mut session = bermd.session();
    session.initialize();

    // Serving tools are not tools.
    let names: Vec<String> = all_tools(&mut session)
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect();
    assert!(names.contains(&"test_simple_text".to_string()), "{names:?}");
    for entry in [
        "test_static_text",
        "test_template_data",
        "test_simple_prompt",
    ] {
        assert!(!names.contains(&entry.to_string()), "{entry} in {names:?}");
    }
    let refused = session.call("test_simple_prompt", json!({}));
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    assert!(
        refused["error"]["message"].as_str().unwrap().contains(
            "`test_simple_prompt` is not a tool; it serves a prompt: get it with prompts/get"
        ),
        "{refused}"
    );

    // Resources, listed and read.
    let listed = session.request("resources/list", json!({}));
    let uris: Vec<&str> = listed["result"]["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["uri"].as_str().unwrap())
        .collect();
    assert_eq!(
        uris,
        [
            "test://static-binary",
            "test://static-text",
            "test://watched-resource"
        ]
    );
    assert_eq!(listed["result"]["resources"][1]["name"], "test_static_text");
    assert_eq!(listed["result"]["resources"][1]["mimeType"], "text/plain");
    let templates = session.request("resources/templates/list", json!({}));
    assert_eq!(
        templates["result"]["resourceTemplates"][0]["uriTemplate"], "test://template/{id}/data",
        "{templates}"
    );
    let text = session.request("resources/read", json!({"uri": "test://static-text"}));
    assert_eq!(
        text["result"]["contents"],
        json!([{"uri": "test://static-text", "mimeType": "text/plain",
            "text": "This is the content of the static text resource."}])
    );
    let binary = session.request("resources/read", json!({"uri": "test://static-binary"}));
    let blob = &binary["result"]["contents"][0];
    assert_eq!(blob["mimeType"], "image/png", "{binary}");
    let png = base64::engine::general_purpose::STANDARD
        .decode(blob["blob"].as_str().unwrap())
        .unwrap();
    assert!(png.starts_with(b"\x89PNG\r\n"));
    // A template's variable reaches the program decoded.
    let data = session.request(
        "resources/read",
        json!({"uri": "test://template/a%20b/data"}),
    );
    let body: Value =
        serde_json::from_str(data["result"]["contents"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(body["id"], "a b", "{data}");
    assert_eq!(
        data["result"]["contents"][0]["uri"],
        "test://template/a%20b/data"
    );
    for unknown in [
        "test://nothing",
        "test://template/1/2/data",
        "test://template//data",
    ] {
        let missing = session.request("resources/read", json!({"uri": unknown}));
        assert_eq!(missing["error"]["code"], -32002, "{missing}");
        assert_eq!(missing["error"]["data"]["uri"], unknown);
    }

    // Prompts, listed and got.
    let prompts = session.request("prompts/list", json!({}));
    let with_args = prompts["result"]["prompts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "test_prompt_with_arguments")
        .unwrap()
        .clone();
    assert_eq!(
        with_args["arguments"],
        json!([
            {"name": "arg1", "description": "First test argument", "required": true},
            {"name": "arg2", "description": "Second test argument", "required": true},
        ])
    );
    let got = session.request(
        "prompts/get",
        json!({"name": "test_prompt_with_arguments", "arguments": {"arg1": "a", "arg2": "b"}}),
    );
    assert_eq!(
        got["result"]["messages"],
        json!([{"role": "user", "content": {"type": "text",
            "text": "Prompt with arguments: arg1='a', arg2='b'"}}])
    );
    let missing = session.request(
        "prompts/get",
        json!({"name": "test_prompt_with_arguments", "arguments": {"arg1": "a"}}),
    );
    assert_eq!(missing["error"]["code"], -32602, "{missing}");
    assert!(
        missing["error"]["message"]
            .as_str()
            .unwrap()
            .contains("arg2"),
        "{missing}"
    );
    let embedded = session.request(
        "prompts/get",
        json!({"name": "test_prompt_with_embedded_resource", "arguments": {"resourceUri": "test://x"}}),
    );
    let kinds: Vec<&str> = embedded["result"]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"]["type"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["resource", "text"], "{embedded}");
    let unknown = session.request("prompts/get", json!({"name": "test_simple_text"}));
    assert_eq!(unknown["error"]["code"], -32602, "{unknown}");

    // Completion: the arguments have no enum, so nothing to suggest; an unknown one is refused.
    let complete = session.request(
        "completion/complete",
        json!({"ref": {"type": "ref/prompt", "name": "test_prompt_with_arguments"},
            "argument": {"name": "arg1", "value": "x"}}),
    );
    assert_eq!(
        complete["result"]["completion"]["values"],
        json!([]),
        "{complete}"
    );
    let bad = session.request(
        "completion/complete",
        json!({"ref": {"type": "ref/resource", "uri": "test://template/{id}/data"},
            "argument": {"name": "nope", "value": ""}}),
    );
    assert_eq!(bad["error"]["code"], -32602, "{bad}");

    // A URI has one server: the same program under another name is refused.
    let image = wasm("conformance");
    let control = bermd.control();
    let refused = block_on(control.deploy(
        "other",
        &DeployRequest::new(&image, vec![], LimitsSpec::default()),
    ))
    .unwrap_err()
    .to_string();
    assert!(
        refused.contains("which program `test` already serves"),
        "{refused}"
    );

    // A subscriber hears that its resource changed when its program goes away.
    let unserved = session.request("resources/subscribe", json!({"uri": "test://nothing"}));
    assert_eq!(unserved["error"]["code"], -32002, "{unserved}");
    // A URI longer than any a program may declare is refused, not kept.
    let long = format!("test://template/{}/data", "x".repeat(4096));
    let refused = session.request("resources/subscribe", json!({"uri": long}));
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    let unread = session.request("resources/read", json!({"uri": long}));
    assert_eq!(unread["error"]["code"], -32002, "{unread}");
    let ok = session.request(
        "resources/subscribe",
        json!({"uri": "test://watched-resource"}),
    );
    assert_eq!(ok["result"], json!({}), "{ok}");
    block_on(control.remove("test")).unwrap();
    let mut heard = BTreeSet::new();
    while !heard.contains("notifications/resources/updated") {
        let message = next_message(&mut session);
        let method = message["method"].as_str().unwrap_or_default().to_string();
        if method == "notifications/resources/updated" {
            assert_eq!(message["params"]["uri"], "test://watched-resource");
        }
        heard.insert(method);
    }
    for method in [
        "notifications/tools/list_changed",
        "notifications/resources/list_changed",
        "notifications/prompts/list_changed",
    ] {
        assert!(heard.contains(method), "{method} not in {heard:?}");
    }
}

#[test]
fn a_program_asks_a_2025_client_over_its_session_only_with_the_grant() {
    let bermd = Bermd::start(&[]);
    bermd.deploy("test", "conformance", &["log"], LimitsSpec::default());
    let open = |capabilities: Value| {
        let mut session = bermd.session();
        let hello = session.request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": capabilities,
                "clientInfo": {"name": "berm-tests", "version": "0"}}),
        );
        assert_eq!(hello["result"]["serverInfo"]["name"], "bermd", "{hello}");
        session.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        session
    };
    let ask = "test_input_required_result_elicitation";

    // Without the `ask` grant, asking is a trap naming the grant.
    let mut session = open(json!({"elicitation": {}}));
    let (text, error) = result_text(&session.call(ask, json!({})));
    assert!(error, "{text}");
    assert!(
        text.contains("called `berm.ask`, which is not granted to `test` (grant `ask`"),
        "{text}"
    );

    bermd.deploy(
        "test",
        "conformance",
        &["log", "ask"],
        LimitsSpec::default(),
    );
    // A client that did not declare elicitation is not asked: MCP's -32021, naming it.
    let mut plain = open(json!({}));
    let refused = plain.call(ask, json!({}));
    assert_eq!(refused["error"]["code"], -32021, "{refused}");
    assert_eq!(
        refused["error"]["data"]["requiredCapabilities"],
        json!({"elicitation": {}})
    );
    assert!(
        refused["error"]["message"].as_str().unwrap().contains(
            "asked the client for `elicitation/create` (request `user_name`), but the client did not declare the `elicitation` capability"
        ),
        "{refused}"
    );

    // One that did is asked over its session, and the tool runs again with the answer.
    let mut session = open(json!({"elicitation": {}}));
    session.send(&json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": ask, "arguments": {}}}));
    let request = next_message(&mut session);
    assert_eq!(request["method"], "elicitation/create", "{request}");
    assert_eq!(request["params"]["message"], "What is your name?");
    session.send(&json!({"jsonrpc": "2.0", "id": request["id"],
        "result": {"action": "accept", "content": {"name": "Ada"}}}));
    let done = session.read();
    assert_eq!(done["id"], 7);
    assert_eq!(result_text(&done), ("Hello, Ada!".to_string(), false));
    // The answer was taken once: the same response again is refused, naming the id.
    session.send(&json!({"jsonrpc": "2.0", "id": request["id"], "result": {}}));
    let again = session.read();
    assert_eq!(again["error"]["code"], -32600, "{again}");

    // A client that refuses the request ends the call with its words, not a hang.
    session.send(&json!({"jsonrpc": "2.0", "id": 8, "method": "tools/call",
        "params": {"name": ask, "arguments": {}}}));
    let request = next_message(&mut session);
    session.send(&json!({"jsonrpc": "2.0", "id": request["id"],
        "error": {"code": -32603, "message": "the user closed the dialog"}}));
    let refused = session.read();
    let (text, error) = result_text(&refused);
    assert!(error, "{text}");
    assert!(
        text.contains("the client did not answer request `user_name`")
            && text.contains("the user closed the dialog"),
        "{text}"
    );
}
