//! End-to-end tests that really boot the pinned kernel and rootfs through `berm-vmm run`.
//!
//! They find the artifacts the way berm-vmm does (the artifact store: `$BERM_VM_ARTIFACTS`,
//! else `~/.cache/berm/vm`), which `scripts/test-vm` fills by building and checking them.
//! A test that cannot run prints `SKIPPED: <why>`; with `BERM_VM_REQUIRE=1` (set by
//! scripts/test-vm) it fails instead, so nothing skips silently where the VM must run.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use berm_pins::{ArtifactStore, KernelPins, RootfsPins};
use berm_vm_protocol::client::GuestConnection;
use berm_vm_protocol::host::{Backend, ExitLine};
use berm_vm_protocol::{BootStep, Event, HostEvent, Landlock, Phase, Request, Service, VmmLine};
use berm_vmm::detect::Detection;
use common::{
    BOOT, Vmm, bootable, can_boot, first_host_event, guest_event, host_event, pinned,
    require_or_skip,
};

/// Boots, checks the greeting, the replayed boot events and `status` on control, the logs
/// port's greeting, then shuts down and expects exit 0. Returns the stopped Vmm.
fn boot_and_shut_down(args: &[&str], envs: &[(&str, &Path)]) -> Vmm {
    let mut vmm = Vmm::start(args, envs);
    let deadline = Instant::now() + BOOT;
    let mut control = GuestConnection::connect(
        &vmm.run_dir.join("control.sock"),
        Service::Control,
        deadline,
    )
    .unwrap_or_else(|e| {
        panic!(
            "{e}; console:\n{}",
            std::fs::read_to_string(vmm.run_dir.join("console.log")).unwrap_or_default()
        )
    });
    let start = control
        .wait_for(deadline, |l| matches!(l.event, Event::BootStart(_)))
        .unwrap();
    let Event::BootStart(start) = start.event else {
        unreachable!()
    };
    assert_eq!(start.pid, 1, "berm-init must be PID 1");
    assert!(start.lsm.iter().any(|l| l == "landlock"), "{:?}", start.lsm);
    assert!(start.landlock_abi.is_some_and(|abi| abi >= 1));
    assert!(start.cmdline_bytes > 100 && start.cmdline_bytes <= 2048);
    assert!(start.cgroup2.contains("nsdelegate"), "{}", start.cgroup2);
    assert!(
        start.kernel_release.ends_with("-berm"),
        "{}",
        start.kernel_release
    );
    control
        .wait_for(deadline, |l| matches!(l.event, Event::BootComplete(_)))
        .unwrap();

    let logs =
        GuestConnection::connect(&vmm.run_dir.join("logs.sock"), Service::Logs, deadline).unwrap();
    assert_eq!(logs.greeting().boot_id, control.greeting().boot_id);

    let status = control.status(deadline).unwrap();
    let Event::Status(status) = status.event else {
        panic!("expected status, got {:?}", status.event)
    };
    assert_eq!((status.phase, status.pid), (Phase::Running, 1));
    assert!(
        status.control_connections >= 2,
        "berm-vmm's own connection and ours"
    );

    control.send(Request::Shutdown, deadline).unwrap();
    let off = control
        .wait_for(deadline, |l| matches!(l.event, Event::PowerOff(_)))
        .unwrap();
    let Event::PowerOff(off) = off.event else {
        unreachable!()
    };
    assert_eq!((off.exit_code, off.unmount_failed.len()), (0, 0), "{off:?}");
    drop(control);
    drop(logs);
    let code = vmm.wait(BOOT);
    assert_eq!(code, 0, "stderr:\n{}", vmm.stderr());
    assert_eq!(first_host_event!(vmm, Exit).status, "clean");
    vmm
}

/// The aarch64 guest (the one a Mac boots) under QEMU's emulation: the same boot, greeting,
/// status and clean shutdown, on its own pinned kernel and rootfs.
#[test]
fn the_aarch64_guest_boots_greets_and_shuts_down_cleanly() {
    let arch = berm::GuestArch::Aarch64;
    if !common::can_boot_for(arch) {
        return;
    }
    let vmm = boot_and_shut_down(&["--arch", "aarch64"], &[]);
    let m = first_host_event!(vmm, Measurements);
    assert_eq!(m.kernel.arch, "aarch64");
    assert_eq!((m.kernel.pinned, m.rootfs.pinned), (true, true));
    let config = first_host_event!(vmm, VmConfig);
    assert_eq!(config.arch, "aarch64");
    assert_eq!(config.hypervisor.chosen, Backend::Qemu, "{config:?}");
    assert_eq!(
        config.hypervisor.accel.as_deref(),
        Some("tcg"),
        "{config:?}"
    );
    let console = std::fs::read_to_string(vmm.run_dir.join("console.log")).unwrap();
    assert!(
        console.contains("Run /sbin/berm-init as init process"),
        "{console}"
    );
    assert!(
        // virt numbers its virtio-mmio disks in reverse: root must still be vda.
        console.contains("erofs: (device vda): mounted"),
        "{console}"
    );
}

#[test]
fn boots_greets_answers_status_and_shuts_down_cleanly() {
    if !can_boot() {
        return;
    }
    let vmm = boot_and_shut_down(&[], &[]);
    // The three lines before boot, in order, before any guest line.
    let order: Vec<&str> = vmm
        .vmm_lines()
        .iter()
        .map(|l| match l {
            VmmLine::Host(event) => event.name(),
            VmmLine::Guest(line) => line.event.name(),
        })
        .collect();
    let pos = |e: &str| {
        order
            .iter()
            .position(|x| *x == e)
            .unwrap_or_else(|| panic!("no {e} line: {order:?}"))
    };
    assert!(pos("hypervisor") < pos("endpoints"));
    assert!(pos("endpoints") < pos("vm_config") && pos("vm_config") < pos("measurements"));
    assert!(pos("measurements") < pos("guest_greeted"));
    let m = first_host_event!(vmm, Measurements);
    assert!(m.kernel.pinned && m.rootfs.pinned, "{m:?}");
    assert!(m.kernel.cmdline.contains("init=/sbin/berm-init"), "{m:?}");
    let config = first_host_event!(vmm, VmConfig);
    assert!(!config.hypervisor.reason.is_empty(), "{config:?}");
    use std::os::unix::fs::MetadataExt;
    assert_eq!(
        std::fs::metadata(&vmm.run_dir).unwrap().mode() & 0o777,
        0o700
    );
    let console = std::fs::read_to_string(vmm.run_dir.join("console.log")).unwrap();
    assert!(
        console.contains("Run /sbin/berm-init as init process"),
        "{console}"
    );
    // The guest events berm-vmm relayed end with power_off.
    let guest = vmm.guest_lines();
    assert!(
        matches!(guest.last().map(|l| &l.event), Some(Event::PowerOff(_))),
        "{guest:?}"
    );
}

#[test]
fn a_bad_guest_setting_fails_the_boot_with_exit_10() {
    if !can_boot() {
        return;
    }
    let mut vmm = Vmm::start(&["--env", "BERM_LOG=loud"], &[]);
    let code = vmm.wait(BOOT);
    assert_eq!(code, 10, "stderr:\n{}", vmm.stderr());
    let failed = guest_event!(vmm.guest_lines(), BootFailed);
    assert_eq!(failed.len(), 1, "{}", vmm.stderr());
    assert_eq!(failed[0].step, BootStep::Settings);
    assert!(
        failed[0].message.contains("BERM_LOG=\"loud\""),
        "{failed:?}"
    );
    assert_eq!(first_host_event!(vmm, Exit).status, "boot_failed");
}

#[test]
fn an_unpinned_rootfs_override_boots_and_is_reported_unpinned() {
    let Some((_, rootfs)) = pinned() else { return };
    if !bootable() {
        return;
    }
    // Trailing bytes change the hash but not the filesystem: a different, bootable image.
    let tmp = tempfile::tempdir().unwrap();
    let copy = tmp.path().join("other.erofs");
    let mut bytes = std::fs::read(&rootfs).unwrap();
    bytes.extend_from_slice(&[0u8; 4096]);
    std::fs::write(&copy, bytes).unwrap();
    let vmm = boot_and_shut_down(&["--rootfs", copy.to_str().unwrap()], &[]);
    let m = first_host_event!(vmm, Measurements);
    assert!(!m.rootfs.pinned);
    assert!(m.kernel.pinned);
}

#[test]
fn a_state_disk_is_created_formatted_measured_and_mounted() {
    if !can_boot() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let disk = tmp.path().join("state.img");
    let vmm = boot_and_shut_down(&["--state", disk.to_str().unwrap()], &[]);
    let state = first_host_event!(vmm, Measurements)
        .state
        .expect("a state disk is measured");
    assert!(state.created);
    assert_eq!(state.size_bytes, 256 << 20);
    assert_eq!(state.chunked_sha256.len(), 64);
    assert!(
        first_host_event!(vmm, VmConfig)
            .settings
            .iter()
            .any(|s| s == "BERM_STATE=vdb")
    );
}

#[test]
fn a_state_disk_claiming_an_absurd_size_is_refused_with_exit_5_and_left_as_it_is() {
    if pinned().is_none() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let disk = tmp.path().join("state.img");
    berm_vmm::state::prepare(&disk).unwrap();
    // What a guest could write: s_blocks_count (low and, with INCOMPAT_64BIT, high word)
    // claiming 2^64 - 1 blocks.
    let head = {
        use std::io::{Read, Seek, Write};
        let mut file = std::fs::File::options()
            .read(true)
            .write(true)
            .open(&disk)
            .unwrap();
        let mut head = vec![0u8; 4096];
        file.read_exact(&mut head).unwrap();
        head[1024 + 0x04..1024 + 0x08].copy_from_slice(&u32::MAX.to_le_bytes());
        head[1024 + 0x60] |= 0x80;
        head[1024 + 0x150..1024 + 0x154].copy_from_slice(&u32::MAX.to_le_bytes());
        file.rewind().unwrap();
        file.write_all(&head).unwrap();
        head
    };
    let before = std::fs::metadata(&disk).unwrap();
    let mut vmm = Vmm::start(&["--state", disk.to_str().unwrap()], &[]);
    assert_eq!(vmm.wait(Duration::from_secs(60)), 5, "{}", vmm.stderr());
    let message = first_host_event!(vmm, Exit).message;
    assert!(message.contains("left as it is"), "{message}");
    assert!(
        host_event!(vmm.host_events(), HostSandbox).is_empty(),
        "no hypervisor may start: {}",
        vmm.stderr()
    );
    let after = std::fs::metadata(&disk).unwrap();
    assert_eq!(after.len(), before.len());
    assert_eq!(after.modified().unwrap(), before.modified().unwrap());
    let mut now = vec![0u8; 4096];
    std::io::Read::read_exact(&mut std::fs::File::open(&disk).unwrap(), &mut now).unwrap();
    assert_eq!(now, head);
}

/// Copies the pinned artifacts into a private store, tampering with one of them.
fn tampered_store(which: &str) -> Option<tempfile::TempDir> {
    let (kernel, rootfs) = pinned()?;
    let store_dir = tempfile::tempdir().unwrap();
    let store = ArtifactStore::at(store_dir.path());
    let k = store.kernel(&KernelPins::compiled_in().unwrap().image.sha256);
    let r = store.rootfs(&RootfsPins::compiled_in().unwrap().image.sha256);
    for (from, to) in [(&kernel, &k), (&rootfs, &r)] {
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(from, to).unwrap();
    }
    let victim = if which == "kernel" { &k } else { &r };
    let mut bytes = std::fs::read(victim).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x01;
    std::fs::write(victim, bytes).unwrap();
    Some(store_dir)
}

#[test]
fn a_tampered_kernel_or_rootfs_is_refused_before_boot() {
    for which in ["kernel", "rootfs"] {
        let Some(store) = tampered_store(which) else {
            return;
        };
        let mut vmm = Vmm::start(&[], &[("BERM_VM_ARTIFACTS", store.path())]);
        let code = vmm.wait(Duration::from_secs(30));
        assert_eq!(code, 4, "{which}: {}", vmm.stderr());
        let exit: ExitLine = first_host_event!(vmm, Exit);
        assert_eq!(exit.status, "pin_mismatch");
        assert!(exit.message.contains(&format!("the {which}")), "{exit:?}");
        assert!(
            host_event!(vmm.host_events(), Endpoints).is_empty(),
            "nothing may start: {}",
            vmm.stderr()
        );
        assert!(!vmm.run_dir.exists(), "not even the run dir");
    }
}

#[test]
fn missing_artifacts_name_the_build_scripts() {
    let empty = tempfile::tempdir().unwrap();
    let mut vmm = Vmm::start(&[], &[("BERM_VM_ARTIFACTS", empty.path())]);
    assert_eq!(vmm.wait(Duration::from_secs(30)), 3, "{}", vmm.stderr());
    let message = first_host_event!(vmm, Exit).message;
    assert!(
        message.contains("the pinned kernel is missing"),
        "{message}"
    );
    assert!(
        message.contains("berm vm install")
            && message.contains("scripts/build-kernel.sh")
            && message.contains("scripts/build-rootfs.sh"),
        "{message}"
    );
}

#[test]
fn guest_setting_injection_is_refused_before_boot() {
    if pinned().is_none() {
        return;
    }
    for (arg, why) in [
        ("X=1\" lsm=\"yama", "a double quote"),
        ("X=1 init=/bin/sh", "whitespace"),
        ("X=1\tlsm=yama", "whitespace"),
        ("X=\\\"", "a backslash"),
        ("X=a\u{7}", "a control character"),
        ("init=/bin/sh", "not an uppercase identifier"),
        ("lsm=capability,yama", "not an uppercase identifier"),
        ("BERM_STATE=vda", "set by berm-vmm itself"),
    ] {
        let (vmm, message) = refused_before_boot(&["--env", arg]);
        assert!(message.contains(why), "{arg:?}: {message}");
        assert!(
            host_event!(vmm.host_events(), Endpoints).is_empty(),
            "{arg:?} must be refused before anything starts"
        );
    }
    let many: Vec<String> = (0..20)
        .flat_map(|i| ["--env".to_owned(), format!("S{i}=1")])
        .collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    let (_, message) = refused_before_boot(&many);
    assert!(message.contains("at most 20"), "{message}");
    let long = format!("X={}", "v".repeat(1500));
    let (_, message) = refused_before_boot(&["--env", &long]);
    assert!(message.contains("2048"), "{message}");
}

/// Runs berm-vmm with `args`, which it must refuse with exit code 5 (`refused`), and
/// returns the run and its `exit` line's message.
fn refused_before_boot(args: &[&str]) -> (Vmm, String) {
    let vmm = Vmm::refused(args, Duration::from_secs(30));
    let message = first_host_event!(vmm, Exit).message;
    (vmm, message)
}

/// libkrun on this host: on hardware KVM the full boot/shutdown contract; on kvm_pvm as far
/// as PVM allows, saying plainly what could not be checked.
#[test]
fn libkrun_smoke() {
    if pinned().is_none() {
        return;
    }
    let detection = Detection::probe();
    if !detection.kvm_usable {
        require_or_skip("/dev/kvm is not usable, so libkrun cannot run at all");
        return;
    }
    if detection.krun_runs_user_space() {
        boot_and_shut_down(&["--hypervisor", "krun"], &[]);
        eprintln!("libkrun: full boot, status and clean shutdown checked on hardware KVM");
        return;
    }
    let mut vmm = Vmm::start(&["--hypervisor", "krun", "--boot-timeout", "45"], &[]);
    let code = vmm.wait(Duration::from_secs(90));
    // Everything berm-vmm does before the hypervisor ran, and libkrun itself started.
    assert!(
        first_host_event!(vmm, Hypervisor)
            .reason
            .contains("kvm_pvm"),
        "{}",
        vmm.stderr()
    );
    let m = first_host_event!(vmm, Measurements);
    assert!(m.kernel.pinned);
    assert!(m.kernel.cmdline.contains(berm_vmm::run::PVM_CMDLINE));
    assert!(
        code == 8 || code == 12,
        "on kvm_pvm the guest cannot reach berm-init, so boot_timeout or crashed; got {code}: {}",
        vmm.stderr()
    );
    let console = std::fs::read_to_string(vmm.run_dir.join("console.log")).unwrap_or_default();
    let log = std::fs::read_to_string(vmm.run_dir.join("hypervisor.log")).unwrap_or_default();
    // The libkrun child confined itself just before krun_start_enter (its stderr is this log).
    let confined = log.lines().filter_map(|l| VmmLine::parse(l).ok()).any(|l| {
        matches!(l, VmmLine::Host(HostEvent::ChildSandbox(c))
            if c.process == "krun-enter"
                && c.report.landlock == Landlock::FullyEnforced
                && c.report.seccomp == "allow_list")
    });
    assert!(
        confined,
        "no child_sandbox line from the libkrun child:\n{log}"
    );
    // berm-vmm's line carries the child's own measurement of itself, sent once confined.
    let sandbox = first_host_event!(vmm, HostSandbox);
    let krun = common::child_named(&sandbox.children, "berm-vmm krun-enter");
    assert_eq!(krun.measured_by, "self_report", "{krun:?}");
    assert_eq!(krun.landlock, Landlock::FullyEnforced, "{krun:?}");
    assert!(krun.no_new_privs, "{krun:?}");
    assert_eq!(krun.seccomp_mode, "filter", "{krun:?}");
    assert_eq!(krun.seccomp_filters, 1, "{krun:?}");
    let kernel_printed = console.contains("Linux version");
    let vsock_up = console.contains("PF_VSOCK");
    eprintln!(
        "libkrun smoke on kvm_pvm: libkrun started and the VM ended with berm-vmm exit {code} ({}).\n  \
         kernel reached its console: {kernel_printed}; vsock device registered: {vsock_up}.\n  \
         libkrun said: {}\n  \
         NOT CHECKED HERE: berm-init under libkrun (PVM faults at guest user space), and {}",
        first_host_event!(vmm, Exit).status,
        log.lines()
            .find(|l| l.contains("ERROR"))
            .unwrap_or("(nothing)"),
        if kernel_printed {
            "nothing else"
        } else {
            "the kernel boot itself: KVM stopped the guest before its console came up, which fits \
             docs/design/microvm-findings.md (under PVM a stock kernel needs its INT3 alternatives \
             self-test skipped; berm's pinned kernel is unpatched Debian source)"
        }
    );
}

#[test]
fn sigterm_stops_the_guest_in_order() {
    if !can_boot() {
        return;
    }
    let mut vmm = Vmm::start(&[], &[]);
    let deadline = Instant::now() + BOOT;
    let mut control = GuestConnection::connect(
        &vmm.run_dir.join("control.sock"),
        Service::Control,
        deadline,
    )
    .unwrap();
    control
        .wait_for(deadline, |l| matches!(l.event, Event::BootComplete(_)))
        .unwrap();
    drop(control);
    berm_fixtures::terminate(&vmm.child);
    assert_eq!(vmm.wait(BOOT), 0, "{}", vmm.stderr());
    assert_eq!(host_event!(vmm.host_events(), StopSignal).len(), 1);
    let off = guest_event!(vmm.guest_lines(), PowerOff);
    assert_eq!((off[0].reason.as_str(), off[0].exit_code), ("requested", 0));
}
