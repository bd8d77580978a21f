//! The Unix-socket connections berm-vmm makes once it is confined, made by another process.
//!
//! Landlock on the kernels berm runs on (before ABI 9, Linux 7.1) cannot limit which pathname
//! Unix sockets a process connects to, and seccomp cannot read a path. So confined berm-vmm
//! may call neither `socket` nor `connect` (its allow list, [`Role::Vmm`], has neither). The
//! connections it still needs after confinement — its own control and log connections, its
//! shutdown request, and on the QEMU path one to vhost-device-vsock per relayed client — come
//! from a **connector**: a process forked just before berm-vmm confines itself, which holds
//! only the run dir (an `O_PATH` descriptor) and a fixed table of socket names in it.
//!
//! A request is an index into that table, never a path, so not even a compromised berm-vmm
//! can make the connector connect anywhere else. For each request it opens the name beneath
//! the run dir without following a symlink, checks that it is a socket, connects through
//! `/proc/self/fd/N` (so the inode connected to is the one checked) and sends the connection
//! back with `SCM_RIGHTS`. The connector runs under Landlock with no file granted, both scopes
//! (no abstract sockets, no signals outside its domain) and its own allow list
//! ([`Role::VmmConnector`]); it dies with berm-vmm.
//!
//! With `--no-host-sandbox` nothing is confined and berm-vmm connects by path itself.

#[cfg(target_os = "linux")]
use std::ffi::CString;
use std::io;
#[cfg(target_os = "linux")]
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
#[cfg(target_os = "linux")]
use std::sync::Mutex;

use crate::run_dir::RunDir;
#[cfg(target_os = "linux")]
use crate::sandbox::{ChildPolicy, Role, SandboxGrants};
use crate::sandbox::{ChildReport, SandboxError};

/// The connector process's system calls: the only `unsafe` code of this feature.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
mod sys;

/// How long the connector may take to report its confinement.
#[cfg(target_os = "linux")]
const REPORT_WITHIN: std::time::Duration = std::time::Duration::from_secs(5);

/// A socket in the run dir that berm-vmm connects to after it is confined.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// `control.sock`: berm-vmm's own control connection and its shutdown request.
    Control,
    /// `logs.sock`: the guest's log port, copied into `guest.log`.
    Logs,
    /// `vsock.sock` (QEMU path): vhost-device-vsock's host side, one connection per relayed
    /// client.
    Vsock,
}

impl Target {
    const ALL: [Target; 3] = [Target::Control, Target::Logs, Target::Vsock];

    fn index(self) -> u8 {
        self as u8
    }

    fn path(self, run: &RunDir) -> &Path {
        match self {
            Target::Control => &run.control,
            Target::Logs => &run.logs,
            Target::Vsock => &run.vsock,
        }
    }
}

/// Why the connector could not be started (the run stops: fail-closed).
#[derive(Debug, thiserror::Error)]
pub enum ConnectorError {
    /// A socket of the table is not directly in the run dir.
    #[error("{0} is not directly in the run dir, so the connector cannot serve it")]
    NotInRunDir(PathBuf),
    /// Opening the run dir, making the channel or forking failed.
    #[error("starting berm-vmm's connector failed")]
    Start(#[source] io::Error),
    /// Its sandbox could not be prepared.
    #[error("confining berm-vmm's connector failed")]
    Sandbox(#[source] SandboxError),
    /// It did not report how it is confined, or its report was refused.
    #[error("berm-vmm's connector did not report its confinement: {0}")]
    Unmeasured(String),
}

/// Makes berm-vmm's connections to the run dir's sockets: through the connector once confined,
/// directly without a host sandbox. Shared by every thread that connects.
pub struct Connector {
    inner: Inner,
}

enum Inner {
    /// `--no-host-sandbox`: connect by path.
    Direct(Vec<PathBuf>),
    /// The channel to the connector process; one request and its answer at a time.
    #[cfg(target_os = "linux")]
    Forked(Mutex<OwnedFd>),
}

impl Connector {
    /// Connects by path, in this process (`--no-host-sandbox`).
    pub fn direct(run: &RunDir) -> Self {
        Self {
            inner: Inner::Direct(Target::ALL.iter().map(|t| t.path(run).to_owned()).collect()),
        }
    }

    /// Forks the connector for `run`'s sockets, confined, and returns the handle and how the
    /// connector is confined. The caller must be single-threaded (it is about to confine
    /// itself, which checks that).
    #[cfg(target_os = "linux")]
    pub fn fork(run: &RunDir) -> Result<(Self, ChildReport), ConnectorError> {
        use std::os::unix::fs::OpenOptionsExt;
        let names = Target::ALL
            .iter()
            .map(|t| {
                let path = t.path(run);
                match (path.parent(), path.file_name()) {
                    (Some(parent), Some(name)) if parent == run.dir => {
                        CString::new(name.as_encoded_bytes())
                            .map_err(|_| ConnectorError::NotInRunDir(path.to_owned()))
                    }
                    _ => Err(ConnectorError::NotInRunDir(path.to_owned())),
                }
            })
            .collect::<Result<Vec<_>, _>>()?;
        let dir: OwnedFd = std::fs::File::options()
            .read(true)
            .custom_flags(libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW)
            .open(&run.dir)
            .map_err(ConnectorError::Start)?
            .into();
        let policy = SandboxGrants::default();
        let sandbox = crate::sandbox::ChildSandbox::prepare(&policy, Role::VmmConnector)
            .map_err(ConnectorError::Sandbox)?;
        let (ours, theirs) = sys::channel().map_err(ConnectorError::Start)?;
        let mut sandbox = sandbox;
        let first_message = move |line: &mut [u8]| {
            // Opened before Landlock grants nothing; read after the filter is loaded, which
            // allows only `read`, `close` and `sendmsg` of what follows (nothing allocates).
            let status = crate::measure::OwnStatus::open();
            let report = match (status, sandbox.apply()) {
                (Ok(status), Ok(landlock)) => status.measure(landlock).ok()?,
                _ => return None,
            };
            let mut buf = [0u8; crate::measure::MAX_REPORT];
            let encoded = report.encode(&mut buf);
            let len = encoded.len().min(line.len());
            line[..len].copy_from_slice(&encoded[..len]);
            Some(len)
        };
        let pid = sys::fork(
            theirs,
            dir,
            &names,
            crate::measure::MAX_REPORT,
            first_message,
        )
        .map_err(ConnectorError::Start)?;
        // Its first message: how it measured itself once confined. Dropping `ours` on a
        // refusal ends it (its read sees the channel closed).
        let line = sys::receive_report(&ours, crate::measure::MAX_REPORT, REPORT_WITHIN)
            .map_err(|e| ConnectorError::Unmeasured(e.to_string()))?;
        let measured = crate::measure::SelfReport::decode(&line)
            .map_err(|e| ConnectorError::Unmeasured(e.to_string()))?;
        let report = ChildPolicy::new("berm-vmm connector", &policy, Role::VmmConnector, "")
            .self_reported(pid, &measured);
        Ok((
            Self {
                inner: Inner::Forked(Mutex::new(ours)),
            },
            report,
        ))
    }

    /// No connector on this OS: there is no host sandbox either.
    #[cfg(not(target_os = "linux"))]
    pub fn fork(_run: &RunDir) -> Result<(Self, ChildReport), ConnectorError> {
        Err(ConnectorError::Sandbox(SandboxError::Unsupported))
    }

    /// A connection to `target`, blocking.
    pub fn connect(&self, target: Target) -> io::Result<UnixStream> {
        match &self.inner {
            Inner::Direct(paths) => UnixStream::connect(&paths[usize::from(target.index())]),
            #[cfg(target_os = "linux")]
            Inner::Forked(channel) => {
                let fd = {
                    let channel = channel
                        .lock()
                        .map_err(|_| io::Error::other("the connector channel is poisoned"))?;
                    sys::request(&channel, target.index())?
                };
                // The connector connects without blocking; the caller's stream blocks.
                let stream = UnixStream::from(fd);
                stream.set_nonblocking(false)?;
                Ok(stream)
            }
        }
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use std::io::ErrorKind;
    use std::os::unix::net::UnixListener;

    use super::*;

    #[test]
    fn the_connector_connects_to_run_dir_sockets_only() {
        let tmp = tempfile::tempdir().unwrap();
        let run = RunDir::prepare(&tmp.path().join("run"), 0).unwrap();
        let control = UnixListener::bind(&run.control).unwrap();
        // What a compromised berm-vmm or hypervisor could try: a run-dir name that is a
        // symlink to a socket of the user's outside the run dir.
        let outside = UnixListener::bind(tmp.path().join("session-bus.sock")).unwrap();
        outside.set_nonblocking(true).unwrap();
        std::os::unix::fs::symlink(tmp.path().join("session-bus.sock"), &run.logs).unwrap();

        let (connector, report) = Connector::fork(&run).unwrap();
        assert_eq!(report.seccomp, "allow_list berm-vmm-connector");
        // Its own words, taken after it confined itself, and the kernel agrees.
        assert_eq!(report.measured_by, "self_report");
        assert_eq!(report.role, "berm-vmm-connector");
        assert_eq!(report.seccomp_mode, "filter");
        assert_eq!(report.seccomp_filters, 1);
        assert!(report.no_new_privs);
        assert_ne!(report.landlock, "not_enforced");
        let status = crate::measure::ProcStatus::of_pid(report.pid).unwrap();
        assert_eq!(status.seccomp, crate::measure::SeccompMode::Filter);
        assert!(status.no_new_privs);
        // The real socket: connected, and the connection is the one the listener accepts.
        let mut stream = connector.connect(Target::Control).unwrap();
        let (mut accepted, _) = control.accept().unwrap();
        std::io::Write::write_all(&mut stream, b"ping").unwrap();
        let mut got = [0u8; 4];
        std::io::Read::read_exact(&mut accepted, &mut got).unwrap();
        assert_eq!(&got, b"ping");
        // The symlink is not followed; a missing socket is missing.
        let refused = connector.connect(Target::Logs).unwrap_err();
        assert_eq!(
            refused.raw_os_error(),
            Some(libc::ECONNREFUSED),
            "{refused}"
        );
        assert_eq!(
            outside.accept().unwrap_err().kind(),
            ErrorKind::WouldBlock,
            "the outside socket was reached"
        );
        let missing = connector.connect(Target::Vsock).unwrap_err();
        assert_eq!(missing.raw_os_error(), Some(libc::ENOENT), "{missing}");
        // An index past the table (only a compromised berm-vmm would send one).
        let Inner::Forked(channel) = &connector.inner else {
            panic!("not forked")
        };
        let err = sys::request(&channel.lock().unwrap(), 3).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EINVAL), "{err}");
        // Still serving after all that.
        connector.connect(Target::Control).unwrap();
    }
}
