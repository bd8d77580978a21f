//! The state disk (`--state DISK`, the guest's `vdb`, mounted at `/state`).
//!
//! A missing disk is created sparse, and a blank one (its first MiB all zeros, e.g. made with
//! `truncate -s`) is used as it is; either is formatted ext4 once, on the host, with mke2fs
//! (docs/vm.md explains the choice). A disk that is neither ext4 nor blank is refused: berm
//! never formats over data. An ext4 disk whose file is shorter than its filesystem — libkrun
//! 1.19's discard handling can truncate a disk's zero tail — gets the tail back (zeros, as
//! sparse space) before boot, and says how much. Then the disk is digested: sha256 over
//! per-MiB chunk hashes, where a chunk with no data extent is known to be zeros and is not
//! read. The digest is taken before the guest can write.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

use crate::sys;

/// Size of a state disk berm-vmm creates.
pub const DEFAULT_SIZE: u64 = 256 << 20;
const CHUNK: u64 = 1 << 20;

/// Why the state disk could not be prepared.
#[derive(Debug, thiserror::Error)]
pub enum PrepareStateError {
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
    /// Neither ext4 nor blank: it holds something berm did not write.
    #[error(
        "state disk {0} is neither an ext4 filesystem nor blank; berm-vmm formats only a new or all-zero disk and will not overwrite data (give another path, or remove this file)"
    )]
    Foreign(PathBuf),
    /// The superblock names a size the file cannot be: a guest wrote it, and berm-vmm will not
    /// resize or read by it.
    #[error(
        "state disk {path}: its ext4 superblock says {claimed} bytes, but the file has {size} (at most {MAX_RESTORE} bytes of zero tail are ever restored, and a disk holds at most {MAX_SIZE} bytes); the file is left as it is"
    )]
    BadSuperblock {
        /// The disk.
        path: PathBuf,
        /// What the superblock claims (saturated at u64::MAX).
        claimed: u64,
        /// The file's own size.
        size: u64,
    },
    /// The file itself is larger than berm-vmm digests.
    #[error("state disk {path} is {size} bytes; berm-vmm takes at most {MAX_SIZE}")]
    TooLarge {
        /// The disk.
        path: PathBuf,
        /// Its size.
        size: u64,
    },
    /// Too small to hold a filesystem.
    #[error("state disk {path} is {size} bytes; it needs at least 16 MiB")]
    TooSmall {
        /// The disk.
        path: PathBuf,
        /// Its size.
        size: u64,
    },
}

/// The state disk as measured (the measurement line's own type).
pub use berm_vm_protocol::host::StateMeasurement as StateDisk;

/// Smallest disk berm-vmm formats.
const MIN_SIZE: u64 = 16 << 20;
/// Largest state disk berm-vmm takes (file or filesystem): 64 GiB, 65,536 chunks to digest.
pub const MAX_SIZE: u64 = 64 << 30;
/// Most zero tail berm-vmm puts back when the file is shorter than its filesystem. libkrun's
/// discard bug cuts only free space at the end; more than this is not that bug.
pub const MAX_RESTORE: u64 = 1 << 30;

/// What to do about the file's size, decided from the superblock before the file is touched:
/// `Ok(bytes)` of zero tail to restore (0 when the sizes agree), or the refusal.
pub fn check_superblock(path: &Path, claimed: u64, size: u64) -> Result<u64, PrepareStateError> {
    let bad = || PrepareStateError::BadSuperblock {
        path: path.to_owned(),
        claimed,
        size,
    };
    if !(MIN_SIZE..=MAX_SIZE).contains(&claimed) {
        return Err(bad());
    }
    match claimed.checked_sub(size) {
        Some(tail) if tail > MAX_RESTORE => Err(bad()),
        Some(tail) => Ok(tail),
        // A file longer than its filesystem is fine (the filesystem was made smaller).
        None => Ok(0),
    }
}

/// Creates and formats `path` if missing or blank, restores a truncated tail, then digests it.
pub fn prepare(path: &Path) -> Result<StateDisk, PrepareStateError> {
    let io = |source| PrepareStateError::Io {
        path: path.to_owned(),
        source,
    };
    let created = !path.exists();
    if created {
        let file = File::create_new(path).map_err(io)?;
        file.set_len(DEFAULT_SIZE).map_err(io)?;
    }
    let size = std::fs::metadata(path).map_err(io)?.len();
    if size > MAX_SIZE {
        return Err(PrepareStateError::TooLarge {
            path: path.to_owned(),
            size,
        });
    }
    let mut head = vec![0u8; CHUNK.min(size) as usize];
    File::open(path)
        .and_then(|f| f.read_exact_at(&mut head, 0))
        .map_err(io)?;
    let mut formatted = false;
    let mut restored_bytes = 0;
    match ext4_size(&head) {
        Some(fs_size) => {
            let tail = check_superblock(path, fs_size, size)?;
            if tail > 0 {
                // The tail was cut off; it held only zeros (ext4 wrote nothing there, or the
                // discard that cut it had zeroed it), so sparse zeros restore it exactly.
                let file = File::options().write(true).open(path).map_err(io)?;
                file.set_len(fs_size).map_err(io)?;
                restored_bytes = tail;
            }
        }
        None if head.iter().all(|&b| b == 0) => {
            if size < MIN_SIZE {
                return Err(PrepareStateError::TooSmall {
                    path: path.to_owned(),
                    size,
                });
            }
            format(path, created)?;
            formatted = true;
        }
        None => return Err(PrepareStateError::Foreign(path.to_owned())),
    }
    let (size_bytes, chunked_sha256, hashed_bytes, hash_ms) = digest(path)?;
    Ok(StateDisk {
        path: path.to_owned(),
        size_bytes,
        created,
        formatted,
        restored_bytes,
        chunked_sha256,
        hashed_bytes,
        hash_ms,
    })
}

/// sha256 over per-MiB chunk hashes, reading only chunks with data: (size, digest, bytes
/// read, milliseconds).
fn digest(path: &Path) -> Result<(u64, String, u64, u64), PrepareStateError> {
    let io = |source| PrepareStateError::Io {
        path: path.to_owned(),
        source,
    };
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
    Ok((
        size_bytes,
        hex::encode(outer.finalize()),
        hashed_bytes,
        started.elapsed().as_millis() as u64,
    ))
}

/// mkfs.ext4 with discards off (libkrun's discard handling is what truncates disks).
fn format(path: &Path, created: bool) -> Result<(), PrepareStateError> {
    let fail = |message: String| {
        if created {
            let _ = std::fs::remove_file(path);
        }
        PrepareStateError::Format {
            path: path.to_owned(),
            message,
        }
    };
    let output = Command::new("mkfs.ext4")
        .args(["-q", "-F", "-L", "berm-state", "-E", "nodiscard"])
        .arg(path)
        .output()
        .map_err(|e| fail(format!("{e} (install e2fsprogs)")))?;
    if !output.status.success() {
        return Err(fail(
            String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        ));
    }
    Ok(())
}

/// The size in bytes the ext4 superblock (at offset 1024 of `head`) says the filesystem has,
/// or `None` if `head` holds no ext4 superblock.
fn ext4_size(head: &[u8]) -> Option<u64> {
    let sb = head.get(1024..2048)?;
    let u32_at = |off: usize| u32::from_le_bytes([sb[off], sb[off + 1], sb[off + 2], sb[off + 3]]);
    if u16::from_le_bytes([sb[0x38], sb[0x39]]) != 0xEF53 {
        return None;
    }
    let log_block = u32_at(0x18);
    if log_block > 6 {
        return None;
    }
    let block_size = 1024u64 << log_block;
    let mut blocks = u64::from(u32_at(0x04));
    // INCOMPAT_64BIT: the high half of the block count is valid.
    if u32_at(0x60) & 0x80 != 0 {
        blocks |= u64::from(u32_at(0x150)) << 32;
    }
    // An overflowing count is as bad as a huge one: saturate, and the bound refuses it.
    Some(blocks.saturating_mul(block_size))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_and_blank_disks_are_formatted_foreign_ones_refused_and_tails_restored() {
        let tmp = tempfile::tempdir().unwrap();
        let new = tmp.path().join("new");
        let disk = prepare(&new).unwrap();
        assert!(disk.created && disk.formatted && disk.restored_bytes == 0);
        let again = prepare(&new).unwrap();
        assert!(!again.created && !again.formatted);
        assert_eq!(again.chunked_sha256, disk.chunked_sha256);

        let blank = tmp.path().join("blank");
        File::create(&blank).unwrap().set_len(32 << 20).unwrap();
        let disk = prepare(&blank).unwrap();
        assert!(!disk.created && disk.formatted);

        let foreign = tmp.path().join("foreign");
        std::fs::write(&foreign, vec![7u8; 32 << 20]).unwrap();
        let err = prepare(&foreign).unwrap_err().to_string();
        assert!(
            err.contains("neither an ext4 filesystem nor blank"),
            "{err}"
        );
        assert_eq!(std::fs::read(&foreign).unwrap(), vec![7u8; 32 << 20]);

        // Cut the tail the way libkrun's discard bug does: the filesystem is whole again.
        let full = std::fs::metadata(&new).unwrap().len();
        File::options()
            .write(true)
            .open(&new)
            .unwrap()
            .set_len(full - (64 << 10))
            .unwrap();
        let disk = prepare(&new).unwrap();
        assert_eq!((disk.restored_bytes, disk.size_bytes), (64 << 10, full));
        assert_eq!(std::fs::metadata(&new).unwrap().len(), full);

        let small = tmp.path().join("small");
        File::create(&small).unwrap().set_len(1 << 20).unwrap();
        assert!(prepare(&small).unwrap_err().to_string().contains("16 MiB"));
    }

    #[test]
    fn a_superblock_claiming_an_absurd_size_is_refused_fast_and_the_file_untouched() {
        let tmp = tempfile::tempdir().unwrap();
        let disk = tmp.path().join("disk");
        prepare(&disk).unwrap();
        let original = std::fs::read(&disk).unwrap();
        let size = original.len() as u64;
        let sb = |head: &mut Vec<u8>, blocks_lo: u32, blocks_hi: u32| {
            head[1024 + 0x04..1024 + 0x08].copy_from_slice(&blocks_lo.to_le_bytes());
            head[1024 + 0x60] |= 0x80; // INCOMPAT_64BIT
            head[1024 + 0x150..1024 + 0x154].copy_from_slice(&blocks_hi.to_le_bytes());
        };
        for (lo, hi) in [(u32::MAX, u32::MAX), (0, 1), (u32::MAX, 0), (1, 0)] {
            let mut bytes = original.clone();
            sb(&mut bytes, lo, hi);
            std::fs::write(&disk, &bytes).unwrap();
            let started = std::time::Instant::now();
            let err = prepare(&disk).unwrap_err();
            berm_fixtures::assert_within(started, std::time::Duration::from_secs(1));
            assert!(
                matches!(err, PrepareStateError::BadSuperblock { .. }),
                "{err}"
            );
            assert!(err.to_string().contains("left as it is"), "{err}");
            assert_eq!(std::fs::metadata(&disk).unwrap().len(), size);
            assert_eq!(std::fs::read(&disk).unwrap(), bytes);
        }
        // Within the bounds, a cut tail is still put back.
        assert_eq!(check_superblock(&disk, size, size - 4096).unwrap(), 4096);
        assert_eq!(check_superblock(&disk, size, size + 4096).unwrap(), 0);
        assert!(check_superblock(&disk, size + MAX_RESTORE + 1, size).is_err());
    }

    #[test]
    fn digest_depends_on_bytes_not_allocation() {
        let tmp = tempfile::tempdir().unwrap();
        let sparse = tmp.path().join("sparse");
        let dense = tmp.path().join("dense");
        File::create(&sparse).unwrap().set_len(3 * CHUNK).unwrap();
        std::fs::write(&dense, vec![0u8; 3 * CHUNK as usize]).unwrap();
        let a = digest(&sparse).unwrap();
        let b = digest(&dense).unwrap();
        assert_eq!(a.1, b.1);
        assert_eq!(a.2, 0);
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(&sparse)
            .unwrap();
        f.write_all_at(b"x", CHUNK + 5).unwrap();
        assert_ne!(digest(&sparse).unwrap().1, b.1);
    }
}
