//! Crash-safe file writes, written once.
//!
//! bermd's records and images, the compiled-code caches of berm and berm-vmm, pulled programs
//! and index entries must each hold either the old file or the whole new one after a crash at
//! any moment, never part of one. That takes four steps in order (a temporary file in the same
//! directory, fsync of the file, rename over the target, fsync of the directory so the rename
//! itself is on disk); leaving any out is a bug that only shows after a power cut, so every
//! crate calls [`write_atomic`] instead of repeating them.
#![forbid(unsafe_code)]

use std::fs::File;
use std::io::Write;
use std::path::Path;

/// Writes `bytes` to `path` so that a crash at any moment leaves either the old file or the
/// new one: a temporary file (mode 0600) in the same directory, fsync, rename over `path`,
/// fsync of the directory. On error the temporary file is removed and `path` is untouched.
///
/// # Errors
/// Any I/O error creating, writing, syncing or renaming; the caller names `path` in its own
/// error.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = parent(path);
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    // tempfile creates the file with O_EXCL and mode 0600 and removes it on drop, so an error
    // at any step below leaves nothing behind.
    let mut tmp = tempfile::Builder::new()
        .prefix(&format!(".{name}.tmp-"))
        .tempfile_in(dir)?;
    tmp.write_all(bytes)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    sync_dir(dir)
}

/// Removes `path` (if it exists) durably: unlink, fsync of the directory.
///
/// # Errors
/// Any I/O error unlinking (other than the file being absent) or syncing the directory.
pub fn remove_durably(path: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    }
    sync_dir(parent(path))
}

/// fsyncs a directory, so a rename or unlink in it survives a crash.
///
/// # Errors
/// The directory cannot be opened or synced.
pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

/// The directory holding `path` (`.` for a bare file name).
fn parent(path: &Path) -> &Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn replaces_whole_files_mode_0600_and_leaves_no_temporaries() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.wasm");
        write_atomic(&path, b"old").unwrap();
        write_atomic(&path, b"new bytes").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"new bytes");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(names(dir.path()), ["p.wasm"]);
        remove_durably(&path).unwrap();
        remove_durably(&path).unwrap();
        assert!(names(dir.path()).is_empty());
    }

    #[test]
    fn failure_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("no/such/dir/p.wasm");
        assert!(write_atomic(&missing, b"x").is_err());
        // A directory in the way of the rename: the temporary is cleaned up.
        let blocked = dir.path().join("blocked");
        std::fs::create_dir_all(blocked.join("inner")).unwrap();
        assert!(write_atomic(&blocked, b"x").is_err());
        assert_eq!(names(dir.path()), ["blocked"]);
    }
}
