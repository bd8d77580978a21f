//! `berm-vmm run`: a straight sequence of checks, then the VM, then the verdict.
//!
//! Order matters: nothing that starts a hypervisor happens before the kernel and rootfs are
//! hashed against the pins, the guest settings and app folders are validated and the run dir
//! is ready; the `endpoints`, `vm_config` and `measurements` lines are written before boot.
//! After boot berm-vmm holds its own control connection and decides its exit code from what
//! the guest reported ([`ExitStatus`]), never from the hypervisor's exit code alone.

use std::path::PathBuf;
use std::process::Child;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use berm_pins::{ArtifactStore, KernelPins, ParsePinsError, RootfsPins};
use berm_vm_protocol::client::{ConnectError, GuestConnection, ReceiveError};
use berm_vm_protocol::{Event, GuestLine, Service};
use serde_json::json;

use crate::apps::{self, AppError};
use crate::artifacts::{self, ArtifactError};
use crate::detect::{Backend, DetectError, Detection, Requested};
use crate::exit::ExitStatus;
use crate::krun::{self, KrunConfig, SpawnKrunError};
use crate::qemu::{self, QemuVm, StartQemuError};
use crate::report;
use crate::run_dir::{RunDir, RunDirError};
use crate::sandbox::{self, SandboxError};
use crate::settings::{self, GuestSetting, SettingError};
use crate::state::{self, StateError};

/// Extra kernel words for libkrun on kvm_pvm (notes/microvm-findings.md): without them the
/// kernel does not get far under PVM's emulation. Only ever added there, and reported.
pub const PVM_CMDLINE: &str = "noxsave clearcpuid=popcnt,smap";

/// How long berm-vmm waits for the guest to reset after `power_off` before killing it.
const RESET_GRACE: Duration = Duration::from_secs(5);
/// How long a guest has to power off after berm-vmm got a stop signal.
const STOP_GRACE: Duration = Duration::from_secs(5);
/// How long berm-vmm waits, after the hypervisor ended, for lines still in flight.
const DRAIN: Duration = Duration::from_secs(1);

/// Everything `run` is told.
#[derive(Clone, Debug)]
pub struct RunConfig {
    /// App folders, in port order.
    pub apps: Vec<PathBuf>,
    /// State disk (created and formatted if missing).
    pub state: Option<PathBuf>,
    /// Run directory (default: a fresh `berm-vmm-<random>` under `$XDG_RUNTIME_DIR`, else
    /// under the system temp dir).
    pub run_dir: Option<PathBuf>,
    /// vCPUs.
    pub cpus: u8,
    /// Guest memory in MiB.
    pub memory_mib: u32,
    /// Which backend.
    pub hypervisor: Requested,
    /// Kernel override (reported unpinned unless it matches the pin).
    pub kernel: Option<PathBuf>,
    /// Rootfs override.
    pub rootfs: Option<PathBuf>,
    /// Extra guest settings, `NAME=VALUE`.
    pub env: Vec<String>,
    /// How long the guest may take to greet on the control port.
    pub boot_timeout: Duration,
    /// Test boots only: the enforcement probe binary, run under app `test_probe_app`'s
    /// confinement; reported in the measurement line.
    pub test_probe: Option<PathBuf>,
    /// The app whose confinement the probe runs under.
    pub test_probe_app: u32,
    /// Confine berm-vmm (and the libkrun child) before the guest is served; `false` is
    /// `--no-host-sandbox`.
    pub host_sandbox: bool,
    /// Once confined, try to read and write this host file and to exec, and report what
    /// happened in a `host_sandbox_probe` line (`--sandbox-probe`, for tests).
    pub sandbox_probe: Option<PathBuf>,
}

/// Why `run` stopped before or while booting.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// A compiled-in manifest is broken.
    #[error("the pins compiled into berm-vmm are unusable")]
    Pins(#[from] ParsePinsError),
    /// Kernel or rootfs missing, unreadable or not the pinned one.
    #[error(transparent)]
    Artifact(#[from] ArtifactError),
    /// A guest setting or the command line was refused.
    #[error(transparent)]
    Setting(#[from] SettingError),
    /// An app folder was refused.
    #[error(transparent)]
    App(#[from] AppError),
    /// The run dir could not be prepared.
    #[error(transparent)]
    RunDir(#[from] RunDirError),
    /// The state disk could not be prepared.
    #[error(transparent)]
    State(#[from] StateError),
    /// The run record (`vmm.jsonl`) could not be started.
    #[error(transparent)]
    Record(#[from] report::RecordError),
    /// No usable hypervisor.
    #[error(transparent)]
    Detect(#[from] DetectError),
    /// QEMU or vhost-device-vsock did not start.
    #[error(transparent)]
    Qemu(#[from] StartQemuError),
    /// The libkrun child did not start.
    #[error(transparent)]
    Krun(#[from] SpawnKrunError),
    /// berm-vmm could not confine itself (fail-closed).
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
    /// Too many vCPUs.
    #[error("--cpus {0} is out of range (1 to 16, the guest kernel's NR_CPUS)")]
    Cpus(u8),
    /// Too little or too much memory.
    #[error("--memory {0} MiB is out of range (64 to 16384)")]
    Memory(u32),
    /// The probe names an app that is not there.
    #[error("--test-probe-app {0} names no app (give --app once per app, the first is 0)")]
    ProbeApp(u32),
}

impl RunError {
    /// The documented exit status for this error.
    pub fn status(&self) -> ExitStatus {
        match self {
            Self::Pins(_) => ExitStatus::Internal,
            Self::Artifact(ArtifactError::Mismatch { .. }) => ExitStatus::PinMismatch,
            Self::Artifact(ArtifactError::Read { .. }) => ExitStatus::Refused,
            Self::Artifact(_) => ExitStatus::ArtifactMissing,
            Self::Setting(_)
            | Self::App(_)
            | Self::RunDir(_)
            | Self::State(_)
            | Self::Record(_)
            | Self::Sandbox(_)
            | Self::Cpus(_)
            | Self::Memory(_)
            | Self::ProbeApp(_) => ExitStatus::Refused,
            Self::Detect(_) => ExitStatus::NoHypervisor,
            Self::Qemu(_) | Self::Krun(_) => ExitStatus::HypervisorFailed,
        }
    }
}

/// How a VM run ended.
#[derive(Debug)]
pub struct Outcome {
    /// The exit status.
    pub status: ExitStatus,
    /// One sentence for a person.
    pub summary: String,
}

/// Runs one VM to its end.
pub fn run(config: &RunConfig) -> Result<Outcome, RunError> {
    if !(1..=16).contains(&config.cpus) {
        return Err(RunError::Cpus(config.cpus));
    }
    if !(64..=16384).contains(&config.memory_mib) {
        return Err(RunError::Memory(config.memory_mib));
    }

    // 1. The artifacts, against the pins, before anything else.
    let kernel_pins = KernelPins::compiled_in()?;
    let rootfs_pins = RootfsPins::compiled_in()?;
    let store = ArtifactStore::from_env();
    let kernel = artifacts::resolve(
        "kernel",
        &kernel_pins.image,
        config.kernel.as_deref(),
        store.as_ref(),
        ArtifactStore::kernel,
    )?;
    let rootfs = artifacts::resolve(
        "rootfs",
        &rootfs_pins.image,
        config.rootfs.as_deref(),
        store.as_ref(),
        ArtifactStore::rootfs,
    )?;

    // 2. Everything that reaches the guest's command line.
    let user_settings: Vec<GuestSetting> = config
        .env
        .iter()
        .map(|arg| GuestSetting::parse_user(arg))
        .collect::<Result<_, _>>()?;
    if config.test_probe.is_some() && config.test_probe_app as usize >= config.apps.len() {
        return Err(RunError::ProbeApp(config.test_probe_app));
    }
    let detection = Detection::probe();
    let choice = detection.choose(config.hypervisor)?;
    let mut settings = vec![GuestSetting::new("BERM_HYPERVISOR", choice.backend.name())?];
    if !config.apps.is_empty() {
        settings.push(GuestSetting::new(
            "BERM_APPS",
            &config.apps.len().to_string(),
        )?);
    }
    if config.test_probe.is_some() {
        settings.push(GuestSetting::new(
            "BERM_PROBE",
            &config.test_probe_app.to_string(),
        )?);
    }
    if config.state.is_some() {
        settings.push(GuestSetting::new("BERM_STATE", "vdb")?);
    }
    settings.extend(user_settings);
    let pvm_words = choice.backend == Backend::Krun && detection.kvm_pvm;
    let pinned_cmdline = if pvm_words {
        format!("{} {PVM_CMDLINE}", kernel_pins.cmdline)
    } else {
        kernel_pins.cmdline.clone()
    };
    let cmdline = settings::command_line(&pinned_cmdline, &settings)?;

    // 3. The run dir and the state disk.
    let run = match &config.run_dir {
        Some(dir) => RunDir::prepare(dir, config.apps.len())?,
        None => RunDir::create(config.apps.len())?,
    };
    report::record_to(&run.dir)?;
    let state = config.state.as_deref().map(state::prepare).transpose()?;
    let apps = apps::prepare(&config.apps, &run.dir)?;
    let probe = config
        .test_probe
        .as_deref()
        .map(|binary| apps::pack_probe(binary, &run.dir))
        .transpose()?;
    // Read-only disks after root (and state): one per app, then the probe. The guest finds
    // each by its serial, not by its position.
    let mut disks: Vec<(String, PathBuf)> = apps
        .iter()
        .map(|a| (format!("app-{}", a.index), a.image.path.clone()))
        .collect();
    if let Some(probe) = &probe {
        disks.push(("probe".into(), probe.path.clone()));
    }

    // 4. Say what is about to boot.
    report::line(
        "hypervisor",
        json!({"chosen": choice.backend, "accel": choice.accel, "reason": choice.reason}),
    );
    report::line(
        "endpoints",
        json!({
            "run_dir": run.dir, "control": run.control, "logs": run.logs, "console": run.console,
            "hypervisor_log": run.hypervisor_log,
            "rpc": apps.iter().map(|app| json!({
                "index": app.index, "name": app.name, "app": app.path, "port": berm_vm_protocol::RPC_PORT_BASE + app.index as u32,
                "socket": run.rpc[app.index],
            })).collect::<Vec<_>>(),
        }),
    );
    report::line(
        "vm_config",
        json!({
            "hypervisor": {"chosen": choice.backend, "accel": choice.accel, "reason": choice.reason, "requested": config.hypervisor},
            "detection": detection, "cpus": config.cpus, "memory_mib": config.memory_mib,
            "settings": settings.iter().map(|s| format!("{}={}", s.name(), s.value())).collect::<Vec<_>>(),
            "pvm_cmdline": pvm_words.then_some(PVM_CMDLINE),
            "boot_timeout_ms": config.boot_timeout.as_millis(),
        }),
    );
    report::line(
        "measurements",
        json!({
            "kernel": {"sha256": kernel.sha256, "size": kernel.size, "pinned": kernel.pinned, "path": kernel.path,
                       "linux": kernel_pins.linux, "config_sha256": kernel_pins.config_sha256.as_str(),
                       "cmdline": cmdline, "hash_ms": kernel.hash_ms},
            "rootfs": {"sha256": rootfs.sha256, "size": rootfs.size, "pinned": rootfs.pinned, "path": rootfs.path,
                       "fstype": rootfs_pins.fstype, "read_only": true, "hash_ms": rootfs.hash_ms},
            "state": state,
            "apps": apps.iter().map(|a| json!({
                "index": a.index, "name": a.name, "path": a.path, "sha256": a.sha256, "files": a.files,
                "programs": a.programs, "code": a.code,
                "image": {"sha256": a.image.sha256, "size": a.image.size},
                "limits": a.limits,
                "uid": berm_vm_protocol::APP_UID_BASE + a.index as u32,
            })).collect::<Vec<_>>(),
            // What re-deriving the code from the programs needs (berm attest verify --programs).
            "engine": (!apps.is_empty()).then(crate::code::engine_identity).flatten(),
            "test_probe": probe.as_ref().map(|p| json!({
                "image": {"sha256": p.sha256, "size": p.size}, "app": config.test_probe_app,
            })),
        }),
    );

    // 5. Boot.
    let host_sandbox = config.host_sandbox;
    let mut ports = vec![
        (berm_vm_protocol::CONTROL_PORT, run.control.clone()),
        (berm_vm_protocol::LOGS_PORT, run.logs.clone()),
    ];
    for (i, rpc) in run.rpc.iter().enumerate() {
        ports.push((berm_vm_protocol::RPC_PORT_BASE + i as u32, rpc.clone()));
    }
    // What the host sandbox grants: the artifacts and shares to read, the run dir and the
    // state disk to write; the libkrun child also gets /dev/kvm.
    let policy = sandbox::Policy {
        read: [kernel.path.clone(), rootfs.path.clone()]
            .into_iter()
            .chain(apps.iter().map(|a| a.path.clone()))
            .collect(),
        read_write: std::iter::once(run.dir.clone())
            .chain(state.as_ref().map(|s| s.path.clone()))
            .collect(),
        ..sandbox::Policy::default()
    };
    let mut relays = None;
    let mut child_sandboxes = Vec::new();
    let started = Instant::now();
    let mut children = match choice.backend {
        Backend::Krun => {
            let config = KrunConfig {
                cpus: config.cpus,
                memory_mib: config.memory_mib,
                kernel: kernel.path.clone(),
                cmdline: cmdline.clone(),
                rootfs: rootfs.path.clone(),
                state: state.as_ref().map(|s| s.path.clone()),
                disks: disks.clone(),
                ports,
                console: run.console.clone(),
                host_sandbox: host_sandbox.then(|| sandbox::Policy {
                    devices: vec![PathBuf::from("/dev/kvm")],
                    ..policy.clone()
                }),
            };
            if let Some(policy) = &config.host_sandbox {
                child_sandboxes.push(sandbox::ChildReport {
                    program: PathBuf::from("berm-vmm krun-enter"),
                    landlock: "fully_enforced",
                    seccomp: format!("allow_list {}", sandbox::Role::KrunEnter.name()),
                    policy_sha256: policy.sha256(sandbox::Role::KrunEnter),
                });
            }
            vec![krun::spawn(&config, &run.hypervisor_log)?]
        }
        Backend::Qemu => {
            // Cannot be None: choose() returned Qemu only with both programs present.
            let (Some(qemu), Some(vhost)) = (&detection.qemu, &detection.vhost_device_vsock) else {
                return Err(
                    DetectError::NoneUsable("QEMU or vhost-device-vsock vanished".into()).into(),
                );
            };
            let vm = QemuVm {
                qemu,
                vhost_device_vsock: vhost,
                accel: choice.accel.unwrap_or("tcg"),
                cpus: config.cpus,
                memory_mib: config.memory_mib,
                kernel: &kernel.path,
                cmdline: &cmdline,
                rootfs: &rootfs.path,
                state: state.as_ref().map(|s| s.path.as_path()),
                disks: &disks,
                run: &run,
                connect_timeout: config.boot_timeout,
                sandbox: host_sandbox.then_some(&policy),
            };
            let children = qemu::start(&vm)?;
            relays = Some(children.relays);
            child_sandboxes = children.sandboxes;
            // The VM is QEMU; vhost-device-vsock is its helper and is stopped after it.
            vec![children.qemu, children.vhost]
        }
    };

    // 6. berm-vmm confines itself: the hypervisor is started, nothing of the guest's has been
    // served yet, and the process is still single-threaded (the relays start after this).
    let mut confined = if host_sandbox {
        let pids: Vec<u32> = children.iter().map(Child::id).collect();
        sandbox::confine(&policy, sandbox::Role::Vmm, &pids).inspect_err(|_| stop(&mut children))?
    } else {
        sandbox::Report::disabled("--no-host-sandbox")
    };
    // A child's ruleset is enforced as far as this kernel's Landlock goes, like berm-vmm's own.
    confined.children = child_sandboxes
        .into_iter()
        .map(|child| sandbox::ChildReport {
            landlock: confined.landlock,
            ..child
        })
        .collect();
    report::line(
        "host_sandbox",
        serde_json::to_value(&confined).unwrap_or_default(),
    );
    if let Some(outside) = &config.sandbox_probe {
        report::line(
            "host_sandbox_probe",
            sandbox::probe(outside, &kernel.path, &run.dir),
        );
    }
    if let Some(relays) = relays {
        relays.serve();
    }
    let outcome = supervise(&run, &mut children, config.boot_timeout, started);
    // The hypervisor is gone: its sockets and the app images are of no further use.
    if let Err(e) = run.clean_up() {
        report::line("run_dir_cleanup", json!({"error": e.to_string()}));
    }
    Ok(outcome)
}

enum Watch {
    Greeted(GuestLine),
    Line(GuestLine),
    ConnectFailed(ConnectError),
    Ended(String),
}

/// Watches the control stream and the hypervisor until the VM ends.
fn supervise(
    run: &RunDir,
    children: &mut [Child],
    boot_timeout: Duration,
    started: Instant,
) -> Outcome {
    let (tx, rx) = mpsc::channel();
    let logs = run.logs.clone();
    let guest_log = run.dir.join("guest.log");
    std::thread::spawn(move || pump_logs(&logs, &guest_log, started + boot_timeout));
    let console = run.console.clone();
    std::thread::spawn(move || {
        crate::log_cap::watch_console(&console, crate::log_cap::CONSOLE_LOG_CAP)
    });
    let control = run.control.clone();
    std::thread::spawn(move || {
        let mut conn =
            match GuestConnection::connect(&control, Service::Control, started + boot_timeout) {
                Ok(conn) => conn,
                Err(e) => return drop(tx.send(Watch::ConnectFailed(e))),
            };
        let _ = tx.send(Watch::Greeted(conn.greeting().clone()));
        loop {
            match conn.receive(Instant::now() + Duration::from_secs(3600)) {
                Ok(line) => {
                    let last = matches!(line.event, Event::PowerOff(_));
                    let _ = tx.send(Watch::Line(line));
                    if last {
                        // Closing tells berm-init the line arrived; it resets right after.
                        return;
                    }
                }
                Err(ReceiveError::TimedOut) => {}
                Err(e) => {
                    let message = match &e {
                        ReceiveError::Line(line) => format!("{e}: {line}"),
                        _ => e.to_string(),
                    };
                    return drop(tx.send(Watch::Ended(message)));
                }
            }
        }
    });

    let mut greeted = false;
    let mut power_off = None;
    let mut boot_failed = None;
    let mut power_off_at = None;
    let mut watch_problem = None;
    let mut stop_signal_at: Option<Instant> = None;
    let hypervisor_exit = loop {
        match rx.recv_timeout(Duration::from_millis(20)) {
            Ok(Watch::Greeted(line)) => {
                greeted = true;
                report::line(
                    "guest_greeted",
                    json!({"after_ms": started.elapsed().as_millis(), "boot_id": line.boot_id}),
                );
            }
            Ok(Watch::Line(line)) => {
                report::guest(&line);
                match &line.event {
                    Event::BootFailed(failed) => boot_failed = Some(failed.clone()),
                    Event::PowerOff(off) => {
                        power_off = Some(off.clone());
                        power_off_at = Some(Instant::now());
                    }
                    _ => {}
                }
            }
            Ok(Watch::ConnectFailed(e)) => {
                let exited = children[0].try_wait().ok().flatten();
                stop(children);
                return match exited {
                    Some(status) => finish(
                        ExitStatus::Crashed,
                        format!(
                            "the VM ended before the guest greeted ({status}); see {}",
                            run.console.display()
                        ),
                    ),
                    None => finish(
                        ExitStatus::BootTimeout,
                        format!("{e}; see {}", run.console.display()),
                    ),
                };
            }
            Ok(Watch::Ended(message)) => watch_problem = Some(message),
            Err(RecvTimeoutError::Timeout) | Err(RecvTimeoutError::Disconnected) => {}
        }
        if let Ok(Some(status)) = children[0].try_wait() {
            break status;
        }
        if crate::sys::stop_requested() && stop_signal_at.is_none() {
            // A stop signal: ask the guest to shut down in order, on a connection of its own
            // (the watcher's is busy reading); kill the VM if that does not end it in time.
            stop_signal_at = Some(Instant::now());
            report::line("stop_signal", json!({"action": "shutdown requested"}));
            let control = run.control.clone();
            std::thread::spawn(move || {
                let deadline = Instant::now() + Duration::from_secs(2);
                if let Ok(mut conn) = GuestConnection::connect(&control, Service::Control, deadline)
                {
                    let _ = conn.send(berm_vm_protocol::Request::Shutdown, deadline);
                    let _ = conn.wait_for(deadline + STOP_GRACE, |l| {
                        matches!(l.event, Event::PowerOff(_))
                    });
                }
            });
        }
        if stop_signal_at.is_some_and(|at| at.elapsed() > STOP_GRACE) {
            let _ = children[0].kill();
        }
        if power_off_at.is_some_and(|at| at.elapsed() > RESET_GRACE) {
            let _ = children[0].kill();
        }
    };
    // Lines can still be in flight when the hypervisor is gone.
    let deadline = Instant::now() + DRAIN;
    while power_off.is_none() && watch_problem.is_none() && greeted {
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(Watch::Line(line)) => {
                report::guest(&line);
                match line.event {
                    Event::BootFailed(failed) => boot_failed = Some(failed),
                    Event::PowerOff(off) => power_off = Some(off),
                    _ => {}
                }
            }
            Ok(Watch::Ended(message)) => watch_problem = Some(message),
            Ok(_) => {}
            Err(_) => break,
        }
    }
    stop(children);
    match (power_off, boot_failed) {
        (Some(off), _) if off.exit_code == 0 => finish(
            ExitStatus::Clean,
            format!("the guest powered off ({})", off.reason),
        ),
        (Some(off), Some(failed)) => finish(
            ExitStatus::BootFailed,
            format!(
                "the guest's boot failed at {}: {} (guest exit code {})",
                failed.step, failed.message, off.exit_code
            ),
        ),
        (Some(off), None) => finish(
            ExitStatus::GuestError,
            format!(
                "the guest powered off with exit code {} ({})",
                off.exit_code, off.reason
            ),
        ),
        (None, _) => {
            let why = watch_problem.unwrap_or_else(|| "no power_off line".into());
            finish(
                ExitStatus::Crashed,
                format!(
                    "the VM ended ({hypervisor_exit}) without power_off: {why}; see {}",
                    run.console.display()
                ),
            )
        }
    }
}

/// Keeps the guest's log port (berm-init's own lines and every app's bermd output) in
/// `guest.log` in the run dir, one parsed and re-escaped line each, so a failed app can be
/// read after the fact. Lines a host connects too late for are still there: the guest keeps a
/// backlog for new connections.
fn pump_logs(logs: &std::path::Path, path: &std::path::Path, deadline: Instant) {
    let Ok(mut conn) = GuestConnection::connect(logs, Service::Logs, deadline) else {
        return;
    };
    let Ok(mut file) = crate::log_cap::CappedLog::open(path, crate::log_cap::GUEST_LOG_CAP) else {
        return;
    };
    while let Ok(line) = conn.receive(Instant::now() + Duration::from_secs(3600)) {
        if let Event::Log(log) = &line.event {
            let text = format!(
                "{:>8} {:?} {}: {}\n",
                line.uptime_ms,
                log.level,
                log.source,
                log.message.escape_debug()
            );
            if file.write(text.as_bytes()).is_err() {
                return;
            }
        }
    }
}

fn stop(children: &mut [Child]) {
    for child in children.iter_mut() {
        if let Ok(None) = child.try_wait() {
            let _ = child.kill();
        }
        let _ = child.wait();
    }
}

fn finish(status: ExitStatus, summary: String) -> Outcome {
    Outcome { status, summary }
}
