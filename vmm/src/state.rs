//! The state disk (`--state DISK`, the guest's `vdb`, mounted at `/state`).
//!
//! A missing disk is created sparse and formatted ext4 on the host with Debian's mke2fs before
//! the first boot (docs/vm.md explains the choice), then digested: sha256 over per-MiB chunk
//! hashes, where a chunk with no data extent is known to be zeros and is not read. The digest
//! is taken before the guest can write.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::sys;

/// Size of a state disk berm-vmm creates.
pub const DEFAULT_SIZE: u64 = 256 << 20;
const CHUNK: u64 = 1 << 20;

/// Why the state disk could not be prepared.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// Creating or reading it failed.
    #[error("state disk {path}")]
    Io {
        /// The disk.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// mkfs.ext4 failed or is missing.
    #[error("formatting the new state disk {path} with mkfs.ext4 failed: {message}")]
    Format {
        /// The disk.
        path: PathBuf,
        /// What mkfs said.
        message: String,
    },
}

/// The state disk as measured.
#[derive(Clone, Debug, Serialize)]
pub struct StateDisk {
    /// Where it is.
    pub path: PathBuf,
    /// Its size.
    pub size_bytes: u64,
    /// Whether berm-vmm created it on this run.
    pub created: bool,
    /// sha256 over the per-MiB chunk hashes.
    pub chunked_sha256: String,
    /// Bytes actually read (data extents).
    pub hashed_bytes: u64,
    /// How long the digest took.
    pub hash_ms: u128,
}

/// Creates and formats `path` if missing, then digests it.
pub fn prepare(path: &Path) -> Result<StateDisk, StateError> {
    let io = |source| StateError::Io {
        path: path.to_owned(),
        source,
    };
    let created = !path.exists();
    if created {
        let file = File::create_new(path).map_err(io)?;
        file.set_len(DEFAULT_SIZE).map_err(io)?;
        drop(file);
        let output = Command::new("mkfs.ext4")
            .args(["-q", "-F", "-L", "berm-state", "-E", "nodiscard"])
            .arg(path)
            .output()
            .map_err(|e| StateError::Format {
                path: path.to_owned(),
                message: e.to_string(),
            })?;
        if !output.status.success() {
            let _ = std::fs::remove_file(path);
            return Err(StateError::Format {
                path: path.to_owned(),
                message: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
            });
        }
    }
    let started = std::time::Instant::now();
    let file = File::open(path).map_err(io)?;
    let size_bytes = file.metadata().map_err(io)?.len();
    let zero_chunk: [u8; 32] = Sha256::digest(vec![0u8; CHUNK as usize]).into();
    let mut outer = Sha256::new();
    let mut buf = vec![0u8; CHUNK as usize];
    let mut hashed_bytes = 0;
    let mut offset = 0;
    while offset < size_bytes {
        let len = CHUNK.min(size_bytes - offset) as usize;
        let has_data = sys::next_data(&file, offset)
            .map_err(io)?
            .is_some_and(|data| data < offset + len as u64);
        if has_data || len as u64 != CHUNK {
            file.read_exact_at(&mut buf[..len], offset).map_err(io)?;
            hashed_bytes += len as u64;
            outer.update(Sha256::digest(&buf[..len]));
        } else {
            outer.update(zero_chunk);
        }
        offset += len as u64;
    }
    Ok(StateDisk {
        path: path.to_owned(),
        size_bytes,
        created,
        chunked_sha256: hex::encode(outer.finalize()),
        hashed_bytes,
        hash_ms: started.elapsed().as_millis(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digest_depends_on_bytes_not_allocation() {
        let tmp = tempfile::tempdir().unwrap();
        let sparse = tmp.path().join("sparse");
        let dense = tmp.path().join("dense");
        File::create(&sparse).unwrap().set_len(3 * CHUNK).unwrap();
        std::fs::write(&dense, vec![0u8; 3 * CHUNK as usize]).unwrap();
        let a = prepare(&sparse).unwrap();
        let b = prepare(&dense).unwrap();
        assert_eq!(a.chunked_sha256, b.chunked_sha256);
        assert!(!a.created);
        assert_eq!(a.hashed_bytes, 0);
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(&sparse)
            .unwrap();
        f.write_all_at(b"x", CHUNK + 5).unwrap();
        assert_ne!(prepare(&sparse).unwrap().chunked_sha256, b.chunked_sha256);
    }
}
