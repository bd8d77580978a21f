//! `berm-vmm`: argument parsing and wiring only; the logic is in the library.
#![deny(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use berm_vm_protocol::HostEvent;
use berm_vm_protocol::host_event::{RecordSignedLine, RecordUnsignedLine};
use berm_vmm::exit::ExitStatus;
use berm_vmm::run::{VmConfig, run};
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
        /// Read the whole run's configuration from FILE (JSON, the fields docs/vm.md lists)
        /// instead of from these flags; it takes no other flag.
        #[arg(long, value_name = "FILE", conflicts_with = "VmConfig")]
        config: Option<PathBuf>,
        #[command(flatten)]
        flags: VmConfig,
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
        Commands::Run { config, flags } => {
            // The flags are the same value a --config file holds.
            let config = match config {
                Some(file) => match VmConfig::read(&file) {
                    Ok(config) => config,
                    Err(e) => {
                        berm_vmm::report::say(format_args!(
                            "berm-vmm: {:#}",
                            anyhow::Error::new(e)
                        ));
                        return ExitCode::from(ExitStatus::Usage.code());
                    }
                },
                None => flags,
            };
            if let Err(e) = berm_vmm::catch_stop_signals() {
                berm_vmm::report::say(format_args!(
                    "berm-vmm: installing the stop-signal handler failed: {e}"
                ));
                return ExitCode::from(ExitStatus::Internal.code());
            }
            register_own_paths(&config);
            // Before anything boots, and before berm-vmm confines itself away from the key.
            let key = match berm_vmm::sign::host_key(config.key.as_deref()) {
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

/// Registers everything this run owns or reads for itself as berm's own
/// ([`berm_app::own_paths`]), before any app folder is read, so that no folder can name one
/// as a secret's value file (the egress dialer is handed the same set): berm's home, the
/// artifact store, and each file or directory a flag names.
fn register_own_paths(paths: &VmConfig) {
    use berm_app::own_paths::{STATE, register};
    register(&berm_control::home::berm_home(), STATE);
    if let Some(store) = berm_pins::ArtifactStore::from_env() {
        register(store.root(), "berm-vmm's kernels and rootfs images");
    }
    let named = [
        (&paths.programs, "the program store (--programs)"),
        (&paths.state, "the VM's state disk (--state)"),
        (&paths.run_dir, "the VM's run dir (--run-dir)"),
        (&paths.kernel, "the kernel booted (--kernel)"),
        (&paths.rootfs, "the rootfs booted (--rootfs)"),
        (&paths.key, "the host key that signs run records (--key)"),
    ];
    for (path, what) in named {
        if let Some(path) = path {
            register(path, what);
        }
    }
    for app in &paths.apps {
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
