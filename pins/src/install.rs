//! Writing one pinned artifact into the [`ArtifactStore`](crate::ArtifactStore): streamed into
//! `<file>.partial` while it is hashed, and renamed to its final name only once its size and
//! sha256 equal the pin.
//!
//! Every source `berm vm install` reads (a directory, a URL, an OCI registry) writes through
//! [`StoreWriter`], so the guarantee is stated once: berm-vmm never sees a name it reads unless
//! the bytes behind it are the pinned ones, and a refused artifact leaves nothing behind — no
//! partial file, no directory this install created. A process that is killed (a power cut,
//! Ctrl-C) leaves only the `.partial` file, which [`StoreWriter::resume`] re-hashes and
//! continues; so does a download whose connection kept breaking off, which
//! [`StoreWriter::keep`] leaves on purpose. The partial file is the owner's only (mode 0600):
//! its bytes are not verified yet.

use std::fs::{File, OpenOptions, Permissions};
use std::io::{Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::ImagePin;

/// Why an artifact was not installed. Each variant names the artifact (`what`, e.g.
/// `x86_64 kernel`) and what was wrong with it.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    /// More bytes arrived than the pin allows.
    #[error("the {what} is longer than the pinned {pinned} bytes: refused as tampered")]
    Overlong {
        /// The artifact.
        what: String,
        /// The pinned size.
        pinned: u64,
    },
    /// Fewer bytes arrived than the pin says.
    #[error("the {what} is truncated: {got} of the pinned {pinned} bytes arrived")]
    Truncated {
        /// The artifact.
        what: String,
        /// How many arrived.
        got: u64,
        /// The pinned size.
        pinned: u64,
    },
    /// The bytes have the pinned size but another sha256.
    #[error("the {what} has sha256 {actual}, but berm is pinned to {pinned}: refused as tampered")]
    Tampered {
        /// The artifact.
        what: String,
        /// What the bytes hash to.
        actual: String,
        /// The pinned sha256.
        pinned: String,
    },
    /// The file system failed.
    #[error("{action} {}", path.display())]
    Io {
        /// What was being done (`creating`, `writing`, …).
        action: &'static str,
        /// On which path.
        path: PathBuf,
        /// Why it failed.
        #[source]
        source: std::io::Error,
    },
}

impl InstallError {
    /// True when the bytes themselves were wrong (as opposed to the file system failing): a
    /// resumed download whose result is refused this way is worth one retry from the start,
    /// since the kept prefix may be what was wrong.
    pub fn is_content(&self) -> bool {
        !matches!(self, InstallError::Io { .. })
    }
}

/// One artifact on its way into the store. Dropped before [`StoreWriter::commit`], it deletes
/// its partial file and the directories this install created (when they are empty), so an
/// early return cannot leave anything half-written.
pub struct StoreWriter {
    what: String,
    pin: ImagePin,
    dest: PathBuf,
    partial: PathBuf,
    file: Option<File>,
    hasher: Sha256,
    written: u64,
    created: Vec<PathBuf>,
    /// Committed or kept: nothing for Drop to delete.
    committed: bool,
}

/// The partial file's mode: unverified bytes are the owner's only.
const PARTIAL_MODE: u32 = 0o600;
/// An installed artifact's mode: verified, readable by whoever runs berm-vmm's hypervisor.
const INSTALLED_MODE: u32 = 0o644;

impl StoreWriter {
    /// Starts `dest`'s partial file afresh (truncating one an interrupted install left).
    ///
    /// # Errors
    /// [`InstallError::Io`] when the directories or the file cannot be created.
    pub fn create(what: &str, pin: &ImagePin, dest: &Path) -> Result<Self, InstallError> {
        let mut writer = Self::open(what, pin, dest)?;
        writer.restart()?;
        Ok(writer)
    }

    /// Continues the partial file an interrupted install left, re-hashing the bytes it holds,
    /// so a download can ask only for the rest. A partial file as long as the pin or longer
    /// cannot be a prefix of it and is started over; no partial file means starting at zero.
    /// The kept prefix is not trusted: it is part of what [`StoreWriter::verify`] hashes.
    ///
    /// # Errors
    /// [`InstallError::Io`] when the file cannot be created or read.
    pub fn resume(what: &str, pin: &ImagePin, dest: &Path) -> Result<Self, InstallError> {
        let mut writer = Self::open(what, pin, dest)?;
        let path = writer.partial.clone();
        let io = |action| {
            let path = path.clone();
            move |source| InstallError::Io {
                action,
                path,
                source,
            }
        };
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(PARTIAL_MODE)
            .open(&writer.partial)
            .map_err(io("opening"))?;
        let len = file.metadata().map_err(io("reading"))?.len();
        if len == 0 || len >= pin.size {
            writer.file = Some(file);
            writer.restart()?;
            return Ok(writer);
        }
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = file.read(&mut buf).map_err(io("reading"))?;
            if n == 0 {
                break;
            }
            writer.hasher.update(&buf[..n]);
            writer.written += n as u64;
        }
        writer.file = Some(file);
        Ok(writer)
    }

    fn open(what: &str, pin: &ImagePin, dest: &Path) -> Result<Self, InstallError> {
        let dir = dest.parent().ok_or_else(|| InstallError::Io {
            action: "finding the directory of",
            path: dest.to_owned(),
            source: std::io::ErrorKind::InvalidInput.into(),
        })?;
        // One level at a time, remembering which this install made, so a refusal can take
        // exactly those away again.
        let mut missing = Vec::new();
        let mut at = Some(dir);
        while let Some(d) = at.filter(|d| !d.as_os_str().is_empty() && !d.exists()) {
            missing.push(d.to_owned());
            at = d.parent();
        }
        let mut created = Vec::new();
        for d in missing.into_iter().rev() {
            match std::fs::create_dir(&d) {
                Ok(()) => created.push(d),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(source) => {
                    remove_empty(&created);
                    return Err(InstallError::Io {
                        action: "creating",
                        path: d,
                        source,
                    });
                }
            }
        }
        let partial = dest.with_extension(match dest.extension() {
            Some(ext) => format!("{}.partial", ext.to_string_lossy()),
            None => "partial".into(),
        });
        Ok(Self {
            what: what.to_owned(),
            pin: pin.clone(),
            dest: dest.to_owned(),
            partial,
            file: None,
            hasher: Sha256::new(),
            written: 0,
            created,
            committed: false,
        })
    }

    /// How many bytes the partial file holds (after [`StoreWriter::resume`], the kept prefix).
    pub fn written(&self) -> u64 {
        self.written
    }

    /// The partial file's path (`<file>.partial` beside the final name).
    pub fn partial(&self) -> &Path {
        &self.partial
    }

    /// Empties the partial file and the hash: the source is sending the whole artifact again
    /// (a registry that ignored a range request, or a retry after a refused resume).
    ///
    /// # Errors
    /// [`InstallError::Io`] when the file cannot be truncated.
    pub fn restart(&mut self) -> Result<(), InstallError> {
        self.file = None;
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(PARTIAL_MODE)
            .open(&self.partial)
            .map_err(|source| InstallError::Io {
                action: "creating",
                path: self.partial.clone(),
                source,
            })?;
        self.file = Some(file);
        self.hasher = Sha256::new();
        self.written = 0;
        Ok(())
    }

    /// Appends `chunk`, refusing to grow past the pinned size.
    ///
    /// # Errors
    /// [`InstallError::Overlong`] past the pin, [`InstallError::Io`] when writing fails.
    pub fn write(&mut self, chunk: &[u8]) -> Result<(), InstallError> {
        if self.written + chunk.len() as u64 > self.pin.size {
            return Err(InstallError::Overlong {
                what: self.what.clone(),
                pinned: self.pin.size,
            });
        }
        let file = self.file.as_mut().ok_or_else(|| InstallError::Io {
            action: "writing (closed)",
            path: self.partial.clone(),
            source: std::io::ErrorKind::BrokenPipe.into(),
        })?;
        file.write_all(chunk).map_err(|source| InstallError::Io {
            action: "writing",
            path: self.partial.clone(),
            source,
        })?;
        self.hasher.update(chunk);
        self.written += chunk.len() as u64;
        Ok(())
    }

    /// Checks the bytes written against the pin's size and sha256, without committing.
    ///
    /// # Errors
    /// [`InstallError::Truncated`] or [`InstallError::Tampered`].
    pub fn verify(&self) -> Result<(), InstallError> {
        if self.written < self.pin.size {
            return Err(InstallError::Truncated {
                what: self.what.clone(),
                got: self.written,
                pinned: self.pin.size,
            });
        }
        let actual = hex::encode(self.hasher.clone().finalize());
        if actual != self.pin.sha256.as_str() {
            return Err(InstallError::Tampered {
                what: self.what.clone(),
                actual,
                pinned: self.pin.sha256.to_string(),
            });
        }
        Ok(())
    }

    /// Verifies, makes the file durable and renames it into place (then syncs the directory).
    /// On error the writer is dropped, which deletes the partial file.
    ///
    /// # Errors
    /// See [`StoreWriter::verify`]; [`InstallError::Io`] when syncing or renaming fails.
    pub fn commit(mut self) -> Result<PathBuf, InstallError> {
        self.verify()?;
        let io = |action, path: &Path| {
            let path = path.to_owned();
            move |source| InstallError::Io {
                action,
                path,
                source,
            }
        };
        if let Some(file) = self.file.take() {
            file.set_permissions(Permissions::from_mode(INSTALLED_MODE))
                .map_err(io("setting the mode of", &self.partial))?;
            file.sync_all().map_err(io("syncing", &self.partial))?;
        }
        std::fs::rename(&self.partial, &self.dest)
            .map_err(io("renaming into place", &self.dest))?;
        // Committed: nothing for Drop to clean up.
        self.committed = true;
        if let Some(dir) = self.dest.parent() {
            File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(io("syncing", dir))?;
        }
        Ok(self.dest.clone())
    }
}

impl StoreWriter {
    /// Leaves the partial file (and its directories) in place for the next install to
    /// [`StoreWriter::resume`]: the source broke off, not the bytes. Synced and mode 0600;
    /// nothing is renamed. Returns the partial file and how many bytes it holds.
    ///
    /// # Errors
    /// [`InstallError::Io`] when the file cannot be synced; the writer then deletes it.
    pub fn keep(mut self) -> Result<(PathBuf, u64), InstallError> {
        if let Some(file) = self.file.take() {
            let io = |action| {
                let path = self.partial.clone();
                move |source| InstallError::Io {
                    action,
                    path,
                    source,
                }
            };
            file.set_permissions(Permissions::from_mode(PARTIAL_MODE))
                .map_err(io("setting the mode of"))?;
            file.sync_all().map_err(io("syncing"))?;
        }
        self.committed = true;
        Ok((self.partial.clone(), self.written))
    }
}

impl Drop for StoreWriter {
    fn drop(&mut self) {
        if self.committed {
            return;
        }
        self.file = None;
        let _ = std::fs::remove_file(&self.partial);
        // The digest's and the kind's directories if now empty (an earlier, interrupted install
        // may have made them), and whatever this install created.
        let mut dirs: Vec<PathBuf> = self
            .dest
            .ancestors()
            .skip(1)
            .take(2)
            .map(Path::to_owned)
            .collect();
        dirs.extend(self.created.iter().rev().cloned());
        remove_empty(&dirs);
    }
}

/// Removes each directory that is empty, in order (deepest first).
fn remove_empty(dirs: &[PathBuf]) {
    for dir in dirs {
        let _ = std::fs::remove_dir(dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Sha256Hex;

    fn pin_of(bytes: &[u8]) -> ImagePin {
        ImagePin {
            sha256: Sha256Hex::parse(&hex::encode(Sha256::digest(bytes))).unwrap(),
            size: bytes.len() as u64,
        }
    }

    #[test]
    fn commits_only_the_pinned_bytes_and_a_refusal_leaves_no_directory() {
        let tmp = tempfile::tempdir().unwrap();
        let tmp = tmp.path();
        let bytes = vec![7u8; 3000];
        let pin = pin_of(&bytes);
        let dest = tmp
            .join("store/kernel")
            .join(pin.sha256.as_str())
            .join("vmlinux");
        let mut w = StoreWriter::create("x86_64 kernel", &pin, &dest).unwrap();
        w.write(&bytes[..1000]).unwrap();
        let err = w.verify().unwrap_err().to_string();
        assert!(err.contains("truncated: 1000 of the pinned 3000"), "{err}");
        drop(w);
        assert!(!tmp.join("store").exists(), "a refusal leaves no directory");

        let mut w = StoreWriter::create("x86_64 kernel", &pin, &dest).unwrap();
        let mut other = bytes.clone();
        other[5] = 8;
        w.write(&other).unwrap();
        assert!(
            w.write(b"x")
                .unwrap_err()
                .to_string()
                .contains("longer than")
        );
        let err = w.commit().unwrap_err().to_string();
        assert!(err.contains("refused as tampered"), "{err}");
        assert!(!tmp.join("store").exists());

        let mut w = StoreWriter::create("x86_64 kernel", &pin, &dest).unwrap();
        w.write(&bytes).unwrap();
        assert_eq!(w.commit().unwrap(), dest);
        assert_eq!(std::fs::read(&dest).unwrap(), bytes);
    }

    #[test]
    fn resume_rehashes_the_prefix_and_restarts_what_cannot_be_one() {
        let tmp = tempfile::tempdir().unwrap();
        let tmp = tmp.path();
        let bytes: Vec<u8> = (0..5000u32).map(|i| (i * 7) as u8).collect();
        let pin = pin_of(&bytes);
        let dest = tmp.join("kernel/x/vmlinux");
        std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
        std::fs::write(dest.with_extension("partial"), &bytes[..2000]).unwrap();
        let mut w = StoreWriter::resume("kernel", &pin, &dest).unwrap();
        assert_eq!(w.written(), 2000);
        w.write(&bytes[2000..]).unwrap();
        w.commit().unwrap();
        assert_eq!(std::fs::read(&dest).unwrap(), bytes);

        let dest = tmp.join("kernel/y/vmlinux");
        std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
        std::fs::write(dest.with_extension("partial"), vec![0; 6000]).unwrap();
        let w = StoreWriter::resume("kernel", &pin, &dest).unwrap();
        assert_eq!(w.written(), 0, "longer than the pin: started over");
        drop(w);
        assert!(!dest.parent().unwrap().exists());
    }

    #[test]
    fn a_kept_partial_file_is_the_owners_and_resumes() {
        let tmp = tempfile::tempdir().unwrap();
        let bytes: Vec<u8> = (0..5000u32).map(|i| (i * 3) as u8).collect();
        let pin = pin_of(&bytes);
        let dest = tmp.path().join("store/kernel/z/vmlinux");
        let mut w = StoreWriter::create("kernel", &pin, &dest).unwrap();
        w.write(&bytes[..1234]).unwrap();
        let (partial, kept) = w.keep().unwrap();
        assert_eq!(
            (partial.as_path(), kept),
            (dest.with_extension("partial").as_path(), 1234)
        );
        let mode = std::fs::metadata(&partial).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let mut w = StoreWriter::resume("kernel", &pin, &dest).unwrap();
        assert_eq!(w.written(), 1234);
        w.write(&bytes[1234..]).unwrap();
        w.commit().unwrap();
        let mode = std::fs::metadata(&dest).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o644);
        assert_eq!(std::fs::read(&dest).unwrap(), bytes);
    }
}
