//! The `fs` grant: files beneath one directory, read-only or read-write.
//!
//! Every path a program gives is resolved by the kernel with
//! `openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)` relative to the granted
//! directory, which refuses absolute paths, `..` that climbs out and symlinks
//! that lead out — at the moment of the open, so no rename race can slip past
//! a check made earlier. There are no string checks on paths here beyond
//! splitting off the last component of a path to write or remove.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use berm_abi::word::ErrorCode;
use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

/// Largest file `fs.read` returns.
pub const MAX_READ_BYTES: u64 = 16 << 20;
/// Largest file `fs.write` writes; larger contents are refused before they
/// are copied out of the program's memory.
pub const MAX_WRITE_BYTES: usize = 16 << 20;
/// Longest path a program may give (Linux's `PATH_MAX`).
pub const MAX_PATH_BYTES: usize = 4096;
/// Most entries `fs.list` returns.
pub const MAX_LIST_ENTRIES: usize = 10_000;

/// Why an `fs` operation was refused or failed: the ABI code the program
/// sees and a message naming the path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct FsError {
    /// The ABI code.
    pub code: ErrorCode,
    /// What happened, naming the path.
    pub message: String,
}

impl FsError {
    fn new(code: ErrorCode, message: impl Into<String>) -> FsError {
        FsError {
            code,
            message: message.into(),
        }
    }

    fn from_errno(path: &str, errno: Errno) -> FsError {
        let (code, what) = match errno {
            Errno::XDEV => (ErrorCode::Denied, "leaves the granted directory"),
            Errno::LOOP => (
                ErrorCode::Denied,
                "goes through too many or forbidden symlinks",
            ),
            Errno::NOENT => (ErrorCode::NotFound, "does not exist"),
            Errno::ISDIR => (ErrorCode::Conflict, "is a directory"),
            Errno::NOTDIR => (
                ErrorCode::Conflict,
                "has a component that is not a directory",
            ),
            Errno::NOTEMPTY => (ErrorCode::Conflict, "is a non-empty directory"),
            Errno::EXIST => (ErrorCode::Conflict, "already exists"),
            Errno::ACCESS | Errno::PERM => (ErrorCode::Denied, "is not accessible to bermd"),
            Errno::NAMETOOLONG => (ErrorCode::Invalid, "is too long"),
            _ => (ErrorCode::Io, ""),
        };
        if what.is_empty() {
            FsError::new(code, format!("`{path}`: {errno}"))
        } else {
            FsError::new(code, format!("`{path}` {what}"))
        }
    }
}

/// Refuses anything `fs.read` must not open for reading: FIFOs (which wait
/// for a writer), sockets, devices, directories, and regular files with a
/// second hard link.
fn check_regular(path: &str, stat: &rustix::fs::Stat) -> Result<(), FsError> {
    match FileType::from_raw_mode(stat.st_mode) {
        FileType::RegularFile if stat.st_nlink > 1 => Err(FsError::new(
            ErrorCode::Denied,
            format!(
                "`{path}` has {} hard links; a file with more than one may also be reachable \
                 outside the granted directory, so it is not read",
                stat.st_nlink
            ),
        )),
        FileType::RegularFile => Ok(()),
        FileType::Directory => Err(FsError::new(
            ErrorCode::Conflict,
            format!("`{path}` is a directory (use fs.list)"),
        )),
        _ => Err(FsError::new(
            ErrorCode::Conflict,
            format!("`{path}` is not a regular file (FIFOs, sockets and devices are refused)"),
        )),
    }
}

/// One directory entry, as `fs.list` reports it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Entry {
    /// File name.
    pub name: String,
    /// `file`, `dir`, `symlink` or `other`.
    pub kind: &'static str,
    /// Size in bytes.
    pub size: u64,
}

/// A granted directory.
#[derive(Debug)]
pub struct FsRoot {
    dir: OwnedFd,
    path: PathBuf,
    read_only: bool,
}

const BENEATH: ResolveFlags = ResolveFlags::BENEATH.union(ResolveFlags::NO_MAGICLINKS);

impl FsRoot {
    /// Opens the granted directory `path`.
    pub fn open(path: &Path, read_only: bool) -> std::io::Result<FsRoot> {
        let dir = rustix::fs::open(
            path,
            OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        Ok(FsRoot {
            dir,
            path: path.to_path_buf(),
            read_only,
        })
    }

    /// The granted directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether writes are refused.
    pub fn read_only(&self) -> bool {
        self.read_only
    }

    fn open_beneath(&self, path: &str, flags: OFlags) -> Result<OwnedFd, FsError> {
        let target = if path.is_empty() { "." } else { path };
        rustix::fs::openat2(
            &self.dir,
            target,
            flags | OFlags::CLOEXEC,
            Mode::empty(),
            BENEATH,
        )
        .map_err(|e| FsError::from_errno(path, e))
    }

    /// The contents of the file at `path`.
    ///
    /// The path is first opened with `O_PATH`, which opens nothing (a FIFO
    /// does not wait for a writer, a device is not touched), and refused
    /// unless it is a regular file with no other hard link — a second name
    /// may lie outside the granted directory. Only then is it opened to
    /// read, non-blocking, and checked to be the same file.
    pub fn read(&self, path: &str) -> Result<Vec<u8>, FsError> {
        let probe = self.open_beneath(path, OFlags::PATH)?;
        let stat = rustix::fs::fstat(&probe).map_err(|e| FsError::from_errno(path, e))?;
        check_regular(path, &stat)?;
        let fd = self.open_beneath(path, OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY)?;
        let opened = rustix::fs::fstat(&fd).map_err(|e| FsError::from_errno(path, e))?;
        check_regular(path, &opened)?;
        if (opened.st_dev, opened.st_ino) != (stat.st_dev, stat.st_ino) {
            return Err(FsError::new(
                ErrorCode::Conflict,
                format!("`{path}` was replaced while it was being opened; try again"),
            ));
        }
        let mut contents = Vec::new();
        File::from(fd)
            .take(MAX_READ_BYTES + 1)
            .read_to_end(&mut contents)
            .map_err(|e| FsError::new(ErrorCode::Io, format!("`{path}`: {e}")))?;
        if contents.len() as u64 > MAX_READ_BYTES {
            return Err(FsError::new(
                ErrorCode::TooLarge,
                format!("`{path}` is larger than the read cap of {MAX_READ_BYTES} bytes"),
            ));
        }
        Ok(contents)
    }

    /// The entries of the directory at `path` (`""` or `"."` is the root),
    /// sorted by name.
    pub fn list(&self, path: &str) -> Result<Vec<Entry>, FsError> {
        // O_DIRECTORY refuses anything else before it is opened.
        let fd = self.open_beneath(path, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NONBLOCK)?;
        let mut dir = rustix::fs::Dir::read_from(&fd).map_err(|e| FsError::from_errno(path, e))?;
        let mut entries = Vec::new();
        while let Some(entry) = dir.read() {
            let entry = entry.map_err(|e| FsError::from_errno(path, e))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name == "." || name == ".." {
                continue;
            }
            if entries.len() == MAX_LIST_ENTRIES {
                return Err(FsError::new(
                    ErrorCode::TooLarge,
                    format!("`{path}` has more than {MAX_LIST_ENTRIES} entries"),
                ));
            }
            let Ok(stat) = rustix::fs::statat(&fd, entry.file_name(), AtFlags::SYMLINK_NOFOLLOW)
            else {
                continue; // removed while listing
            };
            let kind = match FileType::from_raw_mode(stat.st_mode) {
                FileType::RegularFile => "file",
                FileType::Directory => "dir",
                FileType::Symlink => "symlink",
                _ => "other",
            };
            entries.push(Entry {
                name,
                kind,
                size: stat.st_size as u64,
            });
        }
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(entries)
    }

    fn writable(&self, path: &str) -> Result<(), FsError> {
        if self.read_only {
            return Err(FsError::new(
                ErrorCode::Denied,
                format!("`{path}`: the fs grant is read-only"),
            ));
        }
        Ok(())
    }

    /// Splits `path` into its parent (opened beneath the root, created when
    /// `create` is set) and its last component.
    fn parent<'p>(&self, path: &'p str, create: bool) -> Result<(OwnedFd, &'p str), FsError> {
        let (parent, name) = path.rsplit_once('/').unwrap_or(("", path));
        if name.is_empty() || name == "." || name == ".." {
            return Err(FsError::new(
                ErrorCode::Invalid,
                format!("`{path}` does not name a file"),
            ));
        }
        match self.open_beneath(parent, OFlags::RDONLY | OFlags::DIRECTORY) {
            Err(e) if create && e.code == ErrorCode::NotFound => {
                // Create the missing directories one component at a time,
                // each opened beneath the one before, so a symlink planted
                // along the way is still refused by the kernel.
                let mut dir = self.open_beneath("", OFlags::RDONLY | OFlags::DIRECTORY)?;
                for component in parent.split('/').filter(|c| !c.is_empty()) {
                    let open = |dir: &OwnedFd| {
                        rustix::fs::openat2(
                            dir,
                            component,
                            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
                            Mode::empty(),
                            BENEATH,
                        )
                    };
                    dir = match open(&dir) {
                        Ok(next) => next,
                        Err(Errno::NOENT) => {
                            rustix::fs::mkdirat(&dir, component, Mode::from_raw_mode(0o700))
                                .or_else(|e| if e == Errno::EXIST { Ok(()) } else { Err(e) })
                                .and_then(|()| open(&dir))
                                .map_err(|e| FsError::from_errno(path, e))?
                        }
                        Err(e) => return Err(FsError::from_errno(path, e)),
                    };
                }
                Ok((dir, name))
            }
            other => other.map(|fd| (fd, name)),
        }
    }

    /// Writes `contents` to `path` atomically (temp file, fsync, rename),
    /// creating missing directories.
    pub fn write(&self, path: &str, contents: &[u8]) -> Result<(), FsError> {
        self.writable(path)?;
        let (parent, name) = self.parent(path, true)?;
        let mut random = [0u8; 8];
        getrandom::fill(&mut random).map_err(|e| FsError::new(ErrorCode::Io, e.to_string()))?;
        let temp = format!(".berm-write-{:016x}", u64::from_le_bytes(random));
        let io = |e: Errno| FsError::from_errno(path, e);
        let fd = rustix::fs::openat(
            &parent,
            temp.as_str(),
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
        .map_err(io)?;
        let mut file = File::from(fd);
        let written = file
            .write_all(contents)
            .and_then(|()| file.sync_all())
            .map_err(|e| FsError::new(ErrorCode::Io, format!("`{path}`: {e}")));
        let renamed = written
            .and_then(|()| rustix::fs::renameat(&parent, temp.as_str(), &parent, name).map_err(io));
        if let Err(e) = renamed {
            let _ = rustix::fs::unlinkat(&parent, temp.as_str(), AtFlags::empty());
            return Err(e);
        }
        rustix::fs::fsync(parent.as_fd()).map_err(io)
    }

    /// Removes the file (or empty directory) at `path`.
    pub fn remove(&self, path: &str) -> Result<(), FsError> {
        self.writable(path)?;
        let (parent, name) = self.parent(path, false)?;
        let stat = rustix::fs::statat(&parent, name, AtFlags::SYMLINK_NOFOLLOW)
            .map_err(|e| FsError::from_errno(path, e))?;
        let flags = if FileType::from_raw_mode(stat.st_mode) == FileType::Directory {
            AtFlags::REMOVEDIR
        } else {
            AtFlags::empty()
        };
        rustix::fs::unlinkat(&parent, name, flags).map_err(|e| FsError::from_errno(path, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root(read_only: bool) -> (tempfile::TempDir, FsRoot) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("inside")).unwrap();
        std::fs::write(dir.path().join("inside/a.txt"), b"hello").unwrap();
        std::fs::write(dir.path().join("secret.txt"), b"secret").unwrap();
        std::os::unix::fs::symlink(dir.path().join("secret.txt"), dir.path().join("inside/out"))
            .unwrap();
        std::os::unix::fs::symlink("a.txt", dir.path().join("inside/in")).unwrap();
        let fs = FsRoot::open(&dir.path().join("inside"), read_only).unwrap();
        (dir, fs)
    }

    #[test]
    fn escapes_are_refused_by_the_kernel() {
        let (_dir, fs) = root(false);
        for path in ["../secret.txt", "/etc/passwd", "out", "./../secret.txt"] {
            let err = fs.read(path).unwrap_err();
            assert_eq!(err.code, ErrorCode::Denied, "{path}: {err}");
        }
        assert_eq!(
            fs.read("../secret.txt").unwrap_err().message,
            "`../secret.txt` leaves the granted directory"
        );
        assert_eq!(fs.write("../x", b"x").unwrap_err().code, ErrorCode::Denied);
        assert_eq!(
            fs.write("/tmp/x", b"x").unwrap_err().code,
            ErrorCode::Denied
        );
        assert_eq!(fs.list("..").unwrap_err().code, ErrorCode::Denied);
        assert_eq!(
            fs.remove("../secret.txt").unwrap_err().code,
            ErrorCode::Denied
        );
        assert_eq!(fs.read("in").unwrap(), b"hello");
    }

    #[test]
    fn reads_writes_lists_and_removes_inside() {
        let (dir, fs) = root(false);
        fs.write("new/deep/b.txt", b"bee").unwrap();
        assert_eq!(fs.read("new/deep/b.txt").unwrap(), b"bee");
        fs.write("a.txt", b"replaced").unwrap();
        assert_eq!(
            std::fs::read(dir.path().join("inside/a.txt")).unwrap(),
            b"replaced"
        );
        // Writing over a symlink that points out replaces the link itself.
        fs.write("out", b"mine").unwrap();
        assert_eq!(
            std::fs::read(dir.path().join("secret.txt")).unwrap(),
            b"secret"
        );
        let names: Vec<_> = fs
            .list("")
            .unwrap()
            .into_iter()
            .map(|e| (e.name, e.kind))
            .collect();
        assert_eq!(
            names,
            vec![
                ("a.txt".into(), "file"),
                ("in".into(), "symlink"),
                ("new".into(), "dir"),
                ("out".into(), "file")
            ]
        );
        fs.remove("new/deep/b.txt").unwrap();
        assert_eq!(
            fs.read("new/deep/b.txt").unwrap_err().code,
            ErrorCode::NotFound
        );
    }

    #[test]
    fn fifos_sockets_and_hard_links_are_refused_without_blocking() {
        let (dir, fs) = root(false);
        let inside = dir.path().join("inside");
        rustix::fs::mkfifoat(
            rustix::fs::CWD,
            inside.join("fifo"),
            Mode::from_raw_mode(0o600),
        )
        .unwrap();
        let _socket = std::os::unix::net::UnixListener::bind(inside.join("sock")).unwrap();
        std::fs::hard_link(dir.path().join("secret.txt"), inside.join("linked")).unwrap();
        // No writer ever opens the FIFO: a blocking open would hang here.
        let err = fs.read("fifo").unwrap_err();
        assert_eq!(err.code, ErrorCode::Conflict);
        assert_eq!(
            err.message,
            "`fifo` is not a regular file (FIFOs, sockets and devices are refused)"
        );
        assert_eq!(fs.read("sock").unwrap_err().code, ErrorCode::Conflict);
        assert_eq!(fs.list("fifo").unwrap_err().code, ErrorCode::Conflict);
        assert_eq!(
            fs.read("").unwrap_err().message,
            "`` is a directory (use fs.list)"
        );
        let err = fs.read("linked").unwrap_err();
        assert_eq!(err.code, ErrorCode::Denied, "{err}");
        assert!(
            err.message.starts_with("`linked` has 2 hard links"),
            "{err}"
        );
        // Writing over it replaces the name; the other link keeps its data.
        fs.write("linked", b"mine").unwrap();
        assert_eq!(fs.read("linked").unwrap(), b"mine");
        assert_eq!(
            std::fs::read(dir.path().join("secret.txt")).unwrap(),
            b"secret"
        );
    }

    #[test]
    fn what_a_program_creates_is_private() {
        use std::os::unix::fs::PermissionsExt;
        let (dir, fs) = root(false);
        fs.write("made/here.txt", b"x").unwrap();
        let mode = |p: &str| {
            std::fs::metadata(dir.path().join("inside").join(p))
                .unwrap()
                .permissions()
                .mode()
                & 0o777
        };
        assert_eq!(mode("made"), 0o700);
        assert_eq!(mode("made/here.txt"), 0o600);
    }

    #[test]
    fn read_only_refuses_writes() {
        let (_dir, fs) = root(true);
        assert_eq!(
            fs.write("a.txt", b"x").unwrap_err().message,
            "`a.txt`: the fs grant is read-only"
        );
        assert_eq!(fs.remove("a.txt").unwrap_err().code, ErrorCode::Denied);
        assert_eq!(fs.read("a.txt").unwrap(), b"hello");
    }
}
