//! `berm pull` and the pull before `berm deploy NAME REF`: fetch the OCI
//! manifest, refuse anything that is not exactly a berm program, and verify
//! every byte against its digest before returning it.

use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};

use berm_manifest::{Digest, Manifest};
use oci_client::errors::{DigestError, OciDistributionError};
use oci_client::manifest::{
    IMAGE_MANIFEST_LIST_MEDIA_TYPE, IMAGE_MANIFEST_MEDIA_TYPE, OCI_IMAGE_INDEX_MEDIA_TYPE,
    OciDescriptor, OciImageManifest,
};
use tokio::io::AsyncWrite;

use crate::artifact::{self, WasmConfig};
use crate::error::PullError;
use crate::registry::{RegistryOptions, Remote};
use crate::{
    CONFIG_MEDIA_TYPE, LAYER_MEDIA_TYPE, MANIFEST_MEDIA_TYPE, MAX_CONFIG_BYTES, MAX_MANIFEST_BYTES,
    MAX_PROGRAM_BYTES,
};

/// What a registry says about a program, read from its OCI manifest and
/// config without downloading the module.
pub type Described = crate::push::Published;

/// A pulled program whose bytes were verified against the layer digest and
/// whose manifest would deploy.
#[derive(Debug, Clone)]
pub struct Pulled {
    /// What the registry says about it.
    pub described: Described,
    /// The module.
    pub bytes: Vec<u8>,
    /// The OCI manifest, byte for byte as the registry served it (it hashes to
    /// `described.manifest_digest`): what a program store keeps to prove the module later.
    pub manifest_bytes: Vec<u8>,
}

impl fmt::Display for Pulled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = &self.described;
        writeln!(f, "pulled   {}", d.reference)?;
        writeln!(f, "pinned   {}", d.pinned)?;
        write!(f, "program  {} ({} bytes)", d.digest, d.size)
    }
}

/// Reads the OCI manifest and config of `reference` and says what program
/// it holds, without downloading the module. `berm index add` uses it.
///
/// # Errors
/// See [`PullError`]: everything [`pull`] refuses about the manifest and
/// config is refused here too.
pub async fn describe(reference: &str, options: &RegistryOptions) -> Result<Described, PullError> {
    let remote = Remote::new(reference, options)?;
    let (described, _, _) = describe_remote(&remote).await?;
    Ok(described)
}

/// Pulls `reference` (by tag or by manifest digest) and returns the module
/// only once its bytes hash to the layer digest, the manifest to the digest
/// in the reference (when there is one), the config to its digest, and the
/// module's own manifest would deploy and agrees with the config's.
///
/// # Errors
/// See [`PullError`]; on error nothing is returned, so nothing can be
/// written or deployed.
pub async fn pull(reference: &str, options: &RegistryOptions) -> Result<Pulled, PullError> {
    let remote = Remote::new(reference, options)?;
    let (described, layer, manifest_bytes) = describe_remote(&remote).await?;
    let name = described.reference.clone();
    let bytes = fetch_blob(&remote, &name, &layer, "layer", MAX_PROGRAM_BYTES).await?;
    // fetch_blob verified the bytes against `layer.digest`; the program's
    // digest is that same string parsed, so say so in the same terms.
    let actual = Digest::of(&bytes);
    if actual != described.digest {
        return Err(PullError::DigestMismatch {
            reference: name,
            what: "layer",
            expected: described.digest.to_string(),
            actual: actual.to_string(),
        });
    }
    let would_not_deploy = |source| PullError::WouldNotDeploy {
        reference: name.clone(),
        source,
    };
    let manifest = Manifest::from_image(&bytes).map_err(would_not_deploy)?;
    manifest.check().map_err(would_not_deploy)?;
    if manifest != described.manifest {
        return Err(PullError::ConfigDisagrees { reference: name });
    }
    Ok(Pulled {
        described,
        bytes,
        manifest_bytes,
    })
}

/// The manifest and config of `remote`, checked; also the layer descriptor and the
/// manifest's bytes.
async fn describe_remote(
    remote: &Remote,
) -> Result<(Described, OciDescriptor, Vec<u8>), PullError> {
    let name = remote.reference.whole();
    let accepted = [
        MANIFEST_MEDIA_TYPE,
        OCI_IMAGE_INDEX_MEDIA_TYPE,
        IMAGE_MANIFEST_MEDIA_TYPE,
        IMAGE_MANIFEST_LIST_MEDIA_TYPE,
    ];
    let (body, _) = remote
        .client
        .pull_manifest_raw(&remote.reference, &remote.auth, &accepted)
        .await
        .map_err(|e| match e {
            OciDistributionError::DigestError(DigestError::VerificationError {
                expected,
                actual,
            }) => PullError::DigestMismatch {
                reference: name.clone(),
                what: "manifest",
                expected,
                actual,
            },
            other => PullError::Registry(remote.error(other)),
        })?;
    if body.len() > MAX_MANIFEST_BYTES {
        return Err(PullError::ManifestTooLarge {
            reference: name,
            size: body.len(),
        });
    }
    // Our own check, not the library's: the manifest must hash to the digest
    // the reference names, and its digest is what we pin to from here on.
    let manifest_digest = artifact::oci_digest(&body);
    if let Some(expected) = remote.reference.digest()
        && expected != manifest_digest
    {
        return Err(PullError::DigestMismatch {
            reference: name,
            what: "manifest",
            expected: expected.to_string(),
            actual: manifest_digest,
        });
    }
    let image = parse_manifest(&name, &body)?;
    // parse_manifest returned Ok only for exactly one layer.
    let layer = image.layers[0].clone();
    let layer_size = u64::try_from(layer.size).unwrap_or(u64::MAX);
    if layer_size > MAX_PROGRAM_BYTES {
        return Err(PullError::TooLarge {
            reference: name,
            what: "layer",
            size: layer_size,
            cap: MAX_PROGRAM_BYTES,
        });
    }
    let digest: Digest = layer.digest.parse().map_err(|_| PullError::Config {
        reference: name.clone(),
        message: format!("layer digest `{}` is not `sha256:<64 hex>`", layer.digest),
    })?;

    let config_bytes = fetch_blob(remote, &name, &image.config, "config", MAX_CONFIG_BYTES).await?;
    let config: WasmConfig =
        serde_json::from_slice(&config_bytes).map_err(|e| PullError::Config {
            reference: name.clone(),
            message: e.to_string(),
        })?;
    if config.layer_digests != [layer.digest.clone()] {
        return Err(PullError::Config {
            reference: name,
            message: format!(
                "`layerDigests` is {:?} but the manifest's layer is {}",
                config.layer_digests, layer.digest
            ),
        });
    }
    let pinned = format!(
        "{}/{}@{manifest_digest}",
        remote.reference.registry(),
        remote.reference.repository()
    );
    let described = Described {
        reference: name,
        pinned,
        manifest_digest,
        digest,
        size: layer_size,
        manifest: config.berm,
    };
    Ok((described, layer, body.to_vec()))
}

/// Parses a manifest strictly into berm's shape: an OCI image manifest with
/// one `application/wasm` layer and a wasm config. Says what it found.
fn parse_manifest(name: &str, body: &[u8]) -> Result<OciImageManifest, PullError> {
    let json_error = |e: serde_json::Error| PullError::ManifestJson {
        reference: name.to_string(),
        message: e.to_string(),
    };
    let value: serde_json::Value = serde_json::from_slice(body).map_err(json_error)?;
    let media_type = value
        .get("mediaType")
        .and_then(|m| m.as_str())
        .unwrap_or("none")
        .to_string();
    if media_type == OCI_IMAGE_INDEX_MEDIA_TYPE
        || media_type == IMAGE_MANIFEST_LIST_MEDIA_TYPE
        || value.get("manifests").is_some()
    {
        return Err(PullError::Index {
            reference: name.to_string(),
            media_type,
        });
    }
    if media_type != MANIFEST_MEDIA_TYPE {
        return Err(PullError::ManifestMediaType {
            reference: name.to_string(),
            media_type,
        });
    }
    let image: OciImageManifest = serde_json::from_value(value).map_err(json_error)?;
    if image.layers.len() != 1 {
        return Err(PullError::LayerCount {
            reference: name.to_string(),
            count: image.layers.len(),
            media_types: if image.layers.is_empty() {
                "none".to_string()
            } else {
                image
                    .layers
                    .iter()
                    .map(|l| l.media_type.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            },
        });
    }
    if image.layers[0].media_type != LAYER_MEDIA_TYPE {
        return Err(PullError::LayerMediaType {
            reference: name.to_string(),
            media_type: image.layers[0].media_type.clone(),
        });
    }
    if image.config.media_type != CONFIG_MEDIA_TYPE {
        return Err(PullError::ConfigMediaType {
            reference: name.to_string(),
            media_type: image.config.media_type.clone(),
        });
    }
    Ok(image)
}

/// Downloads one blob into memory, refusing more than `cap` bytes, and
/// returns it only if it hashes to the descriptor's digest and has the
/// descriptor's size. oci-client also checks the digest while streaming;
/// this check is berm's own and does not depend on it.
pub(crate) async fn fetch_blob(
    remote: &Remote,
    name: &str,
    descriptor: &OciDescriptor,
    what: &'static str,
    cap: u64,
) -> Result<Vec<u8>, PullError> {
    let announced = u64::try_from(descriptor.size).unwrap_or(u64::MAX);
    if announced > cap {
        return Err(PullError::TooLarge {
            reference: name.to_string(),
            what,
            size: announced,
            cap,
        });
    }
    let mut sink = Bounded {
        bytes: Vec::with_capacity(announced as usize),
        cap: announced,
        overflowed: false,
    };
    let fetched = remote
        .client
        .pull_blob(&remote.reference, descriptor, &mut sink)
        .await;
    if sink.overflowed {
        return Err(PullError::Overlong {
            reference: name.to_string(),
            what,
            announced,
        });
    }
    match fetched {
        Ok(()) => {}
        Err(OciDistributionError::DigestError(DigestError::VerificationError { .. })) => {
            // Fall through to our own comparison, which names both digests.
        }
        Err(e) => return Err(PullError::Registry(remote.error(e))),
    }
    let actual = artifact::oci_digest(&sink.bytes);
    if actual != descriptor.digest {
        return Err(PullError::DigestMismatch {
            reference: name.to_string(),
            what,
            expected: descriptor.digest.clone(),
            actual,
        });
    }
    if sink.bytes.len() as u64 != announced {
        return Err(PullError::SizeMismatch {
            reference: name.to_string(),
            what,
            expected: announced,
            actual: sink.bytes.len() as u64,
        });
    }
    Ok(sink.bytes)
}

/// An in-memory sink that refuses to grow past `cap`: a registry cannot make
/// us hold more than the descriptor announced (itself capped).
struct Bounded {
    bytes: Vec<u8>,
    cap: u64,
    overflowed: bool,
}

impl AsyncWrite for Bounded {
    fn poll_write(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        if (self.bytes.len() + data.len()) as u64 > self.cap {
            self.overflowed = true;
            return Poll::Ready(Err(std::io::Error::other(
                "blob larger than its descriptor",
            )));
        }
        self.bytes.extend_from_slice(data);
        Poll::Ready(Ok(data.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest_json(media: &str, layers: &[&str], config: &str) -> Vec<u8> {
        let layers: Vec<_> = layers
            .iter()
            .map(|m| serde_json::json!({"mediaType": m, "digest": format!("sha256:{}", "a".repeat(64)), "size": 1}))
            .collect();
        serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2,
            "mediaType": media,
            "config": {"mediaType": config, "digest": format!("sha256:{}", "b".repeat(64)), "size": 2},
            "layers": layers,
        }))
        .unwrap()
    }

    #[test]
    fn parse_refuses_what_is_not_a_program_and_says_what_it_found() {
        let ok = manifest_json(MANIFEST_MEDIA_TYPE, &[LAYER_MEDIA_TYPE], CONFIG_MEDIA_TYPE);
        assert!(parse_manifest("r", &ok).is_ok());
        let two = manifest_json(
            MANIFEST_MEDIA_TYPE,
            &[LAYER_MEDIA_TYPE, "text/plain"],
            CONFIG_MEDIA_TYPE,
        );
        let e = parse_manifest("r", &two).unwrap_err().to_string();
        assert!(e.contains("2 layers") && e.contains("text/plain"), "{e}");
        let tar = manifest_json(
            MANIFEST_MEDIA_TYPE,
            &["application/vnd.oci.image.layer.v1.tar"],
            CONFIG_MEDIA_TYPE,
        );
        let e = parse_manifest("r", &tar).unwrap_err().to_string();
        assert!(e.contains("application/vnd.oci.image.layer.v1.tar"), "{e}");
        let cfg = manifest_json(
            MANIFEST_MEDIA_TYPE,
            &[LAYER_MEDIA_TYPE],
            "application/vnd.oci.image.config.v1+json",
        );
        let e = parse_manifest("r", &cfg).unwrap_err().to_string();
        assert!(
            e.contains("application/vnd.oci.image.config.v1+json"),
            "{e}"
        );
        let docker = manifest_json(
            IMAGE_MANIFEST_MEDIA_TYPE,
            &[LAYER_MEDIA_TYPE],
            CONFIG_MEDIA_TYPE,
        );
        let e = parse_manifest("r", &docker).unwrap_err().to_string();
        assert!(e.contains(IMAGE_MANIFEST_MEDIA_TYPE), "{e}");
        let index = br#"{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[]}"#;
        let e = parse_manifest("r", index).unwrap_err().to_string();
        assert!(
            e.contains("image index") && e.contains(OCI_IMAGE_INDEX_MEDIA_TYPE),
            "{e}"
        );
        let e = parse_manifest("r", b"{not json").unwrap_err().to_string();
        assert!(e.contains("does not parse"), "{e}");
    }
}
