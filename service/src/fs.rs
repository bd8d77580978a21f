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
use std::sync::Mutex;

use berm_abi::word::ErrorCode;
use berm_control::FsQuota;
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
    pub(crate) fn new(code: ErrorCode, message: impl Into<String>) -> FsError {
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

/// Counts what `root` holds, without following symlinks or leaving it.
fn count(root: &OwnedFd) -> std::io::Result<Usage> {
    let mut usage = Usage::default();
    let mut pending = vec![rustix::fs::openat(
        root,
        ".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?];
    while let Some(dir) = pending.pop() {
        let mut entries = rustix::fs::Dir::read_from(&dir)?;
        while let Some(entry) = entries.read() {
            let entry = entry?;
            let name = entry.file_name();
            if name == c"." || name == c".." {
                continue;
            }
            let Ok(stat) = rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW) else {
                continue; // removed while counting
            };
            usage.entries += 1;
            if usage.entries > MAX_COUNTED_ENTRIES {
                return Err(std::io::Error::other(format!(
                    "it holds more than {MAX_COUNTED_ENTRIES} entries; grant a smaller directory"
                )));
            }
            match FileType::from_raw_mode(stat.st_mode) {
                FileType::RegularFile => usage.bytes += stat.st_size as u64,
                FileType::Directory => pending.push(rustix::fs::openat(
                    &dir,
                    name,
                    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                    Mode::empty(),
                )?),
                _ => {}
            }
        }
    }
    Ok(usage)
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

/// Most entries bermd counts when it opens a writable grant; a directory
/// holding more is refused at deploy rather than walked without end.
pub const MAX_COUNTED_ENTRIES: u64 = 1_000_000;

/// A granted directory.
#[derive(Debug)]
pub struct FsRoot {
    dir: OwnedFd,
    path: PathBuf,
    read_only: bool,
    quota: FsQuota,
    /// What the directory holds, counted at open and kept up to date by
    /// every write and removal through this root (changes made outside
    /// bermd are seen on the next deploy or restart). Held for a whole write
    /// or removal, so concurrent ones cannot both fit the last byte.
    usage: Mutex<Usage>,
}

/// What a granted directory holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Total size of its regular files.
    pub bytes: u64,
    /// Its files, directories and other entries, below the root.
    pub entries: u64,
}

const BENEATH: ResolveFlags = ResolveFlags::BENEATH.union(ResolveFlags::NO_MAGICLINKS);

impl FsRoot {
    /// Opens the granted directory `path`. A writable one is walked once
    /// to count what it holds against `quota`.
    pub fn open(path: &Path, read_only: bool, quota: FsQuota) -> std::io::Result<FsRoot> {
        let dir = rustix::fs::open(
            path,
            OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        let usage = if read_only {
            Usage::default()
        } else {
            count(&dir)?
        };
        Ok(FsRoot {
            dir,
            path: path.to_path_buf(),
            read_only,
            quota,
            usage: Mutex::new(usage),
        })
    }

    /// What the directory holds, as counted against the quota.
    pub fn usage(&self) -> Usage {
        *self.usage.lock().unwrap_or_else(|p| p.into_inner())
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
        self.read_admitted(path, |_| Ok(()))
            .map(|(contents, ())| contents)
    }

    /// [`FsRoot::read`], with `admit` asked first, given the file's size, before anything is
    /// read or allocated for it (bermd reserves the program's host memory there); what it
    /// returns comes back with the contents. A file larger than the read cap is refused before
    /// `admit`.
    pub fn read_admitted<T>(
        &self,
        path: &str,
        admit: impl FnOnce(usize) -> Result<T, FsError>,
    ) -> Result<(Vec<u8>, T), FsError> {
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
        let too_large = || {
            FsError::new(
                ErrorCode::TooLarge,
                format!("`{path}` is larger than the read cap of {MAX_READ_BYTES} bytes"),
            )
        };
        let size = opened.st_size.max(0) as u64;
        if size > MAX_READ_BYTES {
            return Err(too_large());
        }
        let admitted = admit(size as usize)?;
        let mut contents = Vec::with_capacity(size as usize);
        File::from(fd)
            .take(MAX_READ_BYTES + 1)
            .read_to_end(&mut contents)
            .map_err(|e| FsError::new(ErrorCode::Io, format!("`{path}`: {e}")))?;
        if contents.len() as u64 > MAX_READ_BYTES {
            return Err(too_large());
        }
        Ok((contents, admitted))
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
        self.parent_created(path, create)
            .map(|(parent, name, _)| (parent, name))
    }

    /// [`FsRoot::parent`], and how many directories it created.
    fn parent_created<'p>(
        &self,
        path: &'p str,
        create: bool,
    ) -> Result<(OwnedFd, &'p str, u64), FsError> {
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
                let mut created = 0;
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
                            match rustix::fs::mkdirat(&dir, component, Mode::from_raw_mode(0o700)) {
                                Ok(()) => created += 1,
                                Err(Errno::EXIST) => {}
                                Err(e) => return Err(FsError::from_errno(path, e)),
                            }
                            open(&dir).map_err(|e| FsError::from_errno(path, e))?
                        }
                        Err(e) => return Err(FsError::from_errno(path, e)),
                    };
                }
                Ok((dir, name, created))
            }
            other => other.map(|fd| (fd, name, 0)),
        }
    }

    /// Writes `contents` to `path` atomically (temp file, fsync, rename),
    /// creating missing directories, within the quota.
    pub fn write(&self, path: &str, contents: &[u8]) -> Result<(), FsError> {
        self.writable(path)?;
        let mut usage = self.usage.lock().unwrap_or_else(|p| p.into_inner());
        // What the write adds: the target's new size for its old one, and
        // an entry for it and for each directory it may create (counted
        // from the path when its parent is missing, an upper bound).
        let (old, new_entries) = match self.parent(path, false) {
            Ok((parent, name)) => {
                match rustix::fs::statat(&parent, name, AtFlags::SYMLINK_NOFOLLOW) {
                    Ok(stat) if FileType::from_raw_mode(stat.st_mode) == FileType::RegularFile => {
                        (stat.st_size as u64, 0)
                    }
                    Ok(_) => (0, 0),
                    Err(_) => (0, 1),
                }
            }
            Err(e) if e.code == ErrorCode::NotFound => (0, path.split('/').count() as u64),
            Err(e) => return Err(e),
        };
        let bytes = usage.bytes.saturating_sub(old) + contents.len() as u64;
        if bytes > usage.bytes && bytes > self.quota.max_bytes() {
            return Err(FsError::new(
                ErrorCode::TooLarge,
                format!(
                    "`{path}`: writing {} bytes would put the directory at {bytes} bytes, over its quota of {} (the grant's :bytes=N)",
                    contents.len(),
                    self.quota.max_bytes()
                ),
            ));
        }
        if new_entries > 0 && usage.entries + new_entries > self.quota.max_entries() {
            return Err(FsError::new(
                ErrorCode::TooLarge,
                format!(
                    "`{path}`: the directory holds {} entries, and its quota is {} (the grant's :entries=N)",
                    usage.entries,
                    self.quota.max_entries()
                ),
            ));
        }
        let (parent, name, created) = self.parent_created(path, true)?;
        self.replace(&parent, name, path, contents)?;
        usage.bytes = bytes;
        usage.entries += created + u64::from(old == 0 && new_entries > 0);
        Ok(())
    }

    fn replace(
        &self,
        parent: &OwnedFd,
        name: &str,
        path: &str,
        contents: &[u8],
    ) -> Result<(), FsError> {
        let mut random = [0u8; 8];
        getrandom::fill(&mut random).map_err(|e| FsError::new(ErrorCode::Io, e.to_string()))?;
        let temp = format!(".berm-write-{:016x}", u64::from_le_bytes(random));
        let io = |e: Errno| FsError::from_errno(path, e);
        let fd = rustix::fs::openat(
            parent,
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
            .and_then(|()| rustix::fs::renameat(parent, temp.as_str(), parent, name).map_err(io));
        if let Err(e) = renamed {
            let _ = rustix::fs::unlinkat(parent, temp.as_str(), AtFlags::empty());
            return Err(e);
        }
        rustix::fs::fsync(parent.as_fd()).map_err(io)
    }

    /// Removes the file (or empty directory) at `path`.
    pub fn remove(&self, path: &str) -> Result<(), FsError> {
        self.writable(path)?;
        let mut usage = self.usage.lock().unwrap_or_else(|p| p.into_inner());
        let (parent, name) = self.parent(path, false)?;
        let stat = rustix::fs::statat(&parent, name, AtFlags::SYMLINK_NOFOLLOW)
            .map_err(|e| FsError::from_errno(path, e))?;
        let kind = FileType::from_raw_mode(stat.st_mode);
        let flags = if kind == FileType::Directory {
            AtFlags::REMOVEDIR
        } else {
            AtFlags::empty()
        };
        rustix::fs::unlinkat(&parent, name, flags).map_err(|e| FsError::from_errno(path, e))?;
        if kind == FileType::RegularFile {
            usage.bytes = usage.bytes.saturating_sub(stat.st_size as u64);
        }
        usage.entries = usage.entries.saturating_sub(1);
        Ok(())
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
        let fs = FsRoot::open(&dir.path().join("inside"), read_only, FsQuota::default()).unwrap();
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
    fn quotas_bound_bytes_and_entries() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("old.txt"), [0; 10]).unwrap();
        let quota = FsQuota {
            bytes: Some(100),
            entries: Some(4),
        };
        let fs = FsRoot::open(dir.path(), false, quota).unwrap();
        assert_eq!(
            fs.usage(),
            Usage {
                bytes: 10,
                entries: 1
            }
        );
        fs.write("a.txt", &[1; 60]).unwrap();
        let err = fs.write("b.txt", &[1; 31]).unwrap_err();
        assert_eq!(err.code, ErrorCode::TooLarge);
        assert_eq!(
            err.message,
            "`b.txt`: writing 31 bytes would put the directory at 101 bytes, over its quota of 100 (the grant's :bytes=N)"
        );
        // Replacing a file counts its new size for its old one.
        fs.write("a.txt", &[1; 90]).unwrap();
        assert_eq!(
            fs.usage(),
            Usage {
                bytes: 100,
                entries: 2
            }
        );
        fs.write("a.txt", &[1; 5]).unwrap();
        fs.write("d/e.txt", b"x").unwrap();
        assert_eq!(
            fs.usage(),
            Usage {
                bytes: 16,
                entries: 4
            }
        );
        let err = fs.write("f.txt", b"x").unwrap_err();
        assert_eq!(
            err.message,
            "`f.txt`: the directory holds 4 entries, and its quota is 4 (the grant's :entries=N)"
        );
        fs.remove("d/e.txt").unwrap();
        fs.write("f.txt", b"x").unwrap();
        assert_eq!(
            fs.usage(),
            Usage {
                bytes: 16,
                entries: 4
            }
        );
        // A fresh count agrees with the running one.
        drop(fs);
        let fs = FsRoot::open(dir.path(), false, quota).unwrap();
        assert_eq!(
            fs.usage(),
            Usage {
                bytes: 16,
                entries: 4
            }
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
