//! The run directory: mode 0700, holding every socket of one VM and its console log.

use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

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
    /// A socket path would be longer than `sun_path` allows.
    #[error(
        "socket path {0} is longer than the {MAX_SOCKET_PATH} bytes a Unix socket path may have; choose a shorter --run-dir"
    )]
    PathTooLong(PathBuf),
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
    /// Creates (or reuses) `dir` with mode 0700, removes sockets a previous run left behind
    /// and truncates the logs.
    pub fn prepare(dir: &Path, apps: usize) -> Result<Self, RunDirError> {
        if dir.exists() && !dir.is_dir() {
            return Err(RunDirError::NotADirectory(dir.to_owned()));
        }
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(io(dir))?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(io(dir))?;
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
        // Stale sockets: every *.sock of an earlier run (rpc-<i> for any i), not only ours.
        for entry in std::fs::read_dir(&run.dir).map_err(io(&run.dir))? {
            let path = entry.map_err(io(&run.dir))?.path();
            if path.extension().is_some_and(|e| e == "sock") {
                std::fs::remove_file(&path).map_err(io(&path))?;
            }
        }
        for log in [
            &run.console,
            &run.hypervisor_log,
            &run.dir.join("guest.log"),
        ] {
            std::fs::write(log, b"").map_err(io(log))?;
        }
        Ok(run)
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
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn prepares_0700_and_removes_stale_sockets() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("run");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let stale = std::os::unix::net::UnixListener::bind(dir.join("rpc-7.sock")).unwrap();
        drop(stale);
        std::fs::write(dir.join("keep.txt"), b"x").unwrap();
        let run = RunDir::prepare(&dir, 2).unwrap();
        assert_eq!(std::fs::metadata(&run.dir).unwrap().mode() & 0o777, 0o700);
        assert!(!dir.join("rpc-7.sock").exists());
        assert!(dir.join("keep.txt").exists());
        assert_eq!(run.rpc.len(), 2);
        assert!(run.console.exists());
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
