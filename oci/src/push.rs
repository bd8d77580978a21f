//! `berm push`: read the module's manifest, refuse what would not deploy,
//! then upload the module as the one layer of an OCI artifact.

use std::fmt;

use berm_manifest::{Digest, Manifest};
use oci_client::manifest::{OciDescriptor, OciImageManifest};

use crate::artifact::{self, WasmConfig};
use crate::error::{PushError, RegistryError};
use crate::registry::{RegistryOptions, Remote};
use crate::{CONFIG_MEDIA_TYPE, LAYER_MEDIA_TYPE, MANIFEST_MEDIA_TYPE, MAX_PROGRAM_BYTES};

/// A berm program as it stands on a registry: what a push left there ([`Pushed`]) and what
/// [`describe`](crate::describe) reads back from the OCI manifest and config without
/// downloading the module ([`Described`](crate::Described)). `berm push --json` and
/// `berm pull --json` print it as is.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Published {
    /// The reference as given, normalized (`host/repo:tag` or `@digest`).
    pub reference: String,
    /// The same, pinned: `host/repo@<manifest digest>`, the form an index
    /// entry and `berm deploy` should use.
    pub pinned: String,
    /// The OCI manifest's digest (verified when the reference named one).
    pub manifest_digest: String,
    /// The program's digest: the layer's, and what `berm ls` prints.
    pub digest: Digest,
    /// The module's size in bytes, as the manifest announces it.
    pub size: u64,
    /// berm's manifest, as carried in the config blob (digest-verified).
    pub manifest: Manifest,
}

/// What a push left on the registry.
pub type Pushed = Published;

/// `berm push`'s human output.
impl fmt::Display for Published {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "pushed   {}", self.reference)?;
        writeln!(f, "pinned   {}", self.pinned)?;
        write!(f, "program  {} ({} bytes)", self.digest, self.size)
    }
}

/// Pushes `wasm` to `reference` as a one-layer artifact, after checking that
/// its manifest would deploy. `what` names the module in errors (its path).
///
/// Blobs the registry already holds are not uploaded again. The OCI
/// manifest is serialized here and pushed as raw bytes, so its digest is
/// the hash of exactly what was sent.
///
/// # Errors
/// [`PushError::WouldNotDeploy`] before anything is sent when the module has
/// no valid manifest; [`PushError::Registry`] when the registry fails.
pub async fn push(
    reference: &str,
    wasm: &[u8],
    what: &str,
    options: &RegistryOptions,
) -> Result<Pushed, PushError> {
    let size = wasm.len() as u64;
    if size > MAX_PROGRAM_BYTES {
        return Err(PushError::TooLarge {
            what: what.to_string(),
            size,
            cap: MAX_PROGRAM_BYTES,
        });
    }
    let would_not_deploy = |source| PushError::WouldNotDeploy {
        what: what.to_string(),
        source,
    };
    let manifest = Manifest::from_image(wasm).map_err(would_not_deploy)?;
    manifest.check().map_err(would_not_deploy)?;

    let remote = Remote::new(reference, options)?;
    let digest = Digest::of(wasm);
    let config = WasmConfig::for_program(manifest.clone(), &digest.to_string());
    let config_bytes = serde_json::to_vec(&config).map_err(|e| protocol(&remote, e.to_string()))?;
    let title = std::path::Path::new(what)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned());
    let image = OciImageManifest {
        schema_version: 2,
        media_type: Some(MANIFEST_MEDIA_TYPE.to_string()),
        config: OciDescriptor {
            media_type: CONFIG_MEDIA_TYPE.to_string(),
            digest: artifact::oci_digest(&config_bytes),
            size: config_bytes.len() as i64,
            ..OciDescriptor::default()
        },
        layers: vec![OciDescriptor {
            media_type: LAYER_MEDIA_TYPE.to_string(),
            digest: digest.to_string(),
            size: size as i64,
            annotations: title.map(|t| [(artifact::ANNOTATION_TITLE.to_string(), t)].into()),
            ..OciDescriptor::default()
        }],
        subject: None,
        artifact_type: None,
        annotations: Some(artifact::manifest_annotations(&manifest)),
    };
    let manifest_bytes =
        serde_json::to_vec(&image).map_err(|e| protocol(&remote, e.to_string()))?;

    let blobs = vec![
        (wasm.to_vec(), image.layers[0].digest.clone()),
        (config_bytes, image.config.digest.clone()),
    ];
    upload(&remote, blobs, &manifest_bytes).await?;
    let target = &remote.reference;

    let manifest_digest = artifact::oci_digest(&manifest_bytes);
    Ok(Pushed {
        reference: target.whole(),
        pinned: format!(
            "{}/{}@{manifest_digest}",
            target.registry(),
            target.repository()
        ),
        manifest_digest,
        digest,
        size,
        manifest,
    })
}

/// What every berm push does once its manifest is built: sends each blob (bytes, digest) the
/// registry does not hold yet, then the manifest, so the manifest never names a missing blob.
pub(crate) async fn upload(
    remote: &Remote,
    blobs: Vec<(Vec<u8>, String)>,
    manifest_bytes: &[u8],
) -> Result<(), PushError> {
    let client = &remote.client;
    let target = &remote.reference;
    client
        .store_auth_if_needed(remote.registry(), &remote.auth)
        .await;
    for (data, digest) in blobs {
        let present = client
            .blob_exists(target, &digest)
            .await
            .map_err(|e| remote.error(e))?;
        if !present {
            client
                .push_blob(target, data, &digest)
                .await
                .map_err(|e| remote.error(e))?;
        }
    }
    let content_type = MANIFEST_MEDIA_TYPE
        .parse()
        .map_err(|_| protocol(remote, "bad manifest media type header".into()))?;
    client
        .push_manifest_raw(target, manifest_bytes.to_vec(), content_type)
        .await
        .map_err(|e| remote.error(e))?;
    Ok(())
}

fn protocol(remote: &Remote, cause: String) -> PushError {
    PushError::Registry(RegistryError::Protocol {
        registry: remote.registry().to_string(),
        reference: remote.reference.whole(),
        cause,
    })
}
