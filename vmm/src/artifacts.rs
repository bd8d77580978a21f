//! Finding the kernel and rootfs and checking them against the pins compiled in, before any
//! hypervisor is touched.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Instant;

use berm_pins::{ArtifactStore, ImagePin};
use sha2::{Digest, Sha256};

/// How to get the artifacts a build is missing.
pub const HOW_TO_BUILD: &str = "run `berm vm install` to fetch and verify them, or build them with \
     scripts/build-kernel.sh and scripts/build-rootfs.sh (scripts/test-vm builds both)";

/// Why an artifact could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ArtifactError {
    /// Neither `--kernel`/`--rootfs` nor an artifact store was available.
    #[error("no artifact store: set BERM_VM_ARTIFACTS, XDG_CACHE_HOME or HOME, or pass --{what}")]
    NoStore {
        /// `kernel` or `rootfs`.
        what: &'static str,
    },
    /// The pinned artifact is not installed.
    #[error("the pinned {what} is missing: {path} does not exist; {HOW_TO_BUILD}")]
    Missing {
        /// `kernel` or `rootfs`.
        what: &'static str,
        /// Where it was looked for.
        path: PathBuf,
    },
    /// It could not be read.
    #[error("reading the {what} {path} failed")]
    Read {
        /// `kernel` or `rootfs`.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The pinned location holds a file with another hash.
    #[error(
        "the {what} {path} has sha256 {actual}, but berm-vmm is pinned to {pinned}; it was \
         tampered with or built from other inputs. Rebuild with the scripts, or pass --{what} to \
         boot it as unpinned"
    )]
    Mismatch {
        /// `kernel` or `rootfs`.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// Its hash.
        actual: String,
        /// The pin.
        pinned: String,
    },
}

/// A kernel or rootfs, hashed.
#[derive(Clone, Debug)]
pub struct Artifact {
    /// Where it is.
    pub path: PathBuf,
    /// sha256 of its bytes.
    pub sha256: String,
    /// Its size.
    pub size: u64,
    /// Whether its hash equals the pin.
    pub pinned: bool,
    /// How long hashing took.
    pub hash_ms: u64,
}

/// Hashes a file.
pub fn hash_file(what: &'static str, path: &Path) -> Result<(String, u64), ArtifactError> {
    let read = |source| ArtifactError::Read {
        what,
        path: path.to_owned(),
        source,
    };
    let mut file = File::open(path).map_err(read)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut size = 0u64;
    loop {
        let n = file.read(&mut buf).map_err(read)?;
        if n == 0 {
            break;
        }
        size += n as u64;
        hasher.update(&buf[..n]);
    }
    Ok((hex::encode(hasher.finalize()), size))
}

/// Finds and hashes an artifact: `explicit` (an override, allowed unpinned) or the pinned one
/// in `store`, where `locate` says (refused unless its hash is the pin).
pub fn resolve(
    what: &'static str,
    pin: &ImagePin,
    explicit: Option<&Path>,
    store: Option<&ArtifactStore>,
    locate: &dyn Fn(&ArtifactStore) -> PathBuf,
) -> Result<Artifact, ArtifactError> {
    let path = match explicit {
        Some(path) => path.to_owned(),
        None => locate(store.ok_or(ArtifactError::NoStore { what })?),
    };
    if !path.exists() {
        return Err(ArtifactError::Missing { what, path });
    }
    let started = Instant::now();
    let (sha256, size) = hash_file(what, &path)?;
    let pinned = sha256 == pin.sha256.as_str() && size == pin.size;
    if !pinned && explicit.is_none() {
        return Err(ArtifactError::Mismatch {
            what,
            path,
            actual: sha256,
            pinned: pin.sha256.to_string(),
        });
    }
    Ok(Artifact {
        path,
        sha256,
        size,
        pinned,
        hash_ms: started.elapsed().as_millis() as u64,
    })
}
