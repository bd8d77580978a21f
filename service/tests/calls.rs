//! Calls between programs are grants (`call=PROGRAM`, `call=PROGRAM_TOOL`), checked like
//! calls from outside: each refusal here with the message the user sees.

mod common;

use berm_control::{CallOutcome, LimitsSpec};
use common::{Bermd, block_on};
use serde_json::{Value, json};

/// What `compose_relay` reports after calling `program.tool` with `args`.
fn relay(bermd: &Bermd, program: &str, tool: &str, args: Value) -> Value {
    let request = json!({ "program": program, "tool": tool, "args": args });
    let answer = block_on(
        bermd
            .control()
            .call("compose_relay", request.to_string().into_bytes()),
    )
    .unwrap();
    assert_eq!(answer.outcome, CallOutcome::Done, "{}", answer.text);
    serde_json::from_str(&answer.text).unwrap()
}

/// Asserts that a report of `compose_relay` says the call was refused with `code` and `text`.
fn assert_refused(report: &Value, code: &str, text: &str) {
    let expected = json!({ "outcome": "refused", "code": code, "text": text });
    assert_eq!(report, &expected);
}

/// The message a call from outside is refused with.
fn refusal(bermd: &Bermd, tool: &str, args: Value) -> String {
    block_on(bermd.control().call(tool, args.to_string().into_bytes()))
        .unwrap_err()
        .to_string()
}

/// The issue's scenario: a program with no grants tries to read another
/// program's files through `berm.call`, which would run with the other's `fs`.
#[test]
fn an_ungranted_program_cannot_launder_another_programs_grants() {
    let bermd = Bermd::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("secret.txt"), "files' own data").unwrap();
    let fs = format!("fs={}:ro", dir.path().display());
    bermd.deploy("files", "files", &[&fs], LimitsSpec::default());
    let read = json!({ "path": "secret.txt" });
    let own = block_on(
        bermd
            .control()
            .call("files_read_file", read.to_string().into_bytes()),
    )
    .unwrap();
    assert_eq!(own.text, "files' own data");

    bermd.deploy("compose", "compose", &[], LimitsSpec::default());
    let request = json!({ "program": "files", "tool": "read_file", "args": read });
    assert_eq!(
        refusal(&bermd, "compose_relay", request.clone()),
        "`compose_relay` called `berm.call`, which is not granted to `compose` \
         (grant `call=PROGRAM` to allow it)"
    );

    // A grant to call one program opens no other.
    bermd.deploy("compose", "compose", &["call=echo"], LimitsSpec::default());
    let report = relay(&bermd, "files", "read_file", read);
    assert_refused(
        &report,
        "denied",
        "`compose_relay` called `files_read_file`, which is not granted to `compose` \
         (grant `call=files` or `call=files_read_file` to allow it)",
    );
    assert!(!report.to_string().contains("files' own data"));
}

#[test]
fn a_tool_grant_opens_that_tool_only_and_the_manifest_bounds_every_grant() {
    let bermd = Bermd::start(&[]);
    bermd.deploy("echo", "echo", &[], LimitsSpec::default());
    bermd.deploy("notes", "notes", &["kv"], LimitsSpec::default());
    bermd.deploy(
        "compose",
        "compose",
        &["call=echo_echo", "call=notes"],
        LimitsSpec::default(),
    );
    let message = json!({ "message": "m" });
    assert_eq!(relay(&bermd, "echo", "echo", message.clone())["text"], "m");
    let report = relay(&bermd, "echo", "reverse", message.clone());
    assert_refused(
        &report,
        "denied",
        "`compose_relay` called `echo_reverse`, which is not granted to `compose` \
         (grant `call=echo` or `call=echo_reverse` to allow it)",
    );
    let report = relay(&bermd, "notes", "list", json!({}));
    assert_refused(
        &report,
        "denied",
        "`compose_relay` called `notes`, which `compose` does not declare in its manifest's \
         `calls` (it declares echo, compose, hostile, files); a program calls only the \
         programs it declares",
    );

    let listed = block_on(bermd.control().get("compose")).unwrap();
    let grants: Vec<String> = listed.grants.iter().map(ToString::to_string).collect();
    assert_eq!(grants, ["call=echo_echo", "call=notes"]);
}

#[test]
fn a_nested_call_gets_the_schema_check_of_a_call_from_outside() {
    let bermd = Bermd::start(&[]);
    bermd.deploy("echo", "echo", &[], LimitsSpec::default());
    bermd.deploy("compose", "compose", &["call=echo"], LimitsSpec::default());
    let bad = json!({ "message": 7 });
    let outer = refusal(&bermd, "echo_echo", bad.clone());
    let report = relay(&bermd, "echo", "echo", bad);
    assert_refused(&report, "invalid", &outer);
    assert_eq!(
        outer,
        "invalid arguments for `echo_echo`: `message`: 7 is not of type \"string\""
    );
}

#[test]
fn a_nested_call_takes_one_of_the_callees_call_slots() {
    let bermd = Bermd::start(&["--max-calls-per-program", "1"]);
    bermd.deploy(
        "compose",
        "compose",
        &["call=compose"],
        LimitsSpec::default(),
    );
    // The outer call holds compose's one slot; the call it makes to itself
    // is refused as a second call from outside would be.
    let answer = block_on(
        bermd
            .control()
            .call("compose_recurse", br#"{"depth":1}"#.to_vec()),
    )
    .unwrap();
    assert_eq!(answer.outcome, CallOutcome::Failed);
    assert!(
        answer.text.ends_with(
            "`compose` already has 1 calls running, its cap (bermd --max-calls-per-program); \
             try again when one ends"
        ),
        "{}",
        answer.text
    );
}
