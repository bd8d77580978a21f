//! The digest of an app folder, as the measurement line states it: berm-vmm measures each
//! app with it, and `berm vm up` / `berm mcp --app` compare a folder against the running
//! VM's with it (a changed folder reboots the VM), so both read a folder the same way.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// A file or directory of the folder could not be read.
#[derive(Debug, thiserror::Error)]
#[error("reading {}: {source}", path.display())]
pub struct FolderError {
    /// The file or directory.
    pub path: PathBuf,
    /// The I/O error.
    #[source]
    pub source: std::io::Error,
}

/// One file or link of an app folder, as the folder digest takes it: its path relative to
/// the folder and what it holds, both as raw bytes.
struct Entry {
    path: Vec<u8>,
    kind: u8,
    content: Vec<u8>,
}

/// The folder digest of `dir` (lowercase hex) and how many files and links it covers.
///
/// sha256 over the entries sorted by raw path, each written as a kind byte (`f` file, `l`
/// link), then the path and the content (a file's sha256, a link's target) each prefixed
/// with its length as 8 bytes little-endian. Length prefixes over raw bytes make it
/// injective: no two different folders give the same byte stream, whatever bytes (newlines,
/// invalid UTF-8) their names hold. Links are digested as links, never followed.
///
/// # Errors
/// [`FolderError`] naming the file or directory that could not be read.
pub fn folder_digest(dir: &Path) -> Result<(String, u64), FolderError> {
    let mut entries = Vec::new();
    walk(dir, dir, &mut entries)?;
    entries.sort_by(|a, b| a.path.cmp(&b.path));
    let mut hasher = Sha256::new();
    for entry in &entries {
        hasher.update([entry.kind]);
        for field in [&entry.path, &entry.content] {
            hasher.update((field.len() as u64).to_le_bytes());
            hasher.update(field);
        }
    }
    Ok((hex::encode(hasher.finalize()), entries.len() as u64))
}

fn walk(root: &Path, dir: &Path, entries: &mut Vec<Entry>) -> Result<(), FolderError> {
    use std::os::unix::ffi::OsStrExt;
    let error = |path: &Path| {
        let path = path.to_owned();
        move |source| FolderError { path, source }
    };
    for entry in std::fs::read_dir(dir).map_err(error(dir))? {
        let entry = entry.map_err(error(dir))?;
        let path = entry.path();
        let meta = std::fs::symlink_metadata(&path).map_err(error(&path))?;
        let relative = path
            .strip_prefix(root)
            .unwrap_or(&path)
            .as_os_str()
            .as_bytes()
            .to_vec();
        if meta.is_dir() {
            walk(root, &path, entries)?;
        } else if meta.file_type().is_symlink() {
            let target = std::fs::read_link(&path).map_err(error(&path))?;
            entries.push(Entry {
                path: relative,
                kind: b'l',
                content: target.as_os_str().as_bytes().to_vec(),
            });
        } else {
            let bytes = std::fs::read(&path).map_err(error(&path))?;
            entries.push(Entry {
                path: relative,
                kind: b'f',
                content: Sha256::digest(&bytes).to_vec(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn digest_of(dir: &Path) -> String {
        folder_digest(dir).unwrap().0
    }

    #[test]
    fn folder_digest_is_injective_where_digest_lines_were_not() {
        // Two files `a` and `b`, against one file whose name carries the second digest line:
        // joined as `<sha256>  <path>\n` lines both folders read the same.
        let tmp = tempfile::tempdir().unwrap();
        let (two, one) = (tmp.path().join("two"), tmp.path().join("one"));
        std::fs::create_dir_all(&two).unwrap();
        std::fs::create_dir_all(&one).unwrap();
        std::fs::write(two.join("a"), b"A").unwrap();
        std::fs::write(two.join("b"), b"B").unwrap();
        let b_line = format!("{}  b", hex::encode(Sha256::digest(b"B")));
        std::fs::write(one.join(format!("a\n{b_line}")), b"A").unwrap();
        assert_ne!(digest_of(&two), digest_of(&one));

        // A link and a file holding the link's target are different things.
        let (link, file) = (tmp.path().join("link"), tmp.path().join("file"));
        std::fs::create_dir_all(&link).unwrap();
        std::fs::create_dir_all(&file).unwrap();
        std::os::unix::fs::symlink("x", link.join("p")).unwrap();
        std::fs::write(file.join("p"), b"x").unwrap();
        assert_ne!(digest_of(&link), digest_of(&file));
        // The same folder twice is the same digest, and counts its files.
        assert_eq!(folder_digest(&two).unwrap(), folder_digest(&two).unwrap());
        assert_eq!(folder_digest(&two).unwrap().1, 2);
    }
}
