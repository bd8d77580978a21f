//! Programs that are WebAssembly components (docs/components.md), on the runtime alone: tools
//! from berm's manifest and from plain exports, a fresh instance per call, the limits, the
//! code cache, WASI's stdout into the log (bounded), and refusals at deploy.
//!
//! The components are built by scripts/build-apps.sh (`apps/components`).

use berm::{Berm, CompileSource, DeployOptions, Engine, EngineConfig, Error, Grants, Limits};
use serde_json::{Value, json};

/// The probe component with a manifest naming its tools, appended as an SDK would.
fn probe() -> Vec<u8> {
    let tools: Vec<Value> = [
        "counter",
        "kv",
        "log",
        "read-file",
        "write-file",
        "flood",
        "clock",
        "memory",
        "spin",
        "fetch",
        "wasi-fetch",
    ]
    .iter()
    .map(|name| json!({"name": name, "description": name, "input_schema": {"type": "object"}}))
    .collect();
    let manifest = json!({"abi": 1, "description": "the probe", "tools": tools});
    berm_fixtures::with_section(
        &berm_fixtures::component("probe"),
        berm::abi::MANIFEST_SECTION,
        manifest.to_string().as_bytes(),
    )
}

fn runtime() -> Berm {
    let engine = Engine::new(&EngineConfig::default()).unwrap();
    Berm::new(&engine, berm::call::DEFAULT_CALL_DEPTH, vec![])
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

async fn text(berm: &Berm, program: &str, tool: &str, args: Value) -> Result<String, String> {
    match berm
        .call(None, program, tool, args.to_string().into_bytes())
        .await
    {
        Ok(Ok(output)) => Ok(output.text),
        Ok(Err(failure)) => Err(format!("failed: {}", failure.message)),
        Err(error) => Err(format!("host: {error}")),
    }
}

#[test]
fn a_component_with_a_manifest_runs_each_call_on_a_fresh_instance() {
    let berm = runtime();
    let deployed = berm
        .deploy_with(
            "probe",
            &probe(),
            DeployOptions {
                grants: Grants::none(),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(deployed.source, CompileSource::Compiled);
    let shape = deployed.manifest.component.as_ref().unwrap();
    assert_eq!(shape.tools_from, berm::manifest::ToolsFrom::Manifest);
    block_on(async {
        // Module-level state does not survive a call.
        for _ in 0..3 {
            assert_eq!(
                text(&berm, "probe", "counter", json!({})).await.unwrap(),
                "1"
            );
        }
        // An ungranted berm interface and an ungranted WASI interface trap naming the grant.
        let kv = text(&berm, "probe", "kv", json!({"key": "k", "value": "v"}))
            .await
            .unwrap_err();
        assert!(
            kv.contains("berm:program/kv@1.0.0#put") && kv.contains("grant `kv`"),
            "{kv}"
        );
        let clock = text(&berm, "probe", "clock", json!({})).await.unwrap_err();
        assert!(
            clock.contains("wasi:clocks/wall-clock") && clock.contains("grant `clock`"),
            "{clock}"
        );
        // No filesystem without an fs= grant.
        let read = text(&berm, "probe", "read-file", json!({"path": "/etc/passwd"}))
            .await
            .unwrap_err();
        assert!(
            read.contains("wasi:filesystem/preopens") && read.contains("grant `fs=DIR`"),
            "{read}"
        );
        // A flood of stdout is cut, the call goes on.
        assert_eq!(
            text(&berm, "probe", "flood", json!({"lines": 2000}))
                .await
                .unwrap(),
            "flooded"
        );
        // The memory cap covers the component; the deadline interrupts it.
        let memory = text(&berm, "probe", "memory", json!({"mib": 200}))
            .await
            .unwrap_err();
        assert!(memory.contains("memory"), "{memory}");
        // The instance after a trap is a fresh one too.
        assert_eq!(
            text(&berm, "probe", "counter", json!({})).await.unwrap(),
            "1"
        );
    });
}

#[test]
fn the_deadline_stops_a_component_that_spins() {
    let berm = runtime();
    let limits = Limits {
        deadline: std::time::Duration::from_millis(200),
        ..Limits::default()
    };
    berm.deploy_with(
        "probe",
        &probe(),
        DeployOptions {
            grants: Grants::none(),
            limits: Some(limits),
            ..Default::default()
        },
    )
    .unwrap();
    let error = block_on(berm.call(None, "probe", "spin", b"{}".to_vec())).unwrap_err();
    assert!(matches!(error, Error::Timeout { .. }), "{error}");
}

#[test]
fn plain_exports_are_tools_with_schemas_from_their_wit_types() {
    let berm = runtime();
    let deployed = berm
        .deploy("plain", &berm_fixtures::component("plain"))
        .unwrap();
    let manifest = &deployed.manifest;
    let names: Vec<&str> = manifest.tools.iter().map(|t| t.name.as_str()).collect();
    assert!(
        names.contains(&"greet") && names.contains(&"shapes_echo"),
        "{names:?}"
    );
    // Its input schema names its parameters; its output is `{"result": …}`.
    let greet = manifest.tool("greet").unwrap();
    assert_eq!(greet.input_schema["required"], json!(["name"]));
    assert_eq!(
        greet.output_schema.as_ref().unwrap()["required"],
        json!(["result"])
    );
    block_on(async {
        assert_eq!(
            text(&berm, "plain", "greet", json!({"name": "berm"}))
                .await
                .unwrap(),
            r#"{"result":"hello, berm"}"#
        );
        // A top-level result's error is the tool's failure.
        let zero = text(&berm, "plain", "shapes_divide", json!({"a": 1, "b": 0}))
            .await
            .unwrap_err();
        assert_eq!(zero, r#"failed: "cannot divide by zero""#);
        assert_eq!(
            text(&berm, "plain", "shapes_divide", json!({"a": 7, "b": 2}))
                .await
                .unwrap(),
            r#"{"result":3}"#
        );
        // An option parameter may be left out.
        assert_eq!(
            text(
                &berm,
                "plain",
                "shapes_nudge",
                json!({"p": {"x": 1, "y": 2}})
            )
            .await
            .unwrap(),
            r#"{"result":{"label":null,"x":2,"y":2}}"#
        );
        // Every type goes in and comes back as it went.
        let everything = everything();
        let echoed = text(&berm, "plain", "shapes_echo", json!({"value": everything}))
            .await
            .unwrap();
        let echoed: Value = serde_json::from_str(&echoed).unwrap();
        assert_eq!(echoed["result"], everything);
    });
}

/// A value of `everything` (apps/components/plain) with every WIT type in it.
pub fn everything() -> Value {
    json!({
        "flag": true, "small": 255, "medium": 65535, "large": 4294967295u64,
        "huge": 18446744073709551615u64, "tiny": -128, "short": -32768, "int": -2147483648i64,
        "long": -9223372036854775808i64, "single": 1.5, "double": -2.25, "letter": "é",
        "text": "text", "items": [1, 2, 3], "pair": ["a", 7],
        "point": {"x": 1, "y": -1, "label": "here"}, "colour": "green",
        "access": ["read", "exec"],
        "shape": {"rect": [{"x": 0, "y": 0, "label": null}, {"x": 2, "y": 3, "label": null}]},
        "maybe": 5, "maybe-maybe": {"some": null}, "outcome": {"err": "no"}, "bare": {"ok": null},
    })
}

#[test]
fn a_component_is_compiled_once_and_loaded_from_the_code_cache() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::new(&EngineConfig::default()).unwrap();
    let wasm = berm_fixtures::component("plain");
    let first = Berm::with_code_cache(&engine, 8, vec![], dir.path().to_path_buf());
    assert_eq!(
        first.deploy("plain", &wasm).unwrap().source,
        CompileSource::Compiled
    );
    let second = Berm::with_code_cache(&engine, 8, vec![], dir.path().to_path_buf());
    assert_eq!(
        second.deploy("plain", &wasm).unwrap().source,
        CompileSource::DiskCache
    );
    assert!(second.code_sha256("plain").is_some());
    let out = block_on(text(&second, "plain", "greet", json!({"name": "again"}))).unwrap();
    assert_eq!(out, r#"{"result":"hello, again"}"#);
    // Precompiled for the engine, as berm-vmm does for the microVM.
    let precompiled = engine.precompile(&wasm).unwrap();
    assert!(precompiled.file_name.ends_with(".cwasm"));
}

#[test]
fn hostile_components_are_refused_at_deploy() {
    let berm = runtime();
    let manifest = json!({"abi": 1, "tools": [{"name": "x", "input_schema": {"type": "object"}}]});
    // A manifest on a component without the tools export.
    let plain = berm_fixtures::component("plain");
    let with_manifest = berm_fixtures::with_section(
        &plain,
        berm::abi::MANIFEST_SECTION,
        manifest.to_string().as_bytes(),
    );
    let err = berm.deploy("p", &with_manifest).unwrap_err().to_string();
    assert!(err.contains("does not export berm:program/tools"), "{err}");
    // Two manifests.
    let twice = berm_fixtures::with_section(&probe(), berm::abi::MANIFEST_SECTION, b"{}");
    let err = berm.deploy("p", &twice).unwrap_err().to_string();
    assert!(err.contains("2 `berm.manifest` sections"), "{err}");
    // An interface berm does not offer, a nested component, a start function.
    for (wat, says) in [
        (
            r#"(component (import "wasi:config/store@0.2.0-draft" (instance)))"#,
            "wasi:config/store@0.2.0-draft` is not an interface berm offers",
        ),
        (
            r#"(component (component (core module)))"#,
            "nests a component that holds code",
        ),
        (
            r#"(component
                (import "wasi:cli/environment@0.2.0" (instance $env (export "get-arguments" (func (result (list string))))))
                (core module $m (import "x" "f" (func)) (func $s call 0) (start $s))
            )"#,
            "start function",
        ),
    ] {
        let wasm = wat::parse_str(wat).unwrap();
        let err = berm.deploy("h", &wasm).unwrap_err().to_string();
        assert!(err.contains(says), "{wat}: {err}");
    }
}
