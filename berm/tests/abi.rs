//! The ABI from the other side: hand-written modules that speak it without
//! the SDK, and every deploy refusal with its exact message.

mod common;

use std::sync::Arc;

use berm::{Berm, DeployError, Error, call};
use common::{app, engine, manifest, wat_program};

fn berm() -> Berm {
    Berm::new(&engine(), call::DEFAULT_CALL_DEPTH, vec![])
}

/// A module body that imports each of `imports` from `berm` as `$name`, each
/// `(ptr: i32, len: i32) -> i64` as the ABI has it, exports one page of memory, then `rest`.
fn with_imports(imports: &[&str], rest: &str) -> String {
    let imports: String = imports
        .iter()
        .map(|name| {
            format!("(import \"berm\" \"{name}\" (func ${name} (param i32 i32) (result i64)))\n")
        })
        .collect();
    format!("{imports}(memory (export \"memory\") 1)\n{rest}")
}

/// A tool written straight against the ABI: pulls its arguments with
/// `berm.args` (asking for the length first), and hands them back with
/// `berm.done`.
fn raw_echo() -> String {
    with_imports(&["args", "done", "fail"], RAW_ECHO)
}

/// [`raw_echo`] after its imports and memory: its data and its one tool.
const RAW_ECHO: &str = r#"
  (data (i32.const 0) "no arguments")
  (func (export "berm_tool_raw")
    (local $len i32)
    (local.set $len (i32.wrap_i64 (call $args (i32.const 1024) (i32.const 0))))
    (if (i32.eqz (local.get $len))
      (then (drop (call $fail (i32.const 0) (i32.const 12))) (return)))
    (drop (call $args (i32.const 1024) (local.get $len)))
    (drop (call $done (i32.const 1024) (local.get $len))))
"#;

#[tokio::test]
async fn a_module_written_by_hand_speaks_the_abi() {
    let berm = berm();
    berm.deploy("raw", &wat_program(&manifest(&["raw"]), &raw_echo()))
        .unwrap();
    let out = berm
        .call(None, "raw", "raw", b"{\"a\":1}".to_vec())
        .await
        .unwrap();
    assert_eq!(out, Ok(berm::Output::text("{\"a\":1}")));
    let out = berm.call(None, "raw", "raw", Vec::new()).await.unwrap();
    assert_eq!(out.unwrap_err().message, "no arguments");
}

#[tokio::test]
async fn calls_between_programs_stage_their_reply() {
    // `caller.go` calls `raw.raw` with the frames [program, tool, args] built
    // in its data segment, then pulls the staged reply and returns it.
    let body = r#"
      (data (i32.const 0) "\03\00\00\00raw\03\00\00\00raw\02\00\00\00hi")
      (func (export "berm_tool_go")
        (local $word i64) (local $len i32)
        (local.set $word (call $call (i32.const 0) (i32.const 20)))
        (local.set $len (i32.wrap_i64 (i64.and (local.get $word) (i64.const 0xffffffff))))
        (drop (call $reply (i32.const 512) (local.get $len)))
        (drop (call $done (i32.const 512) (local.get $len))))
    "#;
    let body = with_imports(&["call", "reply", "done"], body);
    let berm = berm();
    berm.deploy("raw", &wat_program(&manifest(&["raw"]), &raw_echo()))
        .unwrap();
    // It declares what it calls: the manifest's `calls` is enforced.
    let declared = manifest(&["go"]).replacen(r#"{"abi":1,"#, r#"{"abi":1,"calls":["raw"],"#, 1);
    berm.deploy("caller", &wat_program(&declared, &body))
        .unwrap();
    assert_eq!(
        berm.call(None, "caller", "go", vec![]).await.unwrap(),
        Ok(berm::Output::text("hi"))
    );
}

/// The `berm.done` import and a memory, which most hand-written tools below start with.
const WITH_DONE: &str = r#"
  (import "berm" "done" (func $done (param i32 i32) (result i64)))
  (memory (export "memory") 1)
"#;

/// Deploys `body` as `name` with the one tool `tool` and calls it: the outer error the call
/// ends with.
async fn violation(berm: &Berm, name: &str, tool: &str, body: &str) -> Error {
    berm.deploy(name, &wat_program(&manifest(&[tool]), body))
        .unwrap();
    berm.call(None, name, tool, vec![]).await.unwrap_err()
}

#[tokio::test]
async fn convention_violations_are_outer_errors() {
    let berm = berm();
    // (program, tool, module, the error its call ends with)
    let cases = [
        (
            "quiet",
            "quiet",
            r#"(memory (export "memory") 1) (func (export "berm_tool_quiet"))"#.to_owned(),
            "`quiet_quiet` broke the calling convention: the tool returned without calling `berm.done` or `berm.fail`",
        ),
        (
            "wild",
            "wild",
            format!(
                r#"{WITH_DONE} (func (export "berm_tool_wild") (drop (call $done (i32.const 65000) (i32.const 1000))))"#
            ),
            "`wild_wild` broke the calling convention: pointer 0xfde8 + length 1000 is outside its 65536-byte memory",
        ),
        (
            "twice",
            "twice",
            format!(
                r#"{WITH_DONE}
                (func (export "berm_tool_twice")
                  (drop (call $done (i32.const 0) (i32.const 1)))
                  (drop (call $done (i32.const 0) (i32.const 1))))"#
            ),
            "`twice_twice` broke the calling convention: the tool gave its result twice",
        ),
        (
            "bytes",
            "bytes",
            format!(
                r#"{WITH_DONE}
                (data (i32.const 0) "\ff\fe")
                (func (export "berm_tool_bytes") (drop (call $done (i32.const 0) (i32.const 2))))"#
            ),
            "`bytes_bytes` broke the calling convention: its result is not UTF-8",
        ),
        (
            "trap",
            "t",
            r#"(memory (export "memory") 1) (func (export "berm_tool_t") unreachable)"#.to_owned(),
            "`trap_t` trapped: wasm trap: wasm `unreachable` instruction executed",
        ),
    ];
    for (name, tool, module, error) in cases {
        let e = violation(&berm, name, tool, &module).await;
        assert_eq!(e.to_string(), error);
    }

    let start = format!(
        r#"{WITH_DONE}
        (func $init (drop (call $done (i32.const 0) (i32.const 0))))
        (start $init)
        (func (export "berm_tool_t"))"#
    );
    let e = violation(&berm, "start", "t", &start).await;
    assert!(matches!(e, Error::Convention { .. }), "{e}");
    assert!(e.to_string().contains("before the call started"), "{e}");
}

fn refusal(name: &str, wasm: &[u8]) -> String {
    berm().deploy(name, wasm).unwrap_err().to_string()
}

#[test]
fn deploy_refuses_what_would_not_work_and_says_why() {
    let memory = r#"(memory (export "memory") 1)"#;
    let tool = |name: &str| format!(r#"(func (export "berm_tool_{name}"))"#);

    assert_eq!(
        refusal("x", b"hello, not wasm"),
        "not a WebAssembly module: missing the `\\0asm` magic number at the start"
    );
    assert!(refusal("x", b"\0asm\x01\0\0\0\x01\x05").starts_with("not a WebAssembly module: "));
    assert_eq!(
        refusal(
            "x",
            &wat::parse_str(format!("(module {memory} {})", tool("a"))).unwrap()
        ),
        "the module has no `berm.manifest` section: build it with berm-guest, or see docs/design/abi.md"
    );
    assert_eq!(
        refusal("x", &wat_program(r#"{"abi":1,"tools":[]}"#, memory)),
        "the module declares no tools"
    );
    assert_eq!(
        refusal(
            "x",
            &wat_program(&manifest(&["a", "b"]), &format!("{memory} {}", tool("a")))
        ),
        "the manifest declares tool `b` but the module does not export `berm_tool_b`"
    );
    assert_eq!(
        refusal(
            "x",
            &wat_program(
                &manifest(&["a"]),
                &format!("{memory} {} {}", tool("a"), tool("c"))
            )
        ),
        "the module exports `berm_tool_c` but the manifest does not declare tool `c`"
    );
    assert_eq!(
        refusal(
            "x",
            &wat_program(&manifest(&["a", "a"]), &format!("{memory} {}", tool("a")))
        ),
        "tool `a` is declared twice"
    );
    assert_eq!(
        refusal(
            "x",
            &wat_program(&manifest(&["a.b"]), &format!("{memory} {}", tool("a.b")))
        ),
        "tool name `a.b` is not valid: use 1-64 of a-z, 0-9, `_`, `-`, starting with a letter or digit (no dots)"
    );
    assert_eq!(
        refusal("x", &wat_program(r#"{"abi":2,"tools":[]}"#, memory)),
        "the module was built for berm ABI v2; this host speaks v1"
    );
    assert!(
        refusal("x", &wat_program("{not json", memory))
            .starts_with("the `berm.manifest` section is not valid: ")
    );
    assert_eq!(
        refusal("x", &wat_program(&manifest(&["a"]), &tool("a"))),
        "the module does not export its linear memory as `memory`"
    );
    assert_eq!(
        refusal(
            "x",
            &wat_program(
                r#"{"abi":1,"tools":[{"name":"a","input_schema":{"type":"string"}}]}"#,
                &format!("{memory} {}", tool("a"))
            )
        ),
        "tool `a`: input_schema must be a JSON Schema object with \"type\": \"object\""
    );
    for bad in ["Echo", "a.b", "", "-x", "my_notes"] {
        assert_eq!(
            refusal(bad, &app("echo")),
            format!(
                "`{bad}` is not a valid program name: use 1-64 of a-z, 0-9, `-`, starting with a letter or digit (no `_`: it separates program and tool in the names MCP clients see, e.g. `notes_add`)"
            )
        );
    }
}

#[test]
fn deploy_refuses_imports_outside_the_abi() {
    let m = manifest(&["a"]);
    let tool = r#"(memory (export "memory") 1) (func (export "berm_tool_a"))"#;
    assert_eq!(
        refusal(
            "x",
            &wat_program(
                &m,
                &format!(
                    r#"(import "env" "mem" (memory 1)) {}"#,
                    r#"(func (export "berm_tool_a"))"#
                )
            )
        ),
        "import `env.mem` is a memory; programs may import only functions"
    );
    assert_eq!(
        refusal(
            "x",
            &wat_program(
                &m,
                &format!(r#"(import "kv" "get" (func (param i32) (result i32))) {tool}"#)
            )
        ),
        "import `kv.get` has type (i32) -> i32; berm imports are (i32, i32) -> i64"
    );
    assert_eq!(
        refusal(
            "x",
            &wat_program(
                &m,
                &format!(r#"(import "berm" "exit" (func (param i32 i32) (result i64))) {tool}"#)
            )
        ),
        "import `berm.exit` is not part of berm's calling convention (ABI v1)"
    );
    assert_eq!(
        refusal(
            "x",
            &wat_program(
                &m,
                r#"(memory (export "memory") 1) (func (export "berm_tool_a") (param i32))"#
            )
        ),
        "export `berm_tool_a` must be a function of type () -> ()"
    );
    assert!(
        refusal(
            "x",
            &wat_program(
                &m,
                r#"(memory (export "memory") 1) (func (export "berm_tool_a") i32.add)"#
            )
        )
        .starts_with("the module does not compile: ")
    );
}

#[tokio::test]
async fn a_failed_deploy_changes_nothing() {
    let berm = berm();
    berm.deploy("echo", &app("echo")).unwrap();
    let e = berm.deploy("echo", b"garbage").unwrap_err();
    assert!(matches!(e, DeployError::Manifest(_)));
    let out = berm
        .call(
            None,
            "echo",
            "echo",
            br#"{"message":"still here"}"#.to_vec(),
        )
        .await
        .unwrap();
    assert_eq!(out, Ok(berm::Output::text("still here")));
}

/// Tools that add content blocks with `berm.content`: a good one, and each way of breaking it.
const CONTENT_TOOLS: &str = r#"
  ;; [image, "", image/png, PNG] at 0 (33 bytes); [video, "", "", ""] at 64 (21 bytes);
  ;; [text, "", "", x] at 96 (21 bytes).
  (data (i32.const 0) "\05\00\00\00image\00\00\00\00\09\00\00\00image/png\03\00\00\00PNG")
  (data (i32.const 64) "\05\00\00\00video\00\00\00\00\00\00\00\00\00\00\00\00")
  (data (i32.const 96) "\04\00\00\00text\00\00\00\00\00\00\00\00\01\00\00\00x")
  (data (i32.const 128) "see")
  (func (export "berm_tool_pic")
    (drop (call $content (i32.const 0) (i32.const 33)))
    (drop (call $content (i32.const 96) (i32.const 21)))
    (drop (call $done (i32.const 128) (i32.const 3))))
  (func (export "berm_tool_bad")
    (drop (call $content (i32.const 64) (i32.const 21)))
    (drop (call $done (i32.const 128) (i32.const 3))))
  (func (export "berm_tool_late")
    (drop (call $done (i32.const 128) (i32.const 3)))
    (drop (call $content (i32.const 96) (i32.const 21))))
  (func (export "berm_tool_many")
    (local $i i32)
    (loop $more
      (drop (call $content (i32.const 96) (i32.const 21)))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $more (i32.lt_u (local.get $i) (i32.const 65))))
    (drop (call $done (i32.const 128) (i32.const 3))))
"#;

#[tokio::test]
async fn content_blocks_ride_beside_the_text_and_a_bad_one_stops_the_call() {
    let berm = berm();
    let tools = manifest(&["pic", "bad", "late", "many"]);
    let image = wat_program(&tools, &with_imports(&["content", "done"], CONTENT_TOOLS));
    berm.deploy("c", &image).unwrap();
    let out = berm.call(None, "c", "pic", vec![]).await.unwrap().unwrap();
    assert_eq!(out.text, "see");
    let kinds: Vec<_> = out.content.iter().map(|b| b.kind.name()).collect();
    assert_eq!(kinds, ["image", "text"]);
    assert_eq!(
        (
            out.content[0].mime_type.as_str(),
            out.content[0].body.as_slice()
        ),
        ("image/png", &b"PNG"[..])
    );
    let convention = |tool: &'static str| {
        let berm = &berm;
        async move {
            match berm.call(None, "c", tool, vec![]).await {
                Err(Error::Convention { message, .. }) => message,
                other => panic!("{tool}: {other:?}"),
            }
        }
    };
    assert_eq!(
        convention("bad").await,
        "berm.content: content kind `video` is not one of text, image, audio, resource_text, resource_blob, resource_link"
    );
    assert_eq!(
        convention("late").await,
        "berm.content after the tool gave its result"
    );
    assert_eq!(
        convention("many").await,
        "berm.content: more than 64 content blocks"
    );

    // Blocks count against the result cap (URI, media type and body), with the text.
    let small = berm::Limits {
        max_result_bytes: 4,
        ..berm::Limits::default()
    };
    let options = berm::DeployOptions {
        limits: Some(small),
        ..Default::default()
    };
    berm.deploy_with("small", &image, options).unwrap();
    match berm.call(None, "small", "pic", vec![]).await {
        Err(Error::ResultTooLarge { size, cap: 4, .. }) => assert_eq!(size, 12),
        other => panic!("{other:?}"),
    }
}

/// One report: the program, progress, total and message.
type Report = (String, f64, Option<f64>, Option<String>);

/// What a [`berm::ProgressSink`] heard.
#[derive(Default)]
struct Heard(std::sync::Mutex<Vec<Report>>);

impl berm::ProgressSink for Heard {
    fn report(&self, program: &str, progress: &berm::Progress<'_>) {
        let message = progress.message.map(str::to_string);
        let report = (
            program.to_string(),
            progress.progress,
            progress.total,
            message,
        );
        self.0.lock().unwrap().push(report);
    }
}

#[tokio::test]
async fn progress_reaches_only_the_caller_that_asked_and_never_goes_back() {
    // Reports 1, then 2 of 3 "half", then 1 again, which must be refused (`ok`).
    let work = r#"
      (data (i32.const 0) "\01\00\00\001\00\00\00\00\00\00\00\00")
      (data (i32.const 16) "\01\00\00\002\01\00\00\003\04\00\00\00half")
      (data (i32.const 40) "ok")
      (data (i32.const 48) "not refused")
      (func (export "berm_tool_work")
        (drop (call $progress (i32.const 0) (i32.const 13)))
        (drop (call $progress (i32.const 16) (i32.const 18)))
        (if (i64.lt_s (call $progress (i32.const 0) (i32.const 13)) (i64.const 0))
          (then (drop (call $done (i32.const 40) (i32.const 2))))
          (else (drop (call $done (i32.const 48) (i32.const 11))))))
    "#;
    let relay = r#"
      (data (i32.const 0) "\01\00\00\00w\04\00\00\00work\00\00\00\00")
      (func (export "berm_tool_relay")
        (local $len i32)
        (local.set $len (i32.wrap_i64 (i64.and
          (call $call (i32.const 0) (i32.const 17)) (i64.const 0xffffffff))))
        (drop (call $reply (i32.const 512) (local.get $len)))
        (drop (call $done (i32.const 512) (local.get $len))))
    "#;
    let berm = berm();
    let image = wat_program(
        &manifest(&["work"]),
        &with_imports(&["progress", "done"], work),
    );
    berm.deploy("w", &image).unwrap();
    let declared = manifest(&["relay"]).replacen(r#"{"abi":1,"#, r#"{"abi":1,"calls":["w"],"#, 1);
    let relay = with_imports(&["call", "reply", "done"], relay);
    berm.deploy("relay", &wat_program(&declared, &relay))
        .unwrap();

    let heard = Arc::new(Heard::default());
    let options = berm::CallOptions {
        progress: Some(heard.clone()),
        ..Default::default()
    };
    let out = berm.call_with(None, "w", "work", vec![], &options).await;
    assert_eq!(out.unwrap(), Ok(berm::Output::text("ok")));
    assert_eq!(
        *heard.0.lock().unwrap(),
        [
            ("w".to_string(), 1.0, None, None),
            ("w".to_string(), 2.0, Some(3.0), Some("half".to_string()))
        ]
    );
    // Without a sink the reports go nowhere; from another program they never reach the
    // outer caller's sink.
    let out = berm.call(None, "w", "work", vec![]).await.unwrap();
    assert_eq!(out, Ok(berm::Output::text("ok")));
    let heard = Arc::new(Heard::default());
    let options = berm::CallOptions {
        progress: Some(heard.clone()),
        ..Default::default()
    };
    let out = berm
        .call_with(None, "relay", "relay", vec![], &options)
        .await;
    assert_eq!(out.unwrap(), Ok(berm::Output::text("ok")));
    assert!(heard.0.lock().unwrap().is_empty());
}
