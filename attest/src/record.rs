//! The record and how it is built from a run dir's `vmm.jsonl`.
//!
//! Building is lenient about what it does not need (lines of other kinds, fields a later
//! berm-vmm or berm-init adds) and strict about the shape of what it keeps: the record's types
//! refuse unknown fields, so a verifier sees exactly the evidence that was hashed.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::canonical::record_sha256;

/// The record format this crate writes and verifies.
pub const FORMAT: &str = "berm-attest/1";

/// The run file berm-vmm writes (vmm/src/report.rs).
const RUN_RECORD: &str = "vmm.jsonl";
/// A run record larger than this is refused rather than read.
const MAX_RUN_RECORD: u64 = 64 << 20;

/// What one berm-vmm run booted and what its guest reported.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Record {
    /// [`FORMAT`].
    pub format: String,
    /// The run dir the record was built from.
    pub run_dir: String,
    /// The kernel berm-vmm booted.
    pub kernel: Kernel,
    /// The root filesystem.
    pub rootfs: Rootfs,
    /// The state disk, measured before the guest could write it.
    pub state: Option<State>,
    /// Every app, in port order, as berm-vmm measured it.
    pub apps: Vec<App>,
    /// The test-only enforcement probe, if this boot attached one (`--test-probe`).
    pub test_probe: Option<TestProbe>,
    /// The engine berm-vmm compiled every program's code with (absent without apps).
    pub code_engine: Option<CodeEngine>,
    /// The backend that ran the VM.
    pub hypervisor: Option<Hypervisor>,
    /// How berm-vmm confined itself (`None`: it never said).
    pub host_sandbox: Option<HostSandbox>,
    /// What the guest reported.
    pub guest: Guest,
    /// How the run ended, if it had ended when the record was made.
    pub exit: Option<Exit>,
    /// sha256 of the canonical JSON of this record without this field.
    pub record_sha256: String,
}

/// The kernel as measured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Kernel {
    /// sha256 of the vmlinux.
    pub sha256: String,
    /// Its size.
    pub size: u64,
    /// What berm-vmm said about it (the verifier re-derives this from the pins).
    pub pinned: bool,
    /// The complete command line it booted with.
    pub cmdline: String,
}

/// The rootfs as measured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Rootfs {
    /// sha256 of the image.
    pub sha256: String,
    /// Its size.
    pub size: u64,
    /// What berm-vmm said about it.
    pub pinned: bool,
}

/// The state disk as measured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct State {
    /// sha256 over its per-MiB chunk hashes.
    pub chunked_sha256: String,
    /// Its size.
    pub size_bytes: u64,
    /// Whether berm-vmm created it on this run.
    pub created: bool,
}

/// One app as measured on the host.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct App {
    /// Port order: uid 10000+i, vsock 5000+i.
    pub index: u64,
    /// Its name, once berm-vmm reports one.
    pub name: Option<String>,
    /// The folder.
    pub path: String,
    /// Digest of the folder's files.
    pub sha256: String,
    /// How many files.
    pub files: u64,
    /// Every program image in it.
    pub programs: Vec<MeasuredProgram>,
    /// The app's disk image, once berm-vmm builds one.
    pub image: Option<MeasuredImage>,
    /// Precompiled code per program.
    pub code: Vec<MeasuredCode>,
}

/// The enforcement probe a test boot attached.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TestProbe {
    /// sha256 of the probe's disk image.
    pub image_sha256: String,
    /// The app whose confinement it ran under.
    pub app: u64,
}

/// A program image measured on the host.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MeasuredProgram {
    /// The program's name.
    pub name: String,
    /// The file in the app folder.
    pub wasm: String,
    /// sha256 of the wasm file.
    pub sha256: String,
}

/// An app's disk image.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MeasuredImage {
    /// sha256 of the image.
    pub sha256: String,
    /// Its size.
    pub size: u64,
}

/// Precompiled code for one program.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MeasuredCode {
    /// The program.
    pub program: String,
    /// sha256 of the code.
    pub sha256: String,
}

/// The WebAssembly engine a run's code was compiled with: what re-deriving it needs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CodeEngine {
    /// berm's engine fingerprint (Wasmtime's version and every compiler and ISA setting).
    pub fingerprint: String,
    /// The target triple the code is for.
    pub target: String,
}

/// The backend.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Hypervisor {
    /// `krun` or `qemu`.
    pub chosen: String,
    /// QEMU's accelerator (`kvm`, `tcg`).
    pub accel: Option<String>,
}

/// berm-vmm's `host_sandbox` line.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HostSandbox {
    /// Whether berm-vmm was confined.
    pub enabled: bool,
    /// The host kernel's Landlock ABI.
    pub landlock_abi: u64,
    /// `fully_enforced`, `partially_enforced` or `not_enforced`.
    pub landlock: String,
    /// `allow_list` or `none`.
    pub seccomp: String,
    /// The allowed syscalls, argument rules in parentheses.
    pub allowed: Vec<String>,
    /// sha256 of the policy.
    pub policy_sha256: String,
    /// Why it was off.
    pub reason: Option<String>,
}

/// What the guest reported, in order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Guest {
    /// The boot id of the control connection's greeting.
    pub boot_id: Option<String>,
    /// The lifecycle events that matter to the verdict.
    pub events: Vec<GuestEvent>,
}

/// One guest event kept in the record.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(
    tag = "event",
    rename_all = "snake_case",
    rename_all_fields = "camelCase",
    deny_unknown_fields
)]
pub enum GuestEvent {
    /// PID 1 started.
    BootStart {
        /// The boot it belongs to.
        boot_id: String,
        /// The guest kernel.
        kernel_release: String,
        /// Active LSMs.
        lsm: Vec<String>,
        /// The guest's Landlock ABI.
        landlock_abi: Option<u64>,
    },
    /// An app's bermd was started, confined.
    AppStarted {
        /// The boot it belongs to.
        boot_id: String,
        /// Its name.
        app: String,
        /// Its index.
        index: u64,
        /// Its uid.
        uid: u64,
        /// Its pid.
        pid: u64,
        /// Its cgroup.
        cgroup: String,
        /// Its cgroup limits as read back.
        limits: Value,
        /// How it is confined.
        enforcement: Enforcement,
    },
    /// An app answers.
    AppReady {
        /// The boot it belongs to.
        boot_id: String,
        /// Its name.
        app: String,
        /// Its index.
        index: u64,
        /// The programs it loaded.
        programs: Vec<ReadyProgram>,
    },
    /// An app was refused.
    AppRefused {
        /// The boot it belongs to.
        boot_id: String,
        /// Its name.
        app: String,
        /// Its index.
        index: u64,
        /// Why.
        reason: String,
    },
    /// An app ended.
    AppExited {
        /// The boot it belongs to.
        boot_id: String,
        /// Its name.
        app: String,
        /// Its index.
        index: u64,
        /// Its exit code.
        code: Option<i64>,
        /// The signal that ended it.
        signal: Option<Value>,
    },
    /// Boot finished.
    BootComplete {
        /// The boot it belongs to.
        boot_id: String,
        /// How many apps run.
        apps: u64,
    },
    /// Boot failed.
    BootFailed {
        /// The boot it belongs to.
        boot_id: String,
        /// Where.
        step: String,
        /// Why.
        message: String,
    },
    /// The guest powered off.
    PowerOff {
        /// The boot it belongs to.
        boot_id: String,
        /// Why.
        reason: String,
        /// berm-init's exit code.
        exit_code: i64,
    },
}

impl GuestEvent {
    /// The boot id the event carries.
    pub fn boot_id(&self) -> &str {
        match self {
            Self::BootStart { boot_id, .. }
            | Self::AppStarted { boot_id, .. }
            | Self::AppReady { boot_id, .. }
            | Self::AppRefused { boot_id, .. }
            | Self::AppExited { boot_id, .. }
            | Self::BootComplete { boot_id, .. }
            | Self::BootFailed { boot_id, .. }
            | Self::PowerOff { boot_id, .. } => boot_id,
        }
    }
}

/// How the guest confined one app.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Enforcement {
    /// `no_new_privs` set.
    pub no_new_privs: bool,
    /// The guest's Landlock ABI.
    pub landlock_abi: u64,
    /// `fully_enforced`, `partially_enforced` or `not_enforced`.
    pub landlock: String,
    /// `filter` or `none`.
    pub seccomp: String,
    /// sha256 of the app's policy.
    pub policy_sha256: String,
}

/// A program as the guest loaded it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReadyProgram {
    /// Its name.
    pub name: String,
    /// sha256 of the wasm the guest loaded.
    pub sha256: String,
    /// How its code was obtained (as the guest reports it).
    pub code: Option<Value>,
    /// sha256 of the code file the guest mapped, as it reports it.
    pub code_sha256: Option<String>,
}

/// How the run ended.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Exit {
    /// berm-vmm's status name.
    pub status: String,
    /// Its exit code.
    pub code: i64,
}

/// Why a record could not be built from a run dir.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// `vmm.jsonl` could not be read.
    #[error("reading {path} failed (is this a berm-vmm run dir?)")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// `vmm.jsonl` is larger than a run writes.
    #[error("{path} is {size} bytes, more than the {MAX_RUN_RECORD} bytes a run record may have")]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// Its size.
        size: u64,
    },
    /// No `measurements` line: the run stopped before berm-vmm measured anything.
    #[error("{0} has no measurements line: the run stopped before berm-vmm measured what it boots")]
    NoMeasurements(PathBuf),
    /// A line berm-vmm writes has the wrong shape.
    #[error("{path} line {line}: the {event} line {problem}")]
    Malformed {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// Which event.
        event: String,
        /// What is wrong.
        problem: String,
    },
}

fn str_of(v: &Value, key: &str) -> Option<String> {
    v.get(key).and_then(Value::as_str).map(str::to_owned)
}

fn u64_of(v: &Value, key: &str) -> Option<u64> {
    v.get(key).and_then(Value::as_u64)
}

impl Record {
    /// Builds the record of the run in `run_dir` from its `vmm.jsonl`.
    pub fn from_run_dir(run_dir: &Path) -> Result<Self, BuildError> {
        let path = run_dir.join(RUN_RECORD);
        let read = |source| BuildError::Read {
            path: path.clone(),
            source,
        };
        let size = std::fs::metadata(&path).map_err(read)?.len();
        if size > MAX_RUN_RECORD {
            return Err(BuildError::TooLarge { path, size });
        }
        let text = std::fs::read_to_string(&path).map_err(read)?;
        Self::from_lines(run_dir, &path, &text)
    }

    fn from_lines(run_dir: &Path, path: &Path, text: &str) -> Result<Self, BuildError> {
        let mut measurements = None;
        let mut hypervisor = None;
        let mut host_sandbox = None;
        let mut greeted_boot_id = None;
        let mut exit = None;
        let mut events = Vec::new();
        for (i, line) in text.lines().enumerate() {
            // A run killed mid-write can leave a torn last line; it carries nothing usable.
            let Ok(value) = serde_json::from_str::<Value>(line) else {
                continue;
            };
            let malformed = |event: &str, problem: String| BuildError::Malformed {
                path: path.to_owned(),
                line: i + 1,
                event: event.to_owned(),
                problem,
            };
            let event = str_of(&value, "event").unwrap_or_default();
            match (value.get("source").and_then(Value::as_str), event.as_str()) {
                (Some("berm-vmm"), "measurements") => measurements = Some((i + 1, value)),
                (Some("berm-vmm"), "hypervisor") => {
                    hypervisor = Some(Hypervisor {
                        chosen: str_of(&value, "chosen").unwrap_or_default(),
                        accel: str_of(&value, "accel"),
                    })
                }
                (Some("berm-vmm"), "host_sandbox") => {
                    host_sandbox =
                        Some(host_sandbox_of(&value).map_err(|p| malformed("host_sandbox", p))?)
                }
                (Some("berm-vmm"), "guest_greeted") => greeted_boot_id = str_of(&value, "boot_id"),
                (Some("berm-vmm"), "exit") => {
                    exit = Some(Exit {
                        status: str_of(&value, "status").unwrap_or_default(),
                        code: value.get("code").and_then(Value::as_i64).unwrap_or(-1),
                    })
                }
                (Some("berm-init"), _) => {
                    if let Some(kept) = guest_event(&value).map_err(|p| malformed(&event, p))? {
                        events.push(kept);
                    }
                }
                _ => {}
            }
        }
        let Some((line, m)) = measurements else {
            return Err(BuildError::NoMeasurements(path.to_owned()));
        };
        let malformed = |problem: String| BuildError::Malformed {
            path: path.to_owned(),
            line,
            event: "measurements".into(),
            problem,
        };
        let (kernel, rootfs, state, apps, test_probe) = measured(&m).map_err(malformed)?;
        let code_engine = match m.get("engine") {
            None | Some(Value::Null) => None,
            Some(e) => Some(CodeEngine {
                fingerprint: need(str_of(e, "fingerprint"), "engine.fingerprint")
                    .map_err(malformed)?,
                target: need(str_of(e, "target"), "engine.target").map_err(malformed)?,
            }),
        };
        let boot_id = greeted_boot_id.or_else(|| events.first().map(|e| e.boot_id().to_owned()));
        let mut record = Record {
            format: FORMAT.into(),
            run_dir: run_dir.display().to_string(),
            kernel,
            rootfs,
            state,
            apps,
            test_probe,
            code_engine,
            hypervisor,
            host_sandbox,
            guest: Guest { boot_id, events },
            exit,
            record_sha256: String::new(),
        };
        record.seal();
        Ok(record)
    }

    /// Sets `recordSha256` to the hash of everything else.
    pub fn seal(&mut self) {
        self.record_sha256 = record_sha256(&self.to_value());
    }

    /// The record as a JSON value.
    pub fn to_value(&self) -> Value {
        // A record holds only strings, integers, booleans, arrays and maps: serializing it
        // cannot fail.
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

fn need<T>(value: Option<T>, what: &str) -> Result<T, String> {
    value.ok_or_else(|| format!("has no {what}"))
}

type Measured = (Kernel, Rootfs, Option<State>, Vec<App>, Option<TestProbe>);

fn measured(m: &Value) -> Result<Measured, String> {
    let k = need(m.get("kernel"), "kernel")?;
    let kernel = Kernel {
        sha256: need(str_of(k, "sha256"), "kernel.sha256")?,
        size: need(u64_of(k, "size"), "kernel.size")?,
        pinned: k.get("pinned").and_then(Value::as_bool).unwrap_or(false),
        cmdline: need(str_of(k, "cmdline"), "kernel.cmdline")?,
    };
    let r = need(m.get("rootfs"), "rootfs")?;
    let rootfs = Rootfs {
        sha256: need(str_of(r, "sha256"), "rootfs.sha256")?,
        size: need(u64_of(r, "size"), "rootfs.size")?,
        pinned: r.get("pinned").and_then(Value::as_bool).unwrap_or(false),
    };
    let state = match m.get("state") {
        None | Some(Value::Null) => None,
        Some(s) => Some(State {
            chunked_sha256: need(str_of(s, "chunked_sha256"), "state.chunked_sha256")?,
            size_bytes: need(u64_of(s, "size_bytes"), "state.size_bytes")?,
            created: s.get("created").and_then(Value::as_bool).unwrap_or(false),
        }),
    };
    let mut apps = Vec::new();
    for a in m
        .get("apps")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
    {
        let programs = a
            .get("programs")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .map(|p| {
                Ok(MeasuredProgram {
                    name: need(str_of(p, "name"), "programs[].name")?,
                    wasm: str_of(p, "wasm").unwrap_or_default(),
                    sha256: need(str_of(p, "sha256"), "programs[].sha256")?,
                })
            })
            .collect::<Result<_, String>>()?;
        let code = a
            .get("code")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .map(|c| {
                Ok(MeasuredCode {
                    program: need(str_of(c, "program"), "code[].program")?,
                    sha256: need(str_of(c, "sha256"), "code[].sha256")?,
                })
            })
            .collect::<Result<_, String>>()?;
        let image = match a.get("image") {
            None | Some(Value::Null) => None,
            Some(i) => Some(MeasuredImage {
                sha256: need(str_of(i, "sha256"), "image.sha256")?,
                size: need(u64_of(i, "size"), "image.size")?,
            }),
        };
        apps.push(App {
            index: need(u64_of(a, "index"), "apps[].index")?,
            name: str_of(a, "name"),
            path: str_of(a, "path").unwrap_or_default(),
            sha256: need(str_of(a, "sha256"), "apps[].sha256")?,
            files: u64_of(a, "files").unwrap_or(0),
            programs,
            image,
            code,
        });
    }
    let test_probe = match m.get("test_probe") {
        None | Some(Value::Null) => None,
        Some(t) => Some(TestProbe {
            image_sha256: need(
                t.get("image").and_then(|i| str_of(i, "sha256")),
                "test_probe.image.sha256",
            )?,
            app: need(u64_of(t, "app"), "test_probe.app")?,
        }),
    };
    Ok((kernel, rootfs, state, apps, test_probe))
}

fn host_sandbox_of(v: &Value) -> Result<HostSandbox, String> {
    Ok(HostSandbox {
        enabled: need(v.get("enabled").and_then(Value::as_bool), "enabled")?,
        landlock_abi: u64_of(v, "landlock_abi").unwrap_or(0),
        landlock: need(str_of(v, "landlock"), "landlock")?,
        seccomp: need(str_of(v, "seccomp"), "seccomp")?,
        allowed: v
            .get("allowed")
            .and_then(Value::as_array)
            .map(|d| {
                d.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default(),
        policy_sha256: str_of(v, "policy_sha256").unwrap_or_default(),
        reason: str_of(v, "reason"),
    })
}

/// The guest events the record keeps; `Ok(None)` for the others (logs, status, …).
fn guest_event(v: &Value) -> Result<Option<GuestEvent>, String> {
    let boot_id = need(str_of(v, "boot_id"), "boot_id")?;
    let app = || need(str_of(v, "app"), "app");
    let index = || need(u64_of(v, "index"), "index");
    let event = match str_of(v, "event").as_deref() {
        Some("boot_start") => GuestEvent::BootStart {
            boot_id,
            kernel_release: str_of(v, "kernel_release").unwrap_or_default(),
            lsm: v
                .get("lsm")
                .and_then(Value::as_array)
                .map(|l| {
                    l.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default(),
            landlock_abi: u64_of(v, "landlock_abi"),
        },
        Some("app_started") => {
            let e = need(v.get("enforcement"), "enforcement")?;
            GuestEvent::AppStarted {
                boot_id,
                app: app()?,
                index: index()?,
                uid: u64_of(v, "uid").unwrap_or(0),
                pid: u64_of(v, "pid").unwrap_or(0),
                cgroup: str_of(v, "cgroup").unwrap_or_default(),
                limits: v.get("limits").cloned().unwrap_or(Value::Null),
                enforcement: Enforcement {
                    no_new_privs: e
                        .get("no_new_privs")
                        .and_then(Value::as_bool)
                        .unwrap_or(false),
                    landlock_abi: u64_of(e, "landlock_abi").unwrap_or(0),
                    landlock: str_of(e, "landlock").unwrap_or_default(),
                    seccomp: str_of(e, "seccomp").unwrap_or_default(),
                    policy_sha256: str_of(e, "policy_sha256").unwrap_or_default(),
                },
            }
        }
        Some("app_ready") => GuestEvent::AppReady {
            boot_id,
            app: app()?,
            index: index()?,
            programs: v
                .get("programs")
                .and_then(Value::as_array)
                .map(Vec::as_slice)
                .unwrap_or_default()
                .iter()
                .map(|p| {
                    Ok(ReadyProgram {
                        name: need(str_of(p, "name"), "programs[].name")?,
                        sha256: need(str_of(p, "sha256"), "programs[].sha256")?,
                        code: p.get("code").cloned(),
                        code_sha256: str_of(p, "code_sha256"),
                    })
                })
                .collect::<Result<_, String>>()?,
        },
        Some("app_refused") => GuestEvent::AppRefused {
            boot_id,
            app: app()?,
            index: index()?,
            reason: str_of(v, "reason").unwrap_or_default(),
        },
        Some("app_exited") => GuestEvent::AppExited {
            boot_id,
            app: app()?,
            index: index()?,
            code: v.get("code").and_then(Value::as_i64),
            signal: v.get("signal").cloned(),
        },
        Some("boot_complete") => GuestEvent::BootComplete {
            boot_id,
            apps: u64_of(v, "apps").unwrap_or(0),
        },
        Some("boot_failed") => GuestEvent::BootFailed {
            boot_id,
            step: str_of(v, "step").unwrap_or_default(),
            message: str_of(v, "message").unwrap_or_default(),
        },
        Some("power_off") => GuestEvent::PowerOff {
            boot_id,
            reason: str_of(v, "reason").unwrap_or_default(),
            exit_code: v.get("exit_code").and_then(Value::as_i64).unwrap_or(-1),
        },
        _ => return Ok(None),
    };
    Ok(Some(event))
}
