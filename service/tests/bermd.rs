//! bermd as a process: persistence across `kill -9`, concurrency, hostile
//! input and hostile programs, fs escapes, grants, HTTP address rules.

mod common;

use std::process::Command;
use std::sync::mpsc;

use berm_control::LimitsSpec;
use berm_fixtures::tool_result as result_text;
use common::{Bermd, Session, block_on};
use serde_json::json;

#[test]
fn deployments_and_acknowledged_writes_survive_kill_9() {
    let bermd = Bermd::start(&[]);
    let deployed = bermd.deploy("notes", "notes", &["kv"], LimitsSpec::default());
    assert_eq!(deployed.program.code_source, "compiled");
    bermd.deploy(
        "echo",
        "echo",
        &[],
        LimitsSpec {
            deadline_ms: Some(1234),
            memory_bytes: None,
        },
    );
    let mut session = bermd.session();
    for i in 0..20 {
        let (text, error) = result_text(&session.call(
            "notes_add",
            json!({"title": format!("n{i}"), "text": format!("body {i}")}),
        ));
        assert!(!error, "{text}");
    }
    let (_, error) = result_text(&session.call("notes_delete", json!({"id": 3})));
    assert!(!error);

    let (home, _dir) = bermd.kill9();

    let restarted = Bermd::start_in(&home, &[]);
    let programs = block_on(restarted.control().list()).unwrap();
    let names: Vec<_> = programs.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["echo", "notes"]);
    for program in &programs {
        // Restored from the compiled-code cache: nothing was compiled.
        assert_eq!(program.code_source, "disk_cache", "{}", program.name);
    }
    assert_eq!(programs[0].limits.deadline_ms, Some(1234));
    assert_eq!(programs[1].grants, vec![berm_control::Grant::Kv]);
    let mut session = restarted.session();
    let (text, _) = result_text(&session.call("notes_list", json!({})));
    let listed: Vec<serde_json::Value> = serde_json::from_str(&text).unwrap();
    assert_eq!(listed.len(), 19);
    assert!(!text.contains("\"n2\""), "note 3 was deleted: {text}");
    let (text, _) = result_text(&session.call("notes_search", json!({"query": "body 19"})));
    assert!(text.contains("n19"), "{text}");
}

#[test]
fn a_corrupt_record_is_reported_and_skipped() {
    let bermd = Bermd::start(&[]);
    bermd.deploy("echo", "echo", &[], LimitsSpec::default());
    bermd.deploy("other", "echo", &[], LimitsSpec::default());
    let (home, _dir) = bermd.kill9();
    std::fs::write(home.join("deployments/broken.json"), b"{ not json").unwrap();
    std::fs::write(
        home.join("deployments/lost.json"),
        br#"{"name":"lost","digest":"sha256:0000000000000000000000000000000000000000000000000000000000000000","grants":[]}"#,
    )
    .unwrap();
    let restarted = Bermd::start_in(&home, &[]);
    let names: Vec<_> = block_on(restarted.control().list())
        .unwrap()
        .into_iter()
        .map(|p| p.name)
        .collect();
    assert_eq!(names, ["echo", "other"]);
    let log = restarted.log_text();
    assert!(
        log.contains("deployment record") && log.contains("broken.json is corrupt"),
        "{log}"
    );
    assert!(log.contains("for `lost` is missing"), "{log}");
}

#[test]
fn eight_clients_times_a_thousand_calls_are_all_answered_correctly() {
    let bermd = Bermd::start(&[]);
    bermd.deploy("echo", "echo", &[], LimitsSpec::default());
    let answered: usize = bermd
        .concurrently(8, |client, session| {
            for i in 0..1000 {
                let message = format!("client {client} call {i}");
                let (text, error) =
                    result_text(&session.call("echo_reverse", json!({"message": message})));
                assert!(!error);
                assert_eq!(text, message.chars().rev().collect::<String>());
            }
            1000
        })
        .into_iter()
        .sum();
    assert_eq!(answered, 8000);
}

#[test]
fn bad_input_gets_errors_and_bermd_stays_up() {
    let mut bermd = Bermd::start(&["--max-frame-bytes", "65536"]);
    bermd.deploy("echo", "echo", &[], LimitsSpec::default());
    let mut session = bermd.session();

    session.send_raw(b"this is not json\n");
    let reply = session.read();
    assert_eq!(reply["error"]["code"], -32700, "{reply}");
    assert_eq!(reply["id"], serde_json::Value::Null);

    let mut huge = vec![b'x'; 200_000];
    huge.push(b'\n');
    session.send_raw(&huge);
    let reply = session.read();
    assert_rpc_error(&reply, -32600, "frame cap of 65536 bytes");

    let reply = session.request("no/such/method", json!({}));
    assert_eq!(reply["error"]["code"], -32601, "{reply}");

    let reply = session.call("echo_nosuch", json!({}));
    assert_rpc_error(&reply, -32602, "no tool `echo_nosuch`");
    for unknown in ["echo.echo", "noseparator", "echo_", "_echo"] {
        let reply = session.call(unknown, json!({}));
        assert_eq!(reply["error"]["code"], -32602, "{reply}");
    }

    // Arguments that break the schema are a result the model reads, naming
    // the field and the rule.
    let (text, error) =
        result_text(&session.call("echo_echo", json!({"message": ["not", "a", "string"]})));
    assert!(error);
    assert_eq!(
        text,
        r#"invalid arguments for `echo_echo`: `message`: ["not","a","string"] is not of type "string""#
    );
    let (text, error) = result_text(&session.call("echo_echo", json!({})));
    assert!(error);
    assert_eq!(
        text,
        r#"invalid arguments for `echo_echo`: "message" is a required property"#
    );

    // Well-formed JSON that is not JSON-RPC.
    session.send_raw(b"[1, 2, 3]\n");
    let reply = session.read();
    assert_rpc_error(&reply, -32600, "a batch (a JSON array) is not supported");
    // A notification gets no answer, even one nobody knows.
    session.send_raw(b"{\"jsonrpc\": \"2.0\", \"method\": \"notifications/nosuch\"}\n");

    // The session and bermd are still fine.
    let (text, error) = result_text(&session.call("echo_echo", json!({"message": "still here"})));
    assert_eq!((text.as_str(), error), ("still here", false));
    // A client that hangs up mid-message does not hurt anyone.
    let mut rude = Session::connect(&bermd.home.join("mcp.sock"));
    rude.send_raw(b"{\"jsonrpc\": \"2.0\", \"id\": 1, \"meth");
    drop(rude);
    let mut fresh = bermd.session();
    let (text, _) = result_text(&fresh.call("echo_echo", json!({"message": "fresh"})));
    assert_eq!(text, "fresh");
    assert!(bermd.alive());
}

/// Each hostile line of `berm_fixtures::hostile`, in the same write as valid requests
/// (so bermd reads them at once), gets exactly its own answer, and the valid requests
/// theirs; repeated, to catch a race.
#[test]
fn each_hostile_line_costs_only_itself() {
    use berm_fixtures::hostile;
    let frame_cap = hostile::MAX_FRAME_BYTES.to_string();
    let bermd = Bermd::start(&["--max-frame-bytes", &frame_cap]);
    let mut session = Session::connect(&bermd.home.join("mcp.sock"));
    hostile::initialize(&mut session.writer, &mut session.reader);
    hostile::assert_each_costs_only_itself(&mut session.writer, &mut session.reader, 20);
}

#[test]
fn a_message_arriving_in_pieces_is_read_whole_while_answers_go_out() {
    let bermd = Bermd::start(&[]);
    bermd.deploy("echo", "echo", &[], LimitsSpec::default());
    let mut session = bermd.session();
    let call = |id: u64, message: &str| {
        let mut line = serde_json::to_vec(&json!({
            "jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "echo_echo", "arguments": {"message": message}},
        }))
        .unwrap();
        line.push(b'\n');
        line
    };
    let answer = |session: &mut Session, id: u64| {
        let reply = session.read();
        assert_eq!(reply["id"], id, "{reply}");
        result_text(&reply).0
    };

    // A whole call, then the opening of a large one: bermd answers the
    // first while the rest of the second is still on its way, so the
    // answer going out must not cost the half-read message.
    let big = "b".repeat(200_000);
    let second = call(101, &big);
    let (one_third, two_thirds) = (second.len() / 3, 2 * second.len() / 3);
    let mut opening = call(100, "first");
    opening.extend_from_slice(&second[..one_third]);
    session.send_raw(&opening);
    assert_eq!(answer(&mut session, 100), "first");
    session.send_raw(&second[one_third..two_thirds]);
    std::thread::sleep(std::time::Duration::from_millis(50));
    let mut closing = second[two_thirds..].to_vec();
    closing.extend_from_slice(&call(102, "third"));
    session.send_raw(&closing);
    // Answers to calls in flight together may come in either order.
    let mut answers: std::collections::BTreeMap<u64, String> = (0..2)
        .map(|_| {
            let reply = session.read();
            (reply["id"].as_u64().unwrap(), result_text(&reply).0)
        })
        .collect();
    assert_eq!(answers.remove(&101).as_deref(), Some(big.as_str()));
    assert_eq!(answers.remove(&102).as_deref(), Some("third"));

    // The same for a line the guard answers itself.
    let mut opening = call(103, "fourth");
    opening.extend_from_slice(b"this is not");
    session.send_raw(&opening);
    assert_eq!(answer(&mut session, 103), "fourth");
    session.send_raw(b" json\n");
    let reply = session.read();
    assert_eq!(reply["error"]["code"], -32700, "{reply}");
    let (text, _) = result_text(&session.call("echo_echo", json!({"message": "after"})));
    assert_eq!(text, "after");
}

#[test]
fn fs_escapes_are_refused() {
    let dir = berm_fixtures::tree(&[("granted/inside.txt", "inside"), ("secret.txt", "secret")]);
    let root = dir.path().join("granted");
    std::os::unix::fs::symlink(dir.path().join("secret.txt"), root.join("link")).unwrap();
    std::os::unix::fs::symlink(dir.path(), root.join("parent")).unwrap();
    let bermd = Bermd::start(&[]);
    bermd.deploy(
        "files",
        "files",
        &[&format!("fs={}:rw", root.display())],
        LimitsSpec::default(),
    );
    let mut session = bermd.session();
    for path in [
        "../secret.txt",
        "/etc/passwd",
        &dir.path().join("secret.txt").display().to_string(),
        "link",
        "parent/secret.txt",
    ] {
        let (text, error) = result_text(&session.call("files_read_file", json!({"path": path})));
        assert!(error, "{path} was read: {text}");
        assert!(
            text.contains("leaves the granted directory"),
            "{path}: {text}"
        );
    }
    let (text, error) = result_text(&session.call(
        "files_write_file",
        json!({"path": "../escaped.txt", "content": "x"}),
    ));
    assert!(
        error && text.contains("leaves the granted directory"),
        "{text}"
    );
    let (text, error) = result_text(&session.call(
        "files_write_file",
        json!({"path": "parent/escaped.txt", "content": "x"}),
    ));
    assert!(error, "{text}");
    assert!(!dir.path().join("escaped.txt").exists());
    let (text, error) = result_text(&session.call("files_list_dir", json!({"path": ".."})));
    assert!(error, "{text}");
    // Inside is fine.
    let (text, error) =
        result_text(&session.call("files_read_file", json!({"path": "inside.txt"})));
    assert_eq!((text.as_str(), error), ("inside", false));
    let (_, error) = result_text(&session.call(
        "files_write_file",
        json!({"path": "sub/new.txt", "content": "new"}),
    ));
    assert!(!error);
    assert_eq!(
        std::fs::read_to_string(root.join("sub/new.txt")).unwrap(),
        "new"
    );
    let (text, _) = result_text(&session.call("files_grep", json!({"pattern": "new"})));
    assert_eq!(text, "sub/new.txt:1: new");
}

#[test]
fn an_ungranted_syscall_traps_naming_the_grant() {
    let bermd = Bermd::start(&[]);
    bermd.deploy("files", "files", &[], LimitsSpec::default());
    bermd.deploy("notes", "notes", &["log"], LimitsSpec::default());
    let mut session = bermd.session();
    // A host error of the call is a result the model reads.
    let (message, error) = result_text(&session.call("files_read_file", json!({"path": "x"})));
    assert!(error);
    assert!(
        message.contains(
            "called `fs.read`, which is not granted to `files` (grant `fs=DIR` to allow it)"
        ),
        "{message}"
    );
    let (message, error) = result_text(&session.call("notes_list", json!({})));
    assert!(error);
    assert!(message.contains("(grant `kv` to allow it)"), "{message}");
}

/// The scheduling class (`policy`, field 41 of `stat`) and state of each
/// thread of `pid` named `name`.
fn threads_named(pid: u32, name: &str) -> Vec<(char, u32)> {
    let mut threads = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
    {
        let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        if &stat[open + 1..close] != name {
            continue;
        }
        // After the name: field 3 (the state) onwards.
        let fields: Vec<&str> = stat[close + 2..].split(' ').collect();
        let state = fields[0].chars().next().unwrap_or('?');
        threads.push((state, fields[38].parse().unwrap()));
    }
    threads
}

#[test]
fn a_call_that_computes_for_long_runs_in_the_idle_class() {
    /// Linux's `SCHED_IDLE`.
    const SCHED_IDLE: u32 = 5;
    let bermd = Bermd::start(&[]);
    bermd.deploy(
        "hostile",
        "hostile",
        &[],
        LimitsSpec {
            deadline_ms: Some(5000),
            memory_bytes: None,
        },
    );
    let socket = bermd.home.join("mcp.sock");
    let spinning = std::thread::spawn(move || {
        let mut session = Session::connect(&socket);
        session.initialize();
        session.call("hostile_spin", json!({}))
    });
    // Every background thread is in the idle class from its start.
    let background = threads_named(bermd.child.id(), "berm-long-call");
    assert!(!background.is_empty(), "no background threads");
    assert!(
        background.iter().all(|(_, policy)| *policy == SCHED_IDLE),
        "{background:?}"
    );
    // Past its first 2 ms of CPU the spin runs on one of them, whatever
    // else this machine is doing: one is runnable for as long as it spins.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(4);
    loop {
        let background = threads_named(bermd.child.id(), "berm-long-call");
        if background.iter().any(|(state, _)| *state == 'R') {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the spin never ran on a background thread: {background:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let (message, error) = result_text(&spinning.join().unwrap());
    assert!(error);
    assert!(message.contains("ran past its deadline of 5s"), "{message}");
}

#[test]
fn a_hostile_program_does_not_hold_up_others() {
    let mut bermd = Bermd::start(&[]);
    bermd.deploy_echo_and_hostile(LimitsSpec {
        deadline_ms: Some(5000),
        memory_bytes: Some(32 << 20),
    });
    let socket = bermd.home.join("mcp.sock");
    // Two spinning calls (one per core) and a memory bomb, all at once.
    let (done, finished) = mpsc::channel();
    for tool in ["spin", "spin", "memory_bomb"] {
        let socket = socket.clone();
        let done = done.clone();
        std::thread::spawn(move || {
            let mut session = Session::connect(&socket);
            session.initialize();
            let reply = session.call(&format!("hostile_{tool}"), json!({}));
            done.send((tool, reply)).unwrap();
        });
    }
    std::thread::sleep(std::time::Duration::from_millis(200));
    let mut session = bermd.session();
    for i in 0..50 {
        let (text, _) =
            result_text(&session.call("echo_echo", json!({"message": format!("m{i}")})));
        assert_eq!(text, format!("m{i}"));
    }
    // Every echo was answered while the spins were still running: they end
    // only at their 5 s deadline.
    let early: Vec<_> = finished.try_iter().collect();
    assert!(early.iter().all(|(t, _)| *t == "memory_bomb"), "{early:?}");
    let mut messages = Vec::new();
    for _ in early.len()..3 {
        let (_, reply) = finished.recv().unwrap();
        let (message, error) = result_text(&reply);
        assert!(error, "{reply}");
        messages.push(message);
    }
    assert!(
        messages
            .iter()
            .filter(|m| m.contains("ran past its deadline of 5s"))
            .count()
            >= 2,
        "{messages:?}"
    );
    assert!(bermd.alive());
    let (text, _) = result_text(&session.call("echo_echo", json!({"message": "after"})));
    assert_eq!(text, "after");
    let (message, error) = result_text(&session.call("hostile_memory_bomb", json!({})));
    assert!(error);
    assert!(
        message.contains("tried to grow its memory past the cap of 33554432 bytes"),
        "{message}"
    );
}

#[test]
fn http_off_loopback_is_refused_without_a_token() {
    let dir = tempfile::tempdir().unwrap();
    let run = Command::new(env!("CARGO_BIN_EXE_bermd"))
        .args(["--http", "0.0.0.0:0"])
        .env("BERM_HOME", dir.path().join("home"))
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        stderr.contains("refusing to serve MCP on 0.0.0.0:0: it is not a loopback address"),
        "{stderr}"
    );
}

#[test]
fn a_second_bermd_on_the_same_home_is_refused() {
    let bermd = Bermd::start(&[]);
    let run = Command::new(env!("CARGO_BIN_EXE_bermd"))
        .env("BERM_HOME", &bermd.home)
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&run.stderr).contains("another bermd already serves"));
}

#[test]
fn sockets_and_home_are_private() {
    use berm_fixtures::mode;
    let bermd = Bermd::start(&[]);
    assert_eq!(mode(&bermd.home), 0o700);
    assert_eq!(mode(&bermd.home.join("mcp.sock")), 0o600);
    assert_eq!(mode(&bermd.home.join("control.sock")), 0o600);
}

/// `reply` is a JSON-RPC error with `code` and a message that contains `part`.
fn assert_rpc_error(reply: &serde_json::Value, code: i64, part: &str) {
    assert_eq!(reply["error"]["code"], code, "{reply}");
    assert!(
        reply["error"]["message"].as_str().unwrap().contains(part),
        "{reply}"
    );
}
