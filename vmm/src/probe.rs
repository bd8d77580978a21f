//! The Landlock probe of a child's sandbox: before berm-vmm spawns a confined hypervisor
//! child, a forked copy of it enters the child's view, applies the same sandbox and reports
//! what it could still reach (`measure.rs` parses the line), so the measurement is of the
//! ruleset the child really gets.

use crate::sandbox::ChildSandbox;
use crate::sys::UnixAddress;
use crate::view::PreparedView;

/// Forks a probe of `sandbox`: the child enters `view` if there is one (going on without it
/// if the kernel refuses, as the real child then does), applies the sandbox (the ruleset and
/// role filter an exec'd child gets), tries to open [`PROBE_OUTSIDE`] and to connect to the
/// socket `outside` (one outside every policy), writes a [`ProbeReport`] line to a pipe and
/// exits. Returns the line's bytes (parsed by the caller), read within `timeout`; empty if
/// the probe could not apply the sandbox. The caller must be single-threaded (berm-vmm
/// starts its hypervisor children while it is).
#[cfg(target_os = "linux")]
pub fn probe_child(
    mut sandbox: ChildSandbox,
    view: Option<&PreparedView>,
    outside: &UnixAddress,
    timeout: std::time::Duration,
) -> std::io::Result<Vec<u8>> {
    use crate::measure::{MAX_REPORT, PROBE_OUTSIDE, ProbeReport};
    use crate::view::Seen;
    crate::sys::fork_reporting(MAX_REPORT, timeout, |line| {
        let seen = match view.map(crate::view::isolate) {
            Some(Ok(())) => Seen::PolicyPaths,
            _ => Seen::Host,
        };
        let Ok(landlock) = sandbox.apply() else {
            return 0;
        };
        let mut buf = [0u8; MAX_REPORT];
        let encoded = ProbeReport {
            landlock,
            read_outside: crate::sys::open_dir_errno(PROBE_OUTSIDE),
            connect_outside: crate::sys::connect_errno(outside),
            seen,
        }
        .encode(&mut buf);
        let len = encoded.len().min(line.len());
        line[..len].copy_from_slice(&encoded[..len]);
        len
    })
}

/// No probe on this OS: there is no host sandbox either.
#[cfg(not(target_os = "linux"))]
pub fn probe_child(
    _sandbox: ChildSandbox,
    _view: Option<&PreparedView>,
    _outside: &UnixAddress,
    _timeout: std::time::Duration,
) -> std::io::Result<Vec<u8>> {
    Err(std::io::Error::other("no host sandbox on this OS"))
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use berm_vm_protocol::host::Landlock;

    use super::*;
    use crate::measure::{OutsideSocket, ProbeReport, outcome};
    use crate::view::Seen;

    #[cfg(target_os = "linux")]
    #[test]
    fn the_probe_of_a_childs_ruleset_is_refused_outside_it() {
        use crate::sandbox::{ChildSandbox, Role, SandboxGrants};
        let policy = crate::sandbox::for_program(
            &SandboxGrants::default(),
            std::path::Path::new("/bin/true"),
        );
        let sandbox = ChildSandbox::prepare(&policy, Role::Qemu).unwrap();
        let outside = OutsideSocket::bind(std::path::Path::new("/nonexistent")).unwrap();
        let line = probe_child(
            sandbox,
            None,
            outside.address(),
            std::time::Duration::from_secs(5),
        )
        .unwrap();
        let probe = ProbeReport::decode(&line).unwrap();
        assert_eq!(probe.outcome(), "EACCES", "{probe:?}");
        assert_ne!(probe.landlock(), Landlock::NotEnforced, "{probe:?}");
        // QEMU's list has no `socket`: the connect outside never starts.
        assert_eq!(outcome(probe.connect_outside), "EPERM", "{probe:?}");
        assert_eq!(probe.seen, Seen::Host);
    }

    /// The vsock device of a run with egress may `connect`; in the view of its policy's
    /// paths, a socket outside them does not exist, while one inside is still reached.
    #[cfg(target_os = "linux")]
    #[test]
    fn the_egress_device_reaches_no_socket_outside_its_policy() {
        use crate::sandbox::{ChildSandbox, Role, SandboxGrants};
        use crate::view::{PreparedView, View};
        let tmp = tempfile::tempdir().unwrap();
        let run = tmp.path().join("run");
        std::fs::create_dir(&run).unwrap();
        let inside = std::os::unix::net::UnixListener::bind(run.join("vsock.sock_6000")).unwrap();
        let policy = crate::sandbox::for_program(
            &SandboxGrants {
                read_write: vec![run.clone()],
                ..SandboxGrants::default()
            },
            std::path::Path::new("/bin/true"),
        );
        let role = Role::VhostDeviceVsockEgress;
        let view = PreparedView::prepare(&View::of(&policy, &run).unwrap()).unwrap();
        let probe = |outside: &OutsideSocket, view: Option<&PreparedView>| {
            let sandbox = ChildSandbox::prepare(&policy, role).unwrap();
            let line = probe_child(
                sandbox,
                view,
                outside.address(),
                std::time::Duration::from_secs(5),
            )
            .unwrap();
            ProbeReport::decode(&line).unwrap()
        };
        let outside = OutsideSocket::bind(&run).unwrap();
        assert!(!outside.path().starts_with(&run));
        // Without the view, nothing but the view stops it: the connect goes through.
        let bare = probe(&outside, None);
        assert_eq!(outcome(bare.connect_outside), "allowed", "{bare:?}");
        assert_eq!(bare.seen, Seen::Host);
        let viewed = probe(&outside, Some(&view));
        if viewed.seen == Seen::Host {
            // This kernel refuses unprivileged user namespaces: the report says so, and
            // the connect outside is not refused, which `berm attest verify` refuses.
            eprintln!("SKIPPED: no unprivileged user namespaces here: {viewed:?}");
            assert_eq!(outcome(viewed.connect_outside), "allowed");
            return;
        }
        assert_eq!(outcome(viewed.connect_outside), "ENOENT", "{viewed:?}");
        assert_eq!(viewed.outcome(), "EACCES", "{viewed:?}");
        assert_ne!(viewed.landlock(), Landlock::NotEnforced, "{viewed:?}");
        // The same probe against the dialer's socket in the run dir connects.
        let dialer = OutsideSocket {
            path: std::path::PathBuf::from("/nonexistent/kept"),
            _listener: inside.try_clone().unwrap(),
            address: crate::sys::UnixAddress::new(&run.join("vsock.sock_6000")).unwrap(),
        };
        let reached = probe(&dialer, Some(&view));
        assert_eq!(outcome(reached.connect_outside), "allowed", "{reached:?}");
        assert_eq!(reached.seen, Seen::PolicyPaths);
    }
}
