//! The record and how it is built from a run dir's `vmm.jsonl`.
//!
//! Building is lenient about what it does not need (lines of other kinds, fields a later
//! berm-vmm or berm-init adds) and strict about the shape of what it keeps: the record's types
//! refuse unknown fields, so a verifier sees exactly the evidence that was hashed.

use std::path::{Path, PathBuf};

use berm_vm_protocol::host::{
    AppMeasurement, ExitLine, HostSandboxLine, HypervisorLine, MeasurementsLine,
};
use berm_vm_protocol::{Event, GuestLine, HostEvent, VmmLine, VmmLineError};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::canonical::record_sha256;

/// The record format this crate writes and verifies. Version 2 added each hypervisor
/// child's `connectOutside` and `view`, which `verify` requires of it.
pub const FORMAT: &str = "berm-attest/2";

/// The format before [`FORMAT`], still verified: its records predate the measurement of the
/// hypervisor children's connect outside their policy, which is therefore not required of
/// them (and the rest is checked as for version 2).
pub const FORMAT_V1: &str = "berm-attest/1";

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
    /// The guest architecture the kernel is for (`x86_64`, `aarch64`): which pins apply.
    /// Records from before berm built more than one name none, and were x86_64.
    #[serde(default = "berm_vm_protocol::host::default_arch")]
    pub arch: String,
    /// sha256 of the kernel file.
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
    /// Its measured grants (egress, `net=` and `secret:NAME=HOST`, never a value, which the
    /// host dialer enforced; and `call=`, the programs it may call), typed as bermd reads
    /// them; absent when it has none (and in records from before issue 15).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub grants: Vec<berm_abi::grant::Grant>,
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
    /// berm-vmm's confined children (the connector, the egress dialer, QEMU and
    /// vhost-device-vsock or the libkrun child), each as measured. Absent in records from
    /// before berm measured them, which `berm attest verify` refuses for a confined run
    /// (`host_child_unmeasured`).
    #[serde(default)]
    pub children: Vec<HostChild>,
}

/// One confined child of berm-vmm, as measured (vmm/src/measure.rs): by itself once confined
/// (`self_report`: the connector, the dialer, krun-enter), or by berm-vmm from its
/// `/proc/PID/status` and a probe of its ruleset (`proc_status+probe`: QEMU,
/// vhost-device-vsock).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HostChild {
    /// The program (`berm-vmm connector`, `berm-vmm dial`, `berm-vmm krun-enter`, or the
    /// path of QEMU or vhost-device-vsock).
    pub program: String,
    /// Its seccomp role.
    pub role: String,
    /// Landlock as measured: `fully_enforced`, `partially_enforced` or `not_enforced`.
    pub landlock: String,
    /// `NoNewPrivs` as measured.
    pub no_new_privs: bool,
    /// The filter berm-vmm installed (`allow_list ROLE`, for QEMU `… and -sandbox …`).
    pub seccomp: String,
    /// The seccomp mode as measured: `filter`, `strict` or `disabled`.
    pub seccomp_mode: String,
    /// How many seccomp filters the kernel showed.
    pub seccomp_filters: u64,
    /// sha256 of the child's policy.
    pub policy_sha256: String,
    /// `self_report` or `proc_status+probe`.
    pub measured_by: String,
    /// `proc_status+probe` only: what the probe's read outside the policy gave (`EACCES`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_outside: Option<String>,
    /// The hypervisor children (QEMU, vhost-device-vsock, krun-enter): what a connect to a
    /// Unix socket outside every policy gave under the child's confinement (`ENOENT` in the
    /// view of its policy's paths, `EPERM` where its seccomp list has no `connect`,
    /// `allowed` where nothing stopped it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connect_outside: Option<String>,
    /// The same children: what they saw of the filesystem, `policy_paths` (only the paths
    /// their policy grants: vmm/src/view.rs) or `host`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub view: Option<String>,
}

impl From<berm_vm_protocol::host::HostChild> for HostChild {
    fn from(c: berm_vm_protocol::host::HostChild) -> Self {
        HostChild {
            program: c.program,
            role: c.role,
            landlock: c.landlock.name().into(),
            no_new_privs: c.no_new_privs,
            seccomp: c.seccomp,
            seccomp_mode: c.seccomp_mode,
            seccomp_filters: c.seccomp_filters.into(),
            policy_sha256: c.policy_sha256,
            measured_by: c.measured_by,
            read_outside: c.read_outside,
            connect_outside: c.connect_outside,
            view: c.view,
        }
    }
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
        let mut lines = Lines::default();
        let mut malformed = None;
        for (i, line) in text.lines().enumerate() {
            if let Err((event, problem)) = lines.keep(line) {
                malformed.get_or_insert(BuildError::Malformed {
                    path: path.to_owned(),
                    line: i + 1,
                    event,
                    problem,
                });
            }
        }
        // A run dir without any measurements line says more than a bad line of another kind.
        let m = match (lines.measurements.take(), malformed) {
            (Some(m), None) => m,
            (None, _) if !lines.saw_measurements => {
                return Err(BuildError::NoMeasurements(path.to_owned()));
            }
            (_, Some(error)) => return Err(error),
            (None, None) => return Err(BuildError::NoMeasurements(path.to_owned())),
        };
        let boot_id = lines
            .greeted_boot_id
            .or_else(|| lines.events.first().map(|e| e.boot_id().to_owned()));
        let mut record = Record {
            format: FORMAT.into(),
            run_dir: run_dir.display().to_string(),
            kernel: Kernel {
                arch: m.kernel.arch,
                sha256: m.kernel.sha256,
                size: m.kernel.size,
                pinned: m.kernel.pinned,
                cmdline: m.kernel.cmdline,
            },
            rootfs: Rootfs {
                sha256: m.rootfs.sha256,
                size: m.rootfs.size,
                pinned: m.rootfs.pinned,
            },
            state: m.state.map(|s| State {
                chunked_sha256: s.chunked_sha256,
                size_bytes: s.size_bytes,
                created: s.created,
            }),
            apps: m.apps.into_iter().map(App::from).collect(),
            code_engine: m.engine.map(|e| CodeEngine {
                fingerprint: e.fingerprint,
                target: e.target,
            }),
            test_probe: m.test_probe.map(|t| TestProbe {
                image_sha256: t.image.sha256,
                app: t.app.into(),
            }),
            hypervisor: lines.hypervisor.map(|h| Hypervisor {
                chosen: h.chosen.name().into(),
                accel: h.accel,
            }),
            host_sandbox: lines.host_sandbox.map(|h| HostSandbox {
                enabled: h.enabled,
                landlock_abi: h.landlock_abi.into(),
                landlock: h.landlock.name().into(),
                seccomp: h.seccomp,
                allowed: h.allowed,
                policy_sha256: h.policy_sha256,
                reason: h.reason,
                children: h.children.into_iter().map(HostChild::from).collect(),
            }),
            guest: Guest {
                boot_id,
                events: lines.events,
            },
            exit: lines.exit.map(|e| Exit {
                status: e.status,
                code: e.code.into(),
            }),
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

/// The lines of a run that the record is made of, each parsed with the type its writer used.
#[derive(Default)]
struct Lines {
    saw_measurements: bool,
    measurements: Option<MeasurementsLine>,
    hypervisor: Option<HypervisorLine>,
    host_sandbox: Option<HostSandboxLine>,
    greeted_boot_id: Option<String>,
    exit: Option<ExitLine>,
    events: Vec<GuestEvent>,
}

impl Lines {
    /// Keeps what `line` contributes; lines of other kinds (berm-vmm's words for a person, a
    /// torn last line, events a later berm-vmm adds) are passed over. On a line of a kept kind
    /// that does not parse: the event's name and what is wrong with it.
    fn keep(&mut self, line: &str) -> Result<(), (String, String)> {
        match VmmLine::parse(line) {
            Ok(VmmLine::Host(event)) => match event {
                HostEvent::Measurements(m) => {
                    self.saw_measurements = true;
                    self.measurements = Some(m);
                }
                HostEvent::Hypervisor(h) => self.hypervisor = Some(h),
                HostEvent::HostSandbox(h) => self.host_sandbox = Some(h),
                HostEvent::GuestGreeted(g) => self.greeted_boot_id = Some(g.boot_id),
                HostEvent::Exit(e) => self.exit = Some(e),
                _ => {}
            },
            Ok(VmmLine::Guest(line)) => {
                if let Some(kept) = GuestEvent::of(line) {
                    self.events.push(kept);
                }
            }
            Err(VmmLineError::Shape { event, message }) => {
                if event == "measurements" {
                    self.saw_measurements = true;
                }
                if KEPT.contains(&event.as_str()) {
                    return Err((event, message));
                }
            }
            Err(VmmLineError::Guest(e)) => return Err(("guest".into(), e.to_string())),
            Err(_) => {}
        }
        Ok(())
    }
}

/// berm-vmm's events the record is made of: one of these that does not parse spoils the
/// record; another kind's does not.
const KEPT: [&str; 5] = [
    "measurements",
    "hypervisor",
    "host_sandbox",
    "guest_greeted",
    "exit",
];

impl From<AppMeasurement> for App {
    fn from(a: AppMeasurement) -> Self {
        App {
            index: a.index.into(),
            name: Some(a.name),
            path: a.path.display().to_string(),
            sha256: a.sha256,
            files: a.files,
            programs: a
                .programs
                .into_iter()
                .map(|p| MeasuredProgram {
                    name: p.name,
                    wasm: p.wasm,
                    sha256: p.sha256,
                    grants: p.grants,
                })
                .collect(),
            image: Some(MeasuredImage {
                sha256: a.image.sha256,
                size: a.image.size,
            }),
            code: a
                .code
                .into_iter()
                .map(|c| MeasuredCode {
                    program: c.program,
                    sha256: c.sha256,
                })
                .collect(),
        }
    }
}

impl GuestEvent {
    /// The record's form of a guest event it keeps; `None` for the others (logs, status, …).
    fn of(line: GuestLine) -> Option<Self> {
        let boot_id = line.boot_id;
        Some(match line.event {
            Event::BootStart(e) => GuestEvent::BootStart {
                boot_id,
                kernel_release: e.kernel_release,
                lsm: e.lsm,
                landlock_abi: e.landlock_abi.map(u64::from),
            },
            Event::AppStarted(e) => GuestEvent::AppStarted {
                boot_id,
                app: e.app,
                index: e.index.into(),
                uid: e.uid.into(),
                pid: e.pid.into(),
                cgroup: e.cgroup,
                // Limits hold strings only: they serialize.
                limits: serde_json::to_value(e.limits).unwrap_or(Value::Null),
                enforcement: Enforcement {
                    no_new_privs: e.enforcement.no_new_privs,
                    landlock_abi: e.enforcement.landlock_abi.into(),
                    landlock: e.enforcement.landlock.name().into(),
                    seccomp: e.enforcement.seccomp.name().into(),
                    policy_sha256: e.enforcement.policy_sha256,
                },
            },
            Event::AppReady(e) => GuestEvent::AppReady {
                boot_id,
                app: e.app,
                index: e.index.into(),
                programs: e
                    .programs
                    .into_iter()
                    .map(|p| ReadyProgram {
                        name: p.name,
                        sha256: p.sha256,
                        code: serde_json::to_value(p.code).ok(),
                        code_sha256: p.code_sha256,
                    })
                    .collect(),
            },
            Event::AppRefused(e) => GuestEvent::AppRefused {
                boot_id,
                app: e.app,
                index: e.index.into(),
                reason: e.reason,
            },
            Event::AppExited(e) => GuestEvent::AppExited {
                boot_id,
                app: e.app,
                index: e.index.into(),
                code: e.code.map(i64::from),
                signal: e.signal.map(Value::from),
            },
            Event::BootComplete(e) => GuestEvent::BootComplete {
                boot_id,
                apps: e.apps.into(),
            },
            Event::BootFailed(e) => GuestEvent::BootFailed {
                boot_id,
                step: e.step.name().into(),
                message: e.message,
            },
            Event::PowerOff(e) => GuestEvent::PowerOff {
                boot_id,
                reason: e.reason,
                exit_code: e.exit_code.into(),
            },
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_childs_measurement_is_kept_and_a_child_without_one_is_malformed() {
        let measurements = r#"{"source":"berm-vmm","event":"measurements","kernel":{"sha256":"k","size":1,"pinned":true,"path":"/k","linux":"6.12","config_sha256":"c","cmdline":"x","hash_ms":0},"rootfs":{"sha256":"r","size":1,"pinned":true,"path":"/r","fstype":"erofs","read_only":true,"hash_ms":0},"state":null,"apps":[],"test_probe":null}"#;
        let child = r#"{"program":"berm-vmm connector","pid":7,"role":"berm-vmm-connector","landlock":"fully_enforced","no_new_privs":true,"seccomp":"allow_list berm-vmm-connector","seccomp_mode":"filter","seccomp_filters":1,"policy_sha256":"p","measured_by":"self_report"}"#;
        let sandbox = |children: &str| {
            format!(
                r#"{{"source":"berm-vmm","event":"host_sandbox","enabled":true,"landlock_abi":7,"landlock":"fully_enforced","no_new_privs":true,"seccomp":"allow_list","allowed":["read"],"policy_sha256":"p","reason":null,"children":{children}}}"#
            )
        };
        let build = |children: &str| {
            Record::from_lines(
                Path::new("/run"),
                Path::new("vmm.jsonl"),
                &format!("{measurements}\n{}\n", sandbox(children)),
            )
        };
        let record = build(&format!("[{child}]")).unwrap();
        let kept = &record.host_sandbox.unwrap().children;
        assert_eq!(kept.len(), 1);
        assert_eq!(kept[0].measured_by, "self_report");
        assert_eq!(kept[0].seccomp_filters, 1);
        // A child as an older berm-vmm stated it, without a measurement, is not taken.
        let stated = r#"[{"program":"berm-vmm connector","landlock":"fully_enforced","seccomp":"allow_list berm-vmm-connector","policy_sha256":"p"}]"#;
        let err = build(stated).unwrap_err().to_string();
        assert!(
            err.contains("the host_sandbox line missing field `pid`"),
            "{err}"
        );
    }

    #[test]
    fn a_missing_field_in_a_kept_line_is_an_error_never_empty() {
        let measurements = r#"{"source":"berm-vmm","event":"measurements","kernel":{"size":1,"pinned":true,"path":"/k","linux":"6.12","config_sha256":"c","cmdline":"x","hash_ms":0},"rootfs":{"sha256":"r","size":1,"pinned":true,"path":"/r","fstype":"erofs","read_only":true,"hash_ms":0},"state":null,"apps":[],"test_probe":null}"#;
        let err = Record::from_lines(Path::new("/run"), Path::new("vmm.jsonl"), measurements)
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("the measurements line missing field `sha256`"),
            "{err}"
        );
        let fixed = measurements.replace(r#""kernel":{"#, r#""kernel":{"sha256":"k","#);
        let exit = r#"{"source":"berm-vmm","event":"exit","status":"clean","code":0}"#;
        let err = Record::from_lines(
            Path::new("/run"),
            Path::new("vmm.jsonl"),
            &format!("{fixed}\n{exit}\n"),
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .contains("line 2: the exit line missing field `message`"),
            "{err}"
        );
    }
}
