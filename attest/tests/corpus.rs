//! A corpus of tampered records, each refused with its own code, and the honest record they
//! are made from, which verifies.
//!
//! The honest run dir is written line by line the way berm-vmm writes `vmm.jsonl`: its own
//! lines and the guest events it relays, each a typed `VmmLine` written with
//! `VmmLine::to_line`, as berm-vmm writes them. The tampered records are JSON, edited as a
//! forger would edit them. A real boot's record is verified in vmm/tests/host_sandbox.rs.
//! Every tamper except "edited after hashing" re-seals the record, as a forger would: the hash
//! is not a signature, so each check must stand on its own.
//!
//! The forgery suite: for every measured field, a consistent forgery (re-sealed) is refused
//! with its own code; a signed record with any one byte changed is refused; a signed record
//! verifies with its key and with no other. Code re-derivation compiles a real program
//! (scripts/build-apps.sh builds it).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use berm_attest::dsse::{self, HostKey};
use berm_attest::{Code, Options, Pins, Programs, Record, Verdict, verify, verify_with};
use berm_vm_protocol::host::{
    AppMeasurement, Backend, CodeMeasurement, EngineMeasurement, ExitLine, GreetedLine, HostChild,
    HostSandboxLine, HypervisorLine, ImageMeasurement, KernelMeasurement, Launch, MeasurementsLine,
    ProgramMeasurement, RootfsMeasurement, SandboxGrants, StateMeasurement,
};
use berm_vm_protocol::{
    AppExited, AppLimits, AppProgram, AppReady, AppStarted, BootComplete, BootStart, CodeSource,
    Enforcement, Event, GuestLine, HostEvent, Landlock, PowerOff, Seccomp, VmmLine,
};
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};

const BOOT_ID: &str = "1a379614-d564-4ed5-b613-915ac31c7798";
const WASM_SHA: &str = "1111111111111111111111111111111111111111111111111111111111111111";
const POLICY_SHA: &str = "2222222222222222222222222222222222222222222222222222222222222222";
const FOLDER_SHA: &str = "3333333333333333333333333333333333333333333333333333333333333333";
const STATE_SHA: &str = "4444444444444444444444444444444444444444444444444444444444444444";
const IMAGE_SHA: &str = "5555555555555555555555555555555555555555555555555555555555555555";
const CODE_SHA: &str = "6666666666666666666666666666666666666666666666666666666666666666";

fn pins() -> Pins {
    Pins::compiled_in().expect("the compiled-in pins parse")
}

fn vmm(event: HostEvent) -> VmmLine {
    VmmLine::Host(event)
}

fn guest(uptime_ms: u64, event: Event) -> VmmLine {
    VmmLine::Guest(GuestLine {
        boot_id: BOOT_ID.into(),
        uptime_ms,
        event,
    })
}

/// The lines of an honest one-app run, as berm-vmm writes them.
fn honest_lines() -> Vec<VmmLine> {
    lines_with(
        WASM_SHA,
        CODE_SHA,
        EngineMeasurement {
            fingerprint: "0123456789abcdef".into(),
            target: "x86_64-unknown-linux-musl".into(),
        },
    )
}

/// An honest run of one program with this wasm digest, compiled to this code by this engine.
fn lines_with(wasm_sha: &str, code_sha: &str, engine: EngineMeasurement) -> Vec<VmmLine> {
    let pins = pins();
    let pinned = pins.host().unwrap();
    vec![
        vmm(HostEvent::Hypervisor(HypervisorLine {
            chosen: Backend::Qemu,
            accel: Some("tcg".into()),
            reason: "kvm_pvm".into(),
        })),
        vmm(HostEvent::Measurements(MeasurementsLine {
            kernel: KernelMeasurement {
                arch: "x86_64".into(),
                sha256: pinned.kernel.image.sha256.to_string(),
                size: pinned.kernel.image.size,
                pinned: true,
                path: "/cache/vmlinux".into(),
                linux: pinned.kernel.linux.clone(),
                config_sha256: pinned.kernel.config_sha256.to_string(),
                cmdline: format!("{} BERM_HYPERVISOR=qemu BERM_APPS=1", pinned.kernel.cmdline),
                hash_ms: 9,
            },
            rootfs: RootfsMeasurement {
                sha256: pinned.rootfs.image.sha256.to_string(),
                size: pinned.rootfs.image.size,
                pinned: true,
                path: "/cache/rootfs.erofs".into(),
                fstype: "erofs".into(),
                read_only: true,
                hash_ms: 1,
            },
            state: Some(StateMeasurement {
                path: "/s.img".into(),
                size_bytes: 268435456,
                created: true,
                formatted: true,
                restored_bytes: 0,
                chunked_sha256: STATE_SHA.into(),
                hashed_bytes: 0,
                hash_ms: 0,
            }),
            apps: vec![AppMeasurement {
                index: 0,
                name: "notes".into(),
                path: "/apps/notes".into(),
                sha256: FOLDER_SHA.into(),
                files: 2,
                programs: vec![ProgramMeasurement {
                    name: "notes".into(),
                    wasm: "notes.wasm".into(),
                    sha256: wasm_sha.into(),
                    grants: Vec::new(),
                }],
                code: vec![CodeMeasurement {
                    program: "notes".into(),
                    file: "notes.cwasm".into(),
                    sha256: code_sha.into(),
                    cached: false,
                }],
                image: ImageMeasurement {
                    sha256: IMAGE_SHA.into(),
                    size: 4096,
                },
                limits: Launch {
                    name: "notes".into(),
                    cpu_max: "max 100000".into(),
                    memory_max: 134217728,
                    pids_max: 64,
                },
                uid: 10000,
            }],
            engine: Some(engine),
            test_probe: None,
        })),
        vmm(HostEvent::HostSandbox(HostSandboxLine {
            enabled: true,
            landlock_abi: 7,
            landlock: Landlock::FullyEnforced,
            no_new_privs: true,
            seccomp: "allow_list".into(),
            allowed: ["read", "write", "clone(no CLONE_NEW*)"]
                .map(String::from)
                .into(),
            scopes: Vec::new(),
            policy_sha256: POLICY_SHA.into(),
            grants: SandboxGrants::default(),
            reason: None,
            children: honest_children(),
        })),
        vmm(HostEvent::GuestGreeted(GreetedLine {
            after_ms: 900,
            boot_id: BOOT_ID.into(),
        })),
        guest(
            800,
            Event::BootStart(BootStart {
                pid: 1,
                kernel_release: "6.12.117-berm".into(),
                lsm: vec!["capability".into(), "landlock".into()],
                landlock_abi: Some(6),
                cmdline_bytes: 300,
                cgroup2: "rw,nsdelegate".into(),
            }),
        ),
        guest(
            850,
            Event::AppStarted(AppStarted {
                app: "notes".into(),
                index: 0,
                uid: 10000,
                gid: 10000,
                pid: 40,
                port: 5000,
                cgroup: "/berm/apps/notes".into(),
                limits: AppLimits {
                    cpu_max: "max 100000".into(),
                    memory_max: "134217728".into(),
                    memory_swap_max: "0".into(),
                    pids_max: "64".into(),
                },
                enforcement: Enforcement {
                    no_new_privs: true,
                    landlock_abi: 6,
                    landlock: Landlock::FullyEnforced,
                    seccomp: Seccomp::AllowList,
                    policy_sha256: pinned.rootfs.app_policy_sha256.to_string(),
                },
            }),
        ),
        guest(
            900,
            Event::AppReady(AppReady {
                app: "notes".into(),
                index: 0,
                pid: 40,
                ms: 50,
                tools: 3,
                programs: vec![AppProgram {
                    name: "notes".into(),
                    sha256: wasm_sha.into(),
                    code: CodeSource::Precompiled,
                    code_sha256: Some(code_sha.into()),
                    ms: 20,
                }],
                receipt_key: None,
            }),
        ),
        guest(901, Event::BootComplete(BootComplete { apps: 1 })),
        guest(
            2000,
            Event::PowerOff(PowerOff {
                reason: "requested".into(),
                exit_code: 0,
                killed: 0,
                unmount_failed: Vec::new(),
            }),
        ),
        vmm(HostEvent::Exit(ExitLine {
            status: "clean".into(),
            code: 0,
            message: "the guest powered off (requested)".into(),
        })),
    ]
}

/// One of berm-vmm's children as it measures it (vmm/src/measure.rs).
fn child(program: &str, pid: u32, role: &str, seccomp: &str, measured_by: &str) -> HostChild {
    HostChild {
        program: program.into(),
        pid,
        role: role.into(),
        landlock: Landlock::FullyEnforced,
        no_new_privs: true,
        seccomp: seccomp.into(),
        seccomp_mode: "filter".into(),
        seccomp_filters: 1,
        policy_sha256: POLICY_SHA.into(),
        measured_by: measured_by.into(),
        read_outside: None,
        connect_outside: None,
        view: None,
    }
}

/// berm-vmm's children in an honest QEMU run, each measured as berm-vmm measures it
/// (vmm/src/measure.rs): the exec'd ones by `/proc/PID/status` and a probe, the connector by
/// itself.
fn honest_children() -> Vec<HostChild> {
    let probed = |mut c: HostChild| {
        c.read_outside = Some("EACCES".into());
        c.connect_outside = Some("EPERM".into());
        c.view = Some("host".into());
        c
    };
    vec![
        probed(child(
            "/usr/bin/vhost-device-vsock",
            41,
            "vhost-device-vsock",
            "allow_list vhost-device-vsock",
            "proc_status+probe",
        )),
        probed(child(
            "/usr/bin/qemu-system-x86_64",
            42,
            "qemu",
            "allow_list qemu and -sandbox on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny",
            "proc_status+probe",
        )),
        child(
            "berm-vmm connector",
            43,
            "berm-vmm-connector",
            "allow_list berm-vmm-connector",
            "self_report",
        ),
    ]
}

/// An egress grant: a run with one starts the egress dialer.
fn net_grant() -> berm_abi::grant::Grant {
    "net=example.com".parse().unwrap()
}

/// The measurements line of `lines`, to change what was measured.
fn measurements_mut(lines: &mut [VmmLine]) -> &mut MeasurementsLine {
    lines
        .iter_mut()
        .find_map(|l| match l {
            VmmLine::Host(HostEvent::Measurements(m)) => Some(m),
            _ => None,
        })
        .expect("a measurements line")
}

/// The host_sandbox line of `lines`, to change what was measured.
fn sandbox_mut(lines: &mut [VmmLine]) -> &mut HostSandboxLine {
    lines
        .iter_mut()
        .find_map(|l| match l {
            VmmLine::Host(HostEvent::HostSandbox(h)) => Some(h),
            _ => None,
        })
        .expect("a host_sandbox line")
}

/// The record's child of berm-vmm whose role is `role`, to forge a field of.
fn child_mut<'a>(record: &'a mut Value, role: &str) -> &'a mut Value {
    record["host_sandbox"]["children"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|c| c["role"] == role)
        .unwrap_or_else(|| panic!("no {role} child in the record"))
}

fn record_of(lines: &[VmmLine]) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let mut text: String = lines.iter().map(VmmLine::to_line).collect();
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
    record["record_sha256"] = hash.into();
    record
}

/// Appends `words` to the record's kernel command line.
fn append_to_cmdline(record: &mut Value, words: &str) {
    let cmdline = record["kernel"]["cmdline"].as_str().unwrap().to_owned();
    record["kernel"]["cmdline"] = format!("{cmdline} {words}").into();
}

/// Drops the record's first `event` guest event.
fn remove_event(record: &mut Value, event: &str) {
    let i = event_index(record, event);
    record["guest"]["events"].as_array_mut().unwrap().remove(i);
}

/// The record's first `event` guest event, to forge a field of.
fn event_mut<'a>(record: &'a mut Value, event: &str) -> &'a mut Value {
    let i = event_index(record, event);
    &mut record["guest"]["events"][i]
}

fn event_index(record: &Value, event: &str) -> usize {
    record["guest"]["events"]
        .as_array()
        .unwrap()
        .iter()
        .position(|e| e["event"] == event)
        .unwrap_or_else(|| panic!("no {event} in the record"))
}

/// One tampered input: what was done, the measured field it forges (for the forgery suite),
/// the input, how it is verified and the one code expected.
struct Case {
    what: &'static str,
    field: Option<&'static str>,
    input: Value,
    verify: Box<dyn Fn(&Value) -> Verdict>,
    code: Code,
}

fn plain() -> Box<dyn Fn(&Value) -> Verdict> {
    Box::new(|record| verify(record, &pins()))
}

/// The measured field each corpus case with this `what` forges consistently.
const FORGED_FIELDS: &[(&str, &str)] = &[
    ("an unpinned kernel", "kernel"),
    ("a kernel parameter appended to the cmdline", "cmdline"),
    ("an unpinned rootfs", "rootfs"),
    ("another state disk", "state disk"),
    ("another app image", "app image"),
    ("a changed measured program digest", "program"),
    ("a changed code digest, the guest's left alone", "code"),
    (
        "an app under another policy than the pinned build's",
        "policy",
    ),
    ("berm-vmm's Landlock partially enforced", "host sandbox"),
    (
        "the connector measured unconfined by Landlock",
        "host child",
    ),
];

/// One tampered input per code.
fn corpus() -> Vec<Case> {
    let mut cases = Vec::new();
    let mut add = |what, edit: &dyn Fn(&mut Value), code| {
        let mut record = honest();
        edit(&mut record);
        cases.push(Case {
            what,
            field: FORGED_FIELDS.iter().find(|f| f.0 == what).map(|f| f.1),
            input: reseal(record),
            verify: plain(),
            code,
        });
    };
    add(
        "a changed program digest in app_ready",
        &|r| event_mut(r, "app_ready")["programs"][0]["sha256"] = "7".repeat(64).into(),
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
        &|r| append_to_cmdline(r, "X=1\" lsm=\"yama"),
        Code::CmdlineMismatch,
    );
    add(
        "a kernel parameter appended to the cmdline",
        &|r| append_to_cmdline(r, "init=/bin/sh"),
        Code::CmdlineMismatch,
    );
    add(
        "the pinned TCG words twice, the second time where guest settings go",
        &|r| {
            let tcg = pins().host().unwrap().kernel.tcg_cmdline.clone();
            let cmdline = format!(
                "{} {tcg} {tcg} BERM_APPS=1",
                pins().host().unwrap().kernel.cmdline
            );
            r["kernel"]["cmdline"] = cmdline.into();
        },
        Code::CmdlineMismatch,
    );
    add(
        "a mismatched boot id",
        &|r| event_mut(r, "app_started")["boot_id"] = "00000000-0000-0000-0000-000000000000".into(),
        Code::BootIdMismatch,
    );
    add(
        "a missing enforcement report",
        &|r| remove_event(r, "app_started"),
        Code::EnforcementMissing,
    );
    add(
        "Landlock partially enforced in the app",
        &|r| event_mut(r, "app_started")["enforcement"]["landlock"] = "partially_enforced".into(),
        Code::EnforcementWeak,
    );
    // The guest's seccomp word is typed (berm-init can only report `allow_list`): another is
    // not a weak record but not a record at all.
    add(
        "no seccomp filter on the app",
        &|r| event_mut(r, "app_started")["enforcement"]["seccomp"] = "none".into(),
        Code::RecordMalformed,
    );
    add(
        "no policy digest",
        &|r| event_mut(r, "app_started")["enforcement"]["policy_sha256"] = "".into(),
        Code::PolicyDigestMissing,
    );
    add(
        "an app under another policy than the pinned build's",
        &|r| event_mut(r, "app_started")["enforcement"]["policy_sha256"] = POLICY_SHA.into(),
        Code::PolicyMismatch,
    );
    add(
        "BERM_PROBE on the command line without the probe's measurement",
        &|r| append_to_cmdline(r, "BERM_PROBE=0"),
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
                json!({"event": "app_refused", "boot_id": BOOT_ID, "uptime_ms": 850, "app": "notes", "index": 0, "reason": "landlock not fully enforced"}),
            );
        },
        Code::AppRefused,
    );
    add(
        "an app that never became ready",
        &|r| remove_event(r, "app_ready"),
        Code::AppNotReady,
    );
    add(
        "a program loaded that the host never measured",
        &|r| {
            let i = event_index(r, "app_ready");
            r["guest"]["events"][i]["programs"]
                .as_array_mut()
                .unwrap()
                .push(
                    json!({"name": "extra", "sha256": "b".repeat(64), "code": "compiled",
                             "code_sha256": null, "ms": 5}),
                );
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
        &|r| r["test_probe"] = json!({"image": {"sha256": "c".repeat(64), "size": 4096}, "app": 0}),
        Code::TestProbePresent,
    );
    add(
        "no host_sandbox line",
        &|r| r["host_sandbox"] = Value::Null,
        Code::HostSandboxMissing,
    );
    add(
        "berm-vmm ran with --no-host-sandbox",
        &|r| {
            r["host_sandbox"]["enabled"] = false.into();
            r["host_sandbox"]["reason"] = "--no-host-sandbox".into();
        },
        Code::HostSandboxDisabled,
    );
    add(
        "berm-vmm's Landlock partially enforced",
        &|r| r["host_sandbox"]["landlock"] = "partially_enforced".into(),
        Code::HostSandboxWeak,
    );
    add(
        "the connector measured unconfined by Landlock",
        &|r| child_mut(r, "berm-vmm-connector")["landlock"] = "not_enforced".into(),
        Code::HostChildWeak,
    );
    add(
        "QEMU measured without a seccomp filter",
        &|r| {
            let qemu = child_mut(r, "qemu");
            qemu["seccomp_mode"] = "disabled".into();
            qemu["seccomp_filters"] = 0.into();
        },
        Code::HostChildWeak,
    );
    add(
        "vhost-device-vsock's probe read outside its ruleset",
        &|r| child_mut(r, "vhost-device-vsock")["read_outside"] = "allowed".into(),
        Code::HostChildWeak,
    );
    add(
        "vhost-device-vsock's probe connected outside its policy",
        &|r| child_mut(r, "vhost-device-vsock")["connect_outside"] = "allowed".into(),
        Code::HostChildWeak,
    );
    add(
        "QEMU's connect outside not measured (a record from before it was)",
        &|r| {
            child_mut(r, "qemu")
                .as_object_mut()
                .unwrap()
                .remove("connect_outside");
        },
        Code::HostChildUnmeasured,
    );
    add(
        "the egress vsock device without the view of its policy's paths",
        &|r| {
            let vhost = child_mut(r, "vhost-device-vsock");
            vhost["role"] = "vhost-device-vsock-egress".into();
            vhost["seccomp"] = "allow_list vhost-device-vsock-egress".into();
            vhost["view"] = "host".into();
        },
        Code::HostChildWeak,
    );
    add(
        "QEMU's measurement taken out",
        &|r| {
            r["host_sandbox"]["children"]
                .as_array_mut()
                .unwrap()
                .retain(|c| c["role"] != "qemu");
        },
        Code::HostChildUnmeasured,
    );
    add(
        "QEMU claimed to have measured itself",
        &|r| {
            let qemu = child_mut(r, "qemu");
            qemu["measured_by"] = "self_report".into();
            qemu.as_object_mut().unwrap().remove("read_outside");
        },
        Code::HostChildUnmeasured,
    );
    add(
        "a record from before children were measured",
        &|r| {
            r["host_sandbox"]
                .as_object_mut()
                .unwrap()
                .remove("children");
        },
        Code::HostChildUnmeasured,
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
            r["guest"]["boot_id"] = Value::Null;
            r["apps"] = json!([]);
        },
        Code::GuestMissing,
    );
    add(
        "a failed boot",
        &|r| {
            r["guest"]["events"].as_array_mut().unwrap().push(json!({
                "event": "boot_failed", "boot_id": BOOT_ID, "uptime_ms": 950, "step": "state",
                "message": "mount failed", "exit_code": 3
            }));
        },
        Code::BootFailed,
    );
    add(
        "a changed code digest, the guest's left alone",
        &|r| r["apps"][0]["code"][0]["sha256"] = "d".repeat(64).into(),
        Code::CodeDigestMismatch,
    );
    add(
        "the guest mapped other code",
        &|r| event_mut(r, "app_ready")["programs"][0]["code_sha256"] = "e".repeat(64).into(),
        Code::CodeDigestMismatch,
    );
    add(
        "the guest compiled the program itself",
        &|r| {
            let i = event_index(r, "app_ready");
            r["guest"]["events"][i]["programs"][0]["code"] = "compiled".into();
            r["guest"]["events"][i]["programs"][0]["code_sha256"] = Value::Null;
        },
        Code::CodeDigestMismatch,
    );
    // Edited after hashing: not re-sealed.
    let mut edited = honest();
    edited["run_dir"] = "/elsewhere".into();
    cases.push(Case {
        what: "edited after hashing",
        field: None,
        input: edited,
        verify: plain(),
        code: Code::RecordHashMismatch,
    });
    // An app that died while the VM ran: berm-init reports app_exited before any shutdown.
    let mut lines = honest_lines();
    let at = lines
        .iter()
        .position(|l| matches!(l, VmmLine::Guest(g) if matches!(g.event, Event::BootComplete(_))))
        .unwrap();
    lines.insert(
        at + 1,
        guest(
            1500,
            Event::AppExited(AppExited {
                app: "notes".into(),
                index: 0,
                pid: 40,
                code: None,
                signal: Some(9),
            }),
        ),
    );
    cases.push(Case {
        what: "an app that exited while the VM ran",
        field: None,
        input: record_of(&lines),
        verify: plain(),
        code: Code::AppExited,
    });
    cases.extend(expectation_cases());
    cases.extend(envelope_cases());
    cases.extend(code_cases());
    cases
}

/// What no pin covers, held to the verifier's own expectations.
fn expectation_cases() -> Vec<Case> {
    let expecting = |key: &str, sha: &str| -> Box<dyn Fn(&Value) -> Verdict> {
        let expect: BTreeMap<String, String> = [(key.to_owned(), sha.to_owned())].into();
        Box::new(move |record| {
            let options = Options {
                expect: expect.clone(),
                ..Options::default()
            };
            verify_with(record, &pins(), &options)
        })
    };
    let forged = |edit: &dyn Fn(&mut Value)| {
        let mut record = honest();
        edit(&mut record);
        reseal(record)
    };
    // The honest record meets both expectations.
    assert!(expecting("state", STATE_SHA)(&honest()).ok);
    assert!(expecting("app/notes/image", IMAGE_SHA)(&honest()).ok);
    vec![
        Case {
            what: "another state disk",
            field: Some("state disk"),
            input: forged(&|r| r["state"]["chunked_sha256"] = "f".repeat(64).into()),
            verify: expecting("state", STATE_SHA),
            code: Code::StateUnexpected,
        },
        Case {
            what: "another app image",
            field: Some("app image"),
            input: forged(&|r| r["apps"][0]["image"]["sha256"] = "f".repeat(64).into()),
            verify: expecting("app/notes/image", IMAGE_SHA),
            code: Code::AppImageUnexpected,
        },
    ]
}

fn host_key(dir: &Path) -> HostKey {
    HostKey::load_or_create(Some(&dir.join("host-key.pem"))).unwrap()
}

/// Verifies an input as `berm attest verify --key` does, with `key`'s public half.
fn with_key(key: &HostKey) -> Box<dyn Fn(&Value) -> Verdict> {
    let public = key.public();
    Box::new(move |input| {
        dsse::verify_document(input, Some(&public), &pins(), &Options::default()).verdict
    })
}

fn signed(key: &HostKey, record: &Value) -> Value {
    let record: Record = serde_json::from_value(record.clone()).unwrap();
    serde_json::to_value(dsse::sign(key, &record)).unwrap()
}

/// Signed records, checked with `--key`.
fn envelope_cases() -> Vec<Case> {
    let dir = tempfile::tempdir().unwrap();
    let key = host_key(dir.path());
    let other = host_key(&dir.path().join("other"));
    let envelope = signed(&key, &honest());
    assert!(with_key(&key)(&envelope).ok);
    let mut wrong_type = envelope.clone();
    wrong_type["payloadType"] = "application/json".into();
    let mut statement = dsse::statement(&serde_json::from_value(honest()).unwrap());
    statement["subject"][0]["digest"]["sha256"] = "0".repeat(64).into();
    vec![
        Case {
            what: "signed by another key",
            field: None,
            input: signed(&other, &honest()),
            verify: with_key(&key),
            code: Code::SignatureInvalid,
        },
        Case {
            what: "a bare record where a signed one is required",
            field: None,
            input: honest(),
            verify: with_key(&key),
            code: Code::SignatureMissing,
        },
        Case {
            what: "an envelope of another payload type",
            field: None,
            input: wrong_type,
            verify: with_key(&key),
            code: Code::EnvelopeMalformed,
        },
        Case {
            what: "a signed statement whose subjects are not its record's",
            field: None,
            input: serde_json::to_value(key.sign_statement(&statement)).unwrap(),
            verify: with_key(&key),
            code: Code::SubjectMismatch,
        },
    ]
}

/// The notes program, its digest, and the digest of its code for the guest, compiled here
/// with berm's engine directly (not through the code under test).
fn notes_and_its_code() -> (PathBuf, String, String, EngineMeasurement) {
    let path = berm_fixtures::example_path("notes");
    let wasm = std::fs::read(&path).unwrap();
    let engine = berm::Engine::compile_only(&berm::EngineConfig::vm()).unwrap();
    let code = engine.precompile(&wasm).unwrap();
    (
        path,
        hex::encode(Sha256::digest(&wasm)),
        hex::encode(Sha256::digest(&code.bytes)),
        EngineMeasurement {
            fingerprint: engine.fingerprint().into(),
            target: berm::PORTABLE_TARGET.into(),
        },
    )
}

/// A record of the real notes program and its real code.
fn real_code_record() -> (PathBuf, Value) {
    let (wasm, wasm_sha, code_sha, engine) = notes_and_its_code();
    (wasm, record_of(&lines_with(&wasm_sha, &code_sha, engine)))
}

fn with_programs(dir: &Path, cache: Option<&Path>, strict: bool) -> Box<dyn Fn(&Value) -> Verdict> {
    let programs = Programs::from_dir(dir)
        .unwrap()
        .with_cache(cache.map(Path::to_owned));
    Box::new(move |record| {
        let options = Options {
            programs: Some(&programs),
            ..Options::default()
        };
        let verdict = verify_with(record, &pins(), &options);
        if strict { verdict.strict() } else { verdict }
    })
}

/// Code re-derived from its program.
fn code_cases() -> Vec<Case> {
    let (wasm, record) = real_code_record();
    // The build output holds every example program; attest/src holds none. Uncached, so
    // every run compiles.
    let programs = wasm.parent().unwrap();
    let none = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    // A forger who changes the code digest on both sides, consistently.
    let mut forged = record.clone();
    forged["apps"][0]["code"][0]["sha256"] = "d".repeat(64).into();
    let i = event_index(&forged, "app_ready");
    forged["guest"]["events"][i]["programs"][0]["code_sha256"] = "d".repeat(64).into();
    vec![
        Case {
            what: "a code digest changed on both sides, consistently",
            field: Some("code"),
            input: reseal(forged),
            verify: with_programs(programs, None, false),
            code: Code::CodeNotReproduced,
        },
        Case {
            what: "code not re-derived (no program given), under --strict",
            field: None,
            input: record,
            verify: with_programs(&none, None, true),
            code: Code::CodeUnverified,
        },
    ]
}

#[test]
fn the_honest_record_verifies() {
    let record = honest();
    let verdict = verify(&record, &pins());
    assert!(verdict.ok, "{:#?}", verdict.problems);
    // Stable: building twice from the same run dir gives the same record and hash.
    let dir = tempfile::tempdir().unwrap();
    let text: String = honest_lines().iter().map(VmmLine::to_line).collect();
    std::fs::write(dir.path().join("vmm.jsonl"), text).unwrap();
    let once = Record::from_run_dir(dir.path()).unwrap();
    assert_eq!(once, Record::from_run_dir(dir.path()).unwrap());
    assert_eq!(record["format"], "berm-attest/2");
    assert_eq!(record["guest"]["boot_id"], BOOT_ID);
}

/// A version-2 record as version 1 wrote the same run: camelCase, each part a subset of its
/// line's fields, the guest's words as strings, no hypervisor child's `connectOutside` or
/// `view`; sealed with `recordSha256`.
fn as_version_1(r: &Value) -> Value {
    let pick = |v: &Value, fields: &[(&str, &str)]| -> Value {
        fields
            .iter()
            .filter(|(from, _)| !v[from].is_null() || v.get(from).is_some())
            .map(|(from, to)| (to.to_string(), v[from].clone()))
            .collect::<serde_json::Map<_, _>>()
            .into()
    };
    let apps: Vec<Value> = r["apps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            json!({
                "index": a["index"], "name": a["name"], "path": a["path"], "sha256": a["sha256"],
                "files": a["files"],
                "programs": a["programs"].as_array().unwrap().iter()
                    .map(|p| pick(p, &[("name", "name"), ("wasm", "wasm"), ("sha256", "sha256"), ("grants", "grants")]))
                    .collect::<Vec<_>>(),
                "image": a["image"],
                "code": a["code"].as_array().unwrap().iter()
                    .map(|c| pick(c, &[("program", "program"), ("sha256", "sha256")]))
                    .collect::<Vec<_>>(),
            })
        })
        .collect();
    let sandbox = &r["host_sandbox"];
    let children: Vec<Value> = sandbox["children"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            pick(
                c,
                &[
                    ("program", "program"),
                    ("role", "role"),
                    ("landlock", "landlock"),
                    ("no_new_privs", "noNewPrivs"),
                    ("seccomp", "seccomp"),
                    ("seccomp_mode", "seccompMode"),
                    ("seccomp_filters", "seccompFilters"),
                    ("policy_sha256", "policySha256"),
                    ("measured_by", "measuredBy"),
                    ("read_outside", "readOutside"),
                ],
            )
        })
        .collect();
    let events: Vec<Value> = r["guest"]["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let fields: &[(&str, &str)] = match e["event"].as_str().unwrap() {
                "boot_start" => &[
                    ("kernel_release", "kernelRelease"),
                    ("lsm", "lsm"),
                    ("landlock_abi", "landlockAbi"),
                ],
                "app_started" => &[
                    ("app", "app"),
                    ("index", "index"),
                    ("uid", "uid"),
                    ("pid", "pid"),
                    ("cgroup", "cgroup"),
                    ("limits", "limits"),
                ],
                "app_ready" => &[("app", "app"), ("index", "index")],
                "boot_complete" => &[("apps", "apps")],
                "power_off" => &[("reason", "reason"), ("exit_code", "exitCode")],
                other => panic!("the honest record has no {other}"),
            };
            let mut event = pick(e, fields);
            event["event"] = e["event"].clone();
            event["bootId"] = e["boot_id"].clone();
            if e["event"] == "app_started" {
                let en = &e["enforcement"];
                event["enforcement"] = pick(
                    en,
                    &[
                        ("no_new_privs", "noNewPrivs"),
                        ("landlock_abi", "landlockAbi"),
                        ("landlock", "landlock"),
                        ("seccomp", "seccomp"),
                        ("policy_sha256", "policySha256"),
                    ],
                );
            }
            if e["event"] == "app_ready" {
                event["programs"] = e["programs"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|p| {
                        pick(
                            p,
                            &[
                                ("name", "name"),
                                ("sha256", "sha256"),
                                ("code", "code"),
                                ("code_sha256", "codeSha256"),
                            ],
                        )
                    })
                    .collect::<Vec<_>>()
                    .into();
            }
            event
        })
        .collect();
    let old = json!({
        "format": "berm-attest/1",
        "runDir": r["run_dir"],
        "kernel": pick(&r["kernel"], &[("arch", "arch"), ("sha256", "sha256"), ("size", "size"), ("pinned", "pinned"), ("cmdline", "cmdline")]),
        "rootfs": pick(&r["rootfs"], &[("sha256", "sha256"), ("size", "size"), ("pinned", "pinned")]),
        "state": pick(&r["state"], &[("chunked_sha256", "chunkedSha256"), ("size_bytes", "sizeBytes"), ("created", "created")]),
        "apps": apps,
        "testProbe": null,
        "codeEngine": r["code_engine"],
        "hypervisor": pick(&r["hypervisor"], &[("chosen", "chosen"), ("accel", "accel")]),
        "hostSandbox": {
            "enabled": sandbox["enabled"], "landlockAbi": sandbox["landlock_abi"],
            "landlock": sandbox["landlock"], "seccomp": sandbox["seccomp"],
            "allowed": sandbox["allowed"], "policySha256": sandbox["policy_sha256"],
            "reason": sandbox["reason"], "children": children,
        },
        "guest": {"bootId": r["guest"]["boot_id"], "events": events},
        "exit": pick(&r["exit"], &[("status", "status"), ("code", "code")]),
        "recordSha256": "",
    });
    reseal_v1(old)
}

fn reseal_v1(mut record: Value) -> Value {
    record["recordSha256"] = berm_attest::record_sha256(&record).into();
    record
}

#[test]
fn a_version_1_record_still_verifies_without_the_connect_measurement_version_2_requires() {
    let old = as_version_1(&honest());
    let verdict = verify(&old, &pins());
    assert!(verdict.ok, "{:#?}", verdict.problems);
    assert_eq!(
        verdict.warnings.iter().map(|w| w.code).collect::<Vec<_>>(),
        vec![Code::CodeUnverified]
    );
    // Its hash covers the version-1 JSON as it was signed: an edit is seen.
    let mut edited = old.clone();
    edited["runDir"] = "/elsewhere".into();
    assert_eq!(
        verify(&edited, &pins()).codes(),
        vec![Code::RecordHashMismatch]
    );
    // Its checks are those of version 2: a forgery re-sealed is refused with its code.
    let mut forged = old.clone();
    forged["hostSandbox"]["children"][1]["landlock"] = "not_enforced".into();
    assert_eq!(
        verify(&reseal_v1(forged), &pins()).codes(),
        vec![Code::HostChildWeak]
    );
    // It keeps refusing fields it never had, and the other version's hash field.
    let mut extra = old.clone();
    extra["kernel"]["path"] = "/cache/vmlinux".into();
    assert_eq!(
        verify(&reseal_v1(extra), &pins()).codes(),
        vec![Code::RecordMalformed]
    );
    // Signed, it verifies too (its subjects are those it names).
    let dir = tempfile::tempdir().unwrap();
    let key = host_key(dir.path());
    let statement = dsse::statement(&Record::from_value(&old).unwrap());
    let mut statement = statement;
    statement["predicate"] = old.clone();
    let envelope = serde_json::to_value(key.sign_statement(&statement)).unwrap();
    let checked =
        dsse::verify_document(&envelope, Some(&key.public()), &pins(), &Options::default());
    assert!(checked.verdict.ok, "{:#?}", checked.verdict);

    // A version-2 record lacks what version 2 requires without the connect measurements.
    let mut unmeasured = honest();
    for child in unmeasured["host_sandbox"]["children"]
        .as_array_mut()
        .unwrap()
    {
        let child = child.as_object_mut().unwrap();
        child.remove("connect_outside");
        child.remove("view");
    }
    let verdict = verify(&reseal(unmeasured), &pins());
    assert!(!verdict.ok);
    assert_eq!(verdict.codes(), vec![Code::HostChildUnmeasured]);
}

#[test]
fn a_record_refuses_fields_its_types_do_not_write_and_guest_lines_it_does_not_keep() {
    let mut extra = honest();
    extra["host_sandbox"]["children"][0]["later"] = true.into();
    let verdict = verify(&reseal(extra), &pins());
    assert_eq!(verdict.codes(), vec![Code::RecordMalformed]);
    assert!(
        verdict.problems[0]
            .detail
            .contains("unknown field `host_sandbox.children[0].later`"),
        "{:#?}",
        verdict.problems
    );
    let mut log = honest();
    log["guest"]["events"].as_array_mut().unwrap().push(json!({
        "boot_id": BOOT_ID, "uptime_ms": 5, "event": "log", "level": "info",
        "source": "berm-init", "message": "hello"
    }));
    let verdict = verify(&reseal(log), &pins());
    assert_eq!(verdict.codes(), vec![Code::RecordMalformed]);
    // A record built from the run holds every line's fields and reads back as itself.
    let record = honest();
    assert_eq!(
        Record::from_value(&record).unwrap().to_value(),
        record,
        "the record round-trips"
    );
    assert_eq!(record["kernel"]["path"], "/cache/vmlinux");
    assert_eq!(record["guest"]["events"][0]["uptime_ms"], 800);
}

#[test]
fn the_pinned_tcg_words_after_the_pinned_cmdline_verify() {
    let pins = pins();
    assert!(
        !pins.host().unwrap().kernel.tcg_cmdline.is_empty(),
        "kernel/manifest.toml pins TCG words"
    );
    let mut record = honest();
    record["kernel"]["cmdline"] = format!(
        "{} {} BERM_HYPERVISOR=qemu BERM_APPS=1",
        pins.host().unwrap().kernel.cmdline,
        pins.host().unwrap().kernel.tcg_cmdline
    )
    .into();
    let record = reseal(record);
    let verdict = verify(&record, &pins);
    assert!(verdict.ok, "{:#?}", verdict.problems);
}

#[test]
fn each_tampered_record_is_refused_with_its_own_code() {
    let cases = corpus();
    for case in &cases {
        let verdict = (case.verify)(&case.input);
        assert!(!verdict.ok, "{}: accepted", case.what);
        assert_eq!(
            verdict.codes(),
            vec![case.code],
            "{}: {:#?}",
            case.what,
            verdict.problems
        );
    }
    eprintln!("corpus: {} tampered inputs", cases.len());
}

#[test]
fn the_corpus_covers_every_code() {
    let covered: BTreeSet<Code> = corpus().into_iter().map(|c| c.code).collect();
    for code in Code::ALL {
        assert!(covered.contains(&code), "no tampered record for {code}");
    }
}

#[test]
fn a_consistent_forgery_of_every_measured_field_is_refused_with_its_own_code() {
    let fields = [
        "kernel",
        "cmdline",
        "rootfs",
        "state disk",
        "app image",
        "program",
        "code",
        "policy",
        "host sandbox",
        "host child",
    ];
    let cases = corpus();
    let mut seen = BTreeMap::new();
    for case in cases.iter().filter(|c| c.field.is_some()) {
        // Re-sealed: the hash alone cannot be what refuses it.
        assert_eq!(
            case.input["record_sha256"],
            berm_attest::record_sha256(&case.input),
            "{}",
            case.what
        );
        let verdict = (case.verify)(&case.input);
        assert_eq!(verdict.codes(), vec![case.code], "{}", case.what);
        seen.insert(case.field.unwrap(), case.code);
    }
    for field in fields {
        assert!(seen.contains_key(field), "no consistent forgery of {field}");
    }
    // Each field has its own code.
    let distinct: BTreeSet<Code> = seen.values().copied().collect();
    assert_eq!(distinct.len(), seen.len(), "{seen:?}");
}

#[test]
fn the_honest_record_verifies_with_warnings_until_its_code_is_re_derived() {
    let verdict = verify(&honest(), &pins());
    assert!(verdict.ok);
    assert_eq!(
        verdict.warnings.iter().map(|w| w.code).collect::<Vec<_>>(),
        vec![Code::CodeUnverified]
    );
    assert!(!verdict.strict().ok);

    let (wasm, record) = real_code_record();
    let programs = tempfile::tempdir().unwrap();
    std::fs::copy(&wasm, programs.path().join("notes.wasm")).unwrap();
    let cache = tempfile::tempdir().unwrap();
    let verify = with_programs(programs.path(), Some(cache.path()), true);
    let verdict = verify(&record);
    assert!(verdict.ok && verdict.warnings.is_empty(), "{verdict:#?}");
    // Cached by program digest, engine fingerprint and target: the second verdict is the same
    // without the program.
    assert_eq!(std::fs::read_dir(cache.path()).unwrap().count(), 1);
    std::fs::remove_file(programs.path().join("notes.wasm")).unwrap();
    assert!(verify(&record).ok);
    let uncached = with_programs(programs.path(), Some(&cache.path().join("none")), true);
    assert_eq!(uncached(&record).codes(), vec![Code::CodeUnverified]);
    // Another engine's code is unverified, not refused: this berm cannot reproduce it.
    let mut other = record.clone();
    other["code_engine"]["fingerprint"] = "ffffffffffffffff".into();
    let verdict = with_programs(programs.path(), Some(cache.path()), false)(&reseal(other));
    assert!(verdict.ok);
    assert!(
        verdict.warnings[0].detail.contains("ffffffffffffffff"),
        "{verdict:#?}"
    );
}

#[test]
fn a_signed_record_verifies_with_its_key_and_no_other() {
    let dir = tempfile::tempdir().unwrap();
    let key = host_key(dir.path());
    let envelope = signed(&key, &honest());
    let checked =
        dsse::verify_document(&envelope, Some(&key.public()), &pins(), &Options::default());
    assert!(checked.verdict.ok, "{:#?}", checked.verdict);
    assert!(!checked.signature_unchecked);
    // The public key as `berm attest key` prints it and `--key` reads it.
    let public = dir.path().join("host.pub");
    std::fs::write(&public, key.public_pem()).unwrap();
    assert_eq!(dsse::read_public_key(&public).unwrap(), key.public());
    for i in 0..3 {
        let other = host_key(&dir.path().join(format!("other-{i}")));
        let verdict = dsse::verify_document(
            &envelope,
            Some(&other.public()),
            &pins(),
            &Options::default(),
        )
        .verdict;
        assert_eq!(verdict.codes(), vec![Code::SignatureInvalid]);
    }
    // Without a key the record inside is verified, and the caller is told the signature was
    // not checked.
    let unchecked = dsse::verify_document(&envelope, None, &pins(), &Options::default());
    assert!(unchecked.verdict.ok && unchecked.signature_unchecked);
}

#[test]
fn a_signed_record_with_any_byte_changed_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let key = host_key(dir.path());
    let public = key.public();
    let pins = pins();
    let text = serde_json::to_string(&signed(&key, &honest())).unwrap();
    let bytes = text.as_bytes();
    let mut refused = 0;
    for i in 0..bytes.len() {
        // Low bit: a neighbouring letter or digit; bit 5: the other case, or punctuation.
        for flip in [0x01u8, 0x20] {
            let mut changed = bytes.to_vec();
            changed[i] ^= flip;
            let verdict = match serde_json::from_slice::<Value>(&changed) {
                Err(_) => continue, // not JSON: the CLI refuses it as record_malformed
                Ok(value) => {
                    dsse::verify_document(&value, Some(&public), &pins, &Options::default()).verdict
                }
            };
            assert!(
                !verdict.ok,
                "byte {i} ({:?} -> {:?}) changed and still accepted",
                bytes[i] as char, changed[i] as char
            );
            refused += 1;
        }
    }
    eprintln!(
        "{} bytes, {refused} changed envelopes parsed and were refused",
        bytes.len()
    );
    assert!(refused > bytes.len());
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
            pins().host().unwrap().kernel.image.sha256.to_string()
        } else {
            pins().host().unwrap().rootfs.image.sha256.to_string()
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
    std::fs::write(dir.path().join("vmm.jsonl"), honest_lines()[0].to_line()).unwrap();
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

#[test]
fn a_record_with_an_unconfined_child_is_refused_naming_the_child() {
    let mut record = honest();
    let qemu = child_mut(&mut record, "qemu");
    qemu["landlock"] = "not_enforced".into();
    qemu["no_new_privs"] = false.into();
    qemu["read_outside"] = "allowed".into();
    let verdict = verify(&reseal(record), &pins());
    let details: Vec<(Code, &str)> = verdict
        .problems
        .iter()
        .map(|p| (p.code, p.detail.as_str()))
        .collect();
    assert_eq!(
        details,
        vec![
            (
                Code::HostChildWeak,
                "berm-vmm's child /usr/bin/qemu-system-x86_64 (role qemu, measured by proc_status+probe) ran with Landlock \"not_enforced\", no_new_privs false, seccomp mode \"filter\" (1 filters), filter \"allow_list qemu and -sandbox on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny\""
            ),
            (
                Code::HostChildWeak,
                "berm-vmm's child /usr/bin/qemu-system-x86_64 (role qemu): the probe of its ruleset read outside it with allowed, not EACCES"
            ),
        ]
    );
    // A run whose apps may reach the network has a dialer, and it must be measured too.
    let mut lines = honest_lines();
    measurements_mut(&mut lines).apps[0].programs[0].grants = vec![net_grant()];
    let verdict = verify(&record_of(&lines), &pins());
    assert_eq!(
        verdict
            .problems
            .iter()
            .map(|p| (p.code, p.detail.as_str()))
            .collect::<Vec<_>>(),
        vec![(
            Code::HostChildUnmeasured,
            "the record has no measurement of the egress dialer (role berm-vmm-dialer), which this run starts"
        )]
    );
}

/// An app with net grants: the vsock device connects to the dialer, so it must have run in
/// the view of its policy's paths, its connect outside refused there.
#[test]
fn an_egress_run_needs_its_vsock_device_confined_to_its_policys_paths() {
    let egress_lines = |view: &str, connect: &str| {
        let mut lines = honest_lines();
        measurements_mut(&mut lines).apps[0].programs[0].grants = vec![net_grant()];
        let children = &mut sandbox_mut(&mut lines).children;
        let vhost = children
            .iter_mut()
            .find(|c| c.role == "vhost-device-vsock")
            .unwrap();
        vhost.role = "vhost-device-vsock-egress".into();
        vhost.seccomp = "allow_list vhost-device-vsock-egress".into();
        vhost.view = Some(view.into());
        vhost.connect_outside = Some(connect.into());
        children.push(child(
            "berm-vmm dial",
            44,
            "berm-vmm-dialer",
            "allow_list berm-vmm-dialer",
            "self_report",
        ));
        lines
    };
    let problems = |lines: &[VmmLine]| -> Vec<(Code, String)> {
        verify(&record_of(lines), &pins())
            .problems
            .into_iter()
            .map(|p| (p.code, p.detail))
            .collect()
    };
    let honest = egress_lines("policy_paths", "ENOENT");
    let record = record_of(&honest);
    let kept = &child_mut(&mut record.clone(), "vhost-device-vsock-egress").clone();
    assert_eq!(kept["view"], "policy_paths", "{kept}");
    assert_eq!(kept["connect_outside"], "ENOENT", "{kept}");
    assert_eq!(problems(&honest), []);
    // Where the kernel refused the namespaces: the device saw the host, and connected out.
    assert_eq!(
        problems(&egress_lines("host", "allowed")),
        [
            (
                Code::HostChildWeak,
                "berm-vmm's child /usr/bin/vhost-device-vsock (role vhost-device-vsock-egress) connected to a Unix socket outside its policy (allowed), so it could reach any socket of the host's user".to_owned()
            ),
            (
                Code::HostChildWeak,
                "berm-vmm's child /usr/bin/vhost-device-vsock (role vhost-device-vsock-egress) may connect by pathname but saw the filesystem view \"host\", not only its policy's paths (policy_paths)".to_owned()
            ),
        ]
    );
}
