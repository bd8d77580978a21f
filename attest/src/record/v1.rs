//! The record as format `berm-attest/1` wrote it, kept only to read it: camelCase, with
//! types of its own (a subset of each line's fields, the guest's enums as strings). A version-1
//! record is parsed into these types (refusing unknown fields, as it always did) and converted
//! into the current [`Record`](super::Record) for the checks; its hash is checked over the JSON
//! as it was hashed and signed, never over the conversion.
//!
//! What version 1 did not record (paths, timings, pids, the guest's `uptime_ms`, …) is empty
//! or zero after the conversion; no check reads it. What cannot be converted (a guest
//! enforcement word the guest's types do not have, a number out of its line type's range, an
//! app without its image) makes the record malformed: berm never wrote such a version-1
//! record.

use std::path::PathBuf;

use berm_vm_protocol::host::{
    AppMeasurement, CodeMeasurement, EngineMeasurement, ExitLine, HostChild as LineChild,
    HostSandboxLine, HypervisorLine, ImageMeasurement, KernelMeasurement, Launch, ProbeMeasurement,
    ProgramMeasurement, RootfsMeasurement, SandboxGrants, StateMeasurement,
};
use berm_vm_protocol::{
    AppExited, AppLimits, AppProgram, AppReady, AppRefused, AppStarted, BootComplete, BootFailed,
    BootStart, Event, GuestLine, PowerOff,
};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// A version-1 record.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct Record {
    format: String,
    run_dir: String,
    kernel: Kernel,
    rootfs: Rootfs,
    state: Option<State>,
    apps: Vec<App>,
    test_probe: Option<TestProbe>,
    code_engine: Option<CodeEngine>,
    hypervisor: Option<Hypervisor>,
    host_sandbox: Option<HostSandbox>,
    guest: Guest,
    exit: Option<Exit>,
    record_sha256: String,
}

/// The kernel as measured.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Kernel {
    /// The guest architecture the kernel is for (`x86_64`, `aarch64`): which pins apply.
    /// Records from before berm built more than one name none, and were x86_64.
    #[serde(default = "berm_vm_protocol::host::default_arch")]
    arch: String,
    /// sha256 of the kernel file.
    sha256: String,
    /// Its size.
    size: u64,
    /// What berm-vmm said about it (the verifier re-derives this from the pins).
    pinned: bool,
    /// The complete command line it booted with.
    cmdline: String,
}

/// The rootfs as measured.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Rootfs {
    /// sha256 of the image.
    sha256: String,
    /// Its size.
    size: u64,
    /// What berm-vmm said about it.
    pinned: bool,
}

/// The state disk as measured.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct State {
    /// sha256 over its per-MiB chunk hashes.
    chunked_sha256: String,
    /// Its size.
    size_bytes: u64,
    /// Whether berm-vmm created it on this run.
    created: bool,
}

/// One app as measured on the host.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct App {
    /// Port order: uid 10000+i, vsock 5000+i.
    index: u64,
    /// Its name, once berm-vmm reports one.
    name: Option<String>,
    /// The folder.
    path: String,
    /// Digest of the folder's files.
    sha256: String,
    /// How many files.
    files: u64,
    /// Every program image in it.
    programs: Vec<MeasuredProgram>,
    /// The app's disk image, once berm-vmm builds one.
    image: Option<MeasuredImage>,
    /// Precompiled code per program.
    code: Vec<MeasuredCode>,
}

/// The enforcement probe a test boot attached.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct TestProbe {
    /// sha256 of the probe's disk image.
    image_sha256: String,
    /// The app whose confinement it ran under.
    app: u64,
}

/// A program image measured on the host.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct MeasuredProgram {
    /// The program's name.
    name: String,
    /// The file in the app folder.
    wasm: String,
    /// sha256 of the wasm file.
    sha256: String,
    /// Its measured grants (egress, `net=` and `secret:NAME=HOST`, never a value, which the
    /// host dialer enforced; and `call=`, the programs it may call), typed as bermd reads
    /// them; absent when it has none (and in records from before issue 15).
    #[serde(default)]
    grants: Vec<berm_abi::grant::Grant>,
}

/// An app's disk image.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct MeasuredImage {
    /// sha256 of the image.
    sha256: String,
    /// Its size.
    size: u64,
}

/// Precompiled code for one program.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct MeasuredCode {
    /// The program.
    program: String,
    /// sha256 of the code.
    sha256: String,
}

/// The WebAssembly engine a run's code was compiled with: what re-deriving it needs.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct CodeEngine {
    /// berm's engine fingerprint (Wasmtime's version and every compiler and ISA setting).
    fingerprint: String,
    /// The target triple the code is for.
    target: String,
}

/// The backend.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Hypervisor {
    /// `krun` or `qemu`.
    chosen: String,
    /// QEMU's accelerator (`kvm`, `tcg`).
    accel: Option<String>,
}

/// berm-vmm's `host_sandbox` line.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct HostSandbox {
    /// Whether berm-vmm was confined.
    enabled: bool,
    /// The host kernel's Landlock ABI.
    landlock_abi: u64,
    /// `fully_enforced`, `partially_enforced` or `not_enforced`.
    landlock: String,
    /// `allow_list` or `none`.
    seccomp: String,
    /// The allowed syscalls, argument rules in parentheses.
    allowed: Vec<String>,
    /// sha256 of the policy.
    policy_sha256: String,
    /// Why it was off.
    reason: Option<String>,
    /// berm-vmm's confined children (the connector, the egress dialer, QEMU and
    /// vhost-device-vsock or the libkrun child), each as measured. Absent in records from
    /// before berm measured them, which `berm attest verify` refuses for a confined run
    /// (`host_child_unmeasured`).
    #[serde(default)]
    children: Vec<HostChild>,
}

/// One confined child of berm-vmm, as measured (vmm/src/measure.rs): by itself once confined
/// (`self_report`: the connector, the dialer, krun-enter), or by berm-vmm from its
/// `/proc/PID/status` and a probe of its ruleset (`proc_status+probe`: QEMU,
/// vhost-device-vsock).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct HostChild {
    /// The program (`berm-vmm connector`, `berm-vmm dial`, `berm-vmm krun-enter`, or the
    /// path of QEMU or vhost-device-vsock).
    program: String,
    /// Its seccomp role.
    role: String,
    /// Landlock as measured: `fully_enforced`, `partially_enforced` or `not_enforced`.
    landlock: String,
    /// `NoNewPrivs` as measured.
    no_new_privs: bool,
    /// The filter berm-vmm installed (`allow_list ROLE`, for QEMU `… and -sandbox …`).
    seccomp: String,
    /// The seccomp mode as measured: `filter`, `strict` or `disabled`.
    seccomp_mode: String,
    /// How many seccomp filters the kernel showed.
    seccomp_filters: u64,
    /// sha256 of the child's policy.
    policy_sha256: String,
    /// `self_report` or `proc_status+probe`.
    measured_by: String,
    /// `proc_status+probe` only: what the probe's read outside the policy gave (`EACCES`).
    #[serde(default)]
    read_outside: Option<String>,
    /// The hypervisor children (QEMU, vhost-device-vsock, krun-enter): what a connect to a
    /// Unix socket outside every policy gave under the child's confinement (`ENOENT` in the
    /// view of its policy's paths, `EPERM` where its seccomp list has no `connect`,
    /// `allowed` where nothing stopped it).
    #[serde(default)]
    connect_outside: Option<String>,
    /// The same children: what they saw of the filesystem, `policy_paths` (only the paths
    /// their policy grants: vmm/src/view.rs) or `host`.
    #[serde(default)]
    view: Option<String>,
}

/// What the guest reported, in order.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Guest {
    /// The boot id of the control connection's greeting.
    boot_id: Option<String>,
    /// The lifecycle events that matter to the verdict.
    events: Vec<GuestEvent>,
}

/// One guest event kept in the record.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(
    tag = "event",
    rename_all = "snake_case",
    rename_all_fields = "camelCase",
    deny_unknown_fields
)]
enum GuestEvent {
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

/// How the guest confined one app.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Enforcement {
    /// `no_new_privs` set.
    no_new_privs: bool,
    /// The guest's Landlock ABI.
    landlock_abi: u64,
    /// `fully_enforced`, `partially_enforced` or `not_enforced`.
    landlock: String,
    /// `filter` or `none`.
    seccomp: String,
    /// sha256 of the app's policy.
    policy_sha256: String,
}

/// A program as the guest loaded it.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ReadyProgram {
    /// Its name.
    name: String,
    /// sha256 of the wasm the guest loaded.
    sha256: String,
    /// How its code was obtained (as the guest reports it).
    code: Option<Value>,
    /// sha256 of the code file the guest mapped, as it reports it.
    code_sha256: Option<String>,
}

/// How the run ended.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Exit {
    /// berm-vmm's status name.
    status: String,
    /// Its exit code.
    code: i64,
}

impl Record {
    /// The current form of this record, for the checks; `format` and `record_sha256` are kept
    /// as they were, so the checks know which version they hold. Why it cannot be converted,
    /// naming the field.
    pub(super) fn convert(self) -> Result<super::Record, String> {
        let guest = super::Guest {
            boot_id: self.guest.boot_id,
            events: self
                .guest
                .events
                .into_iter()
                .map(GuestEvent::convert)
                .collect::<Result<_, _>>()?,
        };
        let apps = self
            .apps
            .into_iter()
            .map(App::convert)
            .collect::<Result<_, _>>()?;
        Ok(super::Record {
            format: self.format,
            run_dir: self.run_dir,
            kernel: KernelMeasurement {
                arch: self.kernel.arch,
                sha256: self.kernel.sha256,
                size: self.kernel.size,
                pinned: self.kernel.pinned,
                path: PathBuf::new(),
                linux: String::new(),
                config_sha256: String::new(),
                cmdline: self.kernel.cmdline,
                hash_ms: 0,
            },
            rootfs: RootfsMeasurement {
                sha256: self.rootfs.sha256,
                size: self.rootfs.size,
                pinned: self.rootfs.pinned,
                path: PathBuf::new(),
                fstype: String::new(),
                read_only: true,
                hash_ms: 0,
            },
            state: self.state.map(|s| StateMeasurement {
                path: PathBuf::new(),
                size_bytes: s.size_bytes,
                created: s.created,
                formatted: false,
                restored_bytes: 0,
                chunked_sha256: s.chunked_sha256,
                hashed_bytes: 0,
                hash_ms: 0,
            }),
            apps,
            test_probe: self
                .test_probe
                .map(|t| -> Result<_, String> {
                    Ok(ProbeMeasurement {
                        image: ImageMeasurement {
                            sha256: t.image_sha256,
                            size: 0,
                        },
                        app: narrow(t.app, "testProbe.app")?,
                    })
                })
                .transpose()?,
            code_engine: self.code_engine.map(|e| EngineMeasurement {
                fingerprint: e.fingerprint,
                target: e.target,
            }),
            hypervisor: self
                .hypervisor
                .map(|h| -> Result<_, String> {
                    Ok(HypervisorLine {
                        chosen: word(h.chosen, "hypervisor.chosen")?,
                        accel: h.accel,
                        reason: String::new(),
                    })
                })
                .transpose()?,
            host_sandbox: self.host_sandbox.map(HostSandbox::convert).transpose()?,
            guest,
            exit: self
                .exit
                .map(|e| -> Result<_, String> {
                    Ok(ExitLine {
                        status: e.status,
                        code: narrow(e.code, "exit.code")?,
                        message: String::new(),
                    })
                })
                .transpose()?,
            record_sha256: self.record_sha256,
        })
    }
}

/// `value` in a line type's narrower integer, or why not.
fn narrow<T: TryFrom<i64>>(
    value: impl Into<i128> + Copy + std::fmt::Display,
    field: &str,
) -> Result<T, String> {
    i64::try_from(value.into())
        .ok()
        .and_then(|v| T::try_from(v).ok())
        .ok_or_else(|| format!("{field} {value} is out of its range"))
}

/// A word version 1 kept as a string, as the line type's enum it was written from.
fn word<T: DeserializeOwned>(value: String, field: &str) -> Result<T, String> {
    serde_json::from_value(Value::String(value.clone()))
        .map_err(|_| format!("{field} {value:?} is not a word berm writes there"))
}

impl App {
    fn convert(self) -> Result<AppMeasurement, String> {
        let Some(image) = self.image else {
            return Err(format!("apps[{}] has no image", self.index));
        };
        let name = self.name.unwrap_or_default();
        Ok(AppMeasurement {
            index: narrow(self.index, "apps[].index")?,
            name: name.clone(),
            path: PathBuf::from(self.path),
            sha256: self.sha256,
            files: self.files,
            programs: self
                .programs
                .into_iter()
                .map(|p| ProgramMeasurement {
                    name: p.name,
                    wasm: p.wasm,
                    sha256: p.sha256,
                    grants: p.grants,
                })
                .collect(),
            code: self
                .code
                .into_iter()
                .map(|c| CodeMeasurement {
                    program: c.program,
                    file: String::new(),
                    sha256: c.sha256,
                    cached: false,
                })
                .collect(),
            image: ImageMeasurement {
                sha256: image.sha256,
                size: image.size,
            },
            limits: Launch {
                name,
                cpu_max: String::new(),
                memory_max: 0,
                pids_max: 0,
            },
            uid: 0,
        })
    }
}

impl HostSandbox {
    fn convert(self) -> Result<HostSandboxLine, String> {
        Ok(HostSandboxLine {
            enabled: self.enabled,
            landlock_abi: narrow(self.landlock_abi, "hostSandbox.landlockAbi")?,
            landlock: word(self.landlock, "hostSandbox.landlock")?,
            no_new_privs: false,
            seccomp: self.seccomp,
            allowed: self.allowed,
            scopes: Vec::new(),
            policy_sha256: self.policy_sha256,
            grants: SandboxGrants::default(),
            reason: self.reason,
            children: self
                .children
                .into_iter()
                .map(|c| -> Result<_, String> {
                    Ok(LineChild {
                        program: c.program,
                        pid: 0,
                        role: c.role,
                        landlock: word(c.landlock, "hostSandbox.children[].landlock")?,
                        no_new_privs: c.no_new_privs,
                        seccomp: c.seccomp,
                        seccomp_mode: c.seccomp_mode,
                        seccomp_filters: narrow(
                            c.seccomp_filters,
                            "hostSandbox.children[].seccompFilters",
                        )?,
                        policy_sha256: c.policy_sha256,
                        measured_by: c.measured_by,
                        read_outside: c.read_outside,
                        connect_outside: c.connect_outside,
                        view: c.view,
                    })
                })
                .collect::<Result<_, _>>()?,
        })
    }
}

impl GuestEvent {
    fn convert(self) -> Result<GuestLine, String> {
        let line = |boot_id: String, event| GuestLine {
            boot_id,
            uptime_ms: 0,
            event,
        };
        Ok(match self {
            Self::BootStart {
                boot_id,
                kernel_release,
                lsm,
                landlock_abi,
            } => line(
                boot_id,
                Event::BootStart(BootStart {
                    pid: 0,
                    kernel_release,
                    lsm,
                    landlock_abi: landlock_abi
                        .map(|abi| narrow(abi, "boot_start.landlockAbi"))
                        .transpose()?,
                    cmdline_bytes: 0,
                    cgroup2: String::new(),
                }),
            ),
            Self::AppStarted {
                boot_id,
                app,
                index,
                uid,
                pid,
                cgroup,
                limits,
                enforcement: e,
            } => line(
                boot_id,
                Event::AppStarted(AppStarted {
                    app,
                    index: narrow(index, "app_started.index")?,
                    uid: narrow(uid, "app_started.uid")?,
                    gid: 0,
                    pid: narrow(pid, "app_started.pid")?,
                    port: 0,
                    cgroup,
                    limits: serde_json::from_value::<AppLimits>(limits)
                        .map_err(|e| format!("app_started.limits: {e}"))?,
                    enforcement: berm_vm_protocol::Enforcement {
                        no_new_privs: e.no_new_privs,
                        landlock_abi: narrow(
                            e.landlock_abi,
                            "app_started.enforcement.landlockAbi",
                        )?,
                        landlock: word(e.landlock, "app_started.enforcement.landlock")?,
                        seccomp: word(e.seccomp, "app_started.enforcement.seccomp")?,
                        policy_sha256: e.policy_sha256,
                    },
                }),
            ),
            Self::AppReady {
                boot_id,
                app,
                index,
                programs,
            } => line(
                boot_id,
                Event::AppReady(AppReady {
                    app,
                    index: narrow(index, "app_ready.index")?,
                    pid: 0,
                    ms: 0,
                    tools: 0,
                    receipt_key: None,
                    programs: programs
                        .into_iter()
                        .map(|p| -> Result<_, String> {
                            let code = p.code.unwrap_or(Value::Null);
                            Ok(AppProgram {
                                code: serde_json::from_value(code.clone()).map_err(|_| {
                                    format!("app_ready.programs[].code {code} is not a code source")
                                })?,
                                name: p.name,
                                sha256: p.sha256,
                                code_sha256: p.code_sha256,
                                ms: 0,
                            })
                        })
                        .collect::<Result<_, _>>()?,
                }),
            ),
            Self::AppRefused {
                boot_id,
                app,
                index,
                reason,
            } => line(
                boot_id,
                Event::AppRefused(AppRefused {
                    app,
                    index: narrow(index, "app_refused.index")?,
                    reason,
                }),
            ),
            Self::AppExited {
                boot_id,
                app,
                index,
                code,
                signal,
            } => line(
                boot_id,
                Event::AppExited(AppExited {
                    app,
                    index: narrow(index, "app_exited.index")?,
                    pid: 0,
                    code: code.map(|c| narrow(c, "app_exited.code")).transpose()?,
                    signal: signal
                        .map(|s| {
                            serde_json::from_value(s.clone()).map_err(|_| {
                                format!("app_exited.signal {s} is not a signal number")
                            })
                        })
                        .transpose()?,
                }),
            ),
            Self::BootComplete { boot_id, apps } => line(
                boot_id,
                Event::BootComplete(BootComplete {
                    apps: narrow(apps, "boot_complete.apps")?,
                }),
            ),
            Self::BootFailed {
                boot_id,
                step,
                message,
            } => line(
                boot_id,
                Event::BootFailed(BootFailed {
                    step: word(step, "boot_failed.step")?,
                    message,
                    exit_code: 0,
                }),
            ),
            Self::PowerOff {
                boot_id,
                reason,
                exit_code,
            } => line(
                boot_id,
                Event::PowerOff(PowerOff {
                    reason,
                    exit_code: narrow(exit_code, "power_off.exitCode")?,
                    killed: 0,
                    unmount_failed: Vec::new(),
                }),
            ),
        })
    }
}
