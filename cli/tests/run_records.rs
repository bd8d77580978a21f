//! What berm reads back from a VM's run after it ran, through the real `berm`: the receipt
//! key a signed record names (`berm receipts key`, which needs the host key). Nothing boots:
//! the runs are written here as berm-vmm leaves them.

use std::path::Path;
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
