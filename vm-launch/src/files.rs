//! The small file rules every part of the lifecycle shares: where an XDG variable points,
//! a private file, the clock in the records.

use std::fs::File;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// The directory the variable `var` names, when it names an absolute path (the XDG rule:
/// a relative one is ignored).
pub fn env_dir(var: &str) -> Option<PathBuf> {
    std::env::var_os(var)
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
}

/// A private file that could not be opened.
#[derive(Debug, thiserror::Error)]
#[error("opening {}", path.display())]
pub struct OpenPrivateError {
    /// The file.
    pub path: PathBuf,
    /// Why.
    #[source]
    pub source: std::io::Error,
}

/// Opens `path` for writing, created with mode 0600, emptied when `truncate`.
pub fn private_file(path: &Path, truncate: bool) -> Result<File, OpenPrivateError> {
    File::options()
        .create(true)
        .truncate(truncate)
        .write(true)
        .mode(0o600)
        .open(path)
        .map_err(|source| OpenPrivateError {
            path: path.to_owned(),
            source,
        })
}

/// Seconds since the Unix epoch.
pub fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
