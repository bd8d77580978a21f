//! The issue's round trip past the registry: push `echo`, pull it by tag and
//! by digest, deploy the verified bytes into the runtime, and call it. The
//! digest the runtime reports (what `berm ls` prints) is the layer's.
//!
//! bermd is not involved: `berm deploy NAME REF` is the CLI pulling with
//! berm-oci and handing bermd these same bytes, which its own tests cover.

#[path = "support/registry.rs"]
mod support;

use berm::{Berm, Engine, EngineConfig, call};
use berm_oci::{Digest, RegistryOptions};
use support::{TestRegistry, program};

#[tokio::test]
async fn push_pull_deploy_call() {
    let registry = TestRegistry::start();
    let (_, bytes) = program("echo");
    let options = RegistryOptions::default();
    let pushed = berm_oci::push(
        &registry.reference("berm/echo:v1"),
        &bytes,
        "echo.wasm",
        &options,
    )
    .await
    .unwrap();

    let engine = Engine::new(&EngineConfig::default()).unwrap();
    let berm = Berm::new(&engine, call::DEFAULT_CALL_DEPTH, vec![]);
    for (name, reference) in [
        ("echo", registry.reference("berm/echo:v1")),
        ("pinned", pushed.pinned.clone()),
    ] {
        let pulled = berm_oci::pull(&reference, &options).await.unwrap();
        let deployed = berm.deploy(name, &pulled.bytes).unwrap();
        assert_eq!(deployed.digest, pulled.described.digest);
        assert_eq!(deployed.digest, Digest::of(&bytes));
        let listed = berm.get(name).unwrap();
        assert_eq!(
            listed.digest.to_string(),
            pushed.digest.to_string(),
            "what `berm ls` prints"
        );
        let result = berm
            .call(
                None,
                name,
                "echo",
                br#"{"message":"through a registry"}"#.to_vec(),
            )
            .await
            .unwrap()
            .unwrap();
        assert!(result.text.contains("through a registry"), "{result}");
    }
}
