//! `berm-vmm`: argument parsing and wiring only; the logic is in the library.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use berm::GuestArch;
use berm_vm_protocol::HostEvent;
use berm_vm_protocol::host_event::{RecordSignedLine, RecordUnsignedLine};
use berm_vmm::detect::Requested;
use berm_vmm::exit::ExitStatus;
use berm_vmm::run::{RunConfig, run};
use clap::{Parser, Subcommand};

/// The host side of berm's microVM.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Commands,
}

#[derive(Subcommand)]
#[expect(
    clippy::large_enum_variant,
    reason = "parsed once at startup and matched at once; boxing the arguments buys nothing"
)]
enum Commands {
    /// Boot the pinned kernel and rootfs and run until the guest powers off.
    #[command(after_help = EXIT_CODES)]
    Run {
        /// An app folder (repeatable); app i is served on rpc-<i>.sock (vsock 5000+i).
        #[arg(long = "app", value_name = "DIR")]
        apps: Vec<PathBuf>,
        /// The program store the apps' `image = "…@sha256:…"` programs are read from,
        /// verified against their pins (`berm pull --app DIR` fills it; berm vm up passes
        /// $BERM_HOME/programs). berm-vmm never talks to a registry.
        #[arg(long, value_name = "DIR")]
        programs: Option<PathBuf>,
        /// Accept what the app folders changed since they last ran on this state disk (a
        /// tool's description or schema, a tool or program added or removed, a syscall or
        /// grant not held before); without it such an app is refused at boot, naming each
        /// change (berm.toml's `accept = "sha256:…"` accepts one program's new bytes).
        #[arg(long)]
        accept: bool,
        /// The state disk (vdb); created and formatted ext4 if missing.
        #[arg(long, value_name = "DISK")]
        state: Option<PathBuf>,
        /// Where the sockets and console.log go (mode 0700).
        #[arg(long, value_name = "DIR")]
        run_dir: Option<PathBuf>,
        /// vCPUs.
        #[arg(long, default_value_t = 1)]
        cpus: u8,
        /// Guest memory in MiB (64-16384) [default: the apps' memory.max added up, plus
        /// 96 MiB for the kernel, berm-init and the page cache, rounded up to 32 MiB].
        #[arg(long, value_name = "MiB")]
        memory: Option<u32>,
        /// Which backend: libkrun, QEMU, or the best one here.
        #[arg(long, value_enum, default_value_t = Requested::Auto)]
        hypervisor: Requested,
        /// The guest's architecture (x86_64 or aarch64): its pinned kernel and rootfs, and
        /// programs compiled for it. Another than this host's boots under QEMU's emulation.
        #[arg(long, value_name = "ARCH", default_value = GuestArch::HOST.name())]
        arch: GuestArch,
        /// Boot this kernel instead of the pinned one (reported "pinned": false).
        #[arg(long, value_name = "FILE")]
        kernel: Option<PathBuf>,
        /// Boot this rootfs instead of the pinned one (reported "pinned": false).
        #[arg(long, value_name = "FILE")]
        rootfs: Option<PathBuf>,
        /// A guest setting NAME=VALUE (repeatable), passed on the kernel command line.
        #[arg(long = "env", value_name = "NAME=VALUE")]
        env: Vec<String>,
        /// Seconds the guest may take to greet on the control port.
        #[arg(long, value_name = "SECONDS", default_value_t = 60)]
        boot_timeout: u64,
        /// Test boots only: run this static enforcement-probe binary (berm-probe) inside the
        /// guest under the confinement of app --test-probe-app; the measurement line reports it.
        #[arg(long, value_name = "FILE", hide_short_help = true)]
        test_probe: Option<PathBuf>,
        /// The app (its index) whose confinement the probe runs under.
        #[arg(
            long,
            value_name = "INDEX",
            default_value_t = 0,
            requires = "test_probe",
            hide_short_help = true
        )]
        test_probe_app: u32,
        /// Run unconfined: no Landlock and no seccomp deny list on berm-vmm (reported in the
        /// host_sandbox line and in `berm attest` records).
        #[arg(long)]
        no_host_sandbox: bool,
        /// Once confined, try to read, write and create beside FILE and to exec, and report
        /// the outcome as a host_sandbox_probe line (tests; nothing is changed if it holds).
        #[arg(long, value_name = "FILE", hide = true)]
        sandbox_probe: Option<PathBuf>,
        /// The host key the run's record is signed with (ed25519, PKCS#8 PEM, mode 0600),
        /// created on first use; default $XDG_CONFIG_HOME/berm/host-key.pem, else
        /// ~/.config/berm/host-key.pem.
        #[arg(long, value_name = "FILE")]
        key: Option<PathBuf>,
    },
    /// Internal: the egress dialer (berm-vmm re-executes itself; its plan comes on stdin).
    #[command(hide = true)]
    Dial,
    /// Internal: the libkrun child process (berm-vmm re-executes itself).
    #[command(hide = true)]
    KrunEnter {
        /// The child's configuration, as JSON.
        config: String,
    },
}

const EXIT_CODES: &str = "Exit codes (docs/vm.md):
  0 clean             guest powered off with exit code 0
  1 internal          berm-vmm itself failed
  2 usage             bad arguments
  3 artifact_missing  kernel or rootfs not installed (berm vm install, or scripts/build-kernel.sh + build-rootfs.sh)
  4 pin_mismatch      kernel or rootfs differs from the pins compiled in
  5 refused           configuration refused before boot (guest settings, apps, code cache, run dir, state disk)
  6 no_hypervisor     no backend can run the guest here
  7 hypervisor_failed QEMU, vhost-device-vsock or libkrun could not be started
  8 boot_timeout      no greeting on the control port in time
 10 boot_failed       the guest reported boot_failed
 11 guest_error       the guest powered off with a non-zero exit code
 12 crashed           the VM ended without power_off";

fn main() -> ExitCode {
    // On bad arguments clap prints why and exits with 2, [`ExitStatus::Usage`]; after --help
    // or --version it exits with 0.
    const _: () = assert!(ExitStatus::Usage.code() == 2);
    let cli = Cli::parse();
    match cli.command {
        Commands::Run {
            apps,
            programs,
            accept,
            state,
            run_dir,
            cpus,
            memory,
            hypervisor,
            arch,
            kernel,
            rootfs,
            env,
            boot_timeout,
            test_probe,
            test_probe_app,
            no_host_sandbox,
            sandbox_probe,
            key,
        } => {
            if let Err(e) = berm_vmm::catch_stop_signals() {
                berm_vmm::report::say(format_args!(
                    "berm-vmm: installing the stop-signal handler failed: {e}"
                ));
                return ExitCode::from(ExitStatus::Internal.code());
            }
            register_own_paths(&OwnPaths {
                apps: &apps,
                programs: programs.as_deref(),
                state: state.as_deref(),
                run_dir: run_dir.as_deref(),
                kernel: kernel.as_deref(),
                rootfs: rootfs.as_deref(),
                key: key.as_deref(),
            });
            // Before anything boots, and before berm-vmm confines itself away from the key.
            let key = match berm_vmm::sign::host_key(key.as_deref()) {
                Ok(key) => key,
                Err(e) => {
                    let message = format!("{:#}", anyhow::Error::new(e));
                    let exit = berm_vm_protocol::host::ExitLine {
                        status: ExitStatus::Refused.name().into(),
                        code: ExitStatus::Refused.code(),
                        message: message.clone(),
                    };
                    berm_vmm::report::host(HostEvent::Exit(exit));
                    berm_vmm::report::say(format_args!("berm-vmm: {message}"));
                    return ExitCode::from(ExitStatus::Refused.code());
                }
            };
            let config = RunConfig {
                apps,
                programs,
                accept,
                state,
                run_dir,
                cpus,
                memory_mib: memory,
                hypervisor,
                arch,
                kernel,
                rootfs,
                env,
                boot_timeout: Duration::from_secs(boot_timeout),
                test_probe,
                test_probe_app,
                host_sandbox: !no_host_sandbox,
                sandbox_probe,
            };
            let (status, message) = match run(&config) {
                Ok(outcome) => (outcome.status, outcome.summary),
                Err(e) => (e.status(), format!("{:#}", anyhow::Error::new(e))),
            };
            let exit = berm_vm_protocol::host::ExitLine {
                status: status.name().into(),
                code: status.code(),
                message: message.clone(),
            };
            berm_vmm::report::host(HostEvent::Exit(exit));
            // A run refused before it measured anything has no record to sign.
            if let Some(run_dir) = berm_vmm::report::recording_to() {
                match berm_vmm::sign::sign_run(&key, &run_dir) {
                    Ok(signed) => {
                        berm_vmm::report::host(HostEvent::RecordSigned(RecordSignedLine {
                            path: signed.path,
                            record_sha256: signed.record_sha256,
                            key_id: signed.key_id,
                        }))
                    }
                    Err(e) => {
                        berm_vmm::report::host(HostEvent::RecordUnsigned(RecordUnsignedLine {
                            message: format!("{:#}", anyhow::Error::new(e)),
                        }))
                    }
                }
            }
            if status != ExitStatus::Clean {
                berm_vmm::report::say(format_args!("berm-vmm: {message}"));
            }
            ExitCode::from(status.code())
        }
        Commands::Dial => match dial() {
            Ok(never) => match never {},
            Err(e) => {
                berm_vmm::report::say(format_args!("berm-vmm dial: {e:#}"));
                ExitCode::from(ExitStatus::Internal.code())
            }
        },
        Commands::KrunEnter { config } => match krun_enter(&config) {
            Ok(never) => match never {},
            Err(e) => {
                berm_vmm::report::say(format_args!("berm-vmm krun-enter: {e:#}"));
                ExitCode::from(ExitStatus::HypervisorFailed.code())
            }
        },
    }
}

/// The paths `berm-vmm run`'s flags name.
struct OwnPaths<'a> {
    apps: &'a [PathBuf],
    programs: Option<&'a Path>,
    state: Option<&'a Path>,
    run_dir: Option<&'a Path>,
    kernel: Option<&'a Path>,
    rootfs: Option<&'a Path>,
    key: Option<&'a Path>,
}

/// Registers everything this run owns or reads for itself as berm's own
/// ([`berm_app::own_paths`]), before any app folder is read, so that no folder can name one
/// as a secret's value file (the egress dialer is handed the same set): berm's home, the
/// artifact store, and each file or directory a flag names.
fn register_own_paths(paths: &OwnPaths<'_>) {
    use berm_app::own_paths::{STATE, register};
    register(&berm_control::home::berm_home(), STATE);
    if let Some(store) = berm_pins::ArtifactStore::from_env() {
        register(store.root(), "berm-vmm's kernels and rootfs images");
    }
    let named = [
        (paths.programs, "the program store (--programs)"),
        (paths.state, "the VM's state disk (--state)"),
        (paths.run_dir, "the VM's run dir (--run-dir)"),
        (paths.kernel, "the kernel booted (--kernel)"),
        (paths.rootfs, "the rootfs booted (--rootfs)"),
        (paths.key, "the host key that signs run records (--key)"),
    ];
    for (path, what) in named {
        if let Some(path) = path {
            register(path, what);
        }
    }
    for app in paths.apps {
        register(app, "an app folder berm-vmm serves (--app)");
    }
}

fn dial() -> anyhow::Result<std::convert::Infallible> {
    use std::io::Read;
    let mut plan = Vec::new();
    std::io::stdin()
        .take(berm_vmm::dialer::MAX_PLAN_BYTES)
        .read_to_end(&mut plan)
        .context("reading the dialer's plan")?;
    berm_vmm::dialer::run(&plan)
}

fn krun_enter(config: &str) -> anyhow::Result<std::convert::Infallible> {
    let config: berm_vmm::krun::KrunConfig =
        serde_json::from_str(config).context("reading the libkrun child's configuration")?;
    berm_vmm::krun::confine_self(&config)?;
    Err(berm_vmm::krun::enter(&config)).context("running the VM with libkrun")
}
