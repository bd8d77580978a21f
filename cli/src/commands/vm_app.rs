//! `berm mcp --app DIR`: one line in an MCP client's config gives it an app in a microVM.
//!
//! The bridge finds the VM by the name `berm vm up` derives (the app's `name` in berm.toml)
//! under that name's lock: if none runs, it boots one as `up` does ([`ensure`]); if
//! one runs with the folder changed, it reboots it on the same state disk (or refuses a
//! change in the tools, descriptions, schemas or grants until `--accept`). Then it
//! share-locks the VM's `clients` file and bridges stdio to the app's `rpc-<i>.sock`.
//!
//! Clients are counted by the kernel: every attached bridge holds a shared `flock` on
//! `clients`, which the kernel drops when the bridge ends however it ends (SIGKILL
//! included). A VM a bridge booted has an idle watchdog, `berm vm watch NAME` (hidden, one
//! per VM through `watch.lock`), which tries the exclusive lock every [`TICK`]: once it has
//! been free for the idle timeout, the watchdog takes the VM's lock, checks once more and
//! stops the VM. A VM `berm vm up` started has no idle timeout and no watchdog.
//!
//! When the VM under an open session reboots (another `mcp --app` or `up` saw the folder
//! change), the bridge waits for the lock, connects to the new VM, replays the client's
//! `initialize` and `notifications/initialized`, answers every request still in flight
//! with an error, and sends the client `notifications/tools/list_changed`. When the VM
//! stopped instead, the session ends.

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use berm_vm_launch::files::{now_unix, private_file};
use berm_vm_launch::launch::{Outcome, VmOptions, Want, ensure};
use berm_vm_launch::layout::{CLIENTS, LAUNCH_FILE, Layout, WATCH, WATCH_LOG};
use berm_vm_launch::lock::Lock;
use berm_vm_launch::record::{Launch, Liveness};
use berm_vm_launch::stop::stop_running;
use berm_vm_launch::view::View;
use serde_json::{Value, json};
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::net::UnixStream;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};

use super::mcp_lines::{LineReader, Pending};
use crate::Exit;

/// How often the idle watchdog counts clients.
const TICK: Duration = Duration::from_millis(200);
/// How long the guest has to shut down when the watchdog stops an idle VM.
const STOP_GRACE: Duration = Duration::from_secs(20);

/// A bridge's hold on its VM: the app's socket and the shared lock that counts it.
struct Attached {
    vm_dir: PathBuf,
    name: String,
    dir: PathBuf,
    launch: Launch,
    socket: PathBuf,
    #[expect(dead_code, reason = "held for its shared flock: one attached client")]
    clients: File,
}

/// Runs `berm mcp --app DIR`.
pub async fn run(dir: &Path, idle_timeout_s: u64, options: &VmOptions) -> anyhow::Result<Exit> {
    super::dist::pull_folders(std::slice::from_ref(&dir.to_path_buf())).await?;
    let attached = attach(dir, idle_timeout_s, options)?;
    bridge(attached).await
}

/// Finds, boots or reboots the VM of the app folder `dir` and counts this bridge as a client.
fn attach(dir: &Path, idle_timeout_s: u64, options: &VmOptions) -> anyhow::Result<Attached> {
    let layout = Layout::from_env()?;
    let dir = fs::canonicalize(dir).with_context(|| format!("reading {}", dir.display()))?;
    let name = berm_app::load(&dir)?.name;
    layout.check_name(&name)?;
    let vm_dir = layout.create_vm_dir(&name)?;
    let lock = Lock::take(&vm_dir, &name, "berm mcp")?;
    let old = Launch::read(&vm_dir, LAUNCH_FILE)?;
    let dirs: Vec<PathBuf> = match old.as_ref().filter(|o| o.liveness() == Liveness::Running) {
        Some(running) if running.apps.iter().any(|a| a.dir == dir) => {
            running.apps.iter().map(|a| a.dir.clone()).collect()
        }
        Some(running) => bail!(
            "VM \"{name}\" is running (pid {}) without the app folder {}: stop it with berm vm stop {name}, or bridge to it with berm mcp --vm {name}",
            running.pid,
            dir.display()
        ),
        None => vec![dir.clone()],
    };
    let want = Want {
        layout: &layout,
        vm_dir: &vm_dir,
        name: &name,
        dirs: &dirs,
        programs: &super::dist::default_store(),
        options,
        idle_timeout_s: Some(idle_timeout_s),
        who: "berm mcp",
    };
    let (launch, outcome) = ensure(&want, old)?;
    if outcome == Outcome::Booted {
        eprintln!(
            "berm mcp: booted VM \"{name}\" (berm-vmm pid {}); it stops {idle_timeout_s} s after its last client leaves",
            launch.pid
        );
    }
    let clients = private_file(&vm_dir.join(CLIENTS), false)?;
    clients
        .lock_shared()
        .with_context(|| format!("locking {}", vm_dir.join(CLIENTS).display()))?;
    if launch.idle_timeout_s.is_some() {
        start_watchdog(&vm_dir, &name)?;
    }
    drop(lock);
    let socket = socket(&vm_dir, &launch, &dir)?;
    Ok(Attached {
        vm_dir,
        name,
        dir,
        launch,
        socket,
        clients,
    })
}

/// The MCP socket of the app in folder `dir` of the running VM `launch`.
fn socket(vm_dir: &Path, launch: &Launch, dir: &Path) -> anyhow::Result<PathBuf> {
    let index = launch
        .apps
        .iter()
        .find(|a| a.dir == dir)
        .map(|a| a.index)
        .with_context(|| format!("VM \"{}\" no longer serves {}", launch.name, dir.display()))?;
    View::of(vm_dir, launch)
        .apps
        .into_iter()
        .find(|a| a.index == index)
        .and_then(|a| a.socket)
        .with_context(|| format!("VM \"{}\" has no run dir", launch.name))
}

/// Starts the idle watchdog of VM `name` unless one runs.
fn start_watchdog(vm_dir: &Path, name: &str) -> anyhow::Result<()> {
    let guard = private_file(&vm_dir.join(WATCH), false)?;
    if guard.try_lock().is_err() {
        return Ok(());
    }
    drop(guard);
    let log = File::options()
        .create(true)
        .append(true)
        .open(vm_dir.join(WATCH_LOG))
        .with_context(|| format!("opening {}", vm_dir.join(WATCH_LOG).display()))?;
    let exe = std::env::current_exe().context("finding berm itself")?;
    let mut command = Command::new(exe);
    command
        .args(["vm", "watch", name])
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log);
    berm_vm_launch::sys::new_session(&mut command);
    command
        .spawn()
        .context("starting the idle watchdog (berm vm watch)")?;
    Ok(())
}

/// Arguments of `berm vm watch` (started by `berm mcp --app`, not by hand).
#[derive(clap::Args)]
pub struct WatchArgs {
    /// The VM's name.
    name: String,
}

/// Runs `berm vm watch`: stops the VM once no client has been attached for its idle
/// timeout; ends when the VM is gone or `berm vm up` took it over.
pub fn watch(args: WatchArgs) -> anyhow::Result<Exit> {
    let layout = Layout::from_env()?;
    let name = &args.name;
    layout.check_name(name)?;
    let vm_dir = layout.vm_dir(name);
    let guard = private_file(&vm_dir.join(WATCH), false)?;
    if guard.try_lock().is_err() {
        return Ok(Exit::Ok);
    }
    let clients = private_file(&vm_dir.join(CLIENTS), false)?;
    let attached = || match clients.try_lock() {
        Ok(()) => {
            let _ = clients.unlock();
            false
        }
        Err(_) => true,
    };
    let say = |what: String| eprintln!("{} berm vm watch: {what}", now_unix());
    let mut idle_since: Option<Instant> = None;
    loop {
        std::thread::sleep(TICK);
        let running = match Launch::read(&vm_dir, LAUNCH_FILE)? {
            Some(launch) if launch.liveness() == Liveness::Running => Some(launch),
            _ => None,
        };
        let Some(launch) = running else {
            // Gone, stale, or between the stop and the boot of a reboot (under the lock).
            if Lock::try_take(&vm_dir)?.is_some() {
                say(format!("\"{name}\" is not running; done"));
                return Ok(Exit::Ok);
            }
            continue;
        };
        let Some(timeout) = launch.idle_timeout_s else {
            return Ok(Exit::Ok);
        };
        if attached() {
            idle_since = None;
            continue;
        }
        let since = *idle_since.get_or_insert_with(Instant::now);
        if since.elapsed() < Duration::from_secs(timeout) {
            continue;
        }
        let _lock = Lock::take(&vm_dir, name, "berm vm watch")?;
        // Under the lock no bridge attaches: count once more.
        if attached() {
            idle_since = None;
            continue;
        }
        if let Some(launch) = Launch::read(&vm_dir, LAUNCH_FILE)?
            && launch.liveness() == Liveness::Running
            && launch.idle_timeout_s.is_some()
        {
            let how = stop_running(&vm_dir, &launch, STOP_GRACE);
            say(format!(
                "stopped \"{name}\" after {timeout} s without a client: {how}"
            ));
        }
        return Ok(Exit::Ok);
    }
}

/// What the bridge remembers of the client's session, to resume it on a rebooted VM.
#[derive(Default)]
struct Session {
    /// The client's `initialize` request line and its id.
    initialize: Option<(Vec<u8>, Value)>,
    /// Its `notifications/initialized` line.
    initialized: Option<Vec<u8>>,
    /// The client's requests not yet answered.
    pending: Pending,
}

impl Session {
    fn saw_client(&mut self, line: &[u8]) {
        self.pending.client(line);
        let Ok(message) = serde_json::from_slice::<Value>(line) else {
            return;
        };
        match (
            message.get("method").and_then(Value::as_str),
            message.get("id"),
        ) {
            (Some("initialize"), Some(id)) => self.initialize = Some((line.to_owned(), id.clone())),
            (Some("notifications/initialized"), None) => self.initialized = Some(line.to_owned()),
            _ => {}
        }
    }
}

type Upstream = (LineReader<BufReader<OwnedReadHalf>>, OwnedWriteHalf);

async fn connect(socket: &Path) -> anyhow::Result<Upstream> {
    let stream = UnixStream::connect(socket)
        .await
        .with_context(|| format!("connecting to {}", socket.display()))?;
    let (read, write) = stream.into_split();
    Ok((LineReader::new(BufReader::new(read), "the server"), write))
}

/// Writes `line`, which ends with its newline (one is added if it does not: a client's last
/// line may lack it, and still ends a frame).
async fn write_line(to: &mut (impl AsyncWriteExt + Unpin), line: &[u8]) -> std::io::Result<()> {
    to.write_all(line).await?;
    if !line.ends_with(b"\n") {
        to.write_all(b"\n").await?;
    }
    to.flush().await
}

async fn to_client(stdout: &mut tokio::io::Stdout, line: &[u8]) {
    if write_line(stdout, line).await.is_err() {
        // The client closed its end: nobody is left to answer.
        crate::out::closed();
    }
}

/// Copies lines between stdio and the app's socket until the client is done (its stdin
/// ended and every request it sent has its answer: [`mcp_lines`](super::mcp_lines)),
/// resuming the session on the new VM when the VM reboots under it.
async fn bridge(mut at: Attached) -> anyhow::Result<Exit> {
    let (mut upstream, mut to_vm) = connect(&at.socket).await?;
    let mut stdin = LineReader::new(BufReader::new(tokio::io::stdin()), "the client");
    let mut stdout = tokio::io::stdout();
    let mut session = Session::default();
    let mut stdin_open = true;
    while stdin_open || !session.pending.is_empty() {
        tokio::select! {
            line = stdin.next_line(), if stdin_open => match line? {
                Some(line) => {
                    session.saw_client(&line);
                    // A VM going away shows as the end of `upstream`; what was in flight
                    // is answered then.
                    let _ = write_line(&mut to_vm, &line).await;
                }
                None => {
                    // No half-close is passed on: libkrun resets a connection whose host
                    // side half-closes, losing the answers still on their way
                    // ([`mcp_lines`](super::mcp_lines)). The socket is closed once they are in.
                    stdin_open = false;
                }
            },
            line = upstream.next_line() => match line {
                Ok(Some(line)) => {
                    session.pending.server(&line);
                    to_client(&mut stdout, &line).await;
                }
                _ if !stdin_open => return Ok(Exit::Ok),
                _ => {
                    (upstream, to_vm) = resume(&mut at, &mut session, &mut stdout).await?;
                }
            },
        }
    }
    Ok(Exit::Ok)
}

/// The VM ended under an open session: waits for whoever holds its lock (a reboot), then
/// resumes the session on the VM now running, or fails when none runs.
async fn resume(
    at: &mut Attached,
    session: &mut Session,
    stdout: &mut tokio::io::Stdout,
) -> anyhow::Result<Upstream> {
    let (vm_dir, name) = (at.vm_dir.clone(), at.name.clone());
    let was = (at.launch.pid, at.launch.start_ticks);
    let found = tokio::task::spawn_blocking(move || -> anyhow::Result<_> {
        let lock = Lock::take(&vm_dir, &name, "berm mcp")?;
        Ok(Launch::read(&vm_dir, LAUNCH_FILE)?
            .filter(|l| l.liveness() == Liveness::Running && (l.pid, l.start_ticks) != was)
            .map(|l| (l, lock)))
    })
    .await
    .context("waiting for the VM's lock")??;
    let name = &at.name;
    let Some((launch, _lock)) = found else {
        bail!(
            "VM \"{name}\" stopped under the session (berm vm logs {name} --host says why); the client may start berm mcp --app again"
        );
    };
    at.socket = socket(&at.vm_dir, &launch, &at.dir)?;
    at.launch = launch;
    let (mut upstream, mut to_vm) = connect(&at.socket).await?;
    if let Some((line, id)) = &session.initialize {
        write_line(&mut to_vm, line).await?;
        loop {
            let answer = upstream
                .next_line()
                .await?
                .context("the rebooted VM closed the session before answering initialize")?;
            let answer: Value = serde_json::from_slice(&answer).unwrap_or_default();
            if answer.get("method").is_none() && answer.get("id") == Some(id) {
                break;
            }
        }
        if let Some(line) = &session.initialized {
            write_line(&mut to_vm, line).await?;
        }
    }
    for id in session.pending.take() {
        let error = json!({"jsonrpc": "2.0", "id": id, "error": {
            "code": -32000,
            "message": format!("VM \"{name}\" rebooted for a changed app folder before answering; send the request again"),
        }});
        to_client(stdout, format!("{error}\n").as_bytes()).await;
    }
    let changed = json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"});
    to_client(stdout, format!("{changed}\n").as_bytes()).await;
    eprintln!(
        "berm mcp: VM \"{name}\" rebooted for a changed app folder (berm-vmm pid {}); the session goes on",
        at.launch.pid
    );
    Ok((upstream, to_vm))
}
