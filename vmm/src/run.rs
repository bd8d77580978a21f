//! `berm-vmm run`: a straight sequence of checks, then the VM, then the verdict.
//!
//! Order matters: nothing that starts a hypervisor happens before the kernel and rootfs are
//! hashed against the pins, the guest settings and app folders are validated and the run dir
//! is ready; the `endpoints`, `vm_config` and `measurements` lines are written before boot.
//! After boot berm-vmm holds its own control connection and decides its exit code from what
//! the guest reported ([`ExitStatus`]), never from the hypervisor's exit code alone.

use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::Arc;
use std::time::Instant;

use berm_pins::{ArtifactStore, KernelPins, ParsePinsError, RootfsPins};
use berm_vm_protocol::HostEvent;
use berm_vm_protocol::host::{
    HypervisorLine, KernelMeasurement, MeasurementsLine, ProbeMeasurement, RootfsMeasurement,
};
use berm_vm_protocol::host_event::{
    EgressEndpoint, EndpointsLine, HypervisorChoice, RpcEndpoint, RunDirCleanupLine, VmConfigLine,
};

use crate::apps::{self, PrepareAppError};
use crate::artifacts::{self, ArtifactError};
use crate::code::{CodeCache, CodeCacheError};
pub use crate::config::VmConfig;
use crate::connector::{Connector, ConnectorError};
use crate::detect::{Backend, Choice, DetectError, Detection};
use crate::dialer::{self, DialerError};
use crate::exit::ExitStatus;
use crate::krun::{self, KrunConfig, SpawnKrunError};
use crate::log_cap::{self, HypervisorOutput};
use crate::measure::OutsideSocket;
use crate::qemu::{self, QemuVm, Relays, StartQemuError};
use crate::report;
use crate::run_dir::{RunDir, RunDirError};
use crate::sandbox::{self, SandboxError};
use crate::settings::{self, GuestSetting, SettingError};
use crate::spec::{self, VmSpec};
use crate::state::{self, PrepareStateError};

/// Watching a booted VM to its end and deciding the verdict.
mod supervise;

pub use supervise::Outcome;
use supervise::{stop, supervise};

/// Extra kernel words for libkrun on kvm_pvm (docs/design/microvm-findings.md): without them the
/// kernel does not get far under PVM's emulation. Only ever added there, and reported.
pub const PVM_CMDLINE: &str = "noxsave clearcpuid=popcnt,smap";

/// Why a run is unconfined, in its `host_sandbox` line and attestation record (which
/// `berm attest verify` flags as `host_sandbox_disabled`). macOS has no Landlock or seccomp,
/// and berm-vmm applies no Seatbelt profile there yet: a Mac run is unconfined, and says so.
const NO_HOST_SANDBOX: &str = if cfg!(target_os = "macos") {
    "--no-host-sandbox: on macOS berm-vmm has no host sandbox (no Seatbelt profile yet), so it and libkrun run unconfined"
} else {
    "--no-host-sandbox"
};

/// Why `run` stopped before or while booting.
#[derive(Debug, thiserror::Error)]
pub enum RunVmError {
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
    App(#[from] PrepareAppError),
    /// The code cache is missing or not the user's alone.
    #[error(transparent)]
    CodeCache(#[from] CodeCacheError),
    /// The run dir could not be prepared.
    #[error(transparent)]
    RunDir(#[from] RunDirError),
    /// The state disk could not be prepared.
    #[error(transparent)]
    State(#[from] PrepareStateError),
    /// The run record (`vmm.jsonl`) could not be started.
    #[error(transparent)]
    Record(#[from] report::StartRecordError),
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
    /// berm-vmm's connector did not start (fail-closed).
    #[error(transparent)]
    Connector(#[from] ConnectorError),
    /// The egress dialer did not start (fail-closed).
    #[error(transparent)]
    Dialer(#[from] DialerError),
    /// The pipe for the hypervisor's output could not be made.
    #[error("making the pipe for hypervisor.log failed")]
    HypervisorOutput(#[source] std::io::Error),
    /// The socket the children's probes connect to could not be made.
    #[error("making the socket outside the run dir that measures the children's connects failed")]
    OutsideSocket(#[source] std::io::Error),
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

impl RunVmError {
    /// The documented exit status for this error.
    pub fn status(&self) -> ExitStatus {
        match self {
            Self::Pins(_) => ExitStatus::Internal,
            Self::Artifact(ArtifactError::Mismatch { .. }) => ExitStatus::PinMismatch,
            Self::Artifact(ArtifactError::Read { .. }) => ExitStatus::Refused,
            Self::Artifact(_) => ExitStatus::ArtifactMissing,
            Self::Setting(_)
            | Self::App(_)
            | Self::CodeCache(_)
            | Self::RunDir(_)
            | Self::State(_)
            | Self::Record(_)
            | Self::Sandbox(_)
            | Self::Connector(_)
            | Self::Dialer(_)
            | Self::Cpus(_)
            | Self::Memory(_)
            | Self::ProbeApp(_) => ExitStatus::Refused,
            Self::Detect(_) => ExitStatus::NoHypervisor,
            Self::Qemu(_) | Self::Krun(_) | Self::HypervisorOutput(_) | Self::OutsideSocket(_) => {
                ExitStatus::HypervisorFailed
            }
        }
    }
}

/// Runs one VM to its end: a straight sequence of steps, each of which may refuse. Nothing
/// that starts a hypervisor happens before the artifacts are checked against the pins and
/// everything the guest will see is validated and written down.
pub fn run(config: &VmConfig) -> Result<Outcome, RunVmError> {
    check_bounds(config)?;
    let artifacts = Artifacts::check(config)?;
    // Where the apps' native code will come from, before anything else about them: a cache
    // only this user could have written, or none at all.
    let code_cache = match config.apps.is_empty() {
        true => None,
        false => Some(CodeCache::open()?),
    };
    let user_settings = user_settings(config)?;
    let detection = Detection::probe();
    let choice = detection.choose(config.hypervisor, config.arch)?;
    let guest = GuestSettings::new(config, user_settings, &artifacts, &detection, &choice)?;
    let prepared = Prepared::new(config, code_cache.as_ref())?;
    let memory_mib = guest_memory(config, &prepared.apps);
    report_plan(
        config, memory_mib, &artifacts, &guest, &prepared, &detection, &choice,
    );
    let spec = VmSpec {
        cpus: config.cpus,
        memory_mib,
        kernel: artifacts.kernel.path.clone(),
        kernel_format: spec::KernelFormat::of(&artifacts.kernel_pins),
        cmdline: guest.cmdline.clone(),
        rootfs: artifacts.rootfs.path.clone(),
        state: prepared.state.as_ref().map(|s| s.path.clone()),
        disks: prepared.disks(),
        ports: spec::ports(&prepared.run),
        egress: prepared
            .dialer
            .iter()
            .flat_map(|plan| &plan.apps)
            .map(|app| {
                (
                    berm_vm_protocol::EGRESS_PORT_BASE + app.index,
                    app.socket.clone(),
                )
            })
            .collect(),
        console: prepared.run.console.clone(),
    };
    // A hypervisor that did not start leaves no sockets or app images behind either.
    let mut booted = boot(config, &spec, &choice, &detection, &prepared).inspect_err(|_| {
        let _ = prepared.run.clean_up();
    })?;
    let outcome = supervise(
        &prepared.run,
        &booted.connector,
        &mut booted.children,
        config.boot_timeout,
        booted.started,
    );
    // The hypervisor is gone: its sockets and the app images are of no further use.
    if let Err(e) = prepared.run.clean_up() {
        report::host(HostEvent::RunDirCleanup(RunDirCleanupLine {
            error: e.to_string(),
        }));
    }
    Ok(outcome)
}

/// Refuses vCPU and memory counts the guest kernel cannot take.
fn check_bounds(config: &VmConfig) -> Result<(), RunVmError> {
    if !(1..=16).contains(&config.cpus) {
        return Err(RunVmError::Cpus(config.cpus));
    }
    match config.memory_mib {
        Some(mib) if !MEMORY_MIB.contains(&mib) => Err(RunVmError::Memory(mib)),
        _ => Ok(()),
    }
}

/// Guest memory the kernel can take, in MiB.
const MEMORY_MIB: std::ops::RangeInclusive<u32> = 64..=16384;

/// What the guest needs beside its apps' cgroups: the kernel, berm-init and the page cache of
/// the rootfs. One app (notes) boots with about 64 MiB in use in all, bermd included.
const GUEST_BASE_MIB: u64 = 96;

/// Guest memory when `--memory` is not given: every app's `memory.max` added up, plus
/// [`GUEST_BASE_MIB`], rounded up to 32 MiB. With that much, an app that runs into its
/// cgroup cap is stopped by its own cgroup before the guest as a whole runs out, so one app's
/// load never brings the kernel's OOM killer to another app. Memory the guest never touches
/// costs the host nothing (QEMU's memfd and libkrun's mapping are filled lazily).
pub fn default_memory_mib(apps: &[apps::App]) -> u64 {
    let caps: u64 = apps
        .iter()
        .map(|app| app.measured.limits.memory_max >> 20)
        .sum();
    (caps + GUEST_BASE_MIB).div_ceil(32) * 32
}

/// The guest memory for this run: `--memory`, or [`default_memory_mib`] up to the kernel's
/// bound. Less than the apps' caps add up to is allowed, with a warning on stderr.
fn guest_memory(config: &VmConfig, apps: &[apps::App]) -> u32 {
    let wanted = default_memory_mib(apps);
    let mib = match config.memory_mib {
        Some(mib) => mib,
        None => u32::try_from(wanted.min(u64::from(*MEMORY_MIB.end()))).unwrap_or(u32::MAX),
    };
    if u64::from(mib) < wanted {
        report::say(format_args!(
            "berm-vmm: warning: {mib} MiB of guest memory is less than the apps' memory.max added up plus {GUEST_BASE_MIB} MiB ({wanted} MiB): the guest can run out of memory before an app reaches its own cap"
        ));
    }
    mib
}

/// The kernel and rootfs, hashed against the pins compiled into berm-vmm.
struct Artifacts {
    kernel_pins: KernelPins,
    rootfs_pins: RootfsPins,
    kernel: artifacts::Artifact,
    rootfs: artifacts::Artifact,
}

impl Artifacts {
    fn check(config: &VmConfig) -> Result<Self, RunVmError> {
        let kernel_pins = KernelPins::compiled_in_for(config.arch.name())?;
        let rootfs_pins = RootfsPins::compiled_in_for(config.arch.name())?;
        let store = ArtifactStore::from_env();
        let kernel = artifacts::resolve(
            "kernel",
            &kernel_pins.image,
            config.kernel.as_deref(),
            store.as_ref(),
            &|store| store.kernel_for(&kernel_pins),
        )?;
        let rootfs = artifacts::resolve(
            "rootfs",
            &rootfs_pins.image,
            config.rootfs.as_deref(),
            store.as_ref(),
            &|store| store.rootfs(&rootfs_pins.image.sha256),
        )?;
        Ok(Self {
            kernel_pins,
            rootfs_pins,
            kernel,
            rootfs,
        })
    }
}

/// The user's `--env` settings, checked, and the probe's app index.
fn user_settings(config: &VmConfig) -> Result<Vec<GuestSetting>, RunVmError> {
    let user_settings = config
        .env
        .iter()
        .map(|arg| GuestSetting::parse_user(arg))
        .collect::<Result<_, _>>()?;
    if config.test_probe.is_some() && config.test_probe_app as usize >= config.apps.len() {
        return Err(RunVmError::ProbeApp(config.test_probe_app));
    }
    Ok(user_settings)
}

/// Everything that reaches the guest's command line, validated.
struct GuestSettings {
    settings: Vec<GuestSetting>,
    pvm_words: bool,
    cmdline: String,
}

impl GuestSettings {
    /// berm-vmm's own settings, then the user's, then the command line they make.
    fn new(
        config: &VmConfig,
        user_settings: Vec<GuestSetting>,
        artifacts: &Artifacts,
        detection: &Detection,
        choice: &Choice,
    ) -> Result<Self, RunVmError> {
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
        if config.accept {
            settings.push(GuestSetting::new("BERM_ACCEPT", "1")?);
        }
        settings.extend(user_settings);
        let pinned = &artifacts.kernel_pins.cmdline;
        let tcg = &artifacts.kernel_pins.tcg_cmdline;
        let pvm_words = choice.backend == Backend::Krun && detection.kvm_pvm;
        let tcg_words =
            choice.backend == Backend::Qemu && choice.accel == Some("tcg") && !tcg.is_empty();
        let pinned_cmdline = if pvm_words {
            format!("{pinned} {PVM_CMDLINE}")
        } else if tcg_words {
            // Pinned beside the command line, and accepted by `berm attest verify` only as
            // exactly these words in this place.
            format!("{pinned} {tcg}")
        } else {
            pinned.clone()
        };
        let cmdline = settings::command_line(&pinned_cmdline, &settings)?;
        Ok(Self {
            settings,
            pvm_words,
            cmdline,
        })
    }
}

/// What [`Prepared::fill`] makes in the run dir: the state disk, the app images, the probe's.
type Filled = (
    Option<state::StateDisk>,
    Vec<apps::App>,
    Option<apps::Image>,
);

/// The run dir, the state disk and the app (and probe) images, ready to attach.
struct Prepared {
    run: RunDir,
    state: Option<state::StateDisk>,
    apps: Vec<apps::App>,
    probe: Option<apps::Image>,
    /// The egress dialer's plan, when an app has net or secret grants.
    dialer: Option<dialer::DialerPlan>,
}

impl Prepared {
    fn new(config: &VmConfig, code_cache: Option<&CodeCache>) -> Result<Self, RunVmError> {
        let run = match &config.run_dir {
            Some(dir) => RunDir::prepare(dir, config.apps.len())?,
            None => RunDir::create(config.apps.len())?,
        };
        // Before any app folder is read: no secret's value file may lie in the run dir.
        berm_app::own_paths::register(&run.dir, "the VM's run dir");
        let (state, apps, probe) = match Self::fill(config, &run, code_cache) {
            Ok(parts) => parts,
            Err(e) => {
                // Images already packed (and a probe's stage) go with the refusal.
                let _ = run.clean_up();
                return Err(e);
            }
        };
        let dialer = match dialer::plan(&run, &apps, config.host_sandbox) {
            Ok(plan) => plan,
            Err(e) => {
                let _ = run.clean_up();
                return Err(e.into());
            }
        };
        Ok(Self {
            run,
            state,
            apps,
            probe,
            dialer,
        })
    }

    /// Everything in `run` after the run dir itself: the record, the state disk, the images
    /// (the apps' code from `code_cache`, which there is when there are apps).
    fn fill(
        config: &VmConfig,
        run: &RunDir,
        code_cache: Option<&CodeCache>,
    ) -> Result<Filled, RunVmError> {
        report::record_to(&run.dir)?;
        let state = config.state.as_deref().map(state::prepare).transpose()?;
        let apps = match code_cache {
            Some(cache) => apps::prepare(
                &config.apps,
                config.programs.as_deref(),
                &run.dir,
                config.arch,
                cache,
            )?,
            None => Vec::new(),
        };
        let probe = config
            .test_probe
            .as_deref()
            .map(|binary| apps::pack_probe(binary, &run.dir))
            .transpose()?;
        Ok((state, apps, probe))
    }

    /// Read-only disks after root (and state): one per app, then the probe. The guest finds
    /// each by its serial, not by its position.
    fn disks(&self) -> Vec<(String, PathBuf)> {
        let mut disks: Vec<(String, PathBuf)> = self
            .apps
            .iter()
            .map(|a| (format!("app-{}", a.index()), a.image.clone()))
            .collect();
        if let Some(probe) = &self.probe {
            disks.push(("probe".into(), probe.path.clone()));
        }
        disks
    }
}

/// Says what is about to boot: the `hypervisor`, `endpoints`, `vm_config` and `measurements`
/// lines, all before the hypervisor starts.
fn report_plan(
    config: &VmConfig,
    memory_mib: u32,
    artifacts: &Artifacts,
    guest: &GuestSettings,
    prepared: &Prepared,
    detection: &Detection,
    choice: &Choice,
) {
    let (run, apps) = (&prepared.run, &prepared.apps);
    report::host(HostEvent::Hypervisor(HypervisorLine {
        chosen: choice.backend,
        accel: choice.accel.map(str::to_owned),
        reason: choice.reason.clone(),
    }));
    report::host(HostEvent::Endpoints(EndpointsLine {
        run_dir: run.dir.clone(),
        control: run.control.clone(),
        logs: run.logs.clone(),
        console: run.console.clone(),
        hypervisor_log: run.hypervisor_log.clone(),
        rpc: apps
            .iter()
            .map(|app| RpcEndpoint {
                index: app.measured.index,
                name: app.measured.name.clone(),
                app: app.measured.path.clone(),
                port: berm_vm_protocol::RPC_PORT_BASE + app.measured.index,
                socket: run.rpc[app.index()].clone(),
            })
            .collect(),
        egress: prepared
            .dialer
            .iter()
            .flat_map(|plan| &plan.apps)
            .map(|app| EgressEndpoint {
                index: app.index,
                name: app.name.clone(),
                port: berm_vm_protocol::EGRESS_PORT_BASE + app.index,
                socket: app.socket.clone(),
            })
            .collect(),
    }));
    report::host(HostEvent::VmConfig(VmConfigLine {
        arch: config.arch.name().to_owned(),
        hypervisor: HypervisorChoice {
            chosen: choice.backend,
            accel: choice.accel.map(str::to_owned),
            reason: choice.reason.clone(),
            requested: config.hypervisor.line(),
        },
        detection: detection.line(),
        cpus: config.cpus.into(),
        memory_mib,
        settings: guest
            .settings
            .iter()
            .map(|s| format!("{}={}", s.name(), s.value()))
            .collect(),
        pvm_cmdline: guest.pvm_words.then(|| PVM_CMDLINE.to_owned()),
        boot_timeout_ms: u64::try_from(config.boot_timeout.as_millis()).unwrap_or(u64::MAX),
    }));
    report::host(HostEvent::Measurements(measurements(
        config, artifacts, guest, prepared,
    )));
}

/// The `measurements` line.
fn measurements(
    config: &VmConfig,
    artifacts: &Artifacts,
    guest: &GuestSettings,
    prepared: &Prepared,
) -> MeasurementsLine {
    let (kernel, rootfs) = (&artifacts.kernel, &artifacts.rootfs);
    MeasurementsLine {
        kernel: KernelMeasurement {
            arch: config.arch.name().to_owned(),
            sha256: kernel.sha256.clone(),
            size: kernel.size,
            pinned: kernel.pinned,
            path: kernel.path.clone(),
            linux: artifacts.kernel_pins.linux.clone(),
            config_sha256: artifacts.kernel_pins.config_sha256.as_str().to_owned(),
            cmdline: guest.cmdline.clone(),
            hash_ms: kernel.hash_ms,
        },
        rootfs: RootfsMeasurement {
            sha256: rootfs.sha256.clone(),
            size: rootfs.size,
            pinned: rootfs.pinned,
            path: rootfs.path.clone(),
            fstype: artifacts.rootfs_pins.fstype.clone(),
            read_only: true,
            hash_ms: rootfs.hash_ms,
        },
        state: prepared.state.clone(),
        apps: prepared.apps.iter().map(|a| a.measured.clone()).collect(),
        // What re-deriving the code from the programs needs (berm attest verify --programs).
        engine: if prepared.apps.is_empty() {
            None
        } else {
            crate::code::engine_identity(config.arch)
        },
        test_probe: prepared.probe.as_ref().map(|p| ProbeMeasurement {
            image: p.measured.clone(),
            app: config.test_probe_app,
        }),
    }
}

/// The hypervisor's processes, when they started, and how berm-vmm connects to the run dir's
/// sockets from now on.
struct Booted {
    children: Vec<Child>,
    started: Instant,
    connector: Arc<Connector>,
}

/// Starts the hypervisor on `spec`, then confines berm-vmm itself and starts serving.
fn boot(
    config: &VmConfig,
    spec: &VmSpec,
    choice: &Choice,
    detection: &Detection,
    prepared: &Prepared,
) -> Result<Booted, RunVmError> {
    let run = &prepared.run;
    // What the host sandbox grants: the artifacts and shares to read, the run dir and the
    // state disk to write; the libkrun child also gets /dev/kvm.
    let policy = sandbox::SandboxGrants {
        read: [spec.kernel.clone(), spec.rootfs.clone()]
            .into_iter()
            .chain(prepared.apps.iter().map(|a| a.measured.path.clone()))
            .collect(),
        read_write: std::iter::once(run.dir.clone())
            .chain(spec.state.clone())
            .collect(),
        ..sandbox::SandboxGrants::default()
    };
    // The probe's sibling process (test boots only), read while files outside are readable.
    let probe_sibling = config.sandbox_probe.as_ref().and_then(|outside| {
        std::fs::read_to_string(outside.with_extension("pid"))
            .ok()
            .and_then(|pid| pid.trim().parse::<u32>().ok())
    });
    let started = Instant::now();
    let output = HypervisorOutput::new().map_err(RunVmError::HypervisorOutput)?;
    // What the children's connects by pathname are measured against; removed once they all
    // started, while berm-vmm may still remove a file outside its run dir.
    let outside = config
        .host_sandbox
        .then(|| OutsideSocket::bind(&run.dir))
        .transpose()
        .map_err(RunVmError::OutsideSocket)?;
    let sandboxed = Sandboxed {
        policy: &policy,
        outside: outside.as_ref(),
    };
    let (mut children, relays, mut child_sandboxes) = match choice.backend {
        Backend::Krun => start_krun(config, spec, &output, &sandboxed, &run.dir)?,
        Backend::Qemu => start_qemu(config, spec, choice, detection, run, &sandboxed, &output)?,
    };
    // The egress dialer, when an app may reach the network: listening and confined before
    // the guest could connect, and stopped with the hypervisor (it is berm-vmm's child).
    if let Some(plan) = &prepared.dialer {
        let (child, report) = dialer::start(plan, &output).inspect_err(|_| stop(&mut children))?;
        children.push(child);
        child_sandboxes.extend(report);
    }
    drop(outside);
    // Every child holds its copy of the pipe now; berm-vmm keeps only the read end.
    let output = output.into_reader();
    // The connector is forked before berm-vmm confines itself (it must be single-threaded for
    // both); from here on it makes every connection berm-vmm needs.
    let connector = if config.host_sandbox {
        let (connector, report) = Connector::fork(run).inspect_err(|_| stop(&mut children))?;
        child_sandboxes.push(report);
        connector
    } else {
        Connector::direct(run)
    };
    let connector = Arc::new(connector);
    // berm-vmm confines itself: the hypervisor is started, nothing of the guest's has been
    // served yet, and the process is still single-threaded (the relays start after this).
    let mut confined = if config.host_sandbox {
        let pids: Vec<u32> = children.iter().map(Child::id).collect();
        sandbox::confine(&policy, sandbox::Role::Vmm, &pids).inspect_err(|_| stop(&mut children))?
    } else {
        sandbox::Report::disabled(NO_HOST_SANDBOX)
    };
    // Each child's confinement as measured when it started (measure.rs), not assumed.
    confined.children = child_sandboxes;
    report::host(HostEvent::HostSandbox(confined.line()));
    if let Some(outside) = &config.sandbox_probe {
        report::host(HostEvent::HostSandboxProbe(sandbox::probe(
            outside,
            &spec.kernel,
            &run.dir,
            probe_sibling,
        )));
    }
    let hypervisor_log = run.hypervisor_log.clone();
    std::thread::spawn(move || {
        log_cap::relay(output, &hypervisor_log, log_cap::HYPERVISOR_LOG_CAP)
    });
    if let Some(relays) = relays {
        relays.serve(&connector);
    }
    Ok(Booted {
        children,
        started,
        connector,
    })
}

/// What a backend started: its processes (the VM first), the relays to serve once confined
/// (QEMU only) and how each child is confined.
type Started = (Vec<Child>, Option<Relays>, Vec<sandbox::ChildReport>);

/// berm-vmm's host-sandbox policy, which each hypervisor child gets widened just enough to
/// run, and the socket outside it their connects are measured against (`None` without a
/// host sandbox).
struct Sandboxed<'a> {
    policy: &'a sandbox::SandboxGrants,
    outside: Option<&'a OutsideSocket>,
}

/// The libkrun child: berm-vmm itself, re-executed, confined to `policy` plus `/dev/kvm`.
fn start_krun(
    config: &VmConfig,
    spec: &VmSpec,
    output: &HypervisorOutput,
    sandboxed: &Sandboxed<'_>,
    run_dir: &Path,
) -> Result<Started, RunVmError> {
    let krun_config = KrunConfig {
        vm: spec.clone(),
        host_sandbox: config.host_sandbox.then(|| sandbox::SandboxGrants {
            devices: vec![PathBuf::from("/dev/kvm")],
            ..sandboxed.policy.clone()
        }),
        report_fd: None,
        outside: sandboxed.outside.map(|o| o.path().to_owned()),
        run_dir: Some(run_dir.to_owned()),
    };
    let (child, report) = krun::spawn(&krun_config, output)?;
    Ok((vec![child], None, report.into_iter().collect()))
}

/// QEMU and its helper vhost-device-vsock, each confined to what it needs.
fn start_qemu(
    config: &VmConfig,
    spec: &VmSpec,
    choice: &Choice,
    detection: &Detection,
    run: &RunDir,
    sandboxed: &Sandboxed<'_>,
    output: &HypervisorOutput,
) -> Result<Started, RunVmError> {
    // Cannot be None: choose() returned Qemu only with both programs present.
    let (Some(qemu), Some(vhost)) = (
        detection.qemu_for(config.arch),
        &detection.vhost_device_vsock,
    ) else {
        return Err(DetectError::NoneUsable("QEMU or vhost-device-vsock vanished".into()).into());
    };
    let vm = QemuVm {
        spec,
        arch: config.arch,
        qemu,
        vhost_device_vsock: vhost,
        accel: choice.accel.unwrap_or("tcg"),
        run,
        connect_timeout: config.boot_timeout,
        sandbox: config.host_sandbox.then_some(sandboxed.policy),
        outside: sandboxed.outside,
        output,
    };
    let children = qemu::start(&vm)?;
    // The VM is QEMU; vhost-device-vsock is its helper and is stopped after it.
    Ok((
        vec![children.qemu, children.vhost],
        Some(children.relays),
        children.sandboxes,
    ))
}
