//! Shared by the integration tests: the engine and the example programs.
#![allow(dead_code)]

use std::time::Duration;

use berm::{Engine, EngineConfig, Limits};

/// The example program `name`, built by scripts/build-apps.sh.
pub use berm_fixtures::example as app;

/// An engine with small, fast-to-hit bounds.
pub fn engine() -> Engine {
    Engine::new(&EngineConfig {
        limits: Limits {
            deadline: Duration::from_secs(5),
            memory_bytes: 16 << 20,
            max_args_bytes: 64 << 10,
            max_result_bytes: 256 << 10,
        },
        max_instances: 64,
        ..EngineConfig::default()
    })
    .expect("engine")
}

/// A module in WAT with a `berm.manifest` section holding `manifest`.
pub fn wat_program(manifest: &str, body: &str) -> Vec<u8> {
    let escaped = manifest.replace('\\', "\\\\").replace('"', "\\\"");
    let source = format!("(module (@custom \"berm.manifest\" \"{escaped}\") {body})");
    wat::parse_str(&source).unwrap_or_else(|e| panic!("bad test WAT: {e}\n{source}"))
}

/// A manifest JSON declaring `tools` with an empty object schema.
pub fn manifest(tools: &[&str]) -> String {
    let tools: Vec<String> = tools
        .iter()
        .map(|t| format!(r#"{{"name":"{t}","input_schema":{{"type":"object"}}}}"#))
        .collect();
    format!(r#"{{"abi":1,"tools":[{}]}}"#, tools.join(","))
}
