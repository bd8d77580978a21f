//! The runtime through its public API, with the example programs.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use berm::abi::word::ErrorCode;
use berm::{
    Berm, CallOptions, CompileSource, DeployOptions, Error, Grants, Limits, Reply, Syscall,
    SyscallError, call,
};
use common::{app, engine};

fn berm_with(programs: &[&str]) -> Berm {
    let berm = Berm::new(&engine(), call::DEFAULT_CALL_DEPTH, vec![]);
    for name in programs {
        berm.deploy(name, &app(name)).unwrap();
    }
    berm
}

async fn text(
    berm: &Berm,
    program: &str,
    tool: &str,
    args: &str,
) -> Result<Result<String, String>, Error> {
    berm.call(None, program, tool, args.as_bytes().to_vec())
        .await
        .map(|r| r.map(|output| output.text).map_err(|f| f.message))
}

/// [`text`] of a call that must not hit a host error: the program's answer or its failure.
async fn answered(berm: &Berm, program: &str, tool: &str, args: &str) -> Result<String, String> {
    text(berm, program, tool, args)
        .await
        .unwrap_or_else(|e| panic!("{program}.{tool}: host error: {e}"))
}

/// The host error (a trap, a deadline, a refusal) a call must end with.
async fn host_error(berm: &Berm, program: &str, tool: &str, args: &str) -> Error {
    text(berm, program, tool, args)
        .await
        .expect_err("the call must end with a host error")
}

/// The failure message of a call that must run and fail.
async fn failed(berm: &Berm, program: &str, tool: &str, args: &str) -> String {
    answered(berm, program, tool, args)
        .await
        .expect_err("the program must fail")
}

#[tokio::test]
async fn echo_answers_and_fails_on_demand() {
    let berm = berm_with(&["echo"]);
    assert_eq!(
        answered(&berm, "echo", "echo", r#"{"message":"hello"}"#).await,
        Ok("hello".into())
    );
    assert_eq!(
        answered(&berm, "echo", "reverse", r#"{"message":"abc"}"#).await,
        Ok("cba".into())
    );
    assert_eq!(
        answered(&berm, "echo", "fail", r#"{"message":"nope"}"#).await,
        Err("nope".into())
    );
    let bad = failed(&berm, "echo", "echo", r#"{"mesage":"x"}"#).await;
    assert!(
        bad.starts_with("invalid arguments: unknown field `mesage`"),
        "{bad}"
    );
}

#[tokio::test]
async fn nothing_survives_a_call() {
    let berm = berm_with(&["hostile"]);
    for _ in 0..5 {
        assert_eq!(
            answered(&berm, "hostile", "counter", "{}").await,
            Ok("1".into())
        );
    }
}

#[tokio::test]
async fn unknown_programs_and_tools_are_outer_errors() {
    let berm = berm_with(&["echo"]);
    let e = host_error(&berm, "nope", "echo", "{}").await;
    assert_eq!(e.to_string(), "no program named `nope` is deployed");
    let e = host_error(&berm, "echo", "shout", "{}").await;
    assert_eq!(
        e.to_string(),
        "program `echo` has no tool `shout` (its tools: echo, fail, reverse)"
    );
    assert!(e.is_refusal());
    assert!(berm.remove("echo").is_some());
    assert!(matches!(
        text(&berm, "echo", "echo", "{}").await,
        Err(Error::NoSuchProgram(_))
    ));
}

#[tokio::test]
async fn a_missing_syscall_traps_only_the_tool_that_reaches_for_it() {
    let berm = berm_with(&["hostile"]);
    assert_eq!(
        answered(&berm, "hostile", "counter", "{}").await,
        Ok("1".into())
    );
    let e = host_error(&berm, "hostile", "read_file", r#"{"path":"x"}"#).await;
    assert_eq!(
        e.to_string(),
        "`hostile_read_file` called `fs.read`, which this host does not serve"
    );
    assert_eq!(
        answered(&berm, "hostile", "counter", "{}").await,
        Ok("1".into())
    );
}

fn fs_read_table(calls: Arc<AtomicUsize>) -> Vec<Syscall> {
    vec![Syscall::new("fs", "read", move |ctx, request| {
        calls.fetch_add(1, Ordering::SeqCst);
        let [path] = berm::abi::frame::decode_exact::<1>(request)
            .map_err(|e| SyscallError::code(ErrorCode::Invalid, e.to_string()))?;
        match path {
            b"hello.txt" => Ok(Reply::Staged(
                format!("hello from {}", ctx.program).into_bytes(),
            )),
            _ => Err(SyscallError::code(ErrorCode::NotFound, "no such file")),
        }
    })]
}

#[tokio::test]
async fn syscalls_are_served_only_when_granted() {
    let calls = Arc::new(AtomicUsize::new(0));
    let berm = Berm::new(
        &engine(),
        call::DEFAULT_CALL_DEPTH,
        fs_read_table(calls.clone()),
    );
    berm.deploy("granted", &app("hostile")).unwrap();
    berm.deploy_with(
        "bare",
        &app("hostile"),
        DeployOptions {
            grants: Grants::none(),
            ..Default::default()
        },
    )
    .unwrap();

    assert_eq!(
        answered(&berm, "granted", "read_file", r#"{"path":"hello.txt"}"#).await,
        Ok("hello from granted".into())
    );
    let missing = failed(&berm, "granted", "read_file", r#"{"path":"nope"}"#).await;
    assert_eq!(missing, "no such file (not_found)");

    let e = host_error(&berm, "bare", "read_file", r#"{"path":"hello.txt"}"#).await;
    assert_eq!(
        e.to_string(),
        "`bare_read_file` called `fs.read`, which is not granted to `bare` (grant `fs=DIR` to allow it)"
    );
    assert_eq!(
        calls.load(Ordering::SeqCst),
        2,
        "the ungranted call never reached the handler"
    );
}

#[tokio::test]
async fn a_syscall_can_stop_the_call() {
    let table = vec![Syscall::new("fs", "read", |_, _| {
        Err(SyscallError::Trap("quota exhausted".into()))
    })];
    let berm = Berm::new(&engine(), call::DEFAULT_CALL_DEPTH, table);
    berm.deploy("hostile", &app("hostile")).unwrap();
    let e = host_error(&berm, "hostile", "read_file", r#"{"path":"a"}"#).await;
    assert_eq!(
        e.to_string(),
        "`hostile_read_file` was stopped by `fs.read`: quota exhausted"
    );
}

/// What `compose.relay` reports after calling `program.tool` with `{"message": message}`.
async fn relay(berm: &Berm, program: &str, tool: &str, message: &str) -> serde_json::Value {
    let args =
        format!(r#"{{"program":"{program}","tool":"{tool}","args":{{"message":"{message}"}}}}"#);
    let reply = answered(berm, "compose", "relay", &args).await.unwrap();
    serde_json::from_str(&reply).unwrap()
}

#[tokio::test]
async fn programs_call_each_other_by_name() {
    let berm = berm_with(&["echo", "compose", "hostile"]);
    assert_eq!(
        answered(&berm, "compose", "shout", r#"{"message":"hi"}"#).await,
        Ok("HI".into())
    );

    // (program, tool, the fields of compose's report)
    let cases = [
        ("echo", "echo", &[("outcome", "done"), ("text", "m")][..]),
        ("echo", "fail", &[("outcome", "failed"), ("text", "m")]),
        (
            "files",
            "read_file",
            &[
                ("outcome", "refused"),
                ("code", "not_found"),
                ("text", "no program named `files` is deployed"),
            ],
        ),
        (
            "echo",
            "nope",
            &[("outcome", "refused"), ("code", "not_found")],
        ),
    ];
    for (program, tool, fields) in cases {
        let report = relay(&berm, program, tool, "m").await;
        for (field, value) in fields {
            assert_eq!(report[field], *value, "{program}.{tool}: {report}");
        }
    }

    let fault = relay(&berm, "hostile", "panic", "boom").await;
    assert_eq!(fault["outcome"], "fault");
    assert!(
        fault["text"]
            .as_str()
            .unwrap()
            .starts_with("`hostile_panic` panicked: panicked at"),
        "{fault}"
    );
    assert!(fault["text"].as_str().unwrap().contains("boom"), "{fault}");
}

/// Asserts that a report of `compose.relay` says the call was refused with `code` and `text`.
fn assert_refused(report: &serde_json::Value, code: &str, text: &str) {
    let expected = serde_json::json!({ "outcome": "refused", "code": code, "text": text });
    assert_eq!(report, &expected);
}

/// `compose` deployed beside `echo` with only `grants`.
fn compose_granted(grants: &[&str]) -> Berm {
    let berm = berm_with(&["echo", "hostile"]);
    let grants = grants.iter().map(|g| g.parse().unwrap()).collect();
    let options = DeployOptions {
        grants: Grants::Only(grants),
        ..Default::default()
    };
    berm.deploy_with("compose", &app("compose"), options)
        .unwrap();
    berm
}

#[tokio::test]
async fn berm_call_is_linked_only_when_granted() {
    let berm = compose_granted(&[]);
    let e = host_error(&berm, "compose", "shout", r#"{"message":"hi"}"#).await;
    assert_eq!(
        e.to_string(),
        "`compose_shout` called `berm.call`, which is not granted to `compose` \
         (grant `call=PROGRAM` to allow it)"
    );
    // A program that declares one callee is told that one's grant.
    let wat = r#"(module
        (@custom "berm.manifest" "{\"abi\":1,\"calls\":[\"echo\"],\"tools\":[{\"name\":\"go\",\"input_schema\":{\"type\":\"object\"}}]}")
        (import "berm" "call" (func $call (param i32 i32) (result i64)))
        (memory (export "memory") 1)
        (func (export "berm_tool_go") (drop (call $call (i32.const 0) (i32.const 0)))))"#;
    let options = DeployOptions {
        grants: Grants::none(),
        ..Default::default()
    };
    berm.deploy_with("one", &wat::parse_str(wat).unwrap(), options)
        .unwrap();
    let e = host_error(&berm, "one", "go", "{}").await;
    assert_eq!(
        e.to_string(),
        "`one_go` called `berm.call`, which is not granted to `one` (grant `call=echo` to allow it)"
    );
}

#[tokio::test]
async fn a_call_reaches_only_what_its_grants_and_manifest_name() {
    let berm = compose_granted(&["call=echo_echo"]);
    assert_eq!(
        answered(&berm, "compose", "shout", r#"{"message":"hi"}"#).await,
        Ok("HI".into())
    );
    let report = relay(&berm, "echo", "fail", "m").await;
    assert_refused(
        &report,
        "denied",
        "`compose_relay` called `echo_fail`, which is not granted to `compose` \
         (grant `call=echo` or `call=echo_fail` to allow it)",
    );
    // Refused before the callee is looked up: an ungranted program cannot
    // learn which programs exist.
    let report = relay(&berm, "hostile", "counter", "m").await;
    assert_eq!(report["code"], "denied", "{report}");

    // A grant the manifest does not declare opens nothing.
    let berm = compose_granted(&["call=notes"]);
    berm.deploy("notes", &app("notes")).unwrap();
    let report = relay(&berm, "notes", "list", "m").await;
    // The whole message is asserted where a user sees it (service/tests/calls.rs).
    assert_eq!(report["code"], "denied", "{report}");
    let text = report["text"].as_str().unwrap();
    assert!(text.contains("which `compose` does not declare"), "{text}");
}

#[tokio::test]
async fn a_nested_call_meets_the_callees_own_caps() {
    let berm = compose_granted(&["call=echo", "call=hostile"]);
    let small = Limits {
        max_args_bytes: 64,
        deadline: Duration::from_millis(200),
        ..Limits::default()
    };
    for name in ["echo", "hostile"] {
        let options = DeployOptions {
            limits: Some(small.clone()),
            ..Default::default()
        };
        berm.deploy_with(name, &app(name), options).unwrap();
    }
    let message = "m".repeat(100);
    let outer = host_error(
        &berm,
        "echo",
        "echo",
        &format!(r#"{{"message":"{message}"}}"#),
    )
    .await;
    let report = relay(&berm, "echo", "echo", &message).await;
    assert_refused(&report, "too_large", &outer.to_string());
    assert_eq!(
        outer.to_string(),
        "arguments to `echo_echo` are 114 bytes, over the cap of 64 bytes"
    );
    // The callee's own deadline holds inside a caller's longer one.
    let args = r#"{"program":"hostile","tool":"spin","args":{}}"#;
    let report: serde_json::Value =
        serde_json::from_str(&answered(&berm, "compose", "relay", args).await.unwrap()).unwrap();
    assert_eq!(report["outcome"], "fault", "{report}");
    assert_eq!(
        report["text"],
        "`hostile_spin` ran past its deadline of 200ms and was stopped"
    );
}

#[tokio::test]
async fn call_depth_is_limited() {
    let berm = berm_with(&["compose"]);
    assert_eq!(
        answered(&berm, "compose", "recurse", r#"{"depth":3}"#).await,
        Ok("bottom".into())
    );
    let failure = failed(&berm, "compose", "recurse", "{}").await;
    assert!(
        failure
            .ends_with("refused: call depth limit of 8 reached: `compose_recurse` was not called"),
        "{failure}"
    );

    let shallow = Berm::new(&engine(), 2, vec![]);
    shallow.deploy("compose", &app("compose")).unwrap();
    let failure = failed(&shallow, "compose", "recurse", r#"{"depth":5}"#).await;
    assert!(
        failure.contains("call depth limit of 2 reached"),
        "{failure}"
    );
}

#[tokio::test]
async fn nested_calls_share_the_outer_deadline() {
    let berm = berm_with(&["compose", "hostile"]);
    // The programs' own deadline is 5 s; the outer call gets 300 ms. If the
    // nested call had a deadline of its own, it would spin for 5 s.
    let options = CallOptions {
        deadline: Some(Duration::from_millis(300)),
        ..CallOptions::default()
    };
    let args = br#"{"program":"hostile","tool":"spin","args":{}}"#.to_vec();
    let started = std::time::Instant::now();
    let result = berm
        .call_with(None, "compose", "relay", args, &options)
        .await;
    let elapsed = started.elapsed();
    match result {
        Err(Error::Timeout {
            program, deadline, ..
        }) => {
            assert_eq!(program, "compose");
            assert_eq!(deadline, Duration::from_millis(300));
        }
        Ok(Ok(json)) => assert!(
            json.text.contains("ran past its deadline of 300ms"),
            "{json}"
        ),
        other => panic!("unexpected: {other:?}"),
    }
    assert!(
        elapsed < Duration::from_secs(4),
        "the nested call ran on its own deadline: {elapsed:?}"
    );
}

#[tokio::test]
async fn every_bound_holds_and_the_next_call_succeeds() {
    let berm = berm_with(&["echo", "hostile"]);
    let check_alive = || async {
        assert_eq!(
            answered(&berm, "hostile", "counter", "{}").await,
            Ok("1".into())
        );
        assert_eq!(
            answered(&berm, "echo", "echo", r#"{"message":"ok"}"#).await,
            Ok("ok".into())
        );
    };

    let options = CallOptions {
        deadline: Some(Duration::from_millis(200)),
        ..CallOptions::default()
    };
    let e = berm
        .call_with(None, "hostile", "spin", b"{}".to_vec(), &options)
        .await
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "`hostile_spin` ran past its deadline of 200ms and was stopped"
    );
    check_alive().await;

    let e = host_error(&berm, "hostile", "memory_bomb", "{}").await;
    assert_eq!(
        e.to_string(),
        "`hostile_memory_bomb` tried to grow its memory past the cap of 16777216 bytes"
    );
    check_alive().await;

    let e = host_error(&berm, "hostile", "recurse", "{}").await;
    assert_eq!(
        e.to_string(),
        "`hostile_recurse` exhausted its stack of 524288 bytes (unbounded recursion?)"
    );
    check_alive().await;

    let e = host_error(&berm, "hostile", "flood", r#"{"bytes":300000}"#).await;
    assert_eq!(
        e.to_string(),
        "`hostile_flood` produced 300000 bytes, over the result cap of 262144 bytes"
    );
    check_alive().await;
    assert_eq!(
        answered(&berm, "hostile", "flood", r#"{"bytes":3}"#).await,
        Ok("xxx".into())
    );

    let e = host_error(&berm, "hostile", "panic", r#"{"message":"on purpose"}"#).await;
    let message = e.to_string();
    assert!(
        message.starts_with("`hostile_panic` panicked: panicked at"),
        "{message}"
    );
    assert!(message.ends_with("on purpose"), "{message}");
    check_alive().await;

    let big = format!(r#"{{"message":"{}"}}"#, "a".repeat(70 << 10));
    let e = host_error(&berm, "echo", "echo", &big).await;
    assert_eq!(
        e.to_string(),
        format!(
            "arguments to `echo_echo` are {} bytes, over the cap of 65536 bytes",
            big.len()
        )
    );
    check_alive().await;
}

#[tokio::test]
async fn per_program_limits_override_the_engine_defaults() {
    let berm = Berm::new(&engine(), call::DEFAULT_CALL_DEPTH, vec![]);
    let limits = Limits {
        memory_bytes: 2 << 20,
        ..Limits::default()
    };
    berm.deploy_with(
        "small",
        &app("hostile"),
        DeployOptions {
            limits: Some(limits),
            ..Default::default()
        },
    )
    .unwrap();
    let e = host_error(&berm, "small", "memory_bomb", "{}").await;
    assert_eq!(
        e.to_string(),
        "`small_memory_bomb` tried to grow its memory past the cap of 2097152 bytes"
    );

    let too_big = Limits {
        memory_bytes: 2 << 30,
        ..Limits::default()
    };
    let e = berm
        .deploy_with(
            "huge",
            &app("echo"),
            DeployOptions {
                limits: Some(too_big),
                ..Default::default()
            },
        )
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "memory cap of 2147483648 bytes exceeds this engine's maximum of 1073741824 bytes"
    );
}

#[tokio::test]
async fn many_calls_at_once_all_answer() {
    let berm = berm_with(&["echo"]);
    let mut tasks = Vec::new();
    for i in 0..200 {
        let berm = berm.clone();
        tasks.push(tokio::spawn(async move {
            let args = format!(r#"{{"message":"m{i}"}}"#);
            let out = berm.call(None, "echo", "echo", args.into_bytes()).await;
            (i, out.unwrap().unwrap().text)
        }));
    }
    for task in tasks {
        let (i, out) = task.await.unwrap();
        assert_eq!(out, format!("m{i}"));
    }
}

#[test]
fn the_same_digest_compiles_once() {
    let berm = Berm::new(&engine(), call::DEFAULT_CALL_DEPTH, vec![]);
    let first = berm.deploy("a", &app("echo")).unwrap();
    let second = berm.deploy("b", &app("echo")).unwrap();
    assert_eq!(first.source, CompileSource::Compiled);
    assert_eq!(second.source, CompileSource::Memory);
    assert_eq!(first.digest, second.digest);
    let again = berm.deploy("a", &app("hostile")).unwrap();
    assert_eq!(again.replaced, Some(first.digest));
    let names: Vec<String> = berm.list().into_iter().map(|p| p.name).collect();
    assert_eq!(names, ["a", "b"]);
}

/// Run by `compiled_code_survives_a_restart` in a second process.
#[test]
#[ignore = "runs only as the child of compiled_code_survives_a_restart"]
fn cache_child() {
    let dir = std::env::var("BERM_TEST_CACHE_DIR").expect("BERM_TEST_CACHE_DIR");
    println!("child-source={:?}", deploy_echo(Path::new(&dir)));
}

/// Where `echo`'s code came from when a berm with the code cache `dir` deployed it.
fn deploy_echo(dir: &Path) -> CompileSource {
    let berm = Berm::with_code_cache(&engine(), call::DEFAULT_CALL_DEPTH, vec![], dir.into());
    berm.deploy("echo", &app("echo")).unwrap().source
}

#[test]
fn compiled_code_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(deploy_echo(dir.path()), CompileSource::Compiled);

    let child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "cache_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("BERM_TEST_CACHE_DIR", dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&child.stdout);
    assert!(
        child.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&child.stderr)
    );
    assert!(stdout.contains("child-source=DiskCache"), "{stdout}");

    // A damaged cache file is discarded and the program recompiled.
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        std::fs::write(entry.unwrap().path(), b"not compiled code").unwrap();
    }
    assert_eq!(deploy_echo(dir.path()), CompileSource::Compiled);
}

/// `fs.read` as a blocking syscall: the request is read in place, the path
/// copied, and the reply comes from a future that waits (here, a timer)
/// while the call's instance holds no thread. `waiting` counts the calls
/// waiting at once, `most` the largest count seen.
fn blocking_fs_read_table(waiting: Arc<AtomicUsize>, most: Arc<AtomicUsize>) -> Vec<Syscall> {
    vec![Syscall::blocking("fs", "read", move |ctx, request| {
        let [path] = berm::abi::frame::decode_exact::<1>(request)
            .map_err(|e| SyscallError::code(ErrorCode::Invalid, e.to_string()))?;
        let (path, program) = (path.to_vec(), ctx.program.to_string());
        assert!(ctx.deadline > std::time::Instant::now());
        let (waiting, most) = (waiting.clone(), most.clone());
        Ok(Box::pin(async move {
            most.fetch_max(waiting.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(200)).await;
            waiting.fetch_sub(1, Ordering::SeqCst);
            match path.as_slice() {
                b"hello.txt" => Ok(Reply::Staged(format!("waited for {program}").into_bytes())),
                _ => Err(SyscallError::code(ErrorCode::NotFound, "no such file")),
            }
        }) as berm::Pending)
    })]
}

#[tokio::test(flavor = "current_thread")]
async fn a_blocking_syscall_waits_without_holding_the_thread() {
    let (waiting, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let berm = Berm::new(
        &engine(),
        call::DEFAULT_CALL_DEPTH,
        blocking_fs_read_table(waiting, most.clone()),
    );
    berm.deploy("hostile", &app("hostile")).unwrap();
    // Ten calls on one thread: all ten are waiting in their syscall at
    // once, because a waiting call yields the thread.
    let mut calls = tokio::task::JoinSet::new();
    for _ in 0..10 {
        let berm = berm.clone();
        calls.spawn(
            async move { text(&berm, "hostile", "read_file", r#"{"path":"hello.txt"}"#).await },
        );
    }
    while let Some(answer) = calls.join_next().await {
        assert_eq!(answer.unwrap().unwrap(), Ok("waited for hostile".into()));
    }
    assert_eq!(most.load(Ordering::SeqCst), 10);
    let missing = failed(&berm, "hostile", "read_file", r#"{"path":"nope"}"#).await;
    assert_eq!(missing, "no such file (not_found)");
}

/// `t.stage` stages as many bytes as its region holds; `t.held` notes how many bytes of its
/// program's host memory are held when it runs.
fn host_memory_table(held: Arc<std::sync::Mutex<Vec<usize>>>) -> Vec<Syscall> {
    vec![
        Syscall::new("t", "stage", |_, region| {
            Ok(Reply::Staged(vec![1; region.len()]))
        }),
        Syscall::new("t", "held", move |cx, _| {
            held.lock().unwrap().push(cx.host_memory().held());
            Ok(Reply::Word(0))
        }),
    ]
}

#[tokio::test]
async fn a_staged_reply_holds_host_memory_until_pulled_replaced_or_the_call_ends() {
    let held = Arc::new(std::sync::Mutex::new(Vec::new()));
    let berm = Berm::new(
        &engine(),
        call::DEFAULT_CALL_DEPTH,
        host_memory_table(held.clone()),
    );
    let body = r#"
        (memory (export "memory") 1)
        (func (export "berm_tool_go")
          (drop (call $stage (i32.const 0) (i32.const 1000)))
          (drop (call $held (i32.const 0) (i32.const 0)))
          ;; pulled
          (drop (call $reply (i32.const 0) (i32.const 4096)))
          (drop (call $held (i32.const 0) (i32.const 0)))
          ;; replaced
          (drop (call $stage (i32.const 0) (i32.const 1000)))
          (drop (call $stage (i32.const 0) (i32.const 600)))
          (drop (call $held (i32.const 0) (i32.const 0)))
          ;; a buffer too small to pull into keeps it
          (drop (call $reply (i32.const 0) (i32.const 10)))
          (drop (call $held (i32.const 0) (i32.const 0)))
          (drop (call $done (i32.const 0) (i32.const 0))))
        (func (export "berm_tool_trap")
          (drop (call $stage (i32.const 0) (i32.const 1500)))
          unreachable)
        (func (export "berm_tool_big") (local $w i64)
          (local.set $w (call $stage (i32.const 0) (i32.const 1501)))
          (if (i64.lt_s (local.get $w) (i64.const 0))
            (then (drop (call $fail (i32.const 8192)
              (i32.wrap_i64 (call $reply (i32.const 8192) (i32.const 4096))))))
            (else (drop (call $done (i32.const 0) (i32.const 0))))))
        (func (export "berm_tool_held")
          (drop (call $held (i32.const 0) (i32.const 0)))
          (drop (call $done (i32.const 0) (i32.const 0))))"#;
    let program = berm_fixtures::wat_program(
        &["go", "trap", "big", "held"],
        &["berm.done", "berm.fail", "berm.reply", "t.stage", "t.held"],
        body,
    );
    let options = DeployOptions {
        host_memory_bytes: Some(1500),
        ..Default::default()
    };
    berm.deploy_with("holder", &program, options).unwrap();
    let taken = || std::mem::take(&mut *held.lock().unwrap());

    assert_eq!(
        answered(&berm, "holder", "go", "{}").await,
        Ok(String::new())
    );
    assert_eq!(taken(), [1000, 0, 600, 600]);
    // Released when the call ends, whether it returned or trapped.
    assert_eq!(
        answered(&berm, "holder", "held", "{}").await,
        Ok(String::new())
    );
    assert!(
        host_error(&berm, "holder", "trap", "{}")
            .await
            .to_string()
            .contains("unreachable")
    );
    assert_eq!(
        answered(&berm, "holder", "held", "{}").await,
        Ok(String::new())
    );
    assert_eq!(taken(), [0, 0]);
    // One byte over the budget: the program gets too_large and the message.
    assert_eq!(
        failed(&berm, "holder", "big", "{}").await,
        "`t.stage`: holding 1501 more bytes would take `holder` past its host memory budget of \
         1500 bytes (bermd --max-host-memory); its calls already hold 0 bytes in replies not yet \
         pulled and requests in flight. Pull each reply before the next syscall, or make fewer \
         calls at once"
    );
}
