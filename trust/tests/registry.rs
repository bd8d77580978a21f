//! Signing and verifying against a real registry (Debian's docker-registry): what `cosign
//! sign` would store, read back and checked; a wrong key, an unsigned program, a signature
//! over another program's digest and a tampered payload are each refused with their reason.

#[path = "../../oci/tests/support/registry.rs"]
mod support;

use std::path::Path;

use berm_oci::RegistryOptions;
use berm_trust::{PublicKey, Signer, SigningError, SigningKey};
use support::{TestRegistry, program};

fn key_pair(dir: &Path) -> (SigningKey, PublicKey) {
    let (private, public) = berm_trust::write_key_pair(dir, b"test password").unwrap();
    (
        SigningKey::load(&private, b"test password").unwrap(),
        PublicKey::load(&public).unwrap(),
    )
}

fn signer(key: &PublicKey) -> Signer {
    Signer {
        keys: vec![key.clone()],
        because: "the test".into(),
    }
}

#[tokio::test]
async fn signatures_hold_only_for_their_key_and_their_program() {
    let registry = TestRegistry::start();
    let options = RegistryOptions::default();
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("a")).unwrap();
    std::fs::create_dir(dir.path().join("b")).unwrap();
    let (signing, public) = key_pair(&dir.path().join("a"));
    let (_, other) = key_pair(&dir.path().join("b"));

    let (_, echo) = program("echo");
    let (_, notes) = program("notes");
    let echo = berm_oci::push(
        &registry.reference("berm/echo:v1"),
        &echo,
        "echo.wasm",
        &options,
    )
    .await
    .unwrap();
    let notes = berm_oci::push(
        &registry.reference("berm/notes:v1"),
        &notes,
        "notes.wasm",
        &options,
    )
    .await
    .unwrap();

    // Unsigned.
    let err = berm_trust::verify(&echo, &signer(&public), &options)
        .await
        .unwrap_err();
    assert!(matches!(err, SigningError::Unsigned { .. }), "{err}");
    assert!(err.to_string().contains("is not signed"), "{err}");

    // Signed: the right key verifies; signing again stores no second copy.
    let signed = berm_trust::sign(&echo, &signing, &options).await.unwrap();
    assert!(
        signed.signatures.ends_with(&format!(
            "berm/echo:{}.sig",
            echo.manifest_digest.replace(':', "-")
        )),
        "{}",
        signed.signatures
    );
    assert!(!signed.already_signed);
    assert!(
        berm_trust::sign(&echo, &signing, &options)
            .await
            .unwrap()
            .already_signed
    );
    let stored = berm_oci::signatures(&echo, &options).await.unwrap();
    assert_eq!(stored.signatures.len(), 1);
    let verified = berm_trust::verify(&echo, &signer(&public), &options)
        .await
        .unwrap();
    assert_eq!(verified.key, public.id());
    assert_eq!(verified.manifest_digest, echo.manifest_digest);
    assert_eq!(verified.signed_as, format!("{}/berm/echo", registry.addr));
    // The payload is cosign's simple-signing document.
    let payload: serde_json::Value = serde_json::from_slice(&stored.signatures[0].payload).unwrap();
    assert_eq!(
        payload["critical"]["type"],
        "cosign container image signature"
    );
    assert_eq!(
        payload["critical"]["image"]["docker-manifest-digest"],
        echo.manifest_digest
    );

    // A wrong key.
    let err = berm_trust::verify(&echo, &signer(&other), &options)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("no valid signature") && err.contains("none of the required keys"),
        "{err}"
    );

    // Either of two keys suffices.
    let both = Signer {
        keys: vec![other.clone(), public.clone()],
        because: "either".into(),
    };
    berm_trust::verify(&echo, &both, &options).await.unwrap();

    // echo's signature copied to notes: made by the right key, but over echo's digest.
    berm_oci::attach_signature(
        &notes,
        stored.signatures[0].payload.clone(),
        stored.signatures[0].signature.clone(),
        &options,
    )
    .await
    .unwrap();
    let err = berm_trust::verify(&notes, &signer(&public), &options)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(&format!("over manifest {}", echo.manifest_digest)),
        "{err}"
    );

    // A payload edited on the registry's disk no longer matches its digest.
    let blob = registry.blob_path(&stored.signatures[0].layer_digest);
    let mut bytes = std::fs::read(&blob).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 1;
    std::fs::write(&blob, bytes).unwrap();
    let err = berm_trust::verify(&echo, &signer(&public), &options)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("does not match its digest"), "{err}");
}

#[test]
fn a_cosign_generated_key_signs() {
    // Written by `cosign generate-key-pair` with an empty password (sigstore-rs's test data,
    // Apache-2.0): berm reads cosign's keys as they are.
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/cosign-generated-empty-password.key");
    let key = SigningKey::load(&path, b"").unwrap();
    let signature = key.sign(b"payload").unwrap();
    use base64::Engine;
    let signature = base64::engine::general_purpose::STANDARD.encode(signature);
    assert!(key.public().verifies(&signature, b"payload"));
}
