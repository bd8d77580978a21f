//! Crash consistency of the state disk: berm-vmm killed with SIGKILL at a random moment while
//! a client streams `notes_add` and `notes_delete` calls to an app in the guest (its hypervisor
//! children die with it, `PR_SET_PDEATHSIG`), then booted again on the same disk, again and
//! again; after every boot, every acknowledged write is there whole, every acknowledged delete
//! stays deleted, and what was in flight is whole or absent (`berm_fixtures::crash` says
//! exactly what is checked). For the guest this is a power cut: its page cache goes with the
//! hypervisor, so only what its bermd synced to the disk is kept.
//!
//! Like vm.rs, it prints `SKIPPED: <why>` where nothing can boot the guest, and fails instead
//! under `BERM_VM_REQUIRE=1`. 3 kills by default (each is a boot); `BERM_CRASH_KILLS=N` for a
//! long run, `BERM_CRASH_SEED` to replay one.

mod common;

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::time::Duration;

use berm::GuestArch;
use berm_fixtures::crash::{KillRun, kills, sigkill};
use berm_vm_protocol::AppReady;
use common::{BOOT, READY, Vmm, app_folder, guest_event_where, scratch_to_boot};

/// A kill lands within this long of the first acknowledged call after a boot.
const MAX_DELAY: Duration = Duration::from_millis(500);

const NOTES_TOML: &str = "name = \"notes\"\n[limits]\ncpu = 0.5\nmemory_mb = 128\npids = 32\n\n\
     [[program]]\nname = \"notes\"\nwasm = \"notes.wasm\"\ngrants = [\"kv\"]\n";

/// Boots berm-vmm with `args` and waits for the notes app to be ready.
fn boot(args: &[&str]) -> Vmm {
    let mut vmm = Vmm::start(args, &[]);
    vmm.wait_line(
        "app_ready of notes",
        BOOT + READY,
        guest_event_where!(AppReady, |e: &AppReady| e.app == "notes"),
    );
    vmm
}

/// Whether any process has `file` open (a hypervisor child still dying, say).
fn held_open(file: &Path) -> bool {
    let Ok(processes) = std::fs::read_dir("/proc") else {
        return false;
    };
    processes.flatten().any(|process| {
        std::fs::read_dir(process.path().join("fd"))
            .into_iter()
            .flatten()
            .flatten()
            .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|target| target == file))
    })
}

#[test]
fn acknowledged_kv_writes_survive_sigkill_of_berm_vmm() {
    let Some(tmp) = scratch_to_boot(GuestArch::HOST) else {
        return;
    };
    let app = app_folder(tmp.path(), "notes", &["notes"], NOTES_TOML);
    let disk = tmp.path().join("state.img");
    let args = [
        "--app",
        app.to_str().unwrap(),
        "--state",
        disk.to_str().unwrap(),
    ];
    let mut run = KillRun::new("state disk");
    for _ in 0..kills(3) {
        let mut vmm = boot(&args);
        let client = run.check(&vmm.run_dir.join("rpc-0.sock"));
        let pid = vmm.child.id();
        run.write_until_cut(client, MAX_DELAY, move || sigkill(pid));
        let status = vmm.child.wait().unwrap();
        assert_eq!(
            status.signal(),
            Some(9),
            "berm-vmm ended with {status} before the kill: {}",
            vmm.stderr()
        );
        // The next boot must not share the disk with a hypervisor that is still going.
        let real = std::fs::canonicalize(&disk).unwrap();
        berm_fixtures::wait_until(
            Duration::from_secs(60),
            Duration::from_millis(50),
            || !held_open(&real),
            || format!("{} is still open after berm-vmm was killed", disk.display()),
        );
    }
    let mut vmm = boot(&args);
    drop(run.check(&vmm.run_dir.join("rpc-0.sock")));
    vmm.shut_down();
    println!("{}", run.summary());
}
