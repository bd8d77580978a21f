//! `berm vm up`, `berm vm ls`, `berm vm stop` and `berm vm logs`: named VMs that berm-vmm
//! runs detached, one per name (where their files live: [`super::vm_life`]).
//!
//! `up` takes the VM's lock, cleans up a stale run of the name (or refuses a running one),
//! starts `berm-vmm run` in a session of its own with its stderr in `vmm.stderr`, writes the
//! pid file and reads the host lines until every app reported `app_ready` — or berm-vmm
//! ended, an app was refused or exited, or `--timeout` passed, which it reports with
//! berm-vmm's own reason, stopping what it started. The VM then runs until `berm vm stop`.

use std::fs::{self, File};
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use berm_vm_protocol::client::GuestConnection;
use berm_vm_protocol::{Event, Request, Service};

use super::vm_life::{
    self, HOST_LINES, HostLines, LAUNCH_FILE, Launch, LaunchApp, Layout, Liveness, Lock, STOPPING,
    Status, View,
};
use crate::Exit;

/// How to boot a VM: what `berm vm up` and `berm mcp --app` pass to berm-vmm.
#[derive(clap::Args, Clone, Debug)]
pub struct VmOptions {
    /// The state disk [default: ~/.local/share/berm/state/N.img, created on first use].
    #[arg(long, value_name = "FILE", conflicts_with = "no_state")]
    pub state: Option<PathBuf>,
    /// Run without a state disk (the apps' workspaces are then a tmpfs).
    #[arg(long)]
    pub no_state: bool,
    /// The guest's architecture.
    #[arg(long, value_name = "ARCH", default_value = berm_pins::HOST_ARCH, value_parser = berm_pins::ARCHES)]
    pub arch: String,
    /// berm-vmm's `--hypervisor`.
    #[arg(long, value_name = "NAME", default_value = "auto", value_parser = ["auto", "krun", "qemu"])]
    pub hypervisor: String,
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

/// Arguments of `berm vm up`.
#[derive(clap::Args)]
pub struct UpArgs {
    /// An app folder (repeatable); app i is served on `rpc-<i>.sock`.
    #[arg(long = "app", value_name = "DIR", required = true)]
    pub apps: Vec<PathBuf>,
    /// The VM's name [default: the first app's `name` in its berm.toml].
    #[arg(long, value_name = "N")]
    name: Option<String>,
    #[command(flatten)]
    vm: VmOptions,
    /// Print the VM (as `berm vm ls --json` shows it) as one JSON object.
    #[arg(long)]
    json: bool,
}

/// Arguments of `berm vm ls`.
#[derive(clap::Args)]
pub struct LsArgs {
    /// One JSON array of the VMs.
    #[arg(long)]
    json: bool,
}

/// Arguments of `berm vm stop`.
#[derive(clap::Args)]
pub struct StopArgs {
    /// The VM's name.
    name: String,
    /// Seconds the guest has to shut down before berm-vmm is killed.
    #[arg(long, value_name = "SECONDS", default_value_t = 20)]
    timeout: u64,
}

/// Arguments of `berm vm logs`.
#[derive(clap::Args)]
pub struct LogsArgs {
    /// The VM's name.
    name: String,
    /// Keep printing what is added, until the VM's berm-vmm ends.
    #[arg(short = 'f', long)]
    follow: bool,
    /// The guest console (console.log) instead of the guest log.
    #[arg(long, conflicts_with = "host")]
    console: bool,
    /// berm-vmm's host lines (its stderr) instead of the guest log.
    #[arg(long)]
    host: bool,
}

/// `$BERM_VMM`, else `berm-vmm` beside this berm, else on `PATH`.
fn berm_vmm() -> anyhow::Result<PathBuf> {
    if let Some(path) = std::env::var_os("BERM_VMM").filter(|p| !p.is_empty()) {
        let path = PathBuf::from(path);
        return fs::canonicalize(&path)
            .with_context(|| format!("BERM_VMM names {}, which is not there", path.display()));
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
        .context("berm-vmm is not installed: put it beside berm or on PATH, or set BERM_VMM")
}

/// An absolute form of `path` (relative to the current directory), without resolving links.
fn absolute(path: &Path) -> anyhow::Result<PathBuf> {
    std::path::absolute(path).with_context(|| format!("resolving {}", path.display()))
}

/// Runs `berm vm up`.
pub fn up(args: UpArgs) -> anyhow::Result<Exit> {
    let layout = Layout::from_env()?;
    let first = berm_app::load(&args.apps[0])?;
    let name = args.name.clone().unwrap_or(first.name);
    layout.check_name(&name)?;
    let vm_dir = layout.create_vm_dir(&name)?;
    let _lock = Lock::take(&vm_dir, &name, "berm vm up")?;
    let dirs: Vec<PathBuf> = args
        .apps
        .iter()
        .map(|dir| fs::canonicalize(dir).with_context(|| format!("reading {}", dir.display())))
        .collect::<anyhow::Result<_>>()?;
    let old = Launch::read(&vm_dir, LAUNCH_FILE)?;
    if let Some(old) = old.as_ref().filter(|o| o.liveness() == Liveness::Running)
        && !old.apps.iter().map(|a| &a.dir).eq(dirs.iter())
    {
        bail!(
            "VM \"{name}\" is already running (pid {}) with other apps; stop it first with berm vm stop {name}",
            old.pid
        );
    }
    let want = Want {
        layout: &layout,
        vm_dir: &vm_dir,
        name: &name,
        dirs: &dirs,
        options: &args.vm,
        idle_timeout_s: None,
        who: "berm vm up",
    };
    let (launch, outcome) = ensure(&want, old)?;
    if outcome == Outcome::Running {
        bail!(
            "VM \"{name}\" is already running (pid {}); stop it first with berm vm stop {name}",
            launch.pid
        );
    }
    let view = View::of(&vm_dir, &launch);
    if args.json {
        super::print_json(&view)?;
    } else {
        for app in &view.apps {
            let socket = app
                .socket
                .as_ref()
                .map_or_else(String::new, |s| s.display().to_string());
            crate::outln!("{}\t{socket}", app.name);
        }
    }
    eprintln!(
        "berm vm up: \"{name}\" is ready (berm-vmm pid {}); connect with berm mcp --vm {name}, stop with berm vm stop {name}",
        launch.pid
    );
    Ok(Exit::Ok)
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

/// Makes the VM `want` names run `want.dirs` as they are now, given the pid file `old`
/// (read under the lock): leaves a running VM whose folders are unchanged alone, reboots
/// one whose folders changed (refusing a change that needs `--accept`), cleans up a stale
/// run and boots.
pub fn ensure(want: &Want, old: Option<Launch>) -> anyhow::Result<(Launch, Outcome)> {
    let name = want.name;
    let mut measured = Vec::new();
    let mut apps = Vec::new();
    for (index, dir) in want.dirs.iter().enumerate() {
        let (app, measure) = super::vm_measure::measure(dir)?;
        apps.push(LaunchApp {
            index: u32::try_from(index).context("too many apps")?,
            name: app.name,
            dir: app.dir,
        });
        measured.push(measure);
    }
    if let Some(old) = old {
        match old.liveness() {
            Liveness::Running => {
                let Some(changes) = super::vm_measure::changes(
                    &old.measured,
                    apps.iter().map(|app| app.name.as_str()),
                    &measured,
                ) else {
                    return Ok((old, Outcome::Running));
                };
                if !changes.is_empty() && !want.options.accept {
                    bail!(
                        "the app folders of VM \"{name}\" changed what its clients are offered:\n{}\nnothing was restarted: add --accept to reboot \"{name}\" with them, or undo the change",
                        changes.join("\n")
                    );
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
                let mut launch = old;
                // The guest's bermd checks the folders against its record on the state disk
                // too: it accepts what was accepted here, and only for this boot.
                set_accept(&mut launch.argv, want.options.accept);
                launch.measured = measured;
                launch.run_dir = want.layout.run_dir(name);
                let launch = spawn_ready(want.vm_dir, launch, want.options.timeout)?;
                return Ok((launch, Outcome::Rebooted));
            }
            stale => {
                vm_life::retire(want.vm_dir, &old);
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
        (None, false) => Some(super::vm_state::default_disk(name)?),
    };
    if let Some(disk) = &state {
        // Before berm-vmm is even looked for: a folder that may not have its workspace on
        // this disk starts nothing.
        super::vm_state::bind(&super::vm_state::Binding {
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
    let mut argv: Vec<String> = vec![vmm.to_string_lossy().into_owned(), "run".into()];
    for app in &apps {
        argv.extend(["--app".into(), app.dir.to_string_lossy().into_owned()]);
    }
    // Where `berm pull --app` (run by `berm vm up` and `berm mcp --app` first) put the
    // programs the folders name by image.
    let store = super::dist::default_store();
    argv.extend(["--programs".into(), store.to_string_lossy().into_owned()]);
    let mut path_arg = |flag: &str, path: &Path| {
        argv.extend([flag.to_owned(), path.to_string_lossy().into_owned()]);
    };
    if let Some(state) = &state {
        path_arg("--state", state);
    }
    if let Some(run_dir) = &run_dir {
        path_arg("--run-dir", run_dir);
    }
    if let Some(key) = &options.key {
        path_arg("--key", &absolute(key)?);
    }
    argv.extend(["--arch".into(), options.arch.clone()]);
    argv.extend(["--hypervisor".into(), options.hypervisor.clone()]);
    if let Some(cpus) = options.cpus {
        argv.extend(["--cpus".into(), cpus.to_string()]);
    }
    if let Some(memory) = options.memory {
        argv.extend(["--memory".into(), memory.to_string()]);
    }
    for setting in &options.env {
        argv.extend(["--env".into(), setting.clone()]);
    }
    set_accept(&mut argv, options.accept);
    let launch = Launch {
        name: name.to_owned(),
        pid: 0,
        start_ticks: None,
        argv,
        started_unix: 0,
        apps,
        arch: options.arch.clone(),
        hypervisor: options.hypervisor.clone(),
        state,
        run_dir,
        idle_timeout_s: want.idle_timeout_s,
        measured,
    };
    let launch = spawn_ready(want.vm_dir, launch, options.timeout)?;
    Ok((launch, Outcome::Booted))
}

/// Starts `launch.argv` (berm-vmm) detached with its stderr in `vmm.stderr`, writes the pid
/// file and reads the host lines until every app is ready; on failure says why with
/// berm-vmm's own reason, stopping what it started.
fn spawn_ready(vm_dir: &Path, mut launch: Launch, timeout: u64) -> anyhow::Result<Launch> {
    let name = launch.name.clone();
    let stderr_path = vm_dir.join(HOST_LINES);
    let stderr = vm_life::private_file(&stderr_path, true)?;
    let mut command = Command::new(&launch.argv[0]);
    command
        .args(&launch.argv[1..])
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr);
    crate::sys::new_session(&mut command);
    let mut child = command
        .spawn()
        .with_context(|| format!("starting {}", launch.argv[0]))?;
    launch.pid = child.id();
    launch.start_ticks = vm_life::start_ticks(child.id());
    launch.started_unix = vm_life::now_unix();
    launch.write(vm_dir)?;

    let mut lines = HostLines::default();
    let mut reader =
        File::open(&stderr_path).with_context(|| format!("reading {}", stderr_path.display()))?;
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
        if let Some(status) = child.try_wait().context("waiting for berm-vmm")? {
            read(&mut lines);
            lines.finish();
            vm_life::retire(vm_dir, &launch);
            let reason = lines
                .reason()
                .unwrap_or_else(|| format!("berm-vmm ended ({status}) without a word"));
            bail!(
                "VM \"{name}\" did not start: {reason}; berm-vmm's output is in {}",
                stderr_path.display()
            );
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
        bail!(
            "VM \"{name}\" did not start: {why}; it was stopped (see {}{logs})",
            stderr_path.display()
        );
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

/// Gives berm-vmm's command line `argv` its `--accept` exactly when `accept`: what the app
/// folders changed since they last ran on the state disk is accepted for that boot only.
fn set_accept(argv: &mut Vec<String>, accept: bool) {
    argv.retain(|arg| arg != "--accept");
    if accept {
        // After `run`, before the first option: berm-vmm's flags go anywhere after it.
        argv.insert(2.min(argv.len()), "--accept".into());
    }
}

/// Asks the guest to shut down on `control.sock` and waits for its `power_off`; `false`
/// when the request could not be sent.
fn shutdown(control: &Path, grace: Duration) -> bool {
    let deadline = Instant::now() + grace.min(Duration::from_secs(5));
    let Ok(mut conn) = GuestConnection::connect(control, Service::Control, deadline) else {
        return false;
    };
    if conn.send(Request::Shutdown, deadline).is_err() {
        return false;
    }
    let _ = conn.wait_for(Instant::now() + grace, |line| {
        matches!(line.event, Event::PowerOff(_))
    });
    true
}

/// Stops a running VM: the `shutdown` op (SIGTERM to berm-vmm when it cannot be sent, which
/// makes berm-vmm send it), SIGKILL after `grace`; then its sockets and pid file go. Says
/// how it ended.
pub fn stop_running(vm_dir: &Path, launch: &Launch, grace: Duration) -> String {
    let _ = File::create(vm_dir.join(STOPPING));
    let sent = launch
        .run_dir
        .as_ref()
        .is_some_and(|dir| shutdown(&dir.join("control.sock"), grace));
    if !sent {
        vm_life::signal(launch, libc::SIGTERM);
    }
    let how = if vm_life::wait_gone(launch, grace) {
        if sent {
            "the guest shut down".to_owned()
        } else {
            "berm-vmm stopped it on SIGTERM".to_owned()
        }
    } else {
        vm_life::signal(launch, libc::SIGKILL);
        vm_life::wait_gone(launch, Duration::from_secs(5));
        format!(
            "killed: it had not ended {} s after the shutdown request",
            grace.as_secs()
        )
    };
    vm_life::retire(vm_dir, launch);
    how
}

/// Runs `berm vm stop`.
pub fn stop(args: StopArgs) -> anyhow::Result<Exit> {
    let layout = Layout::from_env()?;
    layout.check_name(&args.name)?;
    let name = &args.name;
    let vm_dir = layout.vm_dir(name);
    if !vm_dir.join(LAUNCH_FILE).exists() {
        bail!("no VM named \"{name}\" is running (berm vm ls lists them)");
    }
    let _lock = Lock::take(&vm_dir, name, "berm vm stop")?;
    let Some(launch) = Launch::read(&vm_dir, LAUNCH_FILE)? else {
        bail!("no VM named \"{name}\" is running (berm vm ls lists them)");
    };
    match launch.liveness() {
        Liveness::Running => {
            let how = stop_running(&vm_dir, &launch, Duration::from_secs(args.timeout));
            eprintln!("berm vm stop: stopped \"{name}\": {how}");
        }
        stale => {
            vm_life::retire(&vm_dir, &launch);
            eprintln!(
                "berm vm stop: \"{name}\" was not running ({}); removed its sockets and pid file",
                stale.why(launch.pid)
            );
        }
    }
    Ok(Exit::Ok)
}

/// Runs `berm vm ls`.
pub fn ls(args: LsArgs) -> anyhow::Result<Exit> {
    let layout = Layout::from_env()?;
    let mut views = Vec::new();
    for name in layout.names() {
        let vm_dir = layout.vm_dir(&name);
        match Launch::read(&vm_dir, LAUNCH_FILE) {
            Ok(Some(launch)) => views.push(View::of(&vm_dir, &launch)),
            Ok(None) => {}
            Err(e) => eprintln!("berm vm ls: {e:#}"),
        }
    }
    if args.json {
        super::print_json(&views)?;
        return Ok(Exit::Ok);
    }
    crate::outln!(
        "{:<16} {:<9} {:<8} {:<7} {:<8} {:<11} {:<20} STATE",
        "NAME",
        "STATUS",
        "PID",
        "UPTIME",
        "ARCH",
        "HYPERVISOR",
        "APPS"
    );
    for view in &views {
        let apps: Vec<&str> = view.apps.iter().map(|a| a.name.as_str()).collect();
        let state = view
            .state
            .as_ref()
            .map_or_else(|| "none".to_owned(), |s| s.display().to_string());
        crate::outln!(
            "{:<16} {:<9} {:<8} {:<7} {:<8} {:<11} {:<20} {state}",
            view.name,
            view.status.name(),
            view.pid,
            vm_life::uptime_text(view.uptime_s),
            view.arch,
            view.hypervisor,
            apps.join(",")
        );
    }
    for view in views.iter().filter(|v| v.status == Status::Stale) {
        eprintln!(
            "berm vm ls: \"{}\" is stale: {}; berm vm up or berm vm stop cleans it up",
            view.name,
            view.stale.as_deref().unwrap_or("")
        );
    }
    Ok(Exit::Ok)
}

/// Runs `berm vm logs`.
pub fn logs(args: LogsArgs) -> anyhow::Result<Exit> {
    let (vm_dir, launch, active) = vm_life::find(&args.name)?;
    let path = if args.host {
        vm_dir.join(HOST_LINES)
    } else {
        let run_dir = recorded_run_dir(&args.name, &vm_dir, &launch)?;
        run_dir.join(if args.console {
            "console.log"
        } else {
            "guest.log"
        })
    };
    let running = || active && launch.liveness() == Liveness::Running;
    let mut file = None;
    let mut position = 0u64;
    let mut inode = 0u64;
    loop {
        // Follow renames (guest.log → guest.log.1) and truncation (console.log) from the top.
        let follow_on = running();
        match fs::metadata(&path) {
            Ok(meta) if meta.ino() != inode || meta.len() < position => {
                file = File::open(&path).ok();
                inode = meta.ino();
                position = 0;
            }
            Ok(_) => {}
            Err(e) if file.is_none() && !(args.follow && follow_on) => {
                return Err(e).with_context(|| format!("reading {}", path.display()));
            }
            Err(_) => {}
        }
        if let Some(file) = file.as_mut() {
            let _ = file.seek(SeekFrom::Start(position));
            let mut bytes = Vec::new();
            file.read_to_end(&mut bytes)
                .with_context(|| format!("reading {}", path.display()))?;
            position += bytes.len() as u64;
            crate::out::write_bytes(&bytes);
        }
        if !args.follow || !follow_on {
            return Ok(Exit::Ok);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The run dir of VM `name` (running or the last that ran), for `berm attest NAME`, checked
/// as [`recorded_run_dir`] checks it.
pub fn run_dir_of(name: &str) -> anyhow::Result<PathBuf> {
    let (vm_dir, launch, _) = vm_life::find(name)?;
    recorded_run_dir(name, &vm_dir, &launch)
}

/// The run dir the pid file `launch` of VM `name` names (else berm-vmm's `endpoints` line in
/// `vm_dir`), checked again before anything in it is read: still a directory of this user's
/// that group and others cannot reach, the rule berm-vmm held it to
/// ([`berm_vm_protocol::private_dir`]). The pid file outlives the run: a run dir under the
/// temp dir may have been removed since, and made again by another user with a record or
/// logs of their choosing.
fn recorded_run_dir(name: &str, vm_dir: &Path, launch: &Launch) -> anyhow::Result<PathBuf> {
    let run_dir = launch
        .run_dir
        .clone()
        .or_else(|| {
            HostLines::read(&vm_dir.join(HOST_LINES))
                .endpoints
                .map(|e| e.run_dir)
        })
        .with_context(|| format!("VM \"{name}\" has no run dir yet"))?;
    let meta = fs::symlink_metadata(&run_dir)
        .with_context(|| format!("reading the run dir {} of VM \"{name}\"", run_dir.display()))?;
    if let Err(why) = berm_vm_protocol::private_dir::check(&meta, crate::sys::euid()) {
        bail!(
            "the run dir {} of VM \"{name}\" {why}: berm reads a VM's logs and record only from a private directory of this user's, as berm-vmm made it, and this one may not be what the VM wrote (if it is yours, chmod 700 it; else berm vm up {name} runs the VM again in a new one)",
            run_dir.display()
        );
    }
    Ok(run_dir)
}

/// The MCP socket of app `app` (a name or index; the only app when `None`) of the running
/// VM `name`, for `berm mcp --vm`.
pub fn socket_of(name: &str, app: Option<&str>) -> anyhow::Result<PathBuf> {
    let (vm_dir, launch, active) = vm_life::find(name)?;
    if !active {
        bail!("VM \"{name}\" is not running; start it with berm vm up");
    }
    let liveness = launch.liveness();
    if liveness != Liveness::Running {
        bail!(
            "VM \"{name}\" is stale ({}); berm vm up starts it again",
            liveness.why(launch.pid)
        );
    }
    let app = launch.app(app)?;
    let view = View::of(&vm_dir, &launch);
    view.apps
        .iter()
        .find(|a| a.index == app.index)
        .and_then(|a| a.socket.clone())
        .with_context(|| format!("VM \"{name}\" has no run dir yet (it is still booting)"))
}
