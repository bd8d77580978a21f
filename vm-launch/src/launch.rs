//! Booting a named VM, or keeping the one that runs: [`ensure`] measures the app folders,
//! keeps a VM running with them unchanged, reboots one whose folders changed (refusing a
//! change that needs `--accept`), cleans up a stale run, binds the state disk to the
//! folders, writes the one [`VmConfig`] berm-vmm reads (`vmm.json` in the VM dir) and starts
//! `berm-vmm run --config FILE` in a session of its own, its stderr in `vmm.stderr`; then it
//! reads the host lines until every app reported `app_ready` — or berm-vmm ended, an app was
//! refused or exited, or the timeout passed, which it reports with berm-vmm's own reason,
//! stopping what it started.
//!
//! What happened is said on stderr, each line led by the command that asked (`berm vm up`,
//! `berm mcp`).

use std::fs::{self, File};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use berm::GuestArch;
use clap::builder::{PossibleValuesParser, TypedValueParser};

use crate::config::{Requested, VmConfig, WriteVmConfigError};
use crate::files::{OpenPrivateError, now_unix, private_file};
use crate::host_lines::HostLines;
use crate::layout::{CONFIG_FILE, HOST_LINES, Layout, STOPPING};
use crate::measure::{MeasureError, changes, measure};
use crate::record::{Launch, LaunchApp, Liveness, WriteLaunchError, retire, start_ticks};
use crate::state::{BindError, Binding, StateDirError, bind, default_disk};
use crate::stop::stop_running;

/// How to boot a VM: what `berm vm up` and `berm mcp --app` take, and turn into the
/// [`VmConfig`] berm-vmm reads.
#[derive(clap::Args, Clone, Debug)]
pub struct VmOptions {
    /// The state disk [default: ~/.local/share/berm/state/N.img, created on first use].
    #[arg(long, value_name = "FILE", conflicts_with = "no_state")]
    pub state: Option<PathBuf>,
    /// Run without a state disk (the apps' workspaces are then a tmpfs).
    #[arg(long)]
    pub no_state: bool,
    /// The guest's architecture.
    #[arg(
        long,
        value_name = "ARCH",
        default_value = GuestArch::HOST.name(),
        value_parser = PossibleValuesParser::new(GuestArch::ALL.map(GuestArch::name))
            .try_map(|name| name.parse::<GuestArch>())
    )]
    pub arch: GuestArch,
    /// berm-vmm's `--hypervisor`.
    #[arg(
        long,
        value_name = "NAME",
        default_value = "auto",
        value_parser = PossibleValuesParser::new(["auto", "krun", "qemu"])
            .try_map(|name| <Requested as clap::ValueEnum>::from_str(&name, false))
    )]
    pub hypervisor: Requested,
    /// berm-vmm's `--cpus`.
    #[arg(long, value_name = "N")]
    pub cpus: Option<u8>,
    /// berm-vmm's `--memory` (MiB).
    #[arg(long, value_name = "MiB")]
    pub memory: Option<u32>,
    /// berm-vmm's `--key`: the host key the run's record is signed with.
    #[arg(long, value_name = "FILE")]
    pub key: Option<PathBuf>,
    /// berm-vmm's `--env` (repeatable): a guest setting.
    #[arg(long = "env", value_name = "NAME=VALUE")]
    pub env: Vec<String>,
    /// Seconds to wait for every app to be ready before stopping the VM and failing.
    #[arg(long, value_name = "SECONDS", default_value_t = 300)]
    pub timeout: u64,
    /// When the app folders changed what the model reads or what a program may reach (tools,
    /// descriptions, schemas, syscalls, grants), against the running VM or, at boot, against
    /// what last ran on the state disk: boot or reboot with them anyway, for this boot (a
    /// change in nothing else needs no --accept).
    #[arg(long)]
    pub accept: bool,
    /// When the state disk holds the workspace of an app of the same name that another app
    /// folder booted with: boot anyway, and bind that workspace to these folders from now on
    /// (they read and rewrite its files, keyspaces, receipts and keys). Only ever given here:
    /// nothing in berm.toml stands for it.
    #[arg(long, conflicts_with = "no_state")]
    pub inherit_state: bool,
}

/// What `up` or `mcp --app` wants running under a name, with the name's lock held.
pub struct Want<'a> {
    /// Where VMs live.
    pub layout: &'a Layout,
    /// The name's VM dir.
    pub vm_dir: &'a Path,
    /// The name.
    pub name: &'a str,
    /// The app folders, canonical, in port order.
    pub dirs: &'a [PathBuf],
    /// The program store the folders' programs named by image are read from (where
    /// `berm pull --app` put them).
    pub programs: &'a Path,
    /// How to boot it.
    pub options: &'a VmOptions,
    /// `Some` for a VM `mcp --app` boots: it stops this long after its last client left.
    pub idle_timeout_s: Option<u64>,
    /// Who says what happened (`berm vm up`, `berm mcp`).
    pub who: &'a str,
}

/// What [`ensure`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The VM was running with these folders unchanged: nothing was done.
    Running,
    /// No VM ran (or a stale one was cleaned up): one was booted.
    Booted,
    /// The folders changed: the VM was stopped and booted again on the same state disk.
    Rebooted,
}

/// berm-vmm could not be found.
#[derive(Debug, thiserror::Error)]
pub enum FindVmmError {
    /// `$BERM_VMM` names nothing.
    #[error("BERM_VMM names {}, which is not there", path.display())]
    NotThere {
        /// What it names.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Neither beside berm nor on `PATH`.
    #[error("berm-vmm is not installed: put it beside berm or on PATH, or set BERM_VMM")]
    NotInstalled,
}

/// A VM that could not be kept, booted or rebooted.
#[derive(Debug, thiserror::Error)]
pub enum EnsureError {
    /// An app folder could not be measured.
    #[error(transparent)]
    Measure(#[from] MeasureError),
    /// More apps than ports.
    #[error("too many apps")]
    TooManyApps(#[source] std::num::TryFromIntError),
    /// The running VM's folders changed what its clients are offered, without `--accept`.
    #[error(
        "the app folders of VM \"{name}\" changed what its clients are offered:\n{changes}\nnothing was restarted: add --accept to reboot \"{name}\" with them, or undo the change"
    )]
    NeedsAccept {
        /// The VM.
        name: String,
        /// One line per change.
        changes: String,
    },
    /// A path given could not be made absolute.
    #[error("resolving {}", path.display())]
    Absolute {
        /// The path.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The default state disk's directory could not be used.
    #[error(transparent)]
    StateDir(#[from] StateDirError),
    /// The state disk's workspaces belong to other folders.
    #[error(transparent)]
    Bind(#[from] BindError),
    /// berm-vmm could not be found.
    #[error(transparent)]
    FindVmm(#[from] FindVmmError),
    /// The configuration could not be written.
    #[error(transparent)]
    WriteConfig(#[from] WriteVmConfigError),
    /// berm-vmm did not start the VM.
    #[error(transparent)]
    Start(#[from] StartError),
}

/// berm-vmm did not bring every app up.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// `vmm.stderr` could not be opened.
    #[error(transparent)]
    Open(#[from] OpenPrivateError),
    /// berm-vmm could not be started.
    #[error("starting {program}")]
    Spawn {
        /// berm-vmm's path.
        program: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The launch record could not be written.
    #[error(transparent)]
    Record(#[from] WriteLaunchError),
    /// `vmm.stderr` could not be read.
    #[error("reading {}", path.display())]
    ReadLines {
        /// `vmm.stderr`.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Waiting for berm-vmm failed.
    #[error("waiting for berm-vmm")]
    Wait(#[source] std::io::Error),
    /// berm-vmm ended before every app was ready.
    #[error("VM \"{name}\" did not start: {reason}; berm-vmm's output is in {}", stderr.display())]
    Ended {
        /// The VM.
        name: String,
        /// berm-vmm's own reason.
        reason: String,
        /// `vmm.stderr`.
        stderr: PathBuf,
    },
    /// An app was refused or exited, or the timeout passed: the VM was stopped.
    #[error("VM \"{name}\" did not start: {why}; it was stopped (see {}{logs})", stderr.display())]
    Stopped {
        /// The VM.
        name: String,
        /// What went wrong.
        why: String,
        /// `vmm.stderr`.
        stderr: PathBuf,
        /// ` and <run dir>/guest.log`, when there is a run dir.
        logs: String,
    },
}

/// `$BERM_VMM`, else `berm-vmm` beside this program, else on `PATH`.
fn berm_vmm() -> Result<PathBuf, FindVmmError> {
    if let Some(path) = std::env::var_os("BERM_VMM").filter(|p| !p.is_empty()) {
        let path = PathBuf::from(path);
        return fs::canonicalize(&path).map_err(|source| FindVmmError::NotThere { path, source });
    }
    let beside = std::env::current_exe()
        .ok()
        .map(|exe| exe.with_file_name("berm-vmm"));
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .filter(|dir| dir.is_absolute())
        .map(|dir| dir.join("berm-vmm"));
    beside
        .into_iter()
        .chain(on_path)
        .find(|path| path.is_file())
        .ok_or(FindVmmError::NotInstalled)
}

/// An absolute form of `path` (relative to the current directory), without resolving links.
fn absolute(path: &Path) -> Result<PathBuf, EnsureError> {
    std::path::absolute(path).map_err(|source| EnsureError::Absolute {
        path: path.to_owned(),
        source,
    })
}

/// Makes the VM `want` names run `want.dirs` as they are now, given the launch record `old`
/// (read under the lock): leaves a running VM whose folders are unchanged alone, reboots
/// one whose folders changed (refusing a change that needs `--accept`), cleans up a stale
/// run and boots.
pub fn ensure(want: &Want, old: Option<Launch>) -> Result<(Launch, Outcome), EnsureError> {
    let name = want.name;
    let mut measured = Vec::new();
    let mut apps = Vec::new();
    for (index, dir) in want.dirs.iter().enumerate() {
        let (app, measure) = measure(dir, want.programs)?;
        apps.push(LaunchApp {
            index: u32::try_from(index).map_err(EnsureError::TooManyApps)?,
            name: app.name,
            dir: app.dir,
        });
        measured.push(measure);
    }
    let mut outcome = Outcome::Booted;
    if let Some(old) = old {
        match old.liveness() {
            Liveness::Running => {
                let Some(changes) = changes(
                    &old.measured,
                    apps.iter().map(|app| app.name.as_str()),
                    &measured,
                ) else {
                    return Ok((old, Outcome::Running));
                };
                if !changes.is_empty() && !want.options.accept {
                    return Err(EnsureError::NeedsAccept {
                        name: name.to_owned(),
                        changes: changes.join("\n"),
                    });
                }
                let accepted = match changes.is_empty() {
                    true => String::new(),
                    false => format!(" (--accept:\n{})", changes.join("\n")),
                };
                eprintln!(
                    "{}: the app folders of \"{name}\" changed; rebooting it on the same state disk{accepted}",
                    want.who
                );
                stop_running(want.vm_dir, &old, Duration::from_secs(20));
                if let Some(config) = &old.config {
                    let mut launch = old.clone();
                    let mut config = config.clone();
                    // The guest's bermd checks the folders against its record on the state
                    // disk too: it accepts what was accepted here, and only for this boot.
                    config.accept = want.options.accept;
                    config.write(&want.vm_dir.join(CONFIG_FILE))?;
                    launch.config = Some(config);
                    launch.measured = measured;
                    launch.run_dir = want.layout.run_dir(name);
                    let launch = spawn_ready(want.vm_dir, launch, want.options.timeout)?;
                    return Ok((launch, Outcome::Rebooted));
                }
                // An older berm started it and recorded no configuration to start again:
                // it boots afresh, from this command's options.
                eprintln!(
                    "{}: \"{name}\" was started by an older berm, which recorded no configuration to reboot it with; booting it afresh with this command's options",
                    want.who
                );
                outcome = Outcome::Rebooted;
            }
            stale => {
                retire(want.vm_dir, &old);
                eprintln!(
                    "{}: cleaned up a stale \"{name}\": {}",
                    want.who,
                    stale.why(old.pid)
                );
            }
        }
    }
    let _ = fs::remove_file(want.vm_dir.join(STOPPING));
    let options = want.options;
    let state = match (&options.state, options.no_state) {
        (_, true) => None,
        (Some(state), false) => Some(absolute(state)?),
        (None, false) => Some(default_disk(name)?),
    };
    if let Some(disk) = &state {
        // Before berm-vmm is even looked for: a folder that may not have its workspace on
        // this disk starts nothing.
        bind(&Binding {
            disk,
            apps: apps
                .iter()
                .map(|app| (app.name.as_str(), app.dir.as_path()))
                .collect(),
            inherit: options.inherit_state,
            vm_dir: want.vm_dir,
            who: want.who,
        })?;
    }
    let vmm = berm_vmm()?;
    let run_dir = want.layout.run_dir(name);
    let config = VmConfig {
        apps: apps.iter().map(|app| app.dir.clone()).collect(),
        programs: Some(want.programs.to_owned()),
        accept: options.accept,
        state: state.clone(),
        run_dir: run_dir.clone(),
        cpus: options.cpus.unwrap_or(VmConfig::default().cpus),
        memory_mib: options.memory,
        hypervisor: options.hypervisor,
        arch: options.arch,
        key: options.key.as_deref().map(absolute).transpose()?,
        env: options.env.clone(),
        ..VmConfig::default()
    };
    let config_file = want.vm_dir.join(CONFIG_FILE);
    config.write(&config_file)?;
    let argv = [
        vmm.as_path(),
        Path::new("run"),
        Path::new("--config"),
        &config_file,
    ]
    .map(|arg| arg.to_string_lossy().into_owned())
    .to_vec();
    let launch = Launch {
        name: name.to_owned(),
        pid: 0,
        start_ticks: None,
        argv,
        started_unix: 0,
        apps,
        arch: options.arch.name().to_owned(),
        hypervisor: options.hypervisor.name().to_owned(),
        state,
        run_dir,
        idle_timeout_s: want.idle_timeout_s,
        measured,
        config: Some(config),
    };
    let launch = spawn_ready(want.vm_dir, launch, options.timeout)?;
    Ok((launch, outcome))
}

/// Starts `launch.argv` (berm-vmm) detached with its stderr in `vmm.stderr`, writes the
/// launch record and reads the host lines until every app is ready; on failure says why
/// with berm-vmm's own reason, stopping what it started.
fn spawn_ready(vm_dir: &Path, mut launch: Launch, timeout: u64) -> Result<Launch, StartError> {
    let name = launch.name.clone();
    let stderr_path = vm_dir.join(HOST_LINES);
    let stderr = private_file(&stderr_path, true)?;
    let mut command = Command::new(&launch.argv[0]);
    command
        .args(&launch.argv[1..])
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr);
    crate::sys::new_session(&mut command);
    let mut child = command.spawn().map_err(|source| StartError::Spawn {
        program: launch.argv[0].clone(),
        source,
    })?;
    launch.pid = child.id();
    launch.start_ticks = start_ticks(child.id());
    launch.started_unix = now_unix();
    launch.write(vm_dir)?;

    let mut lines = HostLines::default();
    let mut reader = File::open(&stderr_path).map_err(|source| StartError::ReadLines {
        path: stderr_path.clone(),
        source,
    })?;
    let deadline = Instant::now() + Duration::from_secs(timeout);
    let mut read = |lines: &mut HostLines| {
        let mut bytes = Vec::new();
        let _ = reader.read_to_end(&mut bytes);
        lines.feed(&bytes);
    };
    let failure = loop {
        read(&mut lines);
        if launch.run_dir.is_none()
            && let Some(endpoints) = &lines.endpoints
        {
            launch.run_dir = Some(endpoints.run_dir.clone());
            launch.write(vm_dir)?;
        }
        if launch.apps.iter().all(|a| lines.ready.contains(&a.index)) {
            break None;
        }
        if let Some(status) = child.try_wait().map_err(StartError::Wait)? {
            read(&mut lines);
            lines.finish();
            retire(vm_dir, &launch);
            let reason = lines
                .reason()
                .unwrap_or_else(|| format!("berm-vmm ended ({status}) without a word"));
            return Err(StartError::Ended {
                name,
                reason,
                stderr: stderr_path,
            });
        }
        if let Some(refused) = &lines.refused {
            break Some(format!(
                "app {} was refused: {}",
                refused.app, refused.reason
            ));
        }
        if let Some(exited) = &lines.exited {
            let how = match (exited.code, exited.signal) {
                (_, Some(signal)) => format!("was killed by signal {signal}"),
                (Some(code), None) => format!("exited with code {code}"),
                (None, None) => "ended".to_owned(),
            };
            // Its own words (bermd's error, e.g. a folder changed since it last ran on the
            // state disk) are on the guest's log port, which berm-vmm keeps in guest.log.
            let said = launch
                .run_dir
                .as_deref()
                .map(|dir| app_log_tail(dir, &exited.app))
                .unwrap_or_default();
            break Some(format!(
                "app {} {how} before it was ready{said}",
                exited.app
            ));
        }
        if Instant::now() >= deadline {
            break Some(format!("not every app was ready within {timeout} s"));
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    if let Some(why) = failure {
        stop_running(vm_dir, &launch, Duration::from_secs(10));
        let _ = child.try_wait();
        let logs = launch
            .run_dir
            .as_ref()
            .map(|dir| format!(" and {}", dir.join("guest.log").display()))
            .unwrap_or_default();
        return Err(StartError::Stopped {
            name,
            why,
            stderr: stderr_path,
            logs,
        });
    }
    Ok(launch)
}

/// The last lines app `app` wrote to the guest's log (`guest.log` in `run_dir`), unescaped and
/// indented, after a colon; empty when there are none.
fn app_log_tail(run_dir: &Path, app: &str) -> String {
    const LINES: usize = 20;
    let Ok(text) = fs::read_to_string(run_dir.join("guest.log")) else {
        return String::new();
    };
    // berm-vmm writes `{uptime} {Level} {source}: {message, escaped}`: the source is the
    // third field, so another app's message naming this one is not taken for its words.
    let marker = format!("{app}: ");
    let mine: Vec<String> = text
        .lines()
        .filter_map(|line| {
            let mut fields = line.trim_start().splitn(3, ' ');
            let (_uptime, _level) = (fields.next()?, fields.next()?);
            fields.next()?.strip_prefix(&marker)
        })
        .map(|message| {
            message
                .replace("\\n", "\n    ")
                .replace("\\\"", "\"")
                .replace("\\'", "'")
        })
        .collect();
    if mine.is_empty() {
        return String::new();
    }
    let from = mine.len().saturating_sub(LINES);
    format!(":\n    {}\n", mine[from..].join("\n    "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_options_parse_into_a_typed_arch_and_hypervisor() {
        #[derive(clap::Parser)]
        struct Up {
            #[command(flatten)]
            vm: VmOptions,
        }
        let up = <Up as clap::Parser>::try_parse_from(["up"]).unwrap();
        assert_eq!(up.vm.arch, GuestArch::HOST);
        assert_eq!(up.vm.hypervisor, Requested::Auto);
        let up = <Up as clap::Parser>::try_parse_from([
            "up",
            "--arch",
            "aarch64",
            "--hypervisor",
            "qemu",
        ])
        .unwrap();
        assert_eq!(up.vm.arch, GuestArch::Aarch64);
        assert_eq!(up.vm.hypervisor, Requested::Qemu);
        let e = <Up as clap::Parser>::try_parse_from(["up", "--arch", "riscv64"])
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("[possible values: x86_64, aarch64]"), "{e}");
    }

    #[test]
    fn an_app_log_tail_is_its_own_lines() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(
            dir.path().join("guest.log"),
            "1.0 Info notes: first\n2.0 Warn tags: notes: not mine\n3.0 Error notes: a\\nb\n",
        )
        .unwrap();
        assert_eq!(
            app_log_tail(dir.path(), "notes"),
            ":\n    first\n    a\n    b\n"
        );
        assert_eq!(app_log_tail(dir.path(), "other"), "");
    }
}
