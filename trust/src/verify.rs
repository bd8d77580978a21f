//! Signing a program on its registry, and checking its signatures against keys.

use base64::Engine;
use berm_oci::{Described, RegistryOptions, StoredSignature};
use sigstore::cosign::payload::simple_signing::{
    CRITICAL_TYPE_NAME, Critical, Identity, Image, SimpleSigning,
};

use crate::{PublicKey, SigningError, SigningKey};

/// What `berm trust sign` left on the registry.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Signed {
    /// The program, pinned (`registry/repo@sha256:…`).
    pub pinned: String,
    /// Where the signature is: `registry/repo:sha256-<hex>.sig`.
    pub signatures: String,
    /// The key that signed (`sha256:` of its public half).
    pub key: String,
    /// Whether this key's signature over this payload was already stored, so nothing was
    /// added (ECDSA signatures differ each time; cosign skips the same way).
    pub already_signed: bool,
}

/// Who may sign: a set of public keys, any one of which suffices, and where the requirement
/// came from (`--verify-key`, or a trust policy rule), for messages.
#[derive(Debug, Clone)]
pub struct Signer {
    /// The keys.
    pub keys: Vec<PublicKey>,
    /// Why they are required, e.g. `--verify-key cosign.pub` or `trust.toml rule 2`.
    pub because: String,
}

/// A signature that held.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Verified {
    /// The program's manifest digest the signature names.
    pub manifest_digest: String,
    /// The key that verified it (`sha256:` of its public half).
    pub key: String,
    /// That key's file.
    pub key_source: String,
    /// The signature layer's digest.
    pub signature: String,
    /// The repository the signer named (cosign's `docker-reference`), as information: a
    /// program copied to another repository keeps its manifest digest and its signature.
    pub signed_as: String,
    /// The signature itself, as the registry stored it: what a program store records
    /// ([`crate::Provenance`]) to check it again later without the registry.
    #[serde(skip)]
    pub stored: StoredSignature,
}

/// Signs the program `described` names with `key`, and stores the signature where cosign
/// does. Signing the same program twice with one key stores one signature.
///
/// Signing reads the stored signatures, appends and writes back, as cosign does: two signers
/// racing on one program can lose one of the two signatures.
///
/// # Errors
/// [`SigningError::Sign`], or the registry's failure (nothing is stored then).
pub async fn sign(
    described: &Described,
    key: &SigningKey,
    options: &RegistryOptions,
) -> Result<Signed, SigningError> {
    let pinned = berm_oci::parse_reference(&described.pinned)
        .map_err(|e| SigningError::Registry(e.into()))?;
    let payload = SimpleSigning {
        critical: Critical {
            identity: Identity {
                docker_reference: format!("{}/{}", pinned.registry(), pinned.repository()),
            },
            image: Image {
                docker_manifest_digest: described.manifest_digest.clone(),
            },
            type_name: CRITICAL_TYPE_NAME.to_string(),
        },
        optional: None,
    };
    let payload = serde_json::to_vec(&payload).map_err(|e| SigningError::Sign(e.to_string()))?;
    let stored = berm_oci::signatures(described, options).await?;
    if stored
        .signatures
        .iter()
        .any(|s| s.payload == payload && key.public().verifies(&s.signature, &s.payload))
    {
        return Ok(Signed {
            pinned: described.pinned.clone(),
            signatures: stored.reference,
            key: key.public().id().to_string(),
            already_signed: true,
        });
    }
    let signature = base64::engine::general_purpose::STANDARD.encode(key.sign(&payload)?);
    let signatures = berm_oci::attach_signature(described, payload, signature, options).await?;
    Ok(Signed {
        pinned: described.pinned.clone(),
        signatures,
        key: key.public().id().to_string(),
        already_signed: false,
    })
}

/// Checks that the program `described` names carries a signature by one of `signer`'s keys
/// over its own manifest digest, and returns the first that holds.
///
/// # Errors
/// [`SigningError::Unsigned`] when nothing is stored; [`SigningError::NotTrusted`] naming what
/// each stored signature failed on; the registry's failure.
pub async fn verify(
    described: &Described,
    signer: &Signer,
    options: &RegistryOptions,
) -> Result<Verified, SigningError> {
    let stored = berm_oci::signatures(described, options).await?;
    if stored.signatures.is_empty() && stored.skipped.is_empty() {
        return Err(SigningError::Unsigned {
            reference: described.reference.clone(),
            signatures: stored.reference,
        });
    }
    let mut reasons = stored.skipped.clone();
    for signature in &stored.signatures {
        match check(&described.manifest_digest, signature, &signer.keys) {
            Ok(verified) => return Ok(verified),
            Err(reason) => reasons.push(format!("signature {}: {reason}", signature.layer_digest)),
        }
    }
    let keys: Vec<String> = signer
        .keys
        .iter()
        .map(|k| format!("{} ({})", k.source(), k.id()))
        .collect();
    Err(SigningError::NotTrusted {
        reference: described.reference.clone(),
        manifest_digest: described.manifest_digest.clone(),
        wanted: format!("{} [{}]", keys.join(" or "), signer.because),
        reasons,
    })
}

/// One stored signature against the keys: which key made it, then whether it names
/// `manifest_digest`.
pub(crate) fn check(
    manifest_digest: &str,
    stored: &StoredSignature,
    keys: &[PublicKey],
) -> Result<Verified, String> {
    let Some(key) = keys
        .iter()
        .find(|k| k.verifies(&stored.signature, &stored.payload))
    else {
        return Err("made by none of the required keys (or not a valid signature)".into());
    };
    let payload: SimpleSigning = serde_json::from_slice(&stored.payload).map_err(|e| {
        format!(
            "made by {}, but its payload is not a simple-signing document: {e}",
            key.id()
        )
    })?;
    if payload.critical.type_name != CRITICAL_TYPE_NAME {
        return Err(format!(
            "made by {}, but its payload's type is `{}`, not `{CRITICAL_TYPE_NAME}`",
            key.id(),
            payload.critical.type_name
        ));
    }
    let named = &payload.critical.image.docker_manifest_digest;
    if named != manifest_digest {
        return Err(format!(
            "made by {}, but over manifest {named}, not this program's",
            key.id()
        ));
    }
    Ok(Verified {
        manifest_digest: named.clone(),
        key: key.id().to_string(),
        key_source: key.source().to_string(),
        signature: stored.layer_digest.clone(),
        signed_as: payload.critical.identity.docker_reference,
        stored: stored.clone(),
    })
}
