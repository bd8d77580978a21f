//! The lock of one VM dir: one `up`, `stop`, `mcp --app` or watchdog acts on a name at a time.

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::files::{OpenPrivateError, private_file};
use crate::layout::LOCK_FILE;

/// The lock of one VM dir, held until dropped.
pub struct Lock(#[expect(dead_code, reason = "held for its flock")] File);

/// The lock could not be taken (not: someone else holds it).
#[derive(Debug, thiserror::Error)]
pub enum TakeLockError {
    /// The lock file could not be opened.
    #[error(transparent)]
    Open(#[from] OpenPrivateError),
    /// `flock` failed.
    #[error("locking {}", path.display())]
    Lock {
        /// The lock file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

impl Lock {
    /// Takes the lock of `vm_dir` if nobody holds it.
    pub fn try_take(vm_dir: &Path) -> Result<Option<Self>, TakeLockError> {
        let path = vm_dir.join(LOCK_FILE);
        let file = private_file(&path, false)?;
        match file.try_lock() {
            Ok(()) => Ok(Some(Self(file))),
            Err(fs::TryLockError::WouldBlock) => Ok(None),
            Err(fs::TryLockError::Error(source)) => Err(TakeLockError::Lock { path, source }),
        }
    }

    /// Takes the lock of `vm_dir`, waiting for whoever holds it (saying so once on stderr,
    /// as `who`).
    pub fn take(vm_dir: &Path, name: &str, who: &str) -> Result<Self, TakeLockError> {
        let path = vm_dir.join(LOCK_FILE);
        let file = private_file(&path, false)?;
        let mut said = false;
        loop {
            match file.try_lock() {
                Ok(()) => return Ok(Self(file)),
                Err(fs::TryLockError::WouldBlock) => {
                    if !said {
                        eprintln!(
                            "{who}: waiting for another berm vm up or stop of \"{name}\" to finish"
                        );
                        said = true;
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(fs::TryLockError::Error(source)) => {
                    return Err(TakeLockError::Lock { path, source });
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_holder_at_a_time() {
        let dir = tempfile::tempdir().unwrap();
        let held = Lock::try_take(dir.path()).unwrap().expect("free");
        assert!(Lock::try_take(dir.path()).unwrap().is_none());
        drop(held);
        let again = Lock::take(dir.path(), "notes", "test").unwrap();
        assert!(Lock::try_take(dir.path()).unwrap().is_none());
        drop(again);
    }
}
