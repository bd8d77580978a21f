//! A corpus of tampered records, each refused with its own code, and the honest record they
//! are made from, which verifies.
//!
//! The honest run dir is written line by line the way berm-vmm writes `vmm.jsonl` (its own
//! lines and the guest events it relays, in the shapes of docs/design/vm-protocol.md and the
//! issue-6 app events). A real boot's record is verified in vmm/tests/host_sandbox.rs.
//! Every tamper except "edited after hashing" re-seals the record, as a forger would: the hash
//! is not a signature, so each check must stand on its own.

use berm_attest::{Code, Pins, Record, verify};
use serde_json::{Value, json};

const BOOT_ID: &str = "1a379614-d564-4ed5-b613-915ac31c7798";
const WASM_SHA: &str = "1111111111111111111111111111111111111111111111111111111111111111";
const POLICY_SHA: &str = "2222222222222222222222222222222222222222222222222222222222222222";
const FOLDER_SHA: &str = "3333333333333333333333333333333333333333333333333333333333333333";

fn pins() -> Pins {
    Pins::compiled_in().expect("the compiled-in pins parse")
}

fn vmm(event: &str, fields: Value) -> Value {
    let mut line = json!({"source": "berm-vmm", "event": event});
    line.as_object_mut()
        .unwrap()
        .extend(fields.as_object().unwrap().clone());
    line
}

fn guest(event: &str, uptime: u64, fields: Value) -> Value {
    let mut line =
        json!({"source": "berm-init", "boot_id": BOOT_ID, "uptime_ms": uptime, "event": event});
    line.as_object_mut()
        .unwrap()
        .extend(fields.as_object().unwrap().clone());
    line
}

/// The lines of an honest one-app run, as berm-vmm writes them.
fn honest_lines() -> Vec<Value> {
    let pins = pins();
    vec![
        vmm(
            "hypervisor",
            json!({"chosen": "qemu", "accel": "tcg", "reason": "kvm_pvm"}),
        ),
        vmm(
            "measurements",
            json!({
                "kernel": {"sha256": pins.kernel.image.sha256.as_str(), "size": pins.kernel.image.size, "pinned": true,
                           "path": "/cache/vmlinux", "linux": pins.kernel.linux,
                           "config_sha256": pins.kernel.config_sha256.as_str(),
                           "cmdline": format!("{} BERM_HYPERVISOR=qemu BERM_APPS=1", pins.kernel.cmdline), "hash_ms": 9},
                "rootfs": {"sha256": pins.rootfs.image.sha256.as_str(), "size": pins.rootfs.image.size, "pinned": true,
                           "path": "/cache/rootfs.erofs", "fstype": "erofs", "read_only": true, "hash_ms": 1},
                "state": {"path": "/s.img", "size_bytes": 268435456u64, "created": true,
                          "formatted": true, "restored_bytes": 0,
                          "chunked_sha256": "4444444444444444444444444444444444444444444444444444444444444444",
                          "hashed_bytes": 0, "hash_ms": 0},
                "apps": [{"index": 0, "name": "notes", "path": "/apps/notes", "sha256": FOLDER_SHA, "files": 2,
                          "programs": [{"name": "notes", "wasm": "notes.wasm", "sha256": WASM_SHA}],
                          "image": {"sha256": "5555555555555555555555555555555555555555555555555555555555555555", "size": 4096},
                          "code": [{"program": "notes", "file": "notes.cwasm", "cached": false,
                                    "sha256": "6666666666666666666666666666666666666666666666666666666666666666"}],
                          "limits": {"name": "notes", "cpu_max": "max 100000", "memory_max": 134217728, "pids_max": 64},
                          "uid": 10000}],
            }),
        ),
        vmm(
            "host_sandbox",
            json!({"enabled": true, "landlock_abi": 7, "landlock": "fully_enforced", "no_new_privs": true,
                   "seccomp": "allow_list", "allowed": ["read", "write", "clone(no CLONE_NEW*)"], "policy_sha256": POLICY_SHA,
                   "grants": {"read": [], "read_write": [], "devices": []}, "reason": null}),
        ),
        vmm(
            "guest_greeted",
            json!({"after_ms": 900, "boot_id": BOOT_ID}),
        ),
        guest(
            "boot_start",
            800,
            json!({"pid": 1, "kernel_release": "6.12.117-berm", "lsm": ["capability", "landlock"],
                   "landlock_abi": 6, "cmdline_bytes": 300, "cgroup2": "rw,nsdelegate"}),
        ),
        guest(
            "app_started",
            850,
            json!({"app": "notes", "index": 0, "uid": 10000, "gid": 10000, "pid": 40, "port": 5000,
                   "cgroup": "/berm/apps/notes",
                   "limits": {"cpu_max": "max 100000", "memory_max": "134217728", "memory_swap_max": "0", "pids_max": "64"},
                   "enforcement": {"no_new_privs": true, "landlock_abi": 6, "landlock": "fully_enforced",
                                   "seccomp": "allow_list", "policy_sha256": pins.rootfs.app_policy_sha256.as_str()}}),
        ),
        guest(
            "app_ready",
            900,
            json!({"app": "notes", "index": 0, "pid": 40, "ms": 50, "tools": 3,
                   "programs": [{"name": "notes", "sha256": WASM_SHA, "code": "precompiled", "ms": 12}]}),
        ),
        guest("boot_complete", 901, json!({"apps": 1})),
        guest(
            "power_off",
            2000,
            json!({"reason": "requested", "exit_code": 0, "killed": 0, "unmount_failed": []}),
        ),
        vmm(
            "exit",
            json!({"status": "clean", "code": 0, "message": "the guest powered off (requested)"}),
        ),
    ]
}

fn record_of(lines: &[Value]) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let mut text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    // A torn last line (berm-vmm killed mid-write) is ignored, not fatal.
    text.push_str("{\"source\":\"berm-vmm\",\"ev");
    std::fs::write(dir.path().join("vmm.jsonl"), text).unwrap();
    Record::from_run_dir(dir.path()).unwrap().to_value()
}

fn honest() -> Value {
    record_of(&honest_lines())
}

fn reseal(mut record: Value) -> Value {
    let hash = berm_attest::record_sha256(&record);
    record["recordSha256"] = hash.into();
    record
}

fn codes(record: &Value) -> Vec<&'static str> {
    verify(record, &pins())
        .codes()
        .into_iter()
        .map(Code::as_str)
        .collect()
}

fn event_index(record: &Value, event: &str) -> usize {
    record["guest"]["events"]
        .as_array()
        .unwrap()
        .iter()
        .position(|e| e["event"] == event)
        .unwrap_or_else(|| panic!("no {event} in the record"))
}

/// One tampered record per code: (what was done, the record, the one code expected).
fn corpus() -> Vec<(&'static str, Value, Code)> {
    let mut cases = Vec::new();
    let mut add = |what, edit: &dyn Fn(&mut Value), code| {
        let mut record = honest();
        edit(&mut record);
        cases.push((what, reseal(record), code));
    };
    add(
        "a changed program digest in app_ready",
        &|r| {
            let i = event_index(r, "app_ready");
            r["guest"]["events"][i]["programs"][0]["sha256"] = "7".repeat(64).into();
        },
        Code::ProgramDigestMismatch,
    );
    add(
        "a changed measured program digest",
        &|r| r["apps"][0]["programs"][0]["sha256"] = "8".repeat(64).into(),
        Code::ProgramDigestMismatch,
    );
    add(
        "an unpinned kernel",
        &|r| r["kernel"]["sha256"] = "9".repeat(64).into(),
        Code::KernelUnpinned,
    );
    add(
        "an unpinned kernel claiming to be pinned, right digest, wrong size",
        &|r| r["kernel"]["size"] = 1.into(),
        Code::KernelUnpinned,
    );
    add(
        "an unpinned rootfs",
        &|r| r["rootfs"]["sha256"] = "a".repeat(64).into(),
        Code::RootfsUnpinned,
    );
    add(
        "the write-up's cmdline injection",
        &|r| {
            let cmdline = r["kernel"]["cmdline"].as_str().unwrap().to_owned();
            r["kernel"]["cmdline"] = format!("{cmdline} X=1\" lsm=\"yama").into();
        },
        Code::CmdlineMismatch,
    );
    add(
        "a kernel parameter appended to the cmdline",
        &|r| {
            let cmdline = r["kernel"]["cmdline"].as_str().unwrap().to_owned();
            r["kernel"]["cmdline"] = format!("{cmdline} init=/bin/sh").into();
        },
        Code::CmdlineMismatch,
    );
    add(
        "the pinned TCG words twice, the second time where guest settings go",
        &|r| {
            let tcg = &pins().kernel.tcg_cmdline;
            let cmdline = format!("{} {tcg} {tcg} BERM_APPS=1", pins().kernel.cmdline);
            r["kernel"]["cmdline"] = cmdline.into();
        },
        Code::CmdlineMismatch,
    );
    add(
        "a mismatched boot id",
        &|r| {
            let i = event_index(r, "app_started");
            r["guest"]["events"][i]["bootId"] = "00000000-0000-0000-0000-000000000000".into();
        },
        Code::BootIdMismatch,
    );
    add(
        "a missing enforcement report",
        &|r| {
            let i = event_index(r, "app_started");
            r["guest"]["events"].as_array_mut().unwrap().remove(i);
        },
        Code::EnforcementMissing,
    );
    add(
        "Landlock partially enforced in the app",
        &|r| {
            let i = event_index(r, "app_started");
            r["guest"]["events"][i]["enforcement"]["landlock"] = "partially_enforced".into();
        },
        Code::EnforcementWeak,
    );
    add(
        "no seccomp filter on the app",
        &|r| {
            let i = event_index(r, "app_started");
            r["guest"]["events"][i]["enforcement"]["seccomp"] = "none".into();
        },
        Code::EnforcementWeak,
    );
    add(
        "no policy digest",
        &|r| {
            let i = event_index(r, "app_started");
            r["guest"]["events"][i]["enforcement"]["policySha256"] = "".into();
        },
        Code::PolicyDigestMissing,
    );
    add(
        "an app under another policy than the pinned build's",
        &|r| {
            let i = event_index(r, "app_started");
            r["guest"]["events"][i]["enforcement"]["policySha256"] = POLICY_SHA.into();
        },
        Code::PolicyMismatch,
    );
    add(
        "BERM_PROBE on the command line without the probe's measurement",
        &|r| {
            let cmdline = r["kernel"]["cmdline"].as_str().unwrap().to_owned();
            r["kernel"]["cmdline"] = format!("{cmdline} BERM_PROBE=0").into();
        },
        Code::TestProbePresent,
    );
    add(
        "a nonzero exit status",
        &|r| {
            r["exit"]["code"] = 6.into();
            r["exit"]["status"] = "guest_error".into();
        },
        Code::ExitFailed,
    );
    add(
        "an app refused by the guest",
        &|r| {
            let events = r["guest"]["events"].as_array_mut().unwrap();
            events.retain(|e| e["event"] != "app_started" && e["event"] != "app_ready");
            events.insert(
                1,
                json!({"event": "app_refused", "bootId": BOOT_ID, "app": "notes", "index": 0, "reason": "landlock not fully enforced"}),
            );
        },
        Code::AppRefused,
    );
    add(
        "an app that never became ready",
        &|r| {
            let i = event_index(r, "app_ready");
            r["guest"]["events"].as_array_mut().unwrap().remove(i);
        },
        Code::AppNotReady,
    );
    add(
        "a program loaded that the host never measured",
        &|r| {
            let i = event_index(r, "app_ready");
            r["guest"]["events"][i]["programs"]
                .as_array_mut()
                .unwrap()
                .push(json!({"name": "extra", "sha256": "b".repeat(64), "code": null}));
        },
        Code::ProgramUnmeasured,
    );
    add(
        "an app the host never measured",
        &|r| {
            let i = event_index(r, "app_started");
            let mut extra = r["guest"]["events"][i].clone();
            extra["index"] = 7.into();
            r["guest"]["events"].as_array_mut().unwrap().push(extra);
        },
        Code::AppUnmeasured,
    );
    add(
        "a test boot that attached the enforcement probe",
        &|r| r["testProbe"] = json!({"imageSha256": "c".repeat(64), "app": 0}),
        Code::TestProbePresent,
    );
    add(
        "no host_sandbox line",
        &|r| r["hostSandbox"] = Value::Null,
        Code::HostSandboxMissing,
    );
    add(
        "berm-vmm ran with --no-host-sandbox",
        &|r| {
            r["hostSandbox"]["enabled"] = false.into();
            r["hostSandbox"]["reason"] = "--no-host-sandbox".into();
        },
        Code::HostSandboxDisabled,
    );
    add(
        "berm-vmm's Landlock partially enforced",
        &|r| r["hostSandbox"]["landlock"] = "partially_enforced".into(),
        Code::HostSandboxWeak,
    );
    add(
        "a digest that is not a sha256",
        &|r| r["apps"][0]["image"]["sha256"] = "unpinned".into(),
        Code::DigestMalformed,
    );
    add(
        "an unknown format",
        &|r| r["format"] = "berm-attest/99".into(),
        Code::FormatUnsupported,
    );
    add(
        "an extra field",
        &|r| r["kernel"]["trustMe"] = true.into(),
        Code::RecordMalformed,
    );
    add(
        "no guest at all",
        &|r| {
            r["guest"]["events"] = json!([]);
            r["guest"]["bootId"] = Value::Null;
            r["apps"] = json!([]);
        },
        Code::GuestMissing,
    );
    add(
        "a failed boot",
        &|r| {
            r["guest"]["events"].as_array_mut().unwrap().push(json!({
                "event": "boot_failed", "bootId": BOOT_ID, "step": "state", "message": "mount failed"
            }));
        },
        Code::BootFailed,
    );
    // Edited after hashing: not re-sealed.
    let mut edited = honest();
    edited["runDir"] = "/elsewhere".into();
    cases.push(("edited after hashing", edited, Code::RecordHashMismatch));
    // An app that died while the VM ran: berm-init reports app_exited before any shutdown.
    let mut lines = honest_lines();
    let at = lines
        .iter()
        .position(|l| l["event"] == "boot_complete")
        .unwrap();
    lines.insert(
        at + 1,
        guest(
            "app_exited",
            1500,
            json!({"app": "notes", "index": 0, "pid": 40, "code": null, "signal": 9}),
        ),
    );
    cases.push((
        "an app that exited while the VM ran",
        record_of(&lines),
        Code::AppExited,
    ));
    cases
}

#[test]
fn the_honest_record_verifies() {
    let record = honest();
    let verdict = verify(&record, &pins());
    assert!(verdict.ok, "{:#?}", verdict.problems);
    // Stable: building twice from the same run dir gives the same record and hash.
    let dir = tempfile::tempdir().unwrap();
    let text: String = honest_lines().iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(dir.path().join("vmm.jsonl"), text).unwrap();
    let once = Record::from_run_dir(dir.path()).unwrap();
    assert_eq!(once, Record::from_run_dir(dir.path()).unwrap());
    assert_eq!(record["format"], "berm-attest/1");
    assert_eq!(record["guest"]["bootId"], BOOT_ID);
}

#[test]
fn the_pinned_tcg_words_after_the_pinned_cmdline_verify() {
    let pins = pins();
    assert!(
        !pins.kernel.tcg_cmdline.is_empty(),
        "kernel/manifest.toml pins TCG words"
    );
    let mut record = honest();
    record["kernel"]["cmdline"] = format!(
        "{} {} BERM_HYPERVISOR=qemu BERM_APPS=1",
        pins.kernel.cmdline, pins.kernel.tcg_cmdline
    )
    .into();
    let record = reseal(record);
    assert_eq!(codes(&record), Vec::<&str>::new());
}

#[test]
fn each_tampered_record_is_refused_with_its_own_code() {
    for (what, record, expected) in corpus() {
        let verdict = verify(&record, &pins());
        assert!(!verdict.ok, "{what}: accepted");
        assert_eq!(
            codes(&record),
            vec![expected.as_str()],
            "{what}: {:#?}",
            verdict.problems
        );
    }
}

#[test]
fn the_corpus_covers_every_code() {
    let covered: std::collections::BTreeSet<Code> = corpus().into_iter().map(|c| c.2).collect();
    for code in Code::ALL {
        assert!(covered.contains(&code), "no tampered record for {code}");
    }
}

#[test]
fn other_pins_refuse_an_honest_record() {
    // A verifier holding another release's pins: the same record is unpinned there.
    let dir = tempfile::tempdir().unwrap();
    for (manifest, text) in [
        ("kernel", berm_pins::KERNEL_MANIFEST),
        ("rootfs", berm_pins::ROOTFS_MANIFEST),
    ] {
        std::fs::create_dir_all(dir.path().join(manifest)).unwrap();
        let pinned = if manifest == "kernel" {
            pins().kernel.image.sha256.to_string()
        } else {
            pins().rootfs.image.sha256.to_string()
        };
        std::fs::write(
            dir.path().join(manifest).join("manifest.toml"),
            text.replace(&pinned, &"c".repeat(64)),
        )
        .unwrap();
    }
    let other = Pins::from_dir(dir.path()).unwrap();
    let verdict = verify(&honest(), &other);
    let codes: Vec<Code> = verdict.codes();
    assert_eq!(codes, vec![Code::KernelUnpinned, Code::RootfsUnpinned]);
}

#[test]
fn a_run_dir_without_measurements_is_not_a_record() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("vmm.jsonl"),
        format!("{}\n", vmm("hypervisor", json!({"chosen": "qemu"}))),
    )
    .unwrap();
    let err = Record::from_run_dir(dir.path()).unwrap_err().to_string();
    assert!(err.contains("no measurements line"), "{err}");
    let err = Record::from_run_dir(&dir.path().join("absent"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("vmm.jsonl"), "{err}");
}

#[test]
fn every_code_is_documented_in_docs_vm_md() {
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/vm.md")).unwrap();
    for code in Code::ALL {
        let row = format!("| `{code}` |");
        assert!(doc.contains(&row), "docs/vm.md lacks the row {row}");
    }
}
