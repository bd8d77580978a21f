//! The run directory: mode 0700, holding every socket of one VM, its logs and the app images.
//!
//! berm-vmm only ever uses a directory it made or one that holds nothing but what berm-vmm
//! makes: a `--run-dir` that is a symlink, belongs to another user, is open to other users, or
//! holds any other file is refused, and nothing in it is chmod-ed or deleted unless berm-vmm
//! created it. Without `--run-dir`, a fresh directory with a random name is made under
//! `$XDG_RUNTIME_DIR` (or the system temp dir), never at a name another user could predict and
//! take first. At exit the sockets and app images are removed; the logs stay for reading.

use std::ffi::OsStr;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use berm_vm_protocol::private_dir::{self, NotPrivate};
use serde::Serialize;

/// `sun_path` holds 108 bytes, NUL included.
const MAX_SOCKET_PATH: usize = 107;

/// Why the run directory could not be prepared.
#[derive(Debug, thiserror::Error)]
pub enum RunDirError {
    /// Creating, securing or cleaning it failed.
    #[error("preparing run dir {path} failed")]
    Io {
        /// The path involved.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A path exists but is not a directory.
    #[error("run dir {0} exists and is not a directory")]
    NotADirectory(PathBuf),
    /// The path is a symbolic link.
    #[error("run dir {0} is a symbolic link; give the directory itself")]
    Symlink(PathBuf),
    /// Another user owns it.
    #[error("run dir {path} belongs to uid {owner}, not to this user (uid {user})")]
    NotOwned {
        /// The directory.
        path: PathBuf,
        /// Its owner.
        owner: u32,
        /// The user running berm-vmm.
        user: u32,
    },
    /// Group or others have access to it.
    #[error(
        "run dir {path} has mode {mode:o}; berm-vmm needs it private (chmod 700 it, or give a path that does not exist yet)"
    )]
    NotPrivate {
        /// The directory.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// It holds a file berm-vmm does not make.
    #[error(
        "run dir {path} holds {entry:?}, which berm-vmm did not create; give an empty directory or one a previous run used"
    )]
    Foreign {
        /// The directory.
        path: PathBuf,
        /// The first foreign entry.
        entry: String,
    },
    /// A socket path would be longer than `sun_path` allows.
    #[error(
        "socket path {0} is longer than the {MAX_SOCKET_PATH} bytes a Unix socket path may have; choose a shorter --run-dir"
    )]
    PathTooLong(PathBuf),
}

/// Whether `name` is something berm-vmm creates in a run dir (so a directory holding only such
/// names is one berm-vmm used before).
fn made_by_berm(name: &OsStr) -> bool {
    let Some(name) = name.to_str() else {
        return false;
    };
    let numbered = |prefix: &str, suffix: &str| {
        name.strip_prefix(prefix)
            .and_then(|rest| rest.strip_suffix(suffix))
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    };
    // The egress dialer's sockets, named the way vhost-device-vsock connects (`vsock.sock_<port>`).
    let egress = name
        .strip_prefix("vsock.sock_")
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
    egress
        || matches!(
            name,
            "control.sock"
                | "logs.sock"
                | "vhost.sock"
                | "vsock.sock"
                | "console.log"
                | "console.log.1"
                | "hypervisor.log"
                | "hypervisor.log.1"
                | "guest.log"
                | "guest.log.1"
                | "vmm.jsonl"
                | "vmm.jsonl.1"
                | "probe.erofs"
                | "probe.stage"
                | "sandbox-probe"
                | "record.dsse.json"
                // The apps' receipts, one directory per boot; kept across runs.
                | "receipts"
        )
        || numbered("rpc-", ".sock")
        || numbered("app-", ".erofs")
        || numbered("app-", ".stage")
}

/// Creates a fresh private directory under `base` with a random name (`berm-vmm-XXXXXXXX`).
fn create_fresh(base: &Path) -> Result<PathBuf, RunDirError> {
    for _ in 0..16 {
        let mut random = [0u8; 6];
        getrandom::fill(&mut random).map_err(|e| RunDirError::Io {
            path: base.to_owned(),
            source: std::io::Error::other(e),
        })?;
        let dir = base.join(format!("berm-vmm-{}", hex::encode(random)));
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(source) => return Err(RunDirError::Io { path: dir, source }),
        }
    }
    Err(RunDirError::Io {
        path: base.to_owned(),
        source: std::io::Error::other("no free random name after 16 tries"),
    })
}

/// Checks an existing `--run-dir`: a private directory of this user
/// ([`private_dir::check`], the rule `berm vm logs` and `berm attest NAME` apply again before
/// reading one) holding only what berm-vmm makes.
fn check_existing(dir: &Path, meta: &std::fs::Metadata) -> Result<(), RunDirError> {
    let path = dir.to_owned();
    private_dir::check(meta, crate::sys::euid()).map_err(|why| match why {
        NotPrivate::Symlink => RunDirError::Symlink(path),
        NotPrivate::NotADirectory => RunDirError::NotADirectory(path),
        NotPrivate::NotOwned { owner, user } => RunDirError::NotOwned { path, owner, user },
        NotPrivate::Open { mode } => RunDirError::NotPrivate { path, mode },
    })?;
    for entry in std::fs::read_dir(dir).map_err(io(dir))? {
        let name = entry.map_err(io(dir))?.file_name();
        if !made_by_berm(&name) {
            return Err(RunDirError::Foreign {
                path: dir.to_owned(),
                entry: name.to_string_lossy().into_owned(),
            });
        }
    }
    // A previous run's signed record would sit beside this run's vmm.jsonl until this run
    // signs its own: it goes now.
    let record = dir.join("record.dsse.json");
    match std::fs::remove_file(&record) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io(&record)(e)),
        _ => Ok(()),
    }
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> RunDirError + '_ {
    move |source| RunDirError::Io {
        path: path.to_owned(),
        source,
    }
}

/// The paths inside a prepared run directory.
#[derive(Clone, Debug, Serialize)]
pub struct RunDir {
    /// The directory.
    pub dir: PathBuf,
    /// vsock 1024.
    pub control: PathBuf,
    /// vsock 1025.
    pub logs: PathBuf,
    /// vsock 5000+i, one per app.
    pub rpc: Vec<PathBuf>,
    /// The guest console (hvc0).
    pub console: PathBuf,
    /// The hypervisor's own output (QEMU, vhost-device-vsock, libkrun).
    pub hypervisor_log: PathBuf,
    /// QEMU path only: vhost-device-vsock's vhost-user socket (QEMU connects to it).
    pub vhost: PathBuf,
    /// QEMU path only: vhost-device-vsock's host side (`CONNECT <port>`).
    pub vsock: PathBuf,
}

impl RunDir {
    /// Makes a fresh run dir with a random name under `$XDG_RUNTIME_DIR`, or the system temp
    /// dir without one, then prepares it like [`RunDir::prepare`].
    pub fn create(apps: usize) -> Result<Self, RunDirError> {
        let base = std::env::var_os("XDG_RUNTIME_DIR")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .unwrap_or_else(std::env::temp_dir);
        let dir = create_fresh(&base)?;
        Self::prepare(&dir, apps)
    }

    /// Creates `dir` with mode 0700, or reuses it if it is a private directory of this user
    /// holding only what berm-vmm makes; then removes sockets a previous run left behind and
    /// truncates the logs.
    pub fn prepare(dir: &Path, apps: usize) -> Result<Self, RunDirError> {
        match std::fs::symlink_metadata(dir) {
            Ok(meta) => check_existing(dir, &meta)?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
                    std::fs::create_dir_all(parent).map_err(io(parent))?;
                }
                std::fs::DirBuilder::new()
                    .mode(0o700)
                    .create(dir)
                    .map_err(io(dir))?;
            }
            Err(source) => {
                return Err(RunDirError::Io {
                    path: dir.to_owned(),
                    source,
                });
            }
        }
        let dir = std::fs::canonicalize(dir).map_err(io(dir))?;
        let run = Self {
            control: dir.join("control.sock"),
            logs: dir.join("logs.sock"),
            rpc: (0..apps)
                .map(|i| dir.join(format!("rpc-{i}.sock")))
                .collect(),
            console: dir.join("console.log"),
            hypervisor_log: dir.join("hypervisor.log"),
            vhost: dir.join("vhost.sock"),
            vsock: dir.join("vsock.sock"),
            dir,
        };
        for socket in run.sockets() {
            if socket.as_os_str().len() > MAX_SOCKET_PATH {
                return Err(RunDirError::PathTooLong(socket.clone()));
            }
        }
        // Stale sockets of an earlier run (rpc-<i> for any i): every entry is berm-vmm's
        // (checked above), so these are too.
        run.remove_sockets_and_images(false)?;
        for log in [
            &run.console,
            &run.hypervisor_log,
            &run.dir.join("guest.log"),
        ] {
            std::fs::write(log, b"").map_err(io(log))?;
        }
        Ok(run)
    }

    /// Removes the sockets and the app and probe images (and stages), keeping the logs: what
    /// berm-vmm does at exit so run dirs do not pile up images.
    pub fn clean_up(&self) -> Result<(), RunDirError> {
        self.remove_sockets_and_images(true)
    }

    fn remove_sockets_and_images(&self, images: bool) -> Result<(), RunDirError> {
        for entry in std::fs::read_dir(&self.dir).map_err(io(&self.dir))? {
            let entry = entry.map_err(io(&self.dir))?;
            let name = entry.file_name();
            let Some(text) = name.to_str().filter(|_| made_by_berm(&name)) else {
                continue;
            };
            let path = entry.path();
            if text.ends_with(".sock")
                || text.starts_with("vsock.sock_")
                || (images && text.ends_with(".erofs"))
            {
                std::fs::remove_file(&path).map_err(io(&path))?;
            } else if images && text.ends_with(".stage") {
                std::fs::remove_dir_all(&path).map_err(io(&path))?;
            }
        }
        Ok(())
    }

    /// Every socket path berm-vmm or a hypervisor creates here.
    pub fn sockets(&self) -> impl Iterator<Item = &PathBuf> {
        [&self.control, &self.logs, &self.vhost, &self.vsock]
            .into_iter()
            .chain(self.rpc.iter())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    #[test]
    fn prepares_0700_and_removes_stale_sockets() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("run");
        let run = RunDir::prepare(&dir, 2).unwrap();
        assert_eq!(std::fs::metadata(&run.dir).unwrap().mode() & 0o777, 0o700);
        let stale = std::os::unix::net::UnixListener::bind(dir.join("rpc-7.sock")).unwrap();
        drop(stale);
        std::fs::write(dir.join("app-0.erofs"), b"x").unwrap();
        std::fs::write(dir.join("guest.log"), b"old").unwrap();
        // A second run reuses it: stale sockets go, the logs start empty.
        let run = RunDir::prepare(&dir, 2).unwrap();
        assert!(!dir.join("rpc-7.sock").exists());
        assert_eq!(std::fs::read(dir.join("guest.log")).unwrap(), b"");
        assert_eq!(run.rpc.len(), 2);
        assert!(run.console.exists());
        // At exit: sockets and images go, logs stay.
        let sock = std::os::unix::net::UnixListener::bind(&run.control).unwrap();
        drop(sock);
        run.clean_up().unwrap();
        assert!(!run.control.exists() && !dir.join("app-0.erofs").exists());
        assert!(run.console.exists());
    }

    #[test]
    fn refuses_what_berm_did_not_create_and_leaves_it_alone() {
        let tmp = tempfile::tempdir().unwrap();
        // Files berm does not make.
        let dir = tmp.path().join("home");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::fs::write(dir.join("notes.txt"), b"mine").unwrap();
        let stale = std::os::unix::net::UnixListener::bind(dir.join("agent.sock")).unwrap();
        drop(stale);
        let err = RunDir::prepare(&dir, 1).unwrap_err();
        assert!(matches!(err, RunDirError::Foreign { .. }), "{err}");
        assert!(dir.join("agent.sock").exists() && dir.join("notes.txt").exists());
        // Open to others: refused, mode untouched.
        let open = tmp.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o755)).unwrap();
        let err = RunDir::prepare(&open, 1).unwrap_err();
        assert!(err.to_string().contains("mode 755"), "{err}");
        assert_eq!(std::fs::metadata(&open).unwrap().mode() & 0o777, 0o755);
        // A symlink to a good directory.
        let good = tmp.path().join("good");
        RunDir::prepare(&good, 0).unwrap();
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&good, &link).unwrap();
        assert!(matches!(
            RunDir::prepare(&link, 0),
            Err(RunDirError::Symlink(_))
        ));
        // Owned by someone else: root's / for a user; as root, a private directory handed to
        // nobody (65534).
        if crate::sys::euid() != 0 {
            assert!(matches!(
                RunDir::prepare(Path::new("/"), 0),
                Err(RunDirError::NotOwned { .. })
            ));
        } else {
            let theirs = tmp.path().join("theirs");
            std::fs::create_dir(&theirs).unwrap();
            std::fs::set_permissions(&theirs, std::fs::Permissions::from_mode(0o700)).unwrap();
            std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
            assert!(matches!(
                RunDir::prepare(&theirs, 0),
                Err(RunDirError::NotOwned { .. })
            ));
            assert_eq!(std::fs::metadata(&theirs).unwrap().uid(), 65534);
        }
    }

    #[test]
    fn a_fresh_run_dir_has_a_random_private_name() {
        let tmp = tempfile::tempdir().unwrap();
        let a = create_fresh(tmp.path()).unwrap();
        let b = create_fresh(tmp.path()).unwrap();
        assert_ne!(a, b);
        let name = a.file_name().unwrap().to_str().unwrap();
        assert!(name.starts_with("berm-vmm-") && name.len() == "berm-vmm-".len() + 12);
        assert_eq!(std::fs::metadata(&a).unwrap().mode() & 0o777, 0o700);
    }

    #[test]
    fn refuses_socket_paths_that_do_not_fit() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("d".repeat(100));
        assert!(matches!(
            RunDir::prepare(&dir, 0),
            Err(RunDirError::PathTooLong(_))
        ));
    }
}
