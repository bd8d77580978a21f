//! Every syscall in `berm_abi::SYSCALLS` is served by bermd when its module
//! is granted, and traps naming the grant when it is not.

mod common;

use berm_abi::frame;
use berm_control::{DeployRequest, Grant, LimitsSpec};
use common::{Bermd, block_on};

/// A request each syscall accepts (its answer may still be `not_found`: the
/// point is that the handler ran).
fn request(module: &str, name: &str) -> Vec<u8> {
    match (module, name) {
        ("log", "write") => frame::encode(&[b"info", b"hello from the probe"]),
        ("clock", "now") => Vec::new(),
        ("clock", "sleep") => frame::encode(&[b"1"]),
        ("random", "fill") => vec![0; 16],
        ("kv", "put") => frame::encode(&[b"k", b"v"]),
        ("kv", "get" | "delete") => frame::encode(&[b"k"]),
        ("kv", "list") => frame::encode(&[b""]),
        ("fs", "write") => frame::encode(&[b"f.txt", b"x"]),
        ("fs", "read" | "remove") => frame::encode(&[b"f.txt"]),
        ("fs", "list") => frame::encode(&[b""]),
        ("http", "fetch") => frame::encode(&[b"GET", b"http://127.0.0.1:9/", b"", b""]),
        other => panic!("no probe request for {other:?}: add one"),
    }
}

/// A program with one tool per syscall, `s<i>`, that makes the syscall and
/// finishes.
fn probe() -> Vec<u8> {
    let mut imports =
        String::from(r#"(import "berm" "done" (func $done (param i32 i32) (result i64)))"#);
    let mut body = String::from(r#"(memory (export "memory") 1)"#);
    let mut tools = Vec::new();
    for (i, spec) in berm_abi::SYSCALLS.iter().enumerate() {
        let bytes = request(spec.module, spec.name);
        let at = 1024 + i * 256;
        let data: String = bytes.iter().map(|b| format!("\\{b:02x}")).collect();
        imports.push_str(&format!(
            r#"(import "{}" "{}" (func $s{i} (param i32 i32) (result i64)))"#,
            spec.module, spec.name
        ));
        body.push_str(&format!(
            r#"(data (i32.const {at}) "{data}")
               (func (export "berm_tool_s{i}")
                 (drop (call $s{i} (i32.const {at}) (i32.const {len})))
                 (drop (call $done (i32.const 0) (i32.const 0))))"#,
            len = bytes.len()
        ));
        tools.push(format!(
            r#"{{"name":"s{i}","input_schema":{{"type":"object"}}}}"#
        ));
    }
    let manifest = format!(r#"{{"abi":1,"tools":[{}]}}"#, tools.join(","));
    let escaped = manifest.replace('"', "\\\"");
    wat::parse_str(format!(
        r#"(module (@custom "berm.manifest" "{escaped}") {imports} {body})"#
    ))
    .unwrap()
}

#[test]
fn every_syscall_is_served_when_granted_and_traps_when_not() {
    let bermd = Bermd::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let image = probe();
    let all = vec![
        Grant::Log,
        Grant::Clock,
        Grant::Random,
        Grant::Kv,
        Grant::Fs {
            dir: dir.path().to_path_buf(),
            read_only: false,
            quota: berm_control::FsQuota::default(),
        },
        "net=127.0.0.1:9".parse().unwrap(),
    ];
    let control = bermd.control();
    block_on(control.deploy(
        "granted",
        &DeployRequest::new(&image, all, LimitsSpec::default()),
    ))
    .unwrap();
    block_on(control.deploy(
        "bare",
        &DeployRequest::new(&image, vec![], LimitsSpec::default()),
    ))
    .unwrap();
    for (i, spec) in berm_abi::SYSCALLS.iter().enumerate() {
        let tool = format!("s{i}");
        let answer = block_on(control.call(&format!("granted_{tool}"), b"{}".to_vec()));
        assert!(answer.is_ok(), "{} granted: {answer:?}", spec.qualified());
        let refused = block_on(control.call(&format!("bare_{tool}"), b"{}".to_vec()))
            .unwrap_err()
            .to_string();
        let expected = format!(
            "called `{}`, which is not granted to `bare` (grant `{}` to allow it)",
            spec.qualified(),
            berm_abi::grant_for(spec.module)
        );
        assert!(refused.contains(&expected), "{refused}");
    }
    // The syscalls did their work: the log line is in bermd's log, tagged.
    let log = bermd.log_text();
    assert!(
        log.contains("hello from the probe") && log.contains("program=\"granted\""),
        "{log}"
    );
}
