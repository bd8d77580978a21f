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
use berm_vm_protocol::{Event, Request, Service};
use common::{BOOT, Vmm, scratch_to_boot};
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

/// The first line with this `event`.
fn event(run: &mut Vmm, event: &str) -> Option<Value> {
    collect(run);
    run.events(event).into_iter().next()
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
        assert!(event(run, "host_sandbox").is_some());
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

    let sandbox = event(&mut run, "host_sandbox").unwrap();
    assert_eq!(sandbox["enabled"], true, "{sandbox}");
    assert_eq!(sandbox["landlock"], "fully_enforced", "{sandbox}");
    assert_eq!(sandbox["seccomp"], "allow_list", "{sandbox}");
    assert!(sandbox["landlock_abi"].as_u64().unwrap() >= 5, "{sandbox}");
    let allowed: Vec<&str> = sandbox["allowed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_str().unwrap())
        .collect();
    // The report is the enforced table itself.
    assert_eq!(
        allowed,
        berm_vmm::sandbox::Role::Vmm.describe(),
        "{sandbox}"
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
            "{syscall} allowed: {sandbox}"
        );
    }
    if sandbox["landlock_abi"].as_u64().unwrap() >= 6 {
        assert_eq!(
            sandbox["scopes"],
            serde_json::json!(["abstract_unix_socket"])
        );
    }
    let reported: Vec<&Value> = sandbox["children"].as_array().unwrap().iter().collect();
    assert_eq!(reported.len(), children.len(), "{sandbox}");
    // Each child's confinement as measured: one of berm-vmm's children by pid, and what the
    // kernel showed the test for it is what the line says.
    for child in &reported {
        eprintln!("measured child: {child}");
        let pid = child["pid"].as_u64().unwrap() as u32;
        let (name, nnp, seccomp, _) = children
            .iter()
            .find(|c| c.3 == pid)
            .unwrap_or_else(|| panic!("{child}: not a child of berm-vmm: {children:?}"));
        assert_eq!(child["landlock"], "fully_enforced", "{child}");
        assert_eq!(child["no_new_privs"], nnp.as_deref() == Some("1"), "{name}");
        assert_eq!(child["seccomp_mode"], "filter", "{child}");
        assert_eq!(seccomp.as_deref(), Some("2"), "{name}");
        assert!(child["seccomp_filters"].as_u64().unwrap() >= 1, "{child}");
        let own = format!("allow_list {}", child["role"].as_str().unwrap());
        assert!(
            child["seccomp"].as_str().unwrap().starts_with(&own),
            "{child}"
        );
        if child["program"] == "berm-vmm connector" {
            assert_eq!(child["measured_by"], "self_report", "{child}");
            assert!(child.get("read_outside").is_none(), "{child}");
        } else {
            // QEMU and vhost-device-vsock: /proc/PID/status and the probe of their ruleset.
            assert_eq!(child["measured_by"], "proc_status+probe", "{child}");
            assert_eq!(child["read_outside"], "EACCES", "{child}");
        }
    }
    let roles: std::collections::BTreeSet<&str> = reported
        .iter()
        .map(|c| c["role"].as_str().unwrap())
        .collect();
    assert_eq!(
        roles,
        ["berm-vmm-connector", "qemu", "vhost-device-vsock"].into(),
        "{sandbox}"
    );
    // The connector is one of them: its own allow list, and no file granted.
    let connector = common::child_named(&sandbox, "berm-vmm connector");
    assert_eq!(
        connector["seccomp"], "allow_list berm-vmm-connector",
        "{connector}"
    );
    assert!(
        children.iter().any(|(name, ..)| name == "berm-connector"),
        "{children:?}"
    );
    let probe = event(&mut run, "host_sandbox_probe").unwrap();
    eprintln!("host-sandbox probe: {probe}");
    assert_eq!(probe["read_outside"], "EACCES", "{probe}");
    assert_eq!(probe["write_outside"], "EACCES", "{probe}");
    assert_eq!(probe["create_outside"], "EACCES", "{probe}");
    assert_eq!(probe["exec"], "EPERM", "{probe}");
    assert_eq!(probe["read_kernel"], "allowed", "{probe}");
    assert_eq!(probe["x32_call"], "SIGSYS", "{probe}");
    assert_eq!(probe["kill_parent"], "EPERM", "{probe}");
    assert_eq!(probe["kill_sibling"], "EPERM", "{probe}");
    let _ = sibling.kill();
    let _ = sibling.wait();
    if sandbox["landlock_abi"].as_u64().unwrap() >= 6 {
        assert_eq!(probe["connect_abstract_socket"], "EPERM", "{probe}");
    }
    // berm-vmm may not make a socket at all (its connector connects for it, to the run dir's
    // sockets only), so the session-bus stand-in the test binds is out of reach.
    assert_eq!(probe["connect_pathname_outside"], "EPERM", "{probe}");
    assert_eq!(probe["write_run_dir"], "allowed", "{probe}");
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "secret\n");
    assert!(!outside.with_extension("berm-probe-created").exists());

    // The run's record: every JSON line berm-vmm printed, in order, mode 0600.
    let record_path = run_dir.join("vmm.jsonl");
    assert_eq!(berm_fixtures::mode(&record_path), 0o600);
    let printed: Vec<Value> = run
        .seen
        .iter()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let recorded: Vec<Value> = std::fs::read_to_string(&record_path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(printed, recorded);
    assert_eq!(recorded.first().unwrap()["event"], "hypervisor");
    // The exit line, then the signing of the record that ends with it.
    let [.., exit, signed] = recorded.as_slice() else {
        panic!("{recorded:?}")
    };
    assert_eq!(exit["event"], "exit");
    assert_eq!(signed["event"], "record_signed", "{signed}");
    assert!(
        recorded
            .iter()
            .any(|l| l["source"] == "berm-init" && l["event"] == "power_off")
    );

    // An honest record of a real boot (no apps yet) verifies against the pins.
    let started = Instant::now();
    let record = Record::from_run_dir(&run_dir).unwrap().to_value();
    let verdict = verify(&record, &Pins::compiled_in().unwrap());
    eprintln!(
        "attest: record {} bytes, built and verified in {:?}",
        record.to_string().len(),
        started.elapsed()
    );
    assert!(verdict.ok, "{:#?}", verdict.problems);
    // The record carries each child's measurement, as the line said it.
    let kept = record["host_sandbox"]["children"].as_array().unwrap();
    assert_eq!(kept.len(), reported.len(), "{record}");
    for (kept, line) in kept.iter().zip(&reported) {
        for (record_field, line_field) in [
            ("program", "program"),
            ("role", "role"),
            ("landlock", "landlock"),
            ("no_new_privs", "no_new_privs"),
            ("seccomp", "seccomp"),
            ("seccomp_mode", "seccomp_mode"),
            ("seccomp_filters", "seccomp_filters"),
            ("policy_sha256", "policy_sha256"),
            ("measured_by", "measured_by"),
        ] {
            assert_eq!(
                kept[record_field], line[line_field],
                "{record_field}: {kept}"
            );
        }
        assert_eq!(kept.get("read_outside"), line.get("read_outside"), "{kept}");
    }
    // The same record with QEMU measured unconfined (re-sealed, as a forger would) is
    // refused, naming QEMU.
    let mut forged = record.clone();
    let qemu = forged["host_sandbox"]["children"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|c| c["role"] == "qemu")
        .unwrap();
    qemu["no_new_privs"] = false.into();
    forged["record_sha256"] = berm_attest::record_sha256(&forged).into();
    let refused = verify(&forged, &Pins::compiled_in().unwrap());
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
        signed["record_sha256"]
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
    let sandbox = event(&mut run, "host_sandbox").unwrap();
    assert_eq!(sandbox["enabled"], false, "{sandbox}");
    assert_eq!(sandbox["reason"], "--no-host-sandbox", "{sandbox}");
    let probe = event(&mut run, "host_sandbox_probe").unwrap();
    assert_eq!(probe["read_outside"], "allowed", "{probe}");
    assert_eq!(probe["exec"], "allowed", "{probe}");
    // Unconfined, berm-vmm connects by path itself: the row the confined run refuses.
    assert_eq!(probe["connect_pathname_outside"], "allowed", "{probe}");
    let _ = std::fs::remove_file(outside.with_extension("berm-probe-created"));
    // The record says so too, and the verifier refuses it for exactly that.
    let record = Record::from_run_dir(&run_dir).unwrap().to_value();
    assert_eq!(
        verify(&record, &Pins::compiled_in().unwrap()).codes(),
        vec![Code::HostSandboxDisabled]
    );
}
