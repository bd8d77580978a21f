//! The receipt log written and verified, and every kind of tampering refused with its own
//! reason.

use std::path::{Path, PathBuf};
use std::time::Duration;

use berm_dsse::HostKey;
use berm_receipts::{
    Call, Code, LogError, LogOptions, Outcome, ReceiptLog, arguments_sha256, log_files,
    now_rfc3339, text_sha256, verify_dir,
};
use serde_json::json;

fn key(dir: &Path) -> HostKey {
    HostKey::load_or_create(Some(&dir.join("key.pem"))).unwrap()
}

fn call(n: u64) -> Call {
    Call {
        program: "notes".into(),
        program_sha256: "ab".repeat(32),
        code_sha256: Some("cd".repeat(32)),
        tool: "add".into(),
        grants: vec!["kv".into()],
        caller: None,
        arguments_sha256: arguments_sha256(&json!({"text": format!("note {n}")})),
        content_sha256: None,
        result_sha256: text_sha256(&format!("added {n}")),
        outcome: Outcome::Ok,
        http: Vec::new(),
        secrets: Vec::new(),
        calls: Vec::new(),
        omitted: 0,
        started: now_rfc3339(),
        duration_us: 12,
        subject: None,
        client_id: None,
    }
}

/// A log of `n` receipts in `dir/log`, sealed and closed.
fn written(dir: &Path, n: u64, options: LogOptions) -> PathBuf {
    let logdir = dir.join("log");
    let log = ReceiptLog::open(&logdir, key(dir), options).unwrap();
    for i in 0..n {
        assert_eq!(log.append(call(i)).unwrap().seq, i);
    }
    log.close();
    logdir
}

fn codes(dir: &Path) -> Vec<Code> {
    let report = verify_dir(&dir.join("log"), &key(dir).public()).unwrap();
    let mut codes: Vec<Code> = report.problems.iter().map(|p| p.code).collect();
    codes.dedup();
    codes
}

/// The lines of the log's only file.
fn lines(logdir: &Path) -> (PathBuf, Vec<String>) {
    let files = log_files(logdir).unwrap();
    assert_eq!(files.len(), 1);
    let text = std::fs::read_to_string(&files[0]).unwrap();
    (files[0].clone(), text.lines().map(String::from).collect())
}

fn is_receipt(line: &str) -> bool {
    !line.contains("payloadType")
}

#[test]
fn a_written_log_verifies_and_a_call_checks_against_what_its_client_kept() {
    let dir = tempfile::tempdir().unwrap();
    written(dir.path(), 10, LogOptions::default());
    let report = verify_dir(&dir.path().join("log"), &key(dir.path()).public()).unwrap();
    assert!(report.ok(), "{:?}", report.problems);
    assert_eq!(report.receipts, 10);
    assert!(report.checkpoints >= 1);
    let args = json!({"text": "note 3"});
    // Key order and spacing are the client's own; the canonical form is what counts.
    assert_eq!(report.check_call(Some(3), &args, "added 3"), Ok(3));
    assert_eq!(report.check_call(None, &args, "added 3"), Ok(3));
    let wrong = report.check_call(Some(3), &args, "added 4").unwrap_err();
    assert_eq!(wrong[0].code, Code::ResultMismatch);
    let wrong = report
        .check_call(Some(3), &json!({"text": "note 4"}), "added 3")
        .unwrap_err();
    assert_eq!(wrong[0].code, Code::ArgumentsMismatch);
    let none = report.check_call(None, &args, "added 9").unwrap_err();
    assert_eq!(none[0].code, Code::NotFound);
}

#[test]
fn another_key_refuses_every_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let logdir = written(dir.path(), 3, LogOptions::default());
    let other = HostKey::load_or_create(Some(&dir.path().join("other.pem"))).unwrap();
    let report = verify_dir(&logdir, &other.public()).unwrap();
    let codes: Vec<Code> = report.problems.iter().map(|p| p.code).collect();
    assert!(codes.contains(&Code::SignatureInvalid), "{codes:?}");
    assert!(codes.contains(&Code::Unsealed), "{codes:?}");
}

#[test]
fn a_deleted_receipt_is_missing() {
    let dir = tempfile::tempdir().unwrap();
    let logdir = written(dir.path(), 6, LogOptions::default());
    let (file, mut lines) = lines(&logdir);
    let at = lines.iter().position(|l| l.contains("\"seq\":2,")).unwrap();
    lines.remove(at);
    std::fs::write(&file, lines.join("\n") + "\n").unwrap();
    assert_eq!(codes(dir.path()), vec![Code::Missing]);
    // The last one too: its checkpoint names it.
    let (file, mut lines) = self::lines(&logdir);
    let at = lines.iter().position(|l| l.contains("\"seq\":5,")).unwrap();
    lines.remove(at);
    std::fs::write(&file, lines.join("\n") + "\n").unwrap();
    let report = verify_dir(&logdir, &key(dir.path()).public()).unwrap();
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.code == Code::Missing && p.detail.contains("receipt 5")),
        "{:?}",
        report.problems
    );
}

#[test]
fn reordered_receipts_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let logdir = written(dir.path(), 6, LogOptions::default());
    let (file, mut lines) = lines(&logdir);
    let a = lines.iter().position(|l| l.contains("\"seq\":2,")).unwrap();
    let b = lines.iter().position(|l| l.contains("\"seq\":3,")).unwrap();
    lines.swap(a, b);
    std::fs::write(&file, lines.join("\n") + "\n").unwrap();
    assert_eq!(codes(dir.path()), vec![Code::Reordered]);
}

#[test]
fn an_edited_receipt_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let logdir = written(dir.path(), 6, LogOptions::default());
    let (file, mut lines) = lines(&logdir);
    let at = lines.iter().position(|l| l.contains("\"seq\":4,")).unwrap();
    lines[at] = lines[at].replace("\"tool\":\"add\"", "\"tool\":\"del\"");
    std::fs::write(&file, lines.join("\n") + "\n").unwrap();
    let report = verify_dir(&logdir, &key(dir.path()).public()).unwrap();
    let codes: Vec<Code> = report.problems.iter().map(|p| p.code).collect();
    assert_eq!(codes, vec![Code::Edited], "{:?}", report.problems);
    assert!(report.problems[0].detail.contains("receipt 4"));
}

#[test]
fn a_cut_log_is_truncated() {
    let dir = tempfile::tempdir().unwrap();
    let logdir = written(dir.path(), 6, LogOptions::default());
    let (file, _) = lines(&logdir);
    let bytes = std::fs::read(&file).unwrap();
    std::fs::write(&file, &bytes[..bytes.len() - 40]).unwrap();
    let got = codes(dir.path());
    assert_eq!(got[0], Code::Truncated, "{got:?}");
}

#[test]
fn a_killed_writer_leaves_its_receipts_and_the_next_open_seals_them() {
    let dir = tempfile::tempdir().unwrap();
    let logdir = dir.path().join("log");
    // A sealer that never wakes in this test: the receipts stay unsealed, as after SIGKILL.
    let slow = LogOptions {
        interval: Duration::from_secs(3600),
        ..LogOptions::default()
    };
    let log = ReceiptLog::open(&logdir, key(dir.path()), slow).unwrap();
    for i in 0..5 {
        log.append(call(i)).unwrap();
    }
    // What a SIGKILL leaves: the lines, no checkpoint. Read them while the log is open.
    let (_, lines) = lines(&logdir);
    assert_eq!(lines.len(), 5);
    assert!(lines.iter().all(|l| is_receipt(l)));
    assert_eq!(codes(dir.path()), vec![Code::Unsealed]);
    std::mem::forget(log);
    // The lock went with the process; here, a second open in the same process would be
    // refused by the lock file, so take another copy of the directory.
    let copy = dir.path().join("copy");
    std::fs::create_dir(&copy).unwrap();
    for file in log_files(&logdir).unwrap() {
        std::fs::copy(&file, copy.join(file.file_name().unwrap())).unwrap();
    }
    // A torn line, as if the kill came in the middle of a write.
    let last = log_files(&copy).unwrap().pop().unwrap();
    let mut bytes = std::fs::read(&last).unwrap();
    bytes.extend_from_slice(b"{\"_type\":\"https://in-to");
    std::fs::write(&last, bytes).unwrap();
    let log = ReceiptLog::open(&copy, key(dir.path()), LogOptions::default()).unwrap();
    assert_eq!(log.append(call(5)).unwrap().seq, 5);
    log.close();
    let report = verify_dir(&copy, &key(dir.path()).public()).unwrap();
    assert!(report.ok(), "{:?}", report.problems);
    assert_eq!(report.receipts, 6);
}

#[test]
fn one_directory_takes_one_writer() {
    let dir = tempfile::tempdir().unwrap();
    let logdir = dir.path().join("log");
    let _first = ReceiptLog::open(&logdir, key(dir.path()), LogOptions::default()).unwrap();
    let second = ReceiptLog::open(&logdir, key(dir.path()), LogOptions::default());
    assert!(matches!(second, Err(LogError::InUse(_))));
}

#[test]
fn a_reopened_log_continues_its_chain_across_rotated_files() {
    let dir = tempfile::tempdir().unwrap();
    let small = LogOptions {
        max_file_bytes: 4 << 10,
        ..LogOptions::default()
    };
    let logdir = written(dir.path(), 20, small);
    let log = ReceiptLog::open(&logdir, key(dir.path()), small).unwrap();
    assert_eq!(log.append(call(20)).unwrap().seq, 20);
    log.close();
    assert!(log_files(&logdir).unwrap().len() > 2);
    let report = verify_dir(&logdir, &key(dir.path()).public()).unwrap();
    assert!(report.ok(), "{:?}", report.problems);
    assert_eq!(report.receipts, 21);
}

#[test]
fn appends_from_many_threads_chain_in_one_order() {
    let dir = tempfile::tempdir().unwrap();
    let logdir = dir.path().join("log");
    let batchy = LogOptions {
        interval: Duration::from_millis(5),
        max_batch: 7,
        ..LogOptions::default()
    };
    let log = ReceiptLog::open(&logdir, key(dir.path()), batchy).unwrap();
    std::thread::scope(|scope| {
        for t in 0..4 {
            let log = &log;
            scope.spawn(move || {
                for i in 0..50 {
                    log.append(call(t * 100 + i)).unwrap();
                }
            });
        }
    });
    log.close();
    let report = verify_dir(&logdir, &key(dir.path()).public()).unwrap();
    assert!(report.ok(), "{:?}", report.problems);
    assert_eq!(report.receipts, 200);
    assert!(report.checkpoints >= 200 / 7);
}

#[test]
fn a_stream_log_is_what_its_reader_keeps_and_verifies_with_its_key() {
    use std::io::Read as _;
    let dir = tempfile::tempdir().unwrap();
    let (mut reader, writer) = std::io::pipe().unwrap();
    let key = HostKey::ephemeral().unwrap();
    let public = key.public();
    let log = ReceiptLog::stream(
        std::fs::File::from(std::os::fd::OwnedFd::from(writer)),
        "a pipe",
        key,
        LogOptions {
            max_batch: 4,
            ..LogOptions::default()
        },
    )
    .unwrap();
    let kept = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        reader.read_to_end(&mut bytes).unwrap();
        bytes
    });
    for i in 0..10 {
        log.append(call(i)).unwrap();
    }
    drop(log);
    let logdir = dir.path().join("kept");
    std::fs::create_dir(&logdir).unwrap();
    std::fs::write(
        logdir.join("receipts-00000000000000000000.jsonl"),
        kept.join().unwrap(),
    )
    .unwrap();
    let report = verify_dir(&logdir, &public).unwrap();
    assert!(report.ok(), "{:?}", report.problems);
    assert_eq!(report.receipts, 10);
    assert!(report.checkpoints >= 3, "batches of at most 4");
}
