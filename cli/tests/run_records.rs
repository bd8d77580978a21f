//! What berm reads back from a VM's run after it ran, through the real `berm`: the receipt
//! key a signed record names (`berm receipts key`, which needs the host key), and the run dir
//! a pid file names (`berm vm logs`, `berm attest NAME`, which check it again before reading
//! it). Nothing boots: the runs are written here as berm-vmm leaves them.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::json;

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn berm(cwd: &Path, runtime: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_berm"))
        .args(args)
        .current_dir(cwd)
        .env("XDG_RUNTIME_DIR", runtime)
        .env("BERM_HOME", cwd.join("no-bermd"))
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn set_mode(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// The item: `berm receipts key` without `--host-key` is an error (exit 2, saying where the
/// key comes from), not a warning over a key read from a record nobody checked.
#[test]
fn receipts_key_without_the_host_key_is_an_error() {
    let tmp = tempfile::tempdir().unwrap();
    let run_dir = tmp.path().join("run");
    std::fs::create_dir(&run_dir).unwrap();
    let host = berm_dsse::HostKey::ephemeral().unwrap();
    let app = berm_dsse::HostKey::ephemeral().unwrap();
    let statement = json!({
        "_type": berm_attest::dsse::STATEMENT_TYPE,
        "subject": [],
        "predicateType": berm_attest::dsse::PREDICATE_TYPE,
        "predicate": {"guest": {"events": [{
            "event": "app_ready", "app": "notes", "boot_id": "b1",
            "receipt_key": berm_dsse::spki_base64(&app.public()),
        }]}},
    });
    berm_attest::dsse::write_envelope(
        &host.sign_statement(&statement),
        &run_dir.join(berm_attest::dsse::ENVELOPE_FILE),
    )
    .unwrap();
    let host_pub = tmp.path().join("host.pub");
    std::fs::write(&host_pub, host.public_pem()).unwrap();
    let other_pub = tmp.path().join("other.pub");
    std::fs::write(&other_pub, app.public_pem()).unwrap();
    let run = run_dir.to_str().unwrap();
    let key = |extra: &[&str]| {
        berm(
            tmp.path(),
            tmp.path(),
            &[&["receipts", "key", run, "--app", "notes"], extra].concat(),
        )
    };

    let out = key(&[]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(out.stdout.is_empty(), "no key without the host key");
    assert!(
        err.contains("berm receipts key needs --host-key PUB")
            && err.contains("`berm attest key` prints it")
            && err.contains(&run_dir.join("record.dsse.json").display().to_string()),
        "{err}"
    );

    let out = key(&["--host-key", host_pub.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), app.public_pem());

    let out = key(&["--host-key", other_pub.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(out.stdout.is_empty());
}

/// A VM `notes` whose last run (`last.json`) had its run dir at `run_dir`, outside the VM
/// dir, as berm-vmm's own choice under the temp dir is.
fn recorded_run(runtime: &Path, run_dir: &Path) {
    let vm_dir = runtime.join("berm/vm/notes");
    std::fs::create_dir_all(&vm_dir).unwrap();
    let last = json!({
        "name": "notes", "pid": 999_999_999, "start_ticks": null,
        "argv": ["/nonexistent/berm-vmm", "run"], "started_unix": 0,
        "apps": [{"index": 0, "name": "notes", "dir": "/nonexistent/notes"}],
        "arch": "x86_64", "hypervisor": "auto", "state": null, "run_dir": run_dir,
    });
    std::fs::write(vm_dir.join("last.json"), last.to_string()).unwrap();
}

/// The item: `berm vm logs NAME` and `berm attest NAME` check the run dir the pid file names
/// again before reading it — a private directory of this user's, as berm-vmm made it — and
/// refuse one that is open to others, a link, or another user's.
#[test]
fn vm_logs_and_attest_name_recheck_the_run_dir_they_read() {
    let tmp = tempfile::tempdir().unwrap();
    let runtime = tmp.path().join("rt");
    std::fs::create_dir(&runtime).unwrap();
    let run_dir: PathBuf = tmp.path().join("berm-vmm-0123456789ab");
    std::fs::create_dir(&run_dir).unwrap();
    set_mode(&run_dir, 0o700);
    std::fs::write(run_dir.join("guest.log"), "the guest's own words\n").unwrap();
    std::fs::write(run_dir.join("console.log"), "console\n").unwrap();
    recorded_run(&runtime, &run_dir);
    let run = |args: &[&str]| berm(tmp.path(), &runtime, args);

    // As berm-vmm left it: read.
    let out = run(&["vm", "logs", "notes"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "the guest's own words\n");

    let refused = |args: &[&str], why: &str| {
        let out = run(args);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}: nothing of it is printed");
        assert!(
            err.contains(&format!(
                "the run dir {} of VM \"notes\" {why}",
                run_dir.display()
            )) && err.contains("only from a private directory of this user's"),
            "{args:?}: {err}"
        );
    };
    let every_reader = |why: &str| {
        refused(&["vm", "logs", "notes"], why);
        refused(&["vm", "logs", "notes", "--console"], why);
        refused(&["attest", "notes"], why);
    };

    // Open to others (made again by someone, or loosened): refused, whatever it holds.
    std::fs::write(run_dir.join("vmm.jsonl"), "{}\n").unwrap();
    set_mode(&run_dir, 0o755);
    every_reader("has mode 755, open to group or others");
    set_mode(&run_dir, 0o700);

    // A link to a private directory with a record of someone's choosing.
    let elsewhere = tmp.path().join("elsewhere");
    std::fs::rename(&run_dir, &elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &run_dir).unwrap();
    every_reader("is a symbolic link");
    std::fs::remove_file(&run_dir).unwrap();
    std::fs::rename(&elsewhere, &run_dir).unwrap();

    // Another user's, however private (as root: handed to nobody, 65534).
    if std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(tmp.path()).unwrap()) == 0 {
        std::os::unix::fs::chown(&run_dir, Some(65534), Some(65534)).unwrap();
        every_reader("belongs to uid 65534, not to this user (uid 0)");
    }
}
