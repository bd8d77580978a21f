//! berm's guest kernel and rootfs as one OCI artifact (`berm vm push`), and fetching each blob
//! back by its pinned digest into the artifact store (`berm vm install --from oci://…`).
//!
//! The artifact is an OCI image manifest with its own `artifactType`
//! ([`VM_ARTIFACT_TYPE`]), a small config blob ([`VmConfig`]) and two layers, the kernel and
//! the rootfs, each the file itself (no tarball), so a layer's digest **is** its pin. The
//! manifest is tagged with [`vm_tag`], derived from the pins, so a registry's garbage collector
//! keeps the blobs referenced and one tag names exactly one pinned pair.
//!
//! Installing never reads the manifest: the pins compiled into berm name the blobs, and
//! `GET /v2/<repo>/blobs/sha256:<pin>` works on any registry or mirror that holds them, whatever
//! manifests it has. The bytes go through [`berm_pins::StoreWriter`], so nothing that is not
//! the pinned file is ever renamed into place.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use berm_pins::{ImagePin, InstallError, StoreWriter};
use futures_util::StreamExt;
use oci_client::client::{BlobResponse, SizedStream};
use oci_client::manifest::{OciDescriptor, OciImageManifest};

use crate::MANIFEST_MEDIA_TYPE;
use crate::artifact::{self, ANNOTATION_TITLE};
use crate::error::{PushError, RegistryError};
use crate::registry::{RegistryOptions, Remote, parse_reference};

/// The manifest's `artifactType`: what registries and `oras` list the artifact as.
pub const VM_ARTIFACT_TYPE: &str = "application/vnd.berm.vm.v1";
/// Media type of the config blob ([`VmConfig`]).
pub const VM_CONFIG_MEDIA_TYPE: &str = "application/vnd.berm.vm.config.v1+json";
/// Media type of the kernel layer: the kernel file as berm-vmm boots it (`vmlinux`, `Image`).
pub const VM_KERNEL_MEDIA_TYPE: &str = "application/vnd.berm.vm.kernel.v1";
/// Media type of the rootfs layer: the erofs image itself.
pub const VM_ROOTFS_MEDIA_TYPE: &str = "application/vnd.berm.vm.rootfs.v1+erofs";
/// Manifest annotation: the guest architecture (`x86_64`, `aarch64`).
pub const ANNOTATION_VM_ARCH: &str = "dev.berm.vm.arch";
/// Manifest annotation: the kernel's pinned sha256 (bare hex, as the manifests write it).
pub const ANNOTATION_VM_KERNEL: &str = "dev.berm.vm.kernel.sha256";
/// Manifest annotation: the rootfs's pinned sha256.
pub const ANNOTATION_VM_ROOTFS: &str = "dev.berm.vm.rootfs.sha256";

/// The tag `berm vm push` gives a pinned pair: `<arch>-<first 12 hex of the kernel's sha256>-
/// <first 12 of the rootfs's>`, e.g. `x86_64-eb35498e1b90-65e8a1db2db8`. Derived from the pins
/// alone, so every push of the same pins lands on the same tag and a re-pin gets a new one.
pub fn vm_tag(arch: &str, kernel: &ImagePin, rootfs: &ImagePin) -> String {
    format!(
        "{arch}-{}-{}",
        &kernel.sha256.as_str()[..12],
        &rootfs.sha256.as_str()[..12]
    )
}

/// One file of a VM artifact, as `berm vm push` read it (and checked against its pin).
#[derive(Debug, Clone)]
pub struct VmFile {
    /// The file name in the store (`vmlinux`, `Image`, `rootfs.erofs`); the layer's title.
    pub file: String,
    /// Its bytes.
    pub bytes: Vec<u8>,
}

/// One layer as the config blob and `berm vm push --json` describe it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct VmLayer {
    /// The file name in the store.
    pub file: String,
    /// sha256, bare hex (the pin).
    pub sha256: String,
    /// Size in bytes (the pin).
    pub size: u64,
}

/// The config blob: the architecture and both pins, so the artifact describes itself to anyone
/// who reads the manifest. `berm vm install` does not read it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct VmConfig {
    /// The guest architecture.
    pub arch: String,
    /// The kernel layer.
    pub kernel: VmLayer,
    /// The rootfs layer.
    pub rootfs: VmLayer,
}

/// What `berm vm push` left on the registry.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PushedVm {
    /// `host/repo:<tag>` ([`vm_tag`]).
    pub reference: String,
    /// `host/repo@<manifest digest>`.
    pub pinned: String,
    /// The manifest's digest.
    pub manifest_digest: String,
    /// What the artifact holds.
    #[serde(flatten)]
    pub config: VmConfig,
}

/// Pushes `kernel` and `rootfs` of `arch` to `repository` (`host[:port]/repo`, no tag: the
/// tag is [`vm_tag`]'s) as one artifact. Blobs the registry already holds are not sent again.
/// The caller checks the files against the pins; the layer digests are computed here from the
/// bytes sent, so what the manifest names is exactly what was uploaded.
///
/// # Errors
/// [`PushError::Registry`] for a bad reference (including one with a tag or digest) or a
/// failing registry.
pub async fn push_vm(
    repository: &str,
    arch: &str,
    kernel: VmFile,
    rootfs: VmFile,
    options: &RegistryOptions,
) -> Result<PushedVm, PushError> {
    let repository = bare_repository(repository)?;
    let layer = |f: &VmFile| VmLayer {
        file: f.file.clone(),
        sha256: artifact::oci_digest(&f.bytes)["sha256:".len()..].to_string(),
        size: f.bytes.len() as u64,
    };
    let config = VmConfig {
        arch: arch.to_string(),
        kernel: layer(&kernel),
        rootfs: layer(&rootfs),
    };
    let pin = |l: &VmLayer| ImagePin {
        sha256: berm_pins::Sha256Hex::parse(&l.sha256).expect("sha256 of bytes is hex"),
        size: l.size,
    };
    let tag = vm_tag(arch, &pin(&config.kernel), &pin(&config.rootfs));
    let remote = Remote::new(&format!("{repository}:{tag}"), options)?;
    let protocol = |cause: String| {
        PushError::Registry(RegistryError::Protocol {
            registry: remote.registry().to_string(),
            reference: remote.reference.whole(),
            cause,
        })
    };
    let config_bytes = serde_json::to_vec(&config).map_err(|e| protocol(e.to_string()))?;
    let descriptor = |media_type: &str, l: &VmLayer| OciDescriptor {
        media_type: media_type.to_string(),
        digest: format!("sha256:{}", l.sha256),
        size: l.size as i64,
        annotations: Some([(ANNOTATION_TITLE.to_string(), l.file.clone())].into()),
        ..OciDescriptor::default()
    };
    let image = OciImageManifest {
        schema_version: 2,
        media_type: Some(MANIFEST_MEDIA_TYPE.to_string()),
        artifact_type: Some(VM_ARTIFACT_TYPE.to_string()),
        config: OciDescriptor {
            media_type: VM_CONFIG_MEDIA_TYPE.to_string(),
            digest: artifact::oci_digest(&config_bytes),
            size: config_bytes.len() as i64,
            ..OciDescriptor::default()
        },
        layers: vec![
            descriptor(VM_KERNEL_MEDIA_TYPE, &config.kernel),
            descriptor(VM_ROOTFS_MEDIA_TYPE, &config.rootfs),
        ],
        subject: None,
        annotations: Some(BTreeMap::from([
            (ANNOTATION_VM_ARCH.to_string(), arch.to_string()),
            (
                ANNOTATION_VM_KERNEL.to_string(),
                config.kernel.sha256.clone(),
            ),
            (
                ANNOTATION_VM_ROOTFS.to_string(),
                config.rootfs.sha256.clone(),
            ),
        ])),
    };
    let manifest_bytes = serde_json::to_vec(&image).map_err(|e| protocol(e.to_string()))?;

    let blobs = vec![
        (kernel.bytes, image.layers[0].digest.clone()),
        (rootfs.bytes, image.layers[1].digest.clone()),
        (config_bytes, image.config.digest.clone()),
    ];
    crate::push::upload(&remote, blobs, &manifest_bytes).await?;
    let target = &remote.reference;
    let manifest_digest = artifact::oci_digest(&manifest_bytes);
    Ok(PushedVm {
        reference: target.whole(),
        pinned: format!("{repository}@{manifest_digest}"),
        manifest_digest,
        config,
    })
}

/// `repository` checked to be `host[:port]/repo` with neither tag nor digest, normalized.
/// (oci-client's parser fills in `latest` for a missing tag, so the text itself is looked at.)
fn bare_repository(repository: &str) -> Result<String, RegistryError> {
    let reference = parse_reference(repository)?;
    let name = repository.rsplit('/').next().unwrap_or(repository);
    if repository.contains('@') || name.contains(':') {
        return Err(RegistryError::NotARepository {
            reference: repository.chars().take(200).collect(),
        });
    }
    Ok(format!(
        "{}/{}",
        reference.registry(),
        reference.repository()
    ))
}

/// Why a blob was not installed from a registry.
#[derive(Debug, thiserror::Error)]
pub enum VmFetchError {
    /// The registry could not be used or refused the blob (not found, unreachable, denied).
    #[error("cannot fetch the {what} sha256:{sha256} from {repository}: {cause}")]
    Registry {
        /// The artifact (`x86_64 kernel`).
        what: String,
        /// Its pinned sha256.
        sha256: String,
        /// `host/repo`.
        repository: String,
        /// What the registry did (boxed: it is large and this path is cold). In the message,
        /// not a `source()`, so a printed chain does not repeat it.
        cause: Box<RegistryError>,
    },
    /// The registry announced another size than the pin before sending anything.
    #[error(
        "{repository} announces {announced} bytes for the {what} sha256:{sha256}, but the pin is {pinned} bytes: refused as {}",
        if announced < pinned { "truncated" } else { "longer than pinned" }
    )]
    Announced {
        /// The artifact.
        what: String,
        /// Its pinned sha256.
        sha256: String,
        /// `host/repo`.
        repository: String,
        /// The announced total size.
        announced: u64,
        /// The pinned size.
        pinned: u64,
    },
    /// The connection broke off before the whole blob arrived.
    #[error(
        "the download of the {what} from {repository} broke off after {got} of {pinned} bytes: {cause}"
    )]
    Interrupted {
        /// The artifact.
        what: String,
        /// `host/repo`.
        repository: String,
        /// Bytes in the partial file.
        got: u64,
        /// The pinned size.
        pinned: u64,
        /// The transport's message.
        cause: String,
    },
    /// The connection broke off on every attempt; the bytes that arrived are kept for the
    /// next install to resume from.
    #[error(
        "the download of the {what} from {repository} broke off {attempts} times, the last at {kept} of {pinned} bytes ({cause}); kept {kept} bytes in {}; run berm vm install again to resume",
        partial.display()
    )]
    Kept {
        /// The artifact.
        what: String,
        /// `host/repo`.
        repository: String,
        /// How many requests broke off.
        attempts: u32,
        /// Bytes in the kept partial file.
        kept: u64,
        /// The pinned size.
        pinned: u64,
        /// The kept partial file, in the store beside the artifact's final name.
        partial: PathBuf,
        /// The last transport message.
        cause: String,
    },
    /// The bytes were not the pinned ones, or the store could not be written.
    #[error(transparent)]
    Install(#[from] InstallError),
}

impl VmFetchError {
    fn is_content(&self) -> bool {
        match self {
            VmFetchError::Install(e) => e.is_content(),
            VmFetchError::Announced { .. } => true,
            _ => false,
        }
    }

    /// The transport failed after bytes had started to flow (`got` of them are in the partial
    /// file): worth resuming from there, unlike a refusal by the registry or of the bytes.
    fn broke_off(&self, got: u64) -> bool {
        match self {
            VmFetchError::Interrupted { .. } => true,
            VmFetchError::Registry { cause, .. } => {
                got > 0 && matches!(**cause, RegistryError::Unreachable { .. })
            }
            _ => false,
        }
    }
}

/// How many times a download that broke off is resumed in-process (each an HTTP range from
/// the bytes already written) before its partial file is kept for the next install.
pub const RESUME_ATTEMPTS: u32 = 3;
/// The wait before the first in-process resume; the n-th waits n times as long.
const RESUME_BACKOFF: Duration = Duration::from_millis(200);

/// What [`install_blob`] reports while it works, for a progress bar.
#[derive(Debug, Clone)]
pub enum BlobProgress {
    /// Bytes are about to flow from `url`; `offset` of them are already in the partial file.
    Started {
        /// The blob's URL.
        url: String,
        /// Bytes kept from an interrupted install (0 when starting afresh).
        offset: u64,
    },
    /// The partial file now holds this many bytes.
    Written(u64),
}

/// How an installed blob arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fetched {
    /// Bytes kept from an interrupted install's partial file and not downloaded again.
    pub resumed_from: u64,
    /// Bytes downloaded in this install.
    pub downloaded: u64,
}

/// Fetches the blob `pin` names from `repository` (`host[:port]/repo`) into `dest`, its place
/// in the artifact store, through [`StoreWriter`]. A partial file an interrupted install left
/// is re-hashed and only the rest is asked for (an HTTP range); a registry that answers with
/// the whole blob instead is read from the start. If a resumed download is refused for its
/// bytes, it is tried once more from zero, since the kept prefix may be what was wrong.
///
/// A transfer that breaks off midway (a reset connection, a stream error) is resumed from
/// where it stopped, up to [`RESUME_ATTEMPTS`] times with a short backoff; if it still
/// breaks off, the partial file is kept ([`VmFetchError::Kept`]) for the next install.
///
/// # Errors
/// [`VmFetchError`]; on any error but [`VmFetchError::Kept`] nothing is left at `dest` or
/// beside it.
pub async fn install_blob(
    repository: &str,
    what: &str,
    pin: &ImagePin,
    dest: &Path,
    options: &RegistryOptions,
    progress: &mut (dyn FnMut(BlobProgress) + Send),
) -> Result<Fetched, VmFetchError> {
    let registry_error = |source| VmFetchError::Registry {
        what: what.to_string(),
        sha256: pin.sha256.to_string(),
        repository: repository.to_string(),
        cause: Box::new(source),
    };
    let repository = bare_repository(repository).map_err(registry_error)?;
    let remote = Remote::new(&format!("{repository}@sha256:{}", pin.sha256), options)
        .map_err(registry_error)?;
    remote
        .client
        .store_auth_if_needed(remote.registry(), &remote.auth)
        .await;
    let mut writer = StoreWriter::resume(what, pin, dest)?;
    let resumed_from = writer.written();
    let mut retried = false;
    let mut broke_off = 0;
    loop {
        let offset = writer.written();
        let fetched = fetch_into(&remote, &repository, what, pin, &mut writer, progress).await;
        match fetched.and_then(|()| writer.verify().map_err(VmFetchError::from)) {
            Ok(()) => break,
            Err(e) if e.broke_off(writer.written()) => {
                broke_off += 1;
                if broke_off <= RESUME_ATTEMPTS {
                    tokio::time::sleep(RESUME_BACKOFF * broke_off).await;
                    continue;
                }
                if writer.written() == 0 {
                    return Err(e);
                }
                let (partial, kept) = writer.keep()?;
                return Err(VmFetchError::Kept {
                    what: what.to_string(),
                    repository,
                    attempts: broke_off,
                    kept,
                    pinned: pin.size,
                    partial,
                    cause: match e {
                        VmFetchError::Interrupted { cause, .. } => cause,
                        other => other.to_string(),
                    },
                });
            }
            Err(e) if offset > 0 && !retried && e.is_content() => {
                retried = true;
                writer.restart()?;
            }
            // Dropping the writer deletes the partial file.
            Err(e) => return Err(e),
        }
    }
    let kept = if retried { 0 } else { resumed_from };
    writer.commit()?;
    Ok(Fetched {
        resumed_from: kept,
        downloaded: pin.size - kept,
    })
}

/// One request: the rest of the blob after what `writer` holds, or all of it.
async fn fetch_into(
    remote: &Remote,
    repository: &str,
    what: &str,
    pin: &ImagePin,
    writer: &mut StoreWriter,
    progress: &mut (dyn FnMut(BlobProgress) + Send),
) -> Result<(), VmFetchError> {
    let registry_error = |e| VmFetchError::Registry {
        what: what.to_string(),
        sha256: pin.sha256.to_string(),
        repository: repository.to_string(),
        cause: Box::new(remote.error(e)),
    };
    let descriptor = OciDescriptor {
        media_type: "application/octet-stream".to_string(),
        digest: format!("sha256:{}", pin.sha256),
        size: pin.size as i64,
        ..OciDescriptor::default()
    };
    let offset = writer.written();
    let stream: SizedStream = if offset > 0 {
        match remote
            .client
            .pull_blob_stream_partial(&remote.reference, &descriptor, offset, None)
            .await
            .map_err(registry_error)?
        {
            BlobResponse::Partial(stream) => stream,
            BlobResponse::Full(stream) => {
                // The registry ignored the range: everything comes again.
                writer.restart()?;
                stream
            }
        }
    } else {
        remote
            .client
            .pull_blob_stream(&remote.reference, &descriptor)
            .await
            .map_err(registry_error)?
    };
    let from = writer.written();
    if let Some(length) = stream.content_length
        && from + length != pin.size
    {
        return Err(VmFetchError::Announced {
            what: what.to_string(),
            sha256: pin.sha256.to_string(),
            repository: repository.to_string(),
            announced: from + length,
            pinned: pin.size,
        });
    }
    progress(BlobProgress::Started {
        url: format!(
            "{}://{}/v2/{}/blobs/sha256:{}",
            remote.scheme,
            remote.registry(),
            remote.reference.repository(),
            pin.sha256
        ),
        offset: from,
    });
    let mut body = stream.stream;
    while let Some(chunk) = body.next().await {
        match chunk {
            Ok(bytes) => {
                writer.write(&bytes)?;
                progress(BlobProgress::Written(writer.written()));
            }
            // oci-client's own digest check fails at the end of a full body; berm's check
            // (StoreWriter::verify) follows and names both digests.
            Err(_) if writer.written() == pin.size => break,
            Err(e) => {
                return Err(VmFetchError::Interrupted {
                    what: what.to_string(),
                    repository: repository.to_string(),
                    got: writer.written(),
                    pinned: pin.size,
                    cause: berm_errors::chain(&e),
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tag_is_derived_from_the_pins() {
        let pin = |c: &str| ImagePin {
            sha256: berm_pins::Sha256Hex::parse(&c.repeat(64)).unwrap(),
            size: 1,
        };
        assert_eq!(
            vm_tag("x86_64", &pin("a"), &pin("b")),
            "x86_64-aaaaaaaaaaaa-bbbbbbbbbbbb"
        );
    }

    #[test]
    fn a_repository_takes_no_tag() {
        assert_eq!(
            bare_repository("127.0.0.1:5000/berm/vm").unwrap(),
            "127.0.0.1:5000/berm/vm"
        );
        let e = bare_repository("127.0.0.1:5000/berm/vm:v1")
            .unwrap_err()
            .to_string();
        assert!(e.contains("names a tag or digest"), "{e}");
    }
}
