//! Where cosign keeps a signature, and moving it: for a program whose OCI manifest has digest
//! `sha256:<hex>`, the tag `sha256-<hex>.sig` in the same repository holds an image manifest
//! whose layers are simple-signing payloads (`application/vnd.dev.cosign.simplesigning.v1+json`),
//! each with its base64 signature in the annotation `dev.cosignproject.cosign/signature`. So
//! `cosign verify` reads what `berm trust sign` wrote, and berm reads what `cosign sign` wrote.
//!
//! This module only moves bytes, bounded and digest-checked like every other pull; what the
//! payload says and whether the signature holds is berm-trust's business.

use oci_client::manifest::{IMAGE_MANIFEST_MEDIA_TYPE, OciDescriptor, OciImageManifest};

use crate::error::{PullError, PushError, RegistryError};
use crate::pull::{Described, fetch_blob};
use crate::push::upload;
use crate::registry::{RegistryOptions, Remote, parse_reference};
use crate::{MANIFEST_MEDIA_TYPE, MAX_MANIFEST_BYTES};

/// Media type of a cosign simple-signing layer. sigstore-rs keeps its copy crate-private.
pub const SIMPLE_SIGNING_MEDIA_TYPE: &str = "application/vnd.dev.cosign.simplesigning.v1+json";

/// The layer annotation holding the base64 signature over the layer's bytes.
pub const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";

/// Config of the signature manifest: the empty OCI config sigstore-rs writes.
const SIGNATURE_CONFIG_MEDIA_TYPE: &str = "application/vnd.oci.image.config.v1+json";
const SIGNATURE_CONFIG: &[u8] = b"{}";

/// Largest simple-signing payload read: cosign's are a few hundred bytes.
pub const MAX_PAYLOAD_BYTES: u64 = 64 << 10;

/// Most signatures read for one program: a registry cannot make a check read without end.
pub const MAX_SIGNATURES: usize = 64;

/// One signature as the registry holds it, not yet checked.
#[derive(Debug, Clone)]
pub struct StoredSignature {
    /// The simple-signing payload, exactly as stored (its digest was checked).
    pub payload: Vec<u8>,
    /// The base64 signature from the layer's annotation.
    pub signature: String,
    /// The layer's digest, which names this signature.
    pub layer_digest: String,
}

/// The signatures stored for one program.
#[derive(Debug, Clone)]
pub struct StoredSignatures {
    /// Where they are: `registry/repo:sha256-<hex>.sig`.
    pub reference: String,
    /// Each simple-signing layer with a signature annotation, in manifest order.
    pub signatures: Vec<StoredSignature>,
    /// Layers that are not signatures (another media type, no annotation), each said why.
    pub skipped: Vec<String>,
}

/// Something about a program's signatures could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum SignatureError {
    /// Reading the signature manifest or a payload failed.
    #[error(transparent)]
    Fetch(#[from] PullError),
    /// Writing the signature failed.
    #[error(transparent)]
    Push(#[from] PushError),
    /// The signature manifest is not one cosign would write.
    #[error("`{reference}`: {message}")]
    Malformed {
        /// The `.sig` reference.
        reference: String,
        /// What is wrong.
        message: String,
    },
}

impl From<RegistryError> for SignatureError {
    fn from(err: RegistryError) -> SignatureError {
        SignatureError::Fetch(PullError::Registry(err))
    }
}

/// The `.sig` reference cosign uses for the program `described` names.
///
/// # Errors
/// When `described.pinned` does not parse (it always does when berm made it).
pub fn signature_reference(described: &Described) -> Result<String, RegistryError> {
    let pinned = parse_reference(&described.pinned)?;
    Ok(format!(
        "{}/{}:{}.sig",
        pinned.registry(),
        pinned.repository(),
        described.manifest_digest.replace(':', "-")
    ))
}

/// The signatures stored for `described` (none when the `.sig` tag does not exist).
///
/// # Errors
/// See [`SignatureError`]: a registry failure other than "not found", a manifest that does
/// not parse or is too large, a payload over [`MAX_PAYLOAD_BYTES`] or not matching its digest.
pub async fn signatures(
    described: &Described,
    options: &RegistryOptions,
) -> Result<StoredSignatures, SignatureError> {
    let reference = signature_reference(described)?;
    let remote = Remote::new(&reference, options)?;
    let Some(manifest) = signature_manifest(&remote).await? else {
        return Ok(StoredSignatures {
            reference,
            signatures: Vec::new(),
            skipped: Vec::new(),
        });
    };
    let mut signatures = Vec::new();
    let mut skipped = Vec::new();
    for layer in manifest.layers.iter().take(MAX_SIGNATURES) {
        if layer.media_type != SIMPLE_SIGNING_MEDIA_TYPE {
            skipped.push(format!(
                "layer {} has media type `{}`, not a simple-signing payload",
                layer.digest, layer.media_type
            ));
            continue;
        }
        let Some(signature) = layer
            .annotations
            .as_ref()
            .and_then(|a| a.get(SIGNATURE_ANNOTATION))
        else {
            skipped.push(format!(
                "layer {} has no `{SIGNATURE_ANNOTATION}` annotation",
                layer.digest
            ));
            continue;
        };
        let payload = fetch_blob(&remote, &reference, layer, "payload", MAX_PAYLOAD_BYTES).await?;
        signatures.push(StoredSignature {
            payload,
            signature: signature.clone(),
            layer_digest: layer.digest.clone(),
        });
    }
    if manifest.layers.len() > MAX_SIGNATURES {
        skipped.push(format!(
            "{} more layers past the first {MAX_SIGNATURES} were not read",
            manifest.layers.len() - MAX_SIGNATURES
        ));
    }
    Ok(StoredSignatures {
        reference,
        signatures,
        skipped,
    })
}

/// Adds one signature (a simple-signing `payload` and its base64 `signature`) to the `.sig`
/// manifest of `described`, keeping those already there; a signature already stored is not
/// added twice. Returns the `.sig` reference.
///
/// Like cosign, this reads the manifest, appends, and writes it back: two signers racing on
/// one program can lose one of the two signatures (the registry has no compare-and-swap).
///
/// # Errors
/// See [`SignatureError`]; on error the stored signatures are as they were.
pub async fn attach_signature(
    described: &Described,
    payload: Vec<u8>,
    signature: String,
    options: &RegistryOptions,
) -> Result<String, SignatureError> {
    let reference = signature_reference(described)?;
    let remote = Remote::new(&reference, options)?;
    let mut layers = match signature_manifest(&remote).await? {
        Some(manifest) => manifest.layers,
        None => Vec::new(),
    };
    let digest = crate::artifact::oci_digest(&payload);
    let already = layers.iter().any(|l| {
        l.digest == digest
            && l.annotations
                .as_ref()
                .and_then(|a| a.get(SIGNATURE_ANNOTATION))
                == Some(&signature)
    });
    if !already {
        layers.push(OciDescriptor {
            media_type: SIMPLE_SIGNING_MEDIA_TYPE.to_string(),
            digest: digest.clone(),
            size: payload.len() as i64,
            annotations: Some([(SIGNATURE_ANNOTATION.to_string(), signature)].into()),
            ..OciDescriptor::default()
        });
    }
    let image = OciImageManifest {
        schema_version: 2,
        media_type: Some(MANIFEST_MEDIA_TYPE.to_string()),
        config: OciDescriptor {
            media_type: SIGNATURE_CONFIG_MEDIA_TYPE.to_string(),
            digest: crate::artifact::oci_digest(SIGNATURE_CONFIG),
            size: SIGNATURE_CONFIG.len() as i64,
            ..OciDescriptor::default()
        },
        layers,
        subject: None,
        artifact_type: None,
        annotations: None,
    };
    let manifest_bytes = serde_json::to_vec(&image).map_err(|e| SignatureError::Malformed {
        reference: reference.clone(),
        message: e.to_string(),
    })?;
    // Blobs of signatures already stored are on the registry; only the new payload and the
    // config may be missing, and upload skips what is there.
    let blobs = vec![
        (payload, digest),
        (SIGNATURE_CONFIG.to_vec(), image.config.digest.clone()),
    ];
    upload(&remote, blobs, &manifest_bytes).await?;
    Ok(reference)
}

/// The `.sig` manifest, or `None` when the registry has no such tag.
async fn signature_manifest(remote: &Remote) -> Result<Option<OciImageManifest>, SignatureError> {
    let reference = remote.reference.whole();
    let body = match remote
        .client
        // cosign 2 writes an OCI manifest; older cosign, a Docker schema 2 one of the same shape.
        .pull_manifest_raw(
            &remote.reference,
            &remote.auth,
            &[MANIFEST_MEDIA_TYPE, IMAGE_MANIFEST_MEDIA_TYPE],
        )
        .await
    {
        Ok((body, _)) => body,
        Err(e) => match remote.error(e) {
            RegistryError::NotFound { .. } => return Ok(None),
            other => return Err(other.into()),
        },
    };
    if body.len() > MAX_MANIFEST_BYTES {
        return Err(SignatureError::Fetch(PullError::ManifestTooLarge {
            reference,
            size: body.len(),
        }));
    }
    let manifest: OciImageManifest =
        serde_json::from_slice(&body).map_err(|e| SignatureError::Malformed {
            reference: reference.clone(),
            message: format!("the signature manifest does not parse: {e}"),
        })?;
    Ok(Some(manifest))
}
