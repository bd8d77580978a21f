//! berm-vmm confines itself, and the VM still works: real boots through `berm-vmm run`.
//!
//! With `--sandbox-probe FILE`, berm-vmm, once confined, tries to read, append to and create
//! beside a host file outside its grants, and to exec; it reports each outcome in a
//! `host_sandbox_probe` line. The test checks those outcomes, that the file is untouched, that
//! the kernel shows the process filtered (`Seccomp: 2`, `NoNewPrivs: 1`), that the guest still
//! boots and shuts down cleanly, and that the run's record (`vmm.jsonl`) attests.
//! Like vm.rs, a test that cannot boot prints `SKIPPED: <why>` (fails with BERM_VM_REQUIRE=1).
//! Linux only: the host sandbox is Landlock and seccomp (macOS runs unconfined, docs/macos.md).
#![cfg(target_os = "linux")]

mod common;

use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use berm::GuestArch;
use berm_attest::{Code, Pins, Record, verify};
use berm_vm_protocol::client::GuestConnection;
use berm_vm_protocol::host::HostSandboxLine;
use berm_vm_protocol::host_event::SandboxProbeLine;
use berm_vm_protocol::{Event, HostEvent, Landlock, Request, Service, VmmLine};
use common::{BOOT, Vmm, host_event, scratch_to_boot};
use serde_json::Value;

/// The host file `--sandbox-probe` reaches for (`dir/name`, holding `content`), and a
/// pathname socket listening beside it (`.sock`), outside the run dir.
fn probe_target(dir: &Path, name: &str, content: &str) -> (PathBuf, UnixListener) {
    let outside = dir.join(name);
    std::fs::write(&outside, content).unwrap();
    let listener = UnixListener::bind(outside.with_extension("sock")).unwrap();
    (outside, listener)
}

/// Every stderr line berm-vmm has written so far.
fn collect(run: &mut Vmm) {
    while let Ok(line) = run.lines.try_recv() {
        run.seen.push(line);
    }
}

/// berm-vmm's first `host_sandbox` line so far.
fn sandbox_line(run: &mut Vmm) -> Option<HostSandboxLine> {
    collect(run);
    host_event!(run.host_events(), HostSandbox)
        .into_iter()
        .next()
}

/// berm-vmm's first `host_sandbox_probe` line so far.
fn probe_line(run: &mut Vmm) -> Option<SandboxProbeLine> {
    collect(run);
    host_event!(run.host_events(), HostSandboxProbe)
        .into_iter()
        .next()
}

/// Boots to boot_complete, runs `during`, shuts down and waits for exit 0.
fn boot_and_shut_down(run: &mut Vmm, during: impl FnOnce(&mut Vmm)) {
    let deadline = Instant::now() + BOOT;
    let mut control = GuestConnection::connect(
        &run.run_dir.join("control.sock"),
        Service::Control,
        deadline,
    )
    .unwrap_or_else(|e| panic!("{e}; stderr:\n{}", run.seen.join("\n")));
    control
        .wait_for(deadline, |l| matches!(l.event, Event::BootComplete(_)))
        .unwrap();
    during(run);
    control.send(Request::Shutdown, deadline).unwrap();
    control
        .wait_for(deadline, |l| matches!(l.event, Event::PowerOff(_)))
        .unwrap();
    drop(control);
    let status = loop {
        if let Some(status) = run.child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "berm-vmm did not exit");
        std::thread::sleep(Duration::from_millis(20));
    };
    std::thread::sleep(Duration::from_millis(200));
    collect(run);
    assert_eq!(status.code(), Some(0), "stderr:\n{}", run.seen.join("\n"));
}

fn proc_status(pid: u32, field: &str) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|l| {
            l.strip_prefix(&format!("{field}:"))
                .map(|v| v.trim().to_owned())
        })
}

#[test]
fn berm_vmm_confines_itself_and_the_vm_still_works() {
    let Some(tmp) = scratch_to_boot(GuestArch::HOST) else {
        return;
    };
    // What an escaped VMM would reach for: a pathname socket outside its run dir (a session
    // bus) and an abstract one. Both listen for real.
    let (outside, _pathname) = probe_target(tmp.path(), "users-secret.txt", "secret\n");
    let _abstract = {
        use std::os::linux::net::SocketAddrExt;
        let name = format!("berm-probe:{}", outside.display());
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name).unwrap();
        std::os::unix::net::UnixListener::bind_addr(&addr).unwrap()
    };
    // A process beside berm-vmm (neither its parent nor its child), named in FILE.pid.
    let mut sibling = std::process::Command::new("sleep")
        .arg("600")
        .spawn()
        .unwrap();
    std::fs::write(outside.with_extension("pid"), sibling.id().to_string()).unwrap();
    let run_dir = tmp.path().join("run");
    let state = tmp.path().join("state.img");
    let mut run = Vmm::start_in(
        tmp,
        &[
            "--state".as_ref(),
            state.as_os_str(),
            "--sandbox-probe".as_ref(),
            outside.as_os_str(),
        ],
        &[],
    );
    let pid = run.child.id();
    let mut filtered = (None, None);
    let mut children = Vec::new();
    boot_and_shut_down(&mut run, |run| {
        // While the guest runs, the kernel shows berm-vmm filtered and without new privileges,
        // and each hypervisor child without new privileges (Landlock needs it).
        filtered = (proc_status(pid, "Seccomp"), proc_status(pid, "NoNewPrivs"));
        assert!(sandbox_line(run).is_some());
        let list =
            std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
        for child in list.split_whitespace() {
            let child: u32 = child.parse().unwrap();
            let name = std::fs::read_to_string(format!("/proc/{child}/comm")).unwrap_or_default();
            children.push((
                name.trim().to_owned(),
                proc_status(child, "NoNewPrivs"),
                proc_status(child, "Seccomp"),
                child,
            ));
        }
    });
    eprintln!("hypervisor children (comm, NoNewPrivs, Seccomp, pid): {children:?}");
    assert!(!children.is_empty());
    for (name, nnp, seccomp, _) in &children {
        assert_eq!(nnp.as_deref(), Some("1"), "{name}");
        // Every child runs under its role's allow list (QEMU also under its own -sandbox).
        assert_eq!(seccomp.as_deref(), Some("2"), "{name}: no seccomp filter");
    }
    assert_eq!(
        filtered,
        (Some("2".into()), Some("1".into())),
        "Seccomp / NoNewPrivs of berm-vmm"
    );

    let sandbox = sandbox_line(&mut run).unwrap();
    assert!(sandbox.enabled, "{sandbox:?}");
    assert_eq!(sandbox.landlock, Landlock::FullyEnforced, "{sandbox:?}");
    assert_eq!(sandbox.seccomp, "allow_list", "{sandbox:?}");
    assert!(sandbox.landlock_abi >= 5, "{sandbox:?}");
    let allowed: Vec<&str> = sandbox.allowed.iter().map(String::as_str).collect();
    // The report is the enforced table itself.
    assert_eq!(
        allowed,
        berm_vmm::sandbox::Role::Vmm.describe(),
        "{sandbox:?}"
    );
    for syscall in [
        "execve",
        "ptrace",
        "mount",
        "unshare",
        "init_module",
        "kexec_load",
        "bpf",
        "keyctl",
        "io_uring_setup",
        "reboot",
    ] {
        assert!(
            !allowed.iter().any(|a| a.split('(').next() == Some(syscall)),
            "{syscall} allowed: {sandbox:?}"
        );
    }
    if sandbox.landlock_abi >= 6 {
        assert_eq!(sandbox.scopes, ["abstract_unix_socket"]);
    }
    let reported = &sandbox.children;
    assert_eq!(reported.len(), children.len(), "{sandbox:?}");
    // Each child's confinement as measured: one of berm-vmm's children by pid, and what the
    // kernel showed the test for it is what the line says.
    for child in reported {
        eprintln!("measured child: {child:?}");
        let (name, nnp, seccomp, _) = children
            .iter()
            .find(|c| c.3 == child.pid)
            .unwrap_or_else(|| panic!("{child:?}: not a child of berm-vmm: {children:?}"));
        assert_eq!(child.landlock, Landlock::FullyEnforced, "{child:?}");
        assert_eq!(child.no_new_privs, nnp.as_deref() == Some("1"), "{name}");
        assert_eq!(child.seccomp_mode, "filter", "{child:?}");
        assert_eq!(seccomp.as_deref(), Some("2"), "{name}");
        assert!(child.seccomp_filters >= 1, "{child:?}");
        let own = format!("allow_list {}", child.role);
        assert!(child.seccomp.starts_with(&own), "{child:?}");
        if child.program == "berm-vmm connector" {
            assert_eq!(child.measured_by, "self_report", "{child:?}");
            assert_eq!(child.read_outside, None, "{child:?}");
        } else {
            // QEMU and vhost-device-vsock: /proc/PID/status and the probe of their ruleset.
            assert_eq!(child.measured_by, "proc_status+probe", "{child:?}");
            assert_eq!(child.read_outside.as_deref(), Some("EACCES"), "{child:?}");
        }
    }
    let roles: std::collections::BTreeSet<&str> =
        reported.iter().map(|c| c.role.as_str()).collect();
    assert_eq!(
        roles,
        ["berm-vmm-connector", "qemu", "vhost-device-vsock"].into(),
        "{sandbox:?}"
    );
    // The connector is one of them: its own allow list, and no file granted.
    let connector = common::child_named(reported, "berm-vmm connector");
    assert_eq!(
        connector.seccomp, "allow_list berm-vmm-connector",
        "{connector:?}"
    );
    assert!(
        children.iter().any(|(name, ..)| name == "berm-connector"),
        "{children:?}"
    );
    let probe = probe_line(&mut run).unwrap();
    eprintln!("host-sandbox probe: {probe:?}");
    assert_eq!(probe.read_outside, "EACCES", "{probe:?}");
    assert_eq!(probe.write_outside, "EACCES", "{probe:?}");
    assert_eq!(probe.create_outside, "EACCES", "{probe:?}");
    assert_eq!(probe.exec, "EPERM", "{probe:?}");
    assert_eq!(probe.read_kernel, "allowed", "{probe:?}");
    assert_eq!(probe.x32_call, "SIGSYS", "{probe:?}");
    assert_eq!(probe.kill_parent, "EPERM", "{probe:?}");
    assert_eq!(probe.kill_sibling, "EPERM", "{probe:?}");
    let _ = sibling.kill();
    let _ = sibling.wait();
    if sandbox.landlock_abi >= 6 {
        assert_eq!(probe.connect_abstract_socket, "EPERM", "{probe:?}");
    }
    // berm-vmm may not make a socket at all (its connector connects for it, to the run dir's
    // sockets only), so the session-bus stand-in the test binds is out of reach.
    assert_eq!(probe.connect_pathname_outside, "EPERM", "{probe:?}");
    assert_eq!(probe.write_run_dir, "allowed", "{probe:?}");
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "secret\n");
    assert!(!outside.with_extension("berm-probe-created").exists());

    // The run's record: every JSON line berm-vmm printed, in order, mode 0600.
    let record_path = run_dir.join("vmm.jsonl");
    assert_eq!(berm_fixtures::mode(&record_path), 0o600);
    let printed = run.vmm_lines();
    let recorded: Vec<VmmLine> = std::fs::read_to_string(&record_path)
        .unwrap()
        .lines()
        .map(|l| VmmLine::parse(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert_eq!(printed, recorded);
    assert!(
        matches!(
            recorded.first(),
            Some(VmmLine::Host(HostEvent::Hypervisor(_)))
        ),
        "{recorded:?}"
    );
    // The exit line, then the signing of the record that ends with it.
    let [
        ..,
        VmmLine::Host(HostEvent::Exit(_)),
        VmmLine::Host(HostEvent::RecordSigned(signed)),
    ] = recorded.as_slice()
    else {
        panic!("no exit and record_signed lines last: {recorded:?}")
    };
    assert!(
        recorded
            .iter()
            .any(|l| matches!(l, VmmLine::Guest(g) if matches!(g.event, Event::PowerOff(_))))
    );

    // An honest record of a real boot (no apps yet) verifies against the pins.
    let started = Instant::now();
    let record = Record::from_run_dir(&run_dir).unwrap();
    let value = record.to_value();
    let verdict = verify(&value, &Pins::compiled_in().unwrap());
    eprintln!(
        "attest: record {} bytes, built and verified in {:?}",
        value.to_string().len(),
        started.elapsed()
    );
    assert!(verdict.ok, "{:#?}", verdict.problems);
    // The record carries the host_sandbox line as berm-vmm wrote it, each child's
    // measurement with it.
    assert_eq!(record.host_sandbox.as_ref(), Some(&sandbox), "{value}");
    // The same record with QEMU measured unconfined (re-sealed, as a forger would) is
    // refused, naming QEMU.
    let mut forged = record.clone();
    let qemu = forged
        .host_sandbox
        .as_mut()
        .unwrap()
        .children
        .iter_mut()
        .find(|c| c.role == "qemu")
        .unwrap();
    qemu.no_new_privs = false;
    forged.seal();
    let refused = verify(&forged.to_value(), &Pins::compiled_in().unwrap());
    assert_eq!(refused.codes(), vec![Code::HostChildWeak]);
    assert!(
        refused.problems[0].detail.contains("qemu-system-"),
        "{:#?}",
        refused.problems
    );

    // The same record, signed with the host key (the default one: the test's HOME), verifies
    // with its public key and with no other.
    let envelope: Value = serde_json::from_slice(
        &std::fs::read(run_dir.join(berm_attest::dsse::ENVELOPE_FILE)).unwrap(),
    )
    .unwrap();
    let key = berm_attest::dsse::HostKey::load_or_create(None).unwrap();
    let options = berm_attest::Options::default();
    let pins = Pins::compiled_in().unwrap();
    let checked =
        berm_attest::dsse::verify_document(&envelope, Some(&key.public()), &pins, &options);
    assert!(checked.verdict.ok, "{:#?}", checked.verdict.problems);
    assert_eq!(
        berm_attest::dsse::open(&envelope, Some(&key.public())).unwrap()["record_sha256"],
        signed.record_sha256.as_str()
    );
    let other_dir = tempfile::tempdir().unwrap();
    let other =
        berm_attest::dsse::HostKey::load_or_create(Some(&other_dir.path().join("k.pem"))).unwrap();
    let refused =
        berm_attest::dsse::verify_document(&envelope, Some(&other.public()), &pins, &options);
    assert_eq!(refused.verdict.codes(), vec![Code::SignatureInvalid]);
}

#[test]
fn no_host_sandbox_runs_unconfined_and_says_so() {
    let Some(tmp) = scratch_to_boot(GuestArch::HOST) else {
        return;
    };
    let (outside, _pathname) = probe_target(tmp.path(), "users-file.txt", "x");
    let run_dir = tmp.path().join("run");
    let mut run = Vmm::start_in(
        tmp,
        &[
            "--no-host-sandbox".as_ref(),
            "--sandbox-probe".as_ref(),
            outside.as_os_str(),
        ],
        &[],
    );
    let pid = run.child.id();
    let mut seccomp = None;
    boot_and_shut_down(&mut run, |_| seccomp = proc_status(pid, "Seccomp"));
    assert_eq!(seccomp.as_deref(), Some("0"));
    let sandbox = sandbox_line(&mut run).unwrap();
    assert!(!sandbox.enabled, "{sandbox:?}");
    assert_eq!(
        sandbox.reason.as_deref(),
        Some("--no-host-sandbox"),
        "{sandbox:?}"
    );
    let probe = probe_line(&mut run).unwrap();
    assert_eq!(probe.read_outside, "allowed", "{probe:?}");
    assert_eq!(probe.exec, "allowed", "{probe:?}");
    // Unconfined, berm-vmm connects by path itself: the row the confined run refuses.
    assert_eq!(probe.connect_pathname_outside, "allowed", "{probe:?}");
    let _ = std::fs::remove_file(outside.with_extension("berm-probe-created"));
    // The record says so too, and the verifier refuses it for exactly that.
    let record = Record::from_run_dir(&run_dir).unwrap().to_value();
    assert_eq!(
        verify(&record, &Pins::compiled_in().unwrap()).codes(),
        vec![Code::HostSandboxDisabled]
    );
}
