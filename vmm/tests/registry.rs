//! Booting from a store that came from a registry: the real pinned artifacts of the host's
//! guest pushed with `berm vm push` to Debian's docker-registry on loopback, installed with
//! `berm vm install --from oci://…` into an empty store under a temporary HOME, then the notes
//! app booted from that store by `berm-vmm run` and answering MCP on `rpc-0.sock`.
//!
//! It needs the pinned artifacts in the local store (scripts/test-vm), berm built beside
//! berm-vmm (`cargo build -p berm-cli`), the notes app folder (scripts/build-apps.sh) and a
//! host that boots the guest; otherwise it prints `SKIPPED: <why>` (a failure under
//! `BERM_VM_REQUIRE=1`).

mod common;
#[path = "../../oci/tests/support/registry.rs"]
mod registry;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Instant;

use berm_vm_protocol::AppReady;
use common::{
    BOOT, Mcp, READY, Vmm, bootable, first_host_event, guest_event_where, pinned, require_or_skip,
};
use serde_json::{Value, json};

/// `berm ARGS` with `envs`, nothing from the caller's mirror variable.
fn berm(binary: &Path, args: &[&str], envs: &[(&str, &Path)]) -> Output {
    let mut command = Command::new(binary);
    command
        .args(args)
        .env_remove("BERM_VM_MIRROR")
        .stdin(Stdio::null());
    for (k, v) in envs {
        command.env(k, v);
    }
    let out = command.output().unwrap();
    assert!(
        out.status.success(),
        "berm {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// What the test needs beside the artifacts, or `None` after a SKIPPED line.
fn berm_and_notes() -> Option<(PathBuf, PathBuf)> {
    let berm = Path::new(env!("CARGO_BIN_EXE_berm-vmm")).with_file_name("berm");
    let notes = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/apps/notes");
    if !berm.exists() {
        require_or_skip(&format!(
            "{} is not built (cargo build -p berm-cli)",
            berm.display()
        ));
        return None;
    }
    if !notes.join("berm.toml").exists() {
        require_or_skip(&format!(
            "{} is missing (scripts/build-apps.sh)",
            notes.display()
        ));
        return None;
    }
    Some((berm, notes))
}

#[test]
fn boots_the_notes_app_from_a_store_installed_from_a_loopback_registry() {
    let Some((kernel, rootfs)) = pinned() else {
        return;
    };
    if !bootable() {
        return;
    }
    let Some((berm_bin, notes)) = berm_and_notes() else {
        return;
    };
    let source = berm_pins::ArtifactStore::from_env().expect("HOME is set");
    let registry = registry::TestRegistry::start();
    let repository = registry.reference("berm/vm");
    berm(
        &berm_bin,
        &["vm", "push", &repository],
        &[("BERM_VM_ARTIFACTS", source.root())],
    );

    // An empty store under a temporary HOME: nothing there but what the install writes.
    let home = tempfile::tempdir().unwrap();
    let store = home.path().join(".cache/berm/vm");
    let env = [
        ("HOME", home.path()),
        ("BERM_VM_ARTIFACTS", store.as_path()),
    ];
    let from = format!("oci://{repository}");
    let started = Instant::now();
    let out = berm(
        &berm_bin,
        &["vm", "install", "--from", &from, "--json"],
        &env,
    );
    let took = started.elapsed();
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3, "{lines:?}");
    let mut installed = Vec::new();
    for (line, pinned) in lines.iter().zip([&kernel, &rootfs]) {
        assert_eq!(line["status"], "installed", "{line}");
        let path = PathBuf::from(line["path"].as_str().unwrap());
        assert!(path.starts_with(&store), "{line}");
        assert_eq!(
            std::fs::read(&path).unwrap(),
            std::fs::read(pinned).unwrap()
        );
        installed.push(path);
    }
    eprintln!(
        "berm vm install --from oci://127.0.0.1 (loopback docker-registry, debug build): {took:?}"
    );

    // Boot from that store only, and answer MCP. The host's tools stay where the real HOME
    // has them (scripts/test-vm puts vhost-device-vsock under ~/.cache/berm/tools).
    let vsock = berm_vmm::detect::Detection::probe().0.vhost_device_vsock;
    let mut env = env.to_vec();
    if let Some(vsock) = &vsock {
        env.push(("BERM_VHOST_DEVICE_VSOCK", vsock));
    }
    let state = home.path().join("state.img");
    let started = Instant::now();
    let mut vmm = Vmm::start(
        &[
            "--app",
            notes.to_str().unwrap(),
            "--state",
            state.to_str().unwrap(),
        ],
        &env,
    );
    vmm.wait_line(
        "app_ready of notes",
        BOOT + READY,
        guest_event_where!(AppReady, |e: &AppReady| e.app == "notes"),
    );
    let ready = started.elapsed();
    let measured = first_host_event!(vmm, Measurements);
    let booted = [
        (measured.kernel.pinned, &measured.kernel.path),
        (measured.rootfs.pinned, &measured.rootfs.path),
    ];
    for ((pinned, booted), path) in booted.into_iter().zip(&installed) {
        assert!(pinned, "{measured:?}");
        assert_eq!(
            booted, path,
            "booted from the installed store: {measured:?}"
        );
    }
    let mut mcp = Mcp::connect(&vmm.run_dir.join("rpc-0.sock"));
    let (out, is_error) = mcp.call(
        "notes_add",
        json!({"title": "from-a-registry", "text": "installed by digest"}),
    );
    assert!(!is_error, "{out}");
    let (list, is_error) = mcp.call("notes_list", json!({}));
    assert!(!is_error, "{list}");
    assert!(list.contains("from-a-registry"), "{list}");
    drop(mcp);
    vmm.shut_down();
    eprintln!("booted from the registry-installed store: notes app_ready after {ready:?}");
}
