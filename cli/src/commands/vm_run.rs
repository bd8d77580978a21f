//! `berm vm up`, `berm vm ls`, `berm vm stop` and `berm vm logs`: named VMs that berm-vmm
//! runs detached, one per name. The lifecycle is `berm-vm-launch`'s (where a VM's files
//! live: [`berm_vm_launch::layout`]); this module parses the arguments and prints.
//!
//! `up` takes the VM's lock, refuses a VM running under the name with other apps, and
//! [`ensure`]s the VM: a stale run is cleaned up, berm-vmm is started with the VM's
//! configuration and waited for until every app is ready. The VM then runs until
//! `berm vm stop`.

use std::fs::{self, File};
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use berm_vm_launch::host_lines::HostLines;
use berm_vm_launch::launch::{Outcome, VmOptions, Want, ensure};
use berm_vm_launch::layout::{HOST_LINES, LAUNCH_FILE, Layout};
use berm_vm_launch::lock::Lock;
use berm_vm_launch::record::{self, Launch, Liveness};
use berm_vm_launch::stop::stop_running;
use berm_vm_launch::view::{Status, View, uptime_text};

use crate::Exit;

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
        programs: &super::dist::default_store(),
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
            record::retire(&vm_dir, &launch);
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
            uptime_text(view.uptime_s),
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
    let (vm_dir, launch, active) = record::find(&args.name)?;
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
    let (vm_dir, launch, _) = record::find(name)?;
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
    if let Err(why) = berm_vm_protocol::private_dir::check(&meta, berm_vm_launch::sys::euid()) {
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
    let (vm_dir, launch, active) = record::find(name)?;
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
