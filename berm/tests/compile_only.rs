//! `Engine::compile_only` starts no thread (berm-vmm must stay single-threaded to confine
//! itself) and names code exactly as a full engine does. Its own test binary, with one test,
//! so that no other test's threads come and go while they are counted.

mod common;

use berm::{Engine, EngineConfig};
use common::app;

fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").unwrap().count()
}

#[test]
fn a_compile_only_engine_starts_no_thread_and_names_code_like_a_full_one() {
    let config = EngineConfig::vm();
    let wasm = app("echo");
    let before = threads();
    let compiler = Engine::compile_only(&config).unwrap();
    let compiled = compiler.precompile(&wasm).unwrap();
    assert_eq!(
        threads(),
        before,
        "compile_only or its compile started a thread"
    );
    let full = Engine::new(&config).unwrap();
    assert_eq!(
        compiled.file_name,
        full.precompile(&wasm).unwrap().file_name
    );
    assert_eq!(compiler.fingerprint(), full.fingerprint());
}
