//! berm-oci against a real registry (Debian's docker-registry), through the
//! public API only: round trips, tampering, refusals, auth, transport.

#[path = "support/registry.rs"]
mod support;

use std::path::Path;

use base64::Engine as _;
use berm_oci::{CredentialSource, Digest, PullError, PushError, RegistryError, RegistryOptions};
use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::manifest::{
    ImageIndexEntry, OciDescriptor, OciImageIndex, OciImageManifest, OciManifest,
};
use oci_client::secrets::RegistryAuth;
use support::{TestRegistry, free_port, program};

fn anonymous() -> RegistryOptions {
    RegistryOptions::default()
}

#[tokio::test]
async fn round_trip_by_tag_and_by_digest() {
    let registry = TestRegistry::start();
    let (path, bytes) = program("echo");
    let reference = registry.reference("berm/echo:v1");
    let pushed = berm_oci::push(
        &reference,
        &bytes,
        &path.display().to_string(),
        &anonymous(),
    )
    .await
    .unwrap();
    // The layer digest is the program's digest: what `berm ls` prints.
    assert_eq!(pushed.digest, Digest::of(&bytes));
    assert_eq!(pushed.size, bytes.len() as u64);
    assert!(registry.blob_path(&pushed.digest.to_string()).exists());

    let by_tag = berm_oci::pull(&reference, &anonymous()).await.unwrap();
    assert_eq!(by_tag.bytes, bytes);
    assert_eq!(by_tag.described.digest, pushed.digest);
    assert_eq!(by_tag.described.manifest_digest, pushed.manifest_digest);
    assert_eq!(by_tag.described.pinned, pushed.pinned);

    let by_digest = berm_oci::pull(&pushed.pinned, &anonymous()).await.unwrap();
    assert_eq!(by_digest.bytes, bytes);
    assert_eq!(Digest::of(&by_digest.bytes), pushed.digest);

    // The registry describes the program without the layer.
    let described = berm_oci::describe(&reference, &anonymous()).await.unwrap();
    let manifest = berm_oci::Manifest::from_image(&bytes).unwrap();
    assert_eq!(described.manifest, manifest);
    assert_eq!(described.digest, pushed.digest);

    // Pushing the same module again yields the same manifest digest.
    let again = berm_oci::push(
        &registry.reference("berm/echo:v2"),
        &bytes,
        &path.display().to_string(),
        &anonymous(),
    )
    .await
    .unwrap();
    assert_eq!(again.manifest_digest, pushed.manifest_digest);
}

#[tokio::test]
async fn pull_writes_the_file_atomically() {
    let registry = TestRegistry::start();
    let (reference, bytes, _) = push_echo(&registry).await;
    let dir = tempfile::tempdir().unwrap();
    let output = dir.path().join("echo.wasm");
    std::fs::write(&output, b"previous").unwrap();
    let pulled = pull_to(&reference, &output).await.unwrap();
    assert_eq!(std::fs::read(&output).unwrap(), bytes);
    assert!(pulled.to_string().contains(&Digest::of(&bytes).to_string()));
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        1,
        "no temporaries left"
    );
}

#[tokio::test]
async fn tampered_layer_is_refused_and_nothing_is_written() {
    let registry = TestRegistry::start();
    let (reference, _, pushed) = push_echo(&registry).await;

    // Corrupt the stored layer on disk, keeping its size.
    let blob = registry.blob_path(&pushed.digest.to_string());
    let mut stored = std::fs::read(&blob).unwrap();
    let middle = stored.len() / 2;
    stored[middle] ^= 0xff;
    std::fs::write(&blob, &stored).unwrap();

    let dir = tempfile::tempdir().unwrap();
    let output = dir.path().join("echo.wasm");
    for reference in [reference.clone(), pushed.pinned.clone()] {
        let err = pull_to(&reference, &output).await.unwrap_err();
        match &err {
            PullError::DigestMismatch {
                what,
                expected,
                actual,
                ..
            } => {
                assert_eq!(*what, "layer");
                assert_eq!(expected, &pushed.digest.to_string());
                assert_eq!(actual, &Digest::of(&stored).to_string());
            }
            other => panic!("expected a digest mismatch, got {other:?}"),
        }
        assert!(
            err.to_string().contains("does not match its digest"),
            "{err}"
        );
        assert!(!output.exists(), "nothing may be written");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}

#[tokio::test]
async fn missing_tag_repository_and_digest_are_not_found() {
    let registry = TestRegistry::start();
    push_echo(&registry).await;
    let absent_digest = format!("sha256:{}", "0".repeat(64));
    for reference in [
        registry.reference("berm/echo:nope"),
        registry.reference("berm/nothing:v1"),
        registry.reference(&format!("berm/echo@{absent_digest}")),
    ] {
        let err = berm_oci::pull(&reference, &anonymous()).await.unwrap_err();
        assert!(
            matches!(err, PullError::Registry(RegistryError::NotFound { .. })),
            "{reference}: {err:?}"
        );
        assert!(err.to_string().contains("was not found"), "{err}");
    }
}

#[tokio::test]
async fn unreachable_registry_is_named() {
    let port = free_port("127.0.0.1");
    let reference = format!("127.0.0.1:{port}/berm/echo:v1");
    let err = berm_oci::pull(&reference, &anonymous()).await.unwrap_err();
    match &err {
        PullError::Registry(RegistryError::Unreachable {
            registry, scheme, ..
        }) => {
            assert_eq!(registry, &format!("127.0.0.1:{port}"));
            assert_eq!(*scheme, "http");
        }
        other => panic!("expected unreachable, got {other:?}"),
    }
    assert!(err.to_string().contains("cannot reach registry"), "{err}");
    let (_, bytes) = program("echo");
    let err = berm_oci::push(&reference, &bytes, "echo.wasm", &anonymous())
        .await
        .unwrap_err();
    assert!(
        matches!(err, PushError::Registry(RegistryError::Unreachable { .. })),
        "{err:?}"
    );
}

fn with(user: &str, password: &str) -> RegistryOptions {
    RegistryOptions {
        insecure: false,
        credentials: CredentialSource {
            user: Some(user.into()),
            password: Some(password.into()),
            docker_config: None,
        },
    }
}

#[tokio::test]
async fn basic_auth_success_and_failure() {
    let registry = TestRegistry::start_with_basic_auth("alice", "correct horse");
    let (_, bytes) = program("echo");
    let reference = registry.reference("berm/echo:v1");

    for (options, hint_says) in [
        (anonymous(), "needs credentials"),
        (with("alice", "wrong"), "check the user and password"),
    ] {
        let err = berm_oci::push(&reference, &bytes, "echo.wasm", &options)
            .await
            .unwrap_err();
        match &err {
            PushError::Registry(RegistryError::Unauthorized { hint, .. }) => {
                assert!(hint.contains(hint_says), "{err}")
            }
            other => panic!("expected unauthorized, got {other:?}"),
        }
    }

    let pushed = berm_oci::push(
        &reference,
        &bytes,
        "echo.wasm",
        &with("alice", "correct horse"),
    )
    .await
    .unwrap();
    assert_eq!(pushed.digest, Digest::of(&bytes));

    for options in [anonymous(), with("mallory", "correct horse")] {
        let err = berm_oci::pull(&reference, &options).await.unwrap_err();
        assert!(
            matches!(err, PullError::Registry(RegistryError::Unauthorized { .. })),
            "{err:?}"
        );
    }
    assert_eq!(
        berm_oci::pull(&reference, &with("alice", "correct horse"))
            .await
            .unwrap()
            .bytes,
        bytes
    );

    // The same credentials from a Docker config file.
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.json");
    let auth = base64::engine::general_purpose::STANDARD.encode("alice:correct horse");
    std::fs::write(
        &config,
        format!(r#"{{"auths":{{"{}":{{"auth":"{auth}"}}}}}}"#, registry.addr),
    )
    .unwrap();
    let from_file = RegistryOptions {
        insecure: false,
        credentials: CredentialSource {
            docker_config: Some(config),
            ..CredentialSource::default()
        },
    };
    assert_eq!(
        berm_oci::pull(&reference, &from_file).await.unwrap().bytes,
        bytes
    );
}

#[tokio::test]
async fn push_refuses_a_module_that_would_not_deploy_before_sending_anything() {
    // Nothing listens here: a refusal must come before any connection.
    let reference = format!("127.0.0.1:{}/berm/bad:v1", free_port("127.0.0.1"));
    let empty_module = b"\0asm\x01\0\0\0";
    let err = berm_oci::push(&reference, empty_module, "empty.wasm", &anonymous())
        .await
        .unwrap_err();
    assert!(matches!(err, PushError::WouldNotDeploy { .. }), "{err:?}");
    assert!(err.to_string().contains("empty.wasm"), "{err}");
    let err = berm_oci::push(&reference, b"not wasm", "junk.wasm", &anonymous())
        .await
        .unwrap_err();
    assert!(matches!(err, PushError::WouldNotDeploy { .. }), "{err:?}");
}

/// A raw oci-client against the test registry, to push manifests berm
/// itself would never write.
/// Pushes the echo example anonymously as `berm/echo:v1`: its reference, bytes, and what the
/// push left.
async fn push_echo(registry: &TestRegistry) -> (String, Vec<u8>, berm_oci::Pushed) {
    let (_, bytes) = program("echo");
    let reference = registry.reference("berm/echo:v1");
    let pushed = berm_oci::push(&reference, &bytes, "echo.wasm", &anonymous())
        .await
        .unwrap();
    (reference, bytes, pushed)
}

/// `berm_oci::pull_to` with the options `berm pull` takes from its environment.
async fn pull_to(reference: &str, output: &Path) -> Result<berm_oci::Pulled, PullError> {
    berm_oci::pull_to(reference, output, &RegistryOptions::from_environment(false)).await
}

struct Raw {
    client: oci_client::Client,
    registry: String,
}

impl Raw {
    fn new(registry: &TestRegistry) -> Raw {
        let client = oci_client::Client::new(ClientConfig {
            protocol: ClientProtocol::Http,
            ..ClientConfig::default()
        });
        Raw {
            client,
            registry: registry.addr.clone(),
        }
    }

    fn reference(&self, name: &str) -> oci_client::Reference {
        format!("{}/{name}", self.registry).parse().unwrap()
    }

    async fn blob(&self, name: &str, data: &[u8]) -> OciDescriptor {
        let digest = Digest::of(data).to_string();
        self.client
            .store_auth_if_needed(&self.registry, &RegistryAuth::Anonymous)
            .await;
        self.client
            .push_blob(&self.reference(name), data.to_vec(), &digest)
            .await
            .unwrap();
        OciDescriptor {
            digest,
            size: data.len() as i64,
            ..OciDescriptor::default()
        }
    }

    async fn image(&self, name: &str, config_type: &str, layers: &[(&str, &[u8])]) {
        self.image_with_config(
            name,
            config_type,
            br#"{"architecture":"wasm","os":"wasip1"}"#,
            layers,
        )
        .await
    }

    /// Pushes `name`: one wasm layer with a berm config, its descriptor announcing `delta`
    /// more bytes than it has; returns why `berm_oci::pull` refuses it.
    async fn pull_refused(
        &self,
        registry: &TestRegistry,
        name: &str,
        config: &[u8],
        wasm: &[u8],
        delta: i64,
    ) -> PullError {
        let layers = [("application/wasm", wasm)];
        self.image_with_sizes(name, berm_oci::CONFIG_MEDIA_TYPE, config, &layers, delta)
            .await;
        berm_oci::pull(&registry.reference(name), &anonymous())
            .await
            .unwrap_err()
    }

    async fn image_with_config(
        &self,
        name: &str,
        config_type: &str,
        config: &[u8],
        layers: &[(&str, &[u8])],
    ) {
        self.image_with_sizes(name, config_type, config, layers, 0)
            .await
    }

    /// Like `image_with_config`, with every layer's announced size off by
    /// `delta` from the truth.
    async fn image_with_sizes(
        &self,
        name: &str,
        config_type: &str,
        config: &[u8],
        layers: &[(&str, &[u8])],
        delta: i64,
    ) {
        let mut config = self.blob(name, config).await;
        config.media_type = config_type.to_string();
        let mut descriptors = Vec::new();
        for (media_type, data) in layers {
            let mut d = self.blob(name, data).await;
            d.media_type = media_type.to_string();
            d.size += delta;
            descriptors.push(d);
        }
        let manifest = OciImageManifest {
            schema_version: 2,
            media_type: Some(berm_oci::MANIFEST_MEDIA_TYPE.to_string()),
            config,
            layers: descriptors,
            ..OciImageManifest::default()
        };
        self.client
            .push_manifest(&self.reference(name), &OciManifest::Image(manifest))
            .await
            .unwrap();
    }
}

type Expect = fn(&PullError) -> bool;

#[tokio::test]
async fn manifests_that_are_not_a_program_are_refused_saying_what_was_found() {
    let registry = TestRegistry::start();
    let raw = Raw::new(&registry);
    let (_, wasm) = program("echo");
    let wasm = wasm.as_slice();
    let wasm_config = berm_oci::CONFIG_MEDIA_TYPE;

    raw.image(
        "bad/two:v1",
        wasm_config,
        &[("application/wasm", wasm), ("text/plain", b"readme")],
    )
    .await;
    raw.image(
        "bad/tar:v1",
        wasm_config,
        &[("application/vnd.oci.image.layer.v1.tar", wasm)],
    )
    .await;
    raw.image(
        "bad/config:v1",
        "application/vnd.oci.image.config.v1+json",
        &[("application/wasm", wasm)],
    )
    .await;
    raw.image("bad/none:v1", wasm_config, &[]).await;

    // An index pointing at a real berm program, in the same repository.
    let pushed = berm_oci::push(
        &registry.reference("good/echo:v1"),
        wasm,
        "echo.wasm",
        &anonymous(),
    )
    .await
    .unwrap();
    let (manifest_body, _) = raw
        .client
        .pull_manifest_raw(
            &raw.reference("good/echo:v1"),
            &RegistryAuth::Anonymous,
            &[berm_oci::MANIFEST_MEDIA_TYPE],
        )
        .await
        .unwrap();
    let index = OciImageIndex {
        schema_version: 2,
        media_type: Some("application/vnd.oci.image.index.v1+json".to_string()),
        manifests: vec![ImageIndexEntry {
            media_type: berm_oci::MANIFEST_MEDIA_TYPE.to_string(),
            digest: pushed.manifest_digest.clone(),
            size: manifest_body.len() as i64,
            platform: None,
            annotations: None,
            artifact_type: None,
        }],
        artifact_type: None,
        annotations: None,
    };
    raw.client
        .push_manifest(
            &raw.reference("good/echo:index"),
            &OciManifest::ImageIndex(index),
        )
        .await
        .unwrap();

    let cases: [(&str, &str, Expect); 5] = [
        (
            "bad/two:v1",
            "2 layers (application/wasm, text/plain)",
            |e| matches!(e, PullError::LayerCount { count: 2, .. }),
        ),
        ("bad/none:v1", "0 layers (none)", |e| {
            matches!(e, PullError::LayerCount { count: 0, .. })
        }),
        (
            "bad/tar:v1",
            "`application/vnd.oci.image.layer.v1.tar`",
            |e| matches!(e, PullError::LayerMediaType { .. }),
        ),
        (
            "bad/config:v1",
            "`application/vnd.oci.image.config.v1+json`",
            |e| matches!(e, PullError::ConfigMediaType { .. }),
        ),
        (
            "good/echo:index",
            "image index (application/vnd.oci.image.index.v1+json)",
            |e| matches!(e, PullError::Index { .. }),
        ),
    ];
    for (name, found, is_expected) in cases {
        let err = berm_oci::pull(&registry.reference(name), &anonymous())
            .await
            .unwrap_err();
        assert!(is_expected(&err), "{name}: {err:?}");
        assert!(err.to_string().contains(found), "{name}: {err}");
        // describe (what `berm index add` reads) refuses the same.
        assert!(
            berm_oci::describe(&registry.reference(name), &anonymous())
                .await
                .is_err()
        );
    }
}

#[tokio::test]
async fn a_config_that_misdescribes_the_module_is_refused() {
    let registry = TestRegistry::start();
    let raw = Raw::new(&registry);
    let (_, echo) = program("echo");
    let (_, compose) = program("compose");
    let echo_digest = Digest::of(&echo).to_string();
    let config = |manifest: &berm_oci::Manifest, layer_digest: &str| {
        serde_json::to_vec(&serde_json::json!({
            "created": "1970-01-01T00:00:00Z",
            "architecture": "wasm",
            "os": "wasip1",
            "layerDigests": [layer_digest],
            "berm": manifest,
        }))
        .unwrap()
    };
    let compose_manifest = berm_oci::Manifest::from_image(&compose).unwrap();
    let echo_manifest = berm_oci::Manifest::from_image(&echo).unwrap();
    let other = format!("sha256:{}", "e".repeat(64));
    let junk = b"\0asm\x01\0\0\0".to_vec();
    // An image pull must refuse: its name, its config, its one layer, how many more bytes
    // its descriptor announces, the refusal, and a part of the refusal's message.
    type Lie<'a> = (
        &'a str,
        Vec<u8>,
        &'a [u8],
        i64,
        fn(&PullError) -> bool,
        &'a str,
    );
    let lies: [Lie; 4] = [
        // The config claims compose's tools for echo's bytes.
        (
            "lie/tools:v1",
            config(&compose_manifest, &echo_digest),
            &echo,
            0,
            |e| matches!(e, PullError::ConfigDisagrees { .. }),
            "disagrees",
        ),
        // The config names another layer.
        (
            "lie/layers:v1",
            config(&echo_manifest, &other),
            &echo,
            0,
            |e| matches!(e, PullError::Config { .. }),
            "layerDigests",
        ),
        // A descriptor that announces fewer bytes than the registry sends.
        (
            "lie/size:v1",
            config(&echo_manifest, &echo_digest),
            &echo,
            -1,
            |e| matches!(e, PullError::Overlong { .. }),
            "",
        ),
        // A layer that is not a deployable module, correctly described by digest.
        (
            "lie/junk:v1",
            config(&echo_manifest, &Digest::of(&junk).to_string()),
            &junk,
            0,
            |e| matches!(e, PullError::WouldNotDeploy { .. }),
            "",
        ),
    ];
    for (name, config, layer, delta, refusal, says) in lies {
        let err = raw
            .pull_refused(&registry, name, &config, layer, delta)
            .await;
        assert!(refusal(&err), "{name}: {err:?}");
        assert!(err.to_string().contains(says), "{name}: {err}");
    }
}
