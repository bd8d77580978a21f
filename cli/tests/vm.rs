//! `berm vm install`, `berm doctor` and `berm attest` through the real binary.
//!
//! The artifacts served are the real pinned ones, taken from the artifact store
//! (`scripts/test-vm` builds them): from a directory, and from a loopback HTTP server this file
//! starts — honest, tampered, truncated, oversized, missing. The attest test boots a real VM
//! through the workspace's berm-vmm. A test that cannot run prints `SKIPPED: <why>`; with
//! `BERM_VM_REQUIRE=1` it fails instead.
//!
//! `berm vm push` and `berm vm install --from oci://…` run against a real docker-registry on
//! loopback (oci/tests/support/registry.rs). The refusals that need no artifacts (a missing
//! blob, an unreachable registry, the default and `$BERM_VM_MIRROR`) always run; the same
//! refusals with generated artifacts and test pins are berm-oci's (oci/tests/vm.rs), since
//! this binary only knows the real pins.

#[path = "../../oci/tests/support/registry.rs"]
mod registry;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use berm_pins::{ArtifactKind, ArtifactStore, KernelPins, RootfsPins, Sha256Hex};
use berm_vm_protocol::{Event, GuestLine, HostEvent, VmmLine};

fn require_or_skip(why: &str) {
    if std::env::var_os("BERM_VM_REQUIRE").is_some_and(|v| v == "1") {
        panic!("BERM_VM_REQUIRE=1 but this test cannot run: {why}");
    }
    eprintln!("SKIPPED: {why}");
}

fn pin(kind: ArtifactKind) -> (Sha256Hex, u64) {
    let image = match kind {
        ArtifactKind::Kernel => KernelPins::compiled_in().unwrap().image,
        ArtifactKind::Rootfs => RootfsPins::compiled_in().unwrap().image,
    };
    (image.sha256, image.size)
}

/// The installed store holding the pinned artifacts, or `None` after a SKIPPED line.
fn source_store() -> Option<ArtifactStore> {
    let store = ArtifactStore::from_env().expect("HOME is set");
    for kind in ArtifactKind::ALL {
        let path = kind.path_in(&store, &pin(kind).0);
        if !path.exists() {
            require_or_skip(&format!(
                "{} is not installed; run scripts/test-vm",
                path.display()
            ));
            return None;
        }
    }
    Some(store)
}

fn berm(store: &Path, args: &[&str]) -> Output {
    berm_with(store, args, None)
}

/// `berm ARGS` with the artifact store at `store` and `$BERM_VM_MIRROR` set to `mirror` (or
/// unset, whatever the caller's environment says).
fn berm_with(store: &Path, args: &[&str], mirror: Option<&str>) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_berm"));
    command
        .args(args)
        .env("BERM_VM_ARTIFACTS", store)
        .env("BERM_HOME", store.join("no-bermd"))
        .env_remove("BERM_VM_MIRROR")
        .stdin(Stdio::null());
    if let Some(mirror) = mirror {
        command.env("BERM_VM_MIRROR", mirror);
    }
    command.output().unwrap()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Every file under `dir`, relative.
fn files(dir: &Path) -> Vec<PathBuf> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.map_while(Result::ok) {
            let path = entry.path();
            if path.is_dir() {
                walk(root, &path, out);
            } else {
                out.push(path.strip_prefix(root).unwrap().to_owned());
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

/// A temporary directory (kept alive by the caller) and an artifact store path in it that
/// does not exist yet.
fn empty_store() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    (tmp, store)
}

/// Where the pinned kernel goes in the artifact store at `store`.
fn pinned_kernel_in(store: &Path) -> PathBuf {
    ArtifactKind::Kernel.path_in(&ArtifactStore::at(store), &pin(ArtifactKind::Kernel).0)
}

/// `berm vm install --from FROM` into `store` succeeds and installs `source`'s pinned files.
fn installs(store: &Path, source: &ArtifactStore, from: &str) {
    let out = berm(store, &["vm", "install", "--from", from]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_installed(store, source);
}

fn assert_installed(store: &Path, source: &ArtifactStore) {
    for kind in ArtifactKind::ALL {
        let (sha, _) = pin(kind);
        let installed = kind.path_in(&ArtifactStore::at(store), &sha);
        assert_eq!(
            std::fs::read(&installed).unwrap(),
            std::fs::read(kind.path_in(source, &sha)).unwrap(),
            "{}",
            installed.display()
        );
    }
    assert_eq!(
        files(store).len(),
        2,
        "only the two artifacts: {:?}",
        files(store)
    );
}

/// How the loopback server misbehaves.
#[derive(Clone, Copy)]
enum Serve {
    Honest,
    /// One byte of the kernel flipped, same length.
    Tampered,
    /// The full Content-Length announced, half the kernel sent, then the connection closed.
    Truncated,
    /// One byte more than the pin, announced and sent.
    Oversized,
    /// Half the kernel sent, then the connection held open (until the test kills berm).
    Stall,
}

/// A loopback HTTP/1.1 server over the store layout: `/kernel/<sha>/vmlinux`, `/rootfs/...`.
/// Serves at most `limit` requests, then its thread ends.
fn serve(source: ArtifactStore, mode: Serve, limit: usize) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming().take(limit) {
            let Ok(stream) = stream else { continue };
            let _ = answer(stream, &source, mode);
        }
    });
    base
}

fn answer(mut stream: TcpStream, source: &ArtifactStore, mode: Serve) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut request = String::new();
    reader.read_line(&mut request)?;
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header)? == 0 || header == "\r\n" {
            break;
        }
    }
    let path = request.split(' ').nth(1).unwrap_or("/");
    let file = source.root().join(path.trim_start_matches('/'));
    let Ok(mut body) = std::fs::read(&file) else {
        return stream.write_all(
            b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        );
    };
    let kernel = path.starts_with("/kernel/");
    let mut announced = body.len();
    match mode {
        Serve::Honest => {}
        Serve::Tampered if kernel => body[1000] ^= 0x01,
        Serve::Truncated if kernel => body.truncate(body.len() / 2),
        Serve::Oversized if kernel => {
            body.push(0);
            announced = body.len();
        }
        _ => {}
    }
    stream.write_all(
        format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: {announced}\r\nConnection: close\r\n\r\n"
        )
        .as_bytes(),
    )?;
    if matches!(mode, Serve::Stall) && kernel {
        stream.write_all(&body[..body.len() / 2])?;
        stream.flush()?;
        std::thread::sleep(Duration::from_secs(30));
        return Ok(());
    }
    stream.write_all(&body)?;
    stream.flush()
}

#[test]
fn installs_from_a_directory_and_then_has_nothing_to_do() {
    let Some(source) = source_store() else { return };
    let (_tmp, store) = empty_store();
    let out = berm(
        &store,
        &["vm", "install", "--from", source.root().to_str().unwrap()],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_installed(&store, &source);
    // Not a terminal: plain lines, one per step, no progress bar escapes.
    let text = stderr(&out);
    assert!(text.contains("verified and installed"), "{text}");
    assert!(!text.contains('\u{1b}'), "{text}");
    let again = berm(
        &store,
        &["vm", "install", "--from", source.root().to_str().unwrap()],
    );
    assert!(again.status.success());
    assert_eq!(stderr(&again).matches("already installed").count(), 2);
}

#[test]
fn a_tampered_file_in_a_directory_is_refused_and_nothing_is_left() {
    let Some(source) = source_store() else { return };
    let tmp = tempfile::tempdir().unwrap();
    // The side-by-side layout: vmlinux and rootfs.erofs in one folder.
    let dir = tmp.path().join("flat");
    std::fs::create_dir(&dir).unwrap();
    for kind in ArtifactKind::ALL {
        std::fs::copy(kind.path_in(&source, &pin(kind).0), dir.join(kind.file())).unwrap();
    }
    let mut rootfs = std::fs::read(dir.join("rootfs.erofs")).unwrap();
    rootfs[4096] ^= 0x80;
    std::fs::write(dir.join("rootfs.erofs"), rootfs).unwrap();
    let store = tmp.path().join("store");
    let out = berm(&store, &["vm", "install", "--from", dir.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let text = stderr(&out);
    assert!(text.contains("installing the rootfs failed"), "{text}");
    assert!(text.contains("refused as tampered"), "{text}");
    // The kernel was fine and stays; of the rootfs nothing remains, not even a partial file.
    let left = files(&store);
    assert_eq!(left.len(), 1, "{left:?}");
    assert!(left[0].starts_with("kernel"), "{left:?}");
}

#[test]
fn installs_from_a_loopback_server_with_a_url_template() {
    let Some(source) = source_store() else { return };
    let base = serve(source.clone(), Serve::Honest, 2);
    let (_tmp, store) = empty_store();
    let template = format!("{base}/{{kind}}/{{sha256}}/{{file}}");
    let started = Instant::now();
    let out = berm(&store, &["vm", "install", "--from", &template]);
    let took = started.elapsed();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_installed(&store, &source);
    eprintln!("berm vm install from a loopback server: {took:?} (15.9 MB, both artifacts)");
}

#[test]
fn a_base_url_means_the_store_layout() {
    let Some(source) = source_store() else { return };
    let base = serve(source.clone(), Serve::Honest, 2);
    let (_tmp, store) = empty_store();
    installs(&store, &source, &format!("{base}/"));
}

#[test]
fn tampered_truncated_and_oversized_downloads_are_refused_and_leave_nothing() {
    let Some(source) = source_store() else { return };
    for (mode, expected) in [
        (Serve::Tampered, "refused as tampered"),
        (Serve::Truncated, "installing the kernel failed"),
        (Serve::Oversized, "announces"),
    ] {
        let base = serve(source.clone(), mode, 1);
        let (_tmp, store) = empty_store();
        let out = berm(&store, &["vm", "install", "--from", &base]);
        let text = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{text}");
        assert!(text.contains(expected), "{text}");
        assert_eq!(files(&store), Vec::<PathBuf>::new(), "{text}");
        // And berm-vmm's store path for the kernel does not exist.
        let kernel = pinned_kernel_in(&store);
        assert!(!kernel.exists());
    }
}

#[test]
fn a_missing_artifact_names_the_url_and_status() {
    let Some(source) = source_store() else { return };
    let base = serve(source, Serve::Honest, 1);
    let tmp = tempfile::tempdir().unwrap();
    let out = berm(
        &tmp.path().join("store"),
        &[
            "vm",
            "install",
            "--from",
            &format!("{base}/nowhere/{{sha256}}"),
        ],
    );
    let text = stderr(&out);
    assert_eq!(out.status.code(), Some(2));
    assert!(text.contains("404"), "{text}");
    assert!(text.contains("/nowhere/"), "{text}");
}

#[test]
fn a_download_killed_midway_leaves_no_artifact_and_the_next_install_restarts() {
    let Some(source) = source_store() else { return };
    let (_tmp, store) = empty_store();
    let kernel = pinned_kernel_in(&store);
    let partial = kernel.with_extension("partial");
    let stalling = serve(source.clone(), Serve::Stall, 1);
    let mut child = Command::new(env!("CARGO_BIN_EXE_berm"))
        .args(["vm", "install", "--from", &stalling])
        .env("BERM_VM_ARTIFACTS", &store)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Wait until half the kernel has been written, then kill berm as a power cut would.
    let deadline = Instant::now() + Duration::from_secs(30);
    let half = pin(ArtifactKind::Kernel).1 / 2;
    while std::fs::metadata(&partial).map(|m| m.len()).unwrap_or(0) < half {
        assert!(Instant::now() < deadline, "the download did not progress");
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        !kernel.exists(),
        "a killed download must never leave the artifact's name"
    );
    assert!(partial.exists());
    // The next install starts the partial file over and ends with exactly the pinned files.
    installs(&store, &source, &serve(source.clone(), Serve::Honest, 2));
}

#[test]
fn an_interrupted_download_restarts_cleanly() {
    let Some(source) = source_store() else { return };
    let (_tmp, store) = empty_store();
    // What a killed install leaves: a partial file beside where the kernel goes.
    let kernel = pinned_kernel_in(&store);
    std::fs::create_dir_all(kernel.parent().unwrap()).unwrap();
    std::fs::write(kernel.with_extension("partial"), vec![0xee; 5 << 20]).unwrap();
    // A truncated download first (nothing usable), then an honest one.
    let bad = serve(source.clone(), Serve::Truncated, 1);
    assert_eq!(
        berm(&store, &["vm", "install", "--from", &bad])
            .status
            .code(),
        Some(2)
    );
    installs(&store, &source, &serve(source.clone(), Serve::Honest, 2));
}

#[test]
fn doctor_names_each_gap_with_a_fix() {
    let tmp = tempfile::tempdir().unwrap();
    let out = berm(&tmp.path().join("empty-store"), &["doctor", "--json"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let checks: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<&str> = checks
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "kvm",
            "sandbox",
            "artifacts",
            "artifacts",
            "qemu",
            "qemu",
            "vhost",
            "wasm32",
            "bermd"
        ]
    );
    for check in checks.as_array().unwrap() {
        if check["status"] != "ok" {
            let fix = check["fix"].as_str().unwrap_or_default();
            assert!(!fix.is_empty() && !fix.contains('\n'), "{check}");
        }
    }
    // The host's guest architecture first: missing is a failure; the other's only a warning.
    let host_arch = std::env::consts::ARCH;
    for (artifacts, status) in [(&checks[2], "fail"), (&checks[3], "warn")] {
        assert_eq!(artifacts["status"], status, "{artifacts}");
        assert!(
            artifacts["fix"]
                .as_str()
                .unwrap()
                .contains("berm vm install --arch"),
            "{artifacts}"
        );
    }
    assert!(
        checks[2]["detail"]
            .as_str()
            .unwrap()
            .starts_with(&format!("{host_arch}: ")),
        "{}",
        checks[2]
    );
    // Where QEMU is installed, its version and the suite it came from are named.
    for qemu in [&checks[4], &checks[5]] {
        let detail = qemu["detail"].as_str().unwrap();
        if qemu["status"] == "ok" {
            assert!(detail.contains("QEMU emulator version"), "{qemu}");
            assert!(detail.contains("from "), "{qemu}");
        }
    }
    assert_eq!(
        checks[8]["status"], "fail",
        "no bermd runs on this BERM_HOME"
    );
    let kvm = &checks[0];
    if Path::new("/sys/module/kvm_pvm").exists() {
        assert_eq!(kvm["status"], "warn");
        assert!(kvm["detail"].as_str().unwrap().contains("PVM"), "{kvm}");
    }
    // With the artifacts installed the artifacts check passes.
    if let Some(source) = source_store() {
        let out = berm(source.root(), &["doctor", "--json"]);
        let checks: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(checks[2]["status"], "ok", "{}", checks[2]);
    }
}

/// Boots a real VM with berm-vmm (the workspace's build, beside this binary), then
/// `berm attest RUN_DIR` and `berm attest verify`, honest and tampered.
#[test]
fn attest_a_real_run_and_verify_it_offline() {
    let Some(source) = source_store() else { return };
    let vmm = Path::new(env!("CARGO_BIN_EXE_berm")).with_file_name("berm-vmm");
    if !vmm.exists() {
        return require_or_skip(&format!(
            "{} is not built (cargo build -p berm-vmm)",
            vmm.display()
        ));
    }
    let tmp = tempfile::tempdir().unwrap();
    let run_dir = tmp.path().join("run");
    let mut child = Command::new(&vmm)
        .args(["run", "--run-dir"])
        .arg(&run_dir)
        .env("BERM_VM_ARTIFACTS", source.root())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait for boot_complete on berm-vmm's stderr, then shut the guest down with SIGTERM.
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut seen = Vec::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        seen.push(line.clone());
        match VmmLine::parse(&line) {
            Ok(VmmLine::Guest(GuestLine {
                event: Event::BootComplete(_),
                ..
            })) => break,
            Ok(VmmLine::Host(HostEvent::Exit(exit))) => {
                let _ = child.wait();
                if exit.status == "no_hypervisor" {
                    return require_or_skip("no hypervisor can boot the guest here");
                }
                panic!("berm-vmm ended before boot_complete:\n{}", seen.join("\n"));
            }
            _ => {}
        }
    }
    // SIGTERM asks berm-vmm to shut the guest down in order (docs/vm.md).
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    for line in lines.map_while(Result::ok) {
        seen.push(line);
    }
    assert_eq!(child.wait().unwrap().code(), Some(0), "{}", seen.join("\n"));

    let out = berm(source.root(), &["attest", run_dir.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("verifies against the compiled-in pins"),
        "{}",
        stderr(&out)
    );
    let record_path = tmp.path().join("record.json");
    std::fs::write(&record_path, &out.stdout).unwrap();
    let started = Instant::now();
    let verified = berm(
        source.root(),
        &["attest", "verify", record_path.to_str().unwrap()],
    );
    let took = started.elapsed();
    assert!(
        verified.status.success(),
        "{}",
        String::from_utf8_lossy(&verified.stdout)
    );
    eprintln!(
        "berm attest: record {} bytes; berm attest verify (whole process) {took:?}",
        out.stdout.len() - 1
    );

    // The signed record berm-vmm wrote verifies with the host's public key (`berm attest
    // key`, the same default key berm-vmm used) and is refused with any other.
    let envelope = run_dir.join("record.dsse.json");
    // `berm attest key ARGS`'s public key, written to `file`.
    let public_key = |file: &str, args: &[&str]| {
        let key = berm(source.root(), &[&["attest", "key"], args].concat());
        assert!(key.status.success(), "{}", stderr(&key));
        let public = tmp.path().join(file);
        std::fs::write(&public, &key.stdout).unwrap();
        public
    };
    let verify_with = |public: &Path| {
        let (public, envelope) = (public.to_str().unwrap(), envelope.to_str().unwrap());
        berm(
            source.root(),
            &["attest", "verify", "--key", public, envelope],
        )
    };
    let signed = verify_with(&public_key("host.pub", &[]));
    let said = String::from_utf8_lossy(&signed.stdout).into_owned();
    assert!(signed.status.success(), "{said}");
    assert!(said.contains("signed by the given key"), "{said}");
    let other_key = tmp.path().join("other-key.pem");
    let other_public = public_key("other.pub", &["--key", other_key.to_str().unwrap()]);
    let refused = verify_with(&other_public);
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&refused.stdout).starts_with("signature_invalid:"),
        "{}",
        String::from_utf8_lossy(&refused.stdout)
    );

    // The same record with the host sandbox claimed off, re-sealed: refused with its code.
    let printed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut record = berm_attest::Record::from_value(&printed).unwrap();
    record.host_sandbox.as_mut().unwrap().enabled = false;
    record.seal();
    std::fs::write(&record_path, record.to_value().to_string()).unwrap();
    let refused = berm(
        source.root(),
        &["attest", "verify", "--json", record_path.to_str().unwrap()],
    );
    assert_eq!(refused.status.code(), Some(1));
    let verdict: serde_json::Value = serde_json::from_slice(&refused.stdout).unwrap();
    assert_eq!(
        verdict["problems"][0]["code"], "host_sandbox_disabled",
        "{verdict}"
    );
    // Edited without re-sealing.
    let mut text = String::new();
    std::fs::File::open(&record_path)
        .unwrap()
        .read_to_string(&mut text)
        .unwrap();
    let mut edited =
        berm_attest::Record::from_value(&serde_json::from_str(&text).unwrap()).unwrap();
    edited.host_sandbox.as_mut().unwrap().enabled = true;
    std::fs::write(&record_path, edited.to_value().to_string()).unwrap();
    let edited = berm(
        source.root(),
        &["attest", "verify", record_path.to_str().unwrap()],
    );
    assert_eq!(edited.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&edited.stdout).contains("record_hash_mismatch"),
        "{}",
        String::from_utf8_lossy(&edited.stdout)
    );
}

/// The JSON lines `berm … --json` printed.
fn json_lines(output: &Output) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

#[test]
fn a_registry_without_the_blobs_is_refused_naming_the_digest_as_json() {
    let registry = registry::TestRegistry::start();
    let (tmp, store) = empty_store();
    let from = format!("oci://{}/berm/vm", registry.addr);
    let out = berm(&store, &["vm", "install", "--from", &from, "--json"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let lines = json_lines(&out);
    assert_eq!(lines.len(), 1, "{lines:?}");
    let error = &lines[0];
    let (sha, _) = pin(ArtifactKind::Kernel);
    assert_eq!(error["kind"], "kernel", "{error}");
    assert_eq!(error["arch"], berm_pins::HOST_ARCH);
    assert_eq!(error["sha256"], sha.as_str());
    assert_eq!(error["source"], from.as_str());
    let message = error["error"].as_str().unwrap();
    assert!(
        message.contains("installing the kernel failed"),
        "{message}"
    );
    assert!(message.contains(&format!("sha256:{sha}")), "{message}");
    assert!(message.contains("was not found"), "{message}");
    assert_eq!(berm_fixtures::entries(tmp.path()), Vec::<PathBuf>::new());
}

#[test]
fn an_unreachable_registry_is_refused_and_leaves_nothing() {
    let (tmp, store) = empty_store();
    let port = registry::free_port("127.0.0.1");
    let from = format!("oci://127.0.0.1:{port}/berm/vm");
    let out = berm(&store, &["vm", "install", "--from", &from]);
    let text = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(
        text.contains(&format!("cannot reach registry `127.0.0.1:{port}`")),
        "{text}"
    );
    assert!(text.contains("installing the kernel failed"), "{text}");
    assert_eq!(berm_fixtures::entries(tmp.path()), Vec::<PathBuf>::new());
}

#[test]
fn the_mirror_variable_replaces_the_default_and_from_wins_over_it() {
    let (tmp, store) = empty_store();
    let port = registry::free_port("127.0.0.1");
    let mirror = format!("oci://127.0.0.1:{port}/mirror/vm");
    let install = ["vm", "install", "--json"];
    let out = berm_with(&store, &install, Some(&mirror));
    let error = &json_lines(&out)[0];
    assert_eq!(error["source"], mirror.as_str(), "{error}");
    assert!(
        error["error"]
            .as_str()
            .unwrap()
            .contains(&format!("127.0.0.1:{port}")),
        "{error}"
    );
    // Without the variable, the default repository.
    let out = berm_with(&store, &install, None);
    assert_eq!(json_lines(&out)[0]["source"], berm_pins::DEFAULT_SOURCE);
    // --from wins: an empty directory, named in the refusal.
    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let from = empty.to_str().unwrap();
    let out = berm_with(
        &store,
        &["vm", "install", "--json", "--from", from],
        Some(&mirror),
    );
    let error = &json_lines(&out)[0];
    assert_eq!(error["source"], from, "{error}");
    assert!(
        error["error"].as_str().unwrap().contains("holds neither"),
        "{error}"
    );
    assert!(!store.exists());
}

#[test]
fn push_refuses_what_the_store_does_not_hold() {
    let registry = registry::TestRegistry::start();
    let (_tmp, store) = empty_store();
    let out = berm(&store, &["vm", "push", &registry.reference("berm/vm")]);
    let text = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(text.contains("is not in the artifact store"), "{text}");
    assert!(text.contains("kernel"), "{text}");
}

/// The real pinned artifacts of every architecture the store holds (the host's at least):
/// `berm vm push` each, then `berm vm install --from oci://…` into an empty store, timed, then
/// a tampered kernel blob on the registry's disk refused.
#[test]
fn push_the_pinned_artifacts_and_install_them_from_a_loopback_registry() {
    let Some(source) = source_store() else { return };
    let arches: Vec<&str> = berm_pins::ARCHES
        .into_iter()
        .filter(|arch| {
            let kernel = KernelPins::compiled_in_for(arch).unwrap();
            let rootfs = RootfsPins::compiled_in_for(arch).unwrap();
            source.kernel_for(&kernel).exists() && source.rootfs(&rootfs.image.sha256).exists()
        })
        .collect();
    for arch in berm_pins::ARCHES {
        if !arches.contains(&arch) {
            eprintln!("only {arches:?} installed; {arch} is not pushed or installed here");
        }
    }
    let registry = registry::TestRegistry::start();
    let repository = registry.reference("berm/vm");
    for arch in &arches {
        let out = berm(
            source.root(),
            &["vm", "push", &repository, "--arch", arch, "--json"],
        );
        assert!(out.status.success(), "{}", stderr(&out));
        let pushed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let kernel = KernelPins::compiled_in_for(arch).unwrap().image;
        let rootfs = RootfsPins::compiled_in_for(arch).unwrap().image;
        assert_eq!(pushed["kernel"]["sha256"], kernel.sha256.as_str());
        assert_eq!(pushed["rootfs"]["sha256"], rootfs.sha256.as_str());
        let tag = format!(
            "{arch}-{}-{}",
            &kernel.sha256.as_str()[..12],
            &rootfs.sha256.as_str()[..12]
        );
        assert_eq!(pushed["reference"], format!("{repository}:{tag}"));
    }

    let (_tmp, store) = empty_store();
    let from = format!("oci://{repository}");
    let mut args = vec!["vm", "install", "--from", &from, "--json"];
    for arch in &arches {
        args.extend(["--arch", arch]);
    }
    let started = Instant::now();
    let out = berm(&store, &args);
    let took = started.elapsed();
    assert!(out.status.success(), "{}", stderr(&out));
    let lines = json_lines(&out);
    assert_eq!(lines.len(), 2 * arches.len() + 1, "{lines:?}");
    let bytes: u64 = lines[..lines.len() - 1]
        .iter()
        .map(|l| {
            assert_eq!(l["status"], "installed", "{l}");
            l["size"].as_u64().unwrap()
        })
        .sum();
    assert_eq!(lines.last().unwrap()["installed"], 2 * arches.len());
    for line in &lines[..lines.len() - 1] {
        let path = PathBuf::from(line["path"].as_str().unwrap());
        let relative = path.strip_prefix(&store).unwrap();
        assert_eq!(
            std::fs::read(&path).unwrap(),
            std::fs::read(source.root().join(relative)).unwrap()
        );
    }
    assert_eq!(files(&store).len(), 2 * arches.len(), "{:?}", files(&store));
    eprintln!(
        "berm vm install --from oci://127.0.0.1 (loopback docker-registry, debug build): {took:?} for {arches:?}, {bytes} bytes"
    );

    // The kernel's blob tampered on the registry's disk: refused, nothing left.
    let (sha, _) = pin(ArtifactKind::Kernel);
    let blob = registry.blob_path(&format!("sha256:{sha}"));
    let mut stored = std::fs::read(&blob).unwrap();
    stored[4096] ^= 0x01;
    std::fs::write(&blob, stored).unwrap();
    let (tmp, store) = empty_store();
    let out = berm(&store, &["vm", "install", "--from", &from]);
    let text = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(text.contains("refused as tampered"), "{text}");
    assert!(text.contains(&format!("berm is pinned to {sha}")), "{text}");
    assert_eq!(
        berm_fixtures::entries(tmp.path()),
        Vec::<PathBuf>::new(),
        "{text}"
    );
}
