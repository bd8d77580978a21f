//! Precompiled code: what `Engine::precompile` writes is what
//! `Berm::with_code_dirs` looks for, only engines of the same configuration
//! pick it up, and a file Wasmtime refuses is skipped, never deleted.

mod common;

use berm::{Berm, CodeDirs, CompileSource, CpuProfile, Engine, EngineConfig, call};
use common::app;

fn engine(cpu: CpuProfile) -> Engine {
    Engine::new(&EngineConfig {
        cpu,
        max_instances: 8,
        ..EngineConfig::default()
    })
    .unwrap()
}

fn berm_with(
    engine: &Engine,
    precompiled: &std::path::Path,
    cache: Option<&std::path::Path>,
) -> Berm {
    Berm::with_code_dirs(
        engine,
        call::DEFAULT_CALL_DEPTH,
        vec![],
        CodeDirs {
            cache: cache.map(|c| c.to_path_buf()),
            precompiled: Some(precompiled.to_path_buf()),
        },
    )
}

#[tokio::test]
async fn native_precompiled_code_is_used_and_nothing_is_compiled() {
    let wasm = app("echo");
    let engine = engine(CpuProfile::Native);
    let precompiled = engine.precompile(&wasm).unwrap();
    assert_eq!(precompiled.digest, berm::Digest::of(&wasm));
    assert_eq!(
        precompiled.file_name,
        format!(
            "{}-{}.cwasm",
            precompiled.digest.hex(),
            engine.fingerprint()
        )
    );
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(&precompiled.file_name), &precompiled.bytes).unwrap();
    let cache = tempfile::tempdir().unwrap();

    let berm = berm_with(&engine, dir.path(), Some(cache.path()));
    let deployed = berm.deploy("echo", &wasm).unwrap();
    assert_eq!(deployed.source, CompileSource::Precompiled);
    let info = berm.get("echo").unwrap();
    assert_eq!(info.source, CompileSource::Precompiled);
    assert_eq!(info.code_time, deployed.code_time);
    // Loaded, not compiled: nothing was added to the writable cache.
    assert_eq!(std::fs::read_dir(cache.path()).unwrap().count(), 0);
    // The code a receipt names is the file's, byte for byte.
    use sha2::Digest as _;
    assert_eq!(
        berm.code_sha256("echo").unwrap(),
        hex::encode(sha2::Sha256::digest(&precompiled.bytes))
    );
    let answer = berm
        .call(None, "echo", "echo", br#"{"message":"hi"}"#.to_vec())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(answer.text, "hi");
}

#[test]
fn portable_code_is_not_picked_up_by_a_native_engine() {
    let wasm = app("echo");
    let portable = engine(CpuProfile::Portable(berm::GuestArch::HOST));
    let native = engine(CpuProfile::Native);
    assert_ne!(portable.fingerprint(), native.fingerprint());
    // The VM's configuration is the portable one: berm-vmm and the guest
    // agree on the fingerprint.
    assert_eq!(
        Engine::new(&EngineConfig::vm()).unwrap().fingerprint(),
        Engine::new(&EngineConfig {
            cpu: CpuProfile::Portable(berm::GuestArch::HOST),
            ..EngineConfig::default()
        })
        .unwrap()
        .fingerprint()
    );

    let precompiled = portable.precompile(&wasm).unwrap();
    assert!(
        precompiled
            .file_name
            .ends_with(&format!("-{}.cwasm", portable.fingerprint()))
    );
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(&precompiled.file_name), &precompiled.bytes).unwrap();

    let berm = berm_with(&native, dir.path(), None);
    let deployed = berm.deploy("echo", &wasm).unwrap();
    assert_eq!(deployed.source, CompileSource::Compiled);
    assert!(dir.path().join(&precompiled.file_name).exists());
}

#[test]
fn a_refused_precompiled_file_is_skipped_and_kept() {
    let wasm = app("echo");
    let engine = engine(CpuProfile::Native);
    let name = engine.precompile(&wasm).unwrap().file_name;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(&name);
    std::fs::write(&path, b"not compiled code").unwrap();

    let berm = berm_with(&engine, dir.path(), None);
    let deployed = berm.deploy("echo", &wasm).unwrap();
    assert_eq!(deployed.source, CompileSource::Compiled);
    assert_eq!(std::fs::read(&path).unwrap(), b"not compiled code");
}

#[test]
fn precompile_refuses_what_deploy_refuses_with_the_same_error() {
    let bad_import = common::wat_program(
        r#"{"abi":1,"description":"d","usage":"u","tools":[{"name":"a","description":"a","input_schema":{"type":"object"}}]}"#,
        r#"(import "kv" "get" (func (param i32) (result i32)))
           (memory (export "memory") 1)
           (func (export "berm_tool_a"))"#,
    );
    let bad_export = common::wat_program(
        r#"{"abi":1,"description":"d","usage":"u","tools":[{"name":"a","description":"a","input_schema":{"type":"object"}}]}"#,
        r#"(memory (export "memory") 1)
           (func (export "berm_tool_a") (param i32))"#,
    );
    let invalid = common::wat_program(
        r#"{"abi":1,"description":"d","usage":"u","tools":[{"name":"a","description":"a","input_schema":{"type":"object"}}]}"#,
        r#"(memory (export "memory") 1)
           (func (export "berm_tool_a") (i64.const 1))"#,
    );
    for cpu in [
        CpuProfile::Native,
        CpuProfile::Portable(berm::GuestArch::HOST),
    ] {
        let engine = engine(cpu);
        let berm = Berm::new(&common::engine(), call::DEFAULT_CALL_DEPTH, vec![]);
        for (wasm, expected) in [
            (
                &bad_import,
                "import `kv.get` has type (i32) -> i32; berm imports are (i32, i32) -> i64",
            ),
            (
                &bad_export,
                "export `berm_tool_a` must be a function of type () -> ()",
            ),
            (&invalid, "the module does not compile: "),
        ] {
            let deploy = berm.deploy("a", wasm).unwrap_err().to_string();
            let precompile = engine.precompile(wasm).unwrap_err().to_string();
            assert!(deploy.starts_with(expected), "{deploy}");
            assert_eq!(precompile, deploy, "{cpu:?}");
        }
    }
}

#[test]
fn portable_code_cannot_run_on_a_host_of_another_target() {
    if cfg!(target_env = "musl") {
        return; // this host *is* the portable target
    }
    let engine = engine(CpuProfile::Portable(berm::GuestArch::HOST));
    let berm = Berm::new(&engine, call::DEFAULT_CALL_DEPTH, vec![]);
    let message = berm.deploy("echo", &app("echo")).unwrap_err().to_string();
    assert!(message.contains("does not match the host"), "{message}");
}
