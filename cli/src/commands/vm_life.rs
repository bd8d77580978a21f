//! What `berm vm up`, `ls`, `stop`, `logs`, `berm mcp --vm` and `berm attest NAME` share
//! about a named VM: where its files live, its name rules, its lock, whether its berm-vmm
//! is still the one `up` started, and what berm-vmm's host lines say.
//!
//! A VM named N has a directory of its own (mode 0700), the *VM dir*:
//! `$XDG_RUNTIME_DIR/berm/vm/N/`, else `$XDG_STATE_HOME/berm/vm/N/` (else
//! `~/.local/state/berm/vm/N/`). It holds the lifecycle files, beside berm-vmm's run dir
//! rather than in it (so berm-vmm's rule that a run dir holds only what berm-vmm makes
//! stands):
//!
//! | file | what |
//! |---|---|
//! | `lock` | `flock`ed by `up` and `stop` for as long as they run: one VM per name |
//! | `vm.json` | the pid file: berm-vmm's pid, its start time and command line, the apps, the run dir |
//! | `vmm.stderr` | berm-vmm's stderr: its JSON host lines, then its last words |
//! | `stopping` | present while `stop` stops it |
//! | `clients` | share-`flock`ed by each attached `berm mcp --app` bridge (the kernel drops a killed one's) |
//! | `watch.lock`, `watch.log` | locked by the idle watchdog of a VM `mcp --app` booted; its words |
//! | `last.json` | the `vm.json` of the last run that ended, for `logs` and `attest` |
//! | `run/` | berm-vmm's run dir, when `$XDG_RUNTIME_DIR` is set; else berm-vmm makes its own (a fresh random one under the temp dir) and `vm.json` names it |

use std::collections::BTreeSet;
use std::fs::{self, File};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use berm_vm_protocol::host::{ExitLine, HypervisorLine};
use berm_vm_protocol::{
    AppExited, AppRefused, BootFailed, Event, HostEvent, VmmLine, VmmLineError,
};
use serde::{Deserialize, Serialize};

/// `sun_path` holds 108 bytes, NUL included.
const SUN_PATH_MAX: usize = 107;
/// The longest socket name berm-vmm makes in a run dir: an egress socket, `vsock.sock_<6000+i>`.
const LONGEST_SOCKET: usize = "vsock.sock_6063".len();
/// The longest VM name, wherever its run dir is.
const NAME_MAX: usize = 64;
/// Names `berm attest NAME` could not tell from its subcommands.
const RESERVED: [&str; 2] = ["verify", "key"];

/// The pid file.
pub const LAUNCH_FILE: &str = "vm.json";
/// The pid file of the last run that ended.
pub const LAST_FILE: &str = "last.json";
/// The lock file.
const LOCK_FILE: &str = "lock";
/// berm-vmm's stderr.
pub const HOST_LINES: &str = "vmm.stderr";
/// Present while `stop` stops the VM.
pub const STOPPING: &str = "stopping";
/// Share-locked by every attached `berm mcp --app` bridge: the clients the idle watchdog counts.
pub const CLIENTS: &str = "clients";
/// Locked by the idle watchdog of a VM `berm mcp --app` booted, for as long as it runs.
pub const WATCH: &str = "watch.lock";
/// The idle watchdog's own words.
pub const WATCH_LOG: &str = "watch.log";

/// The directory the variable `var` names, when it names an absolute path (the XDG rule:
/// a relative one is ignored).
pub fn env_dir(var: &str) -> Option<PathBuf> {
    std::env::var_os(var)
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
}

/// Where named VMs live in this environment.
pub struct Layout {
    /// The directory holding one VM dir per name.
    pub base: PathBuf,
    /// Whether `base` is under `$XDG_RUNTIME_DIR` (then each run dir is `<VM dir>/run`).
    pub runtime: bool,
}

impl Layout {
    /// `$XDG_RUNTIME_DIR/berm/vm`, else `$XDG_STATE_HOME/berm/vm`, else
    /// `~/.local/state/berm/vm`.
    pub fn from_env() -> anyhow::Result<Self> {
        if let Some(dir) = env_dir("XDG_RUNTIME_DIR") {
            return Ok(Self {
                base: dir.join("berm/vm"),
                runtime: true,
            });
        }
        let state = env_dir("XDG_STATE_HOME")
            .or_else(|| env_dir("HOME").map(|home| home.join(".local/state")))
            .context(
                "neither XDG_RUNTIME_DIR nor HOME is set: there is nowhere to keep a VM's files",
            )?;
        Ok(Self {
            base: state.join("berm/vm"),
            runtime: false,
        })
    }

    /// The VM dir of `name`.
    pub fn vm_dir(&self, name: &str) -> PathBuf {
        self.base.join(name)
    }

    /// The run dir `up` gives berm-vmm for `name`, or `None` for berm-vmm's own choice.
    pub fn run_dir(&self, name: &str) -> Option<PathBuf> {
        self.runtime.then(|| self.vm_dir(name).join("run"))
    }

    /// The longest name whose sockets fit in a Unix socket path here.
    pub fn max_name(&self) -> usize {
        if !self.runtime {
            return NAME_MAX;
        }
        // <base>/<name>/run/<socket>
        let fixed = self.base.as_os_str().len() + "/".len() + "/run/".len() + LONGEST_SOCKET;
        SUN_PATH_MAX.saturating_sub(fixed).min(NAME_MAX)
    }

    /// Refuses a name that is not a plain word, is reserved, or would not fit.
    pub fn check_name(&self, name: &str) -> anyhow::Result<()> {
        if RESERVED.contains(&name) {
            bail!(
                "\"{name}\" cannot name a VM: `berm attest {name}` is a subcommand; choose another with --name"
            );
        }
        let bytes = name.as_bytes();
        let plain = bytes.first().is_some_and(u8::is_ascii_alphanumeric)
            && bytes
                .iter()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
        if !plain {
            bail!(
                "VM name {name:?} is not a plain name: letters, digits, '-', '_' and '.', starting with a letter or digit"
            );
        }
        let max = self.max_name();
        if name.len() > max {
            bail!(
                "VM name \"{name}\" is {} bytes, longer than the {max} that fit: a Unix socket path under {} holds at most {SUN_PATH_MAX} bytes",
                name.len(),
                self.base.display()
            );
        }
        Ok(())
    }

    /// Creates the VM dir of `name` (and the directories above it), mode 0700, and refuses
    /// one that is a symlink or not this user's.
    pub fn create_vm_dir(&self, name: &str) -> anyhow::Result<PathBuf> {
        let dir = self.vm_dir(name);
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .with_context(|| format!("creating {}", dir.display()))?;
        let meta =
            fs::symlink_metadata(&dir).with_context(|| format!("reading {}", dir.display()))?;
        let user = crate::sys::euid();
        if !meta.is_dir() || meta.uid() != user {
            bail!(
                "{} is not a directory of this user's; move it away",
                dir.display()
            );
        }
        Ok(dir)
    }

    /// Every VM dir that holds a pid file, by name.
    pub fn names(&self) -> Vec<String> {
        let Ok(entries) = fs::read_dir(&self.base) else {
            return Vec::new();
        };
        let mut names: Vec<String> = entries
            .map_while(Result::ok)
            .filter(|e| e.path().join(LAUNCH_FILE).is_file())
            .filter_map(|e| e.file_name().into_string().ok())
            .collect();
        names.sort();
        names
    }
}

/// Opens `path` for writing, created with mode 0600, emptied when `truncate`.
pub fn private_file(path: &Path, truncate: bool) -> anyhow::Result<File> {
    File::options()
        .create(true)
        .truncate(truncate)
        .write(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))
}

/// The lock of one VM dir, held until dropped.
pub struct Lock(#[expect(dead_code, reason = "held for its flock")] File);

impl Lock {
    /// Takes the lock of `vm_dir` if nobody holds it.
    pub fn try_take(vm_dir: &Path) -> anyhow::Result<Option<Self>> {
        let path = vm_dir.join(LOCK_FILE);
        let file = private_file(&path, false)?;
        match file.try_lock() {
            Ok(()) => Ok(Some(Self(file))),
            Err(fs::TryLockError::WouldBlock) => Ok(None),
            Err(fs::TryLockError::Error(e)) => {
                Err(e).with_context(|| format!("locking {}", path.display()))
            }
        }
    }

    /// Takes the lock of `vm_dir`, waiting for whoever holds it (saying so once on stderr).
    pub fn take(vm_dir: &Path, name: &str, who: &str) -> anyhow::Result<Self> {
        let path = vm_dir.join(LOCK_FILE);
        let file = private_file(&path, false)?;
        let mut said = false;
        loop {
            match file.try_lock() {
                Ok(()) => return Ok(Self(file)),
                Err(fs::TryLockError::WouldBlock) => {
                    if !said {
                        eprintln!(
                            "{who}: waiting for another berm vm up or stop of \"{name}\" to finish"
                        );
                        said = true;
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(fs::TryLockError::Error(e)) => {
                    return Err(e).with_context(|| format!("locking {}", path.display()));
                }
            }
        }
    }
}

/// One app of a VM, as `up` started it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LaunchApp {
    /// App i: `rpc-<i>.sock`.
    pub index: u32,
    /// Its name (berm.toml).
    pub name: String,
    /// Its folder.
    pub dir: PathBuf,
}

/// The pid file, `vm.json`: what `up` started.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Launch {
    /// The VM's name.
    pub name: String,
    /// berm-vmm's pid.
    pub pid: u32,
    /// berm-vmm's start time in clock ticks after boot (`/proc/PID/stat` field 22), where
    /// there is a `/proc`.
    pub start_ticks: Option<u64>,
    /// berm-vmm's command line, as `/proc/PID/cmdline` shows it.
    pub argv: Vec<String>,
    /// When it started, in seconds since the Unix epoch.
    pub started_unix: u64,
    /// The apps, in port order.
    pub apps: Vec<LaunchApp>,
    /// The guest's architecture.
    pub arch: String,
    /// The hypervisor asked for (`auto`, `krun`, `qemu`).
    pub hypervisor: String,
    /// The state disk, if any.
    pub state: Option<PathBuf>,
    /// berm-vmm's run dir, once known.
    pub run_dir: Option<PathBuf>,
    /// For a VM `berm mcp --app` booted: the seconds it stays up after its last client
    /// left. `None` (`berm vm up`): it runs until `berm vm stop`.
    #[serde(default)]
    pub idle_timeout_s: Option<u64>,
    /// Each app folder as measured when the VM booted, in port order: what a changed folder
    /// is compared against.
    #[serde(default)]
    pub measured: Vec<super::vm_measure::Measured>,
}

impl Launch {
    /// Reads `<vm_dir>/<file>`; `None` when it does not exist.
    pub fn read(vm_dir: &Path, file: &str) -> anyhow::Result<Option<Self>> {
        let path = vm_dir.join(file);
        match fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .with_context(|| format!("{} is not a pid file berm wrote", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
        }
    }

    /// Writes it to `<vm_dir>/vm.json` (mode 0600, through a rename).
    pub fn write(&self, vm_dir: &Path) -> anyhow::Result<()> {
        let path = vm_dir.join(LAUNCH_FILE);
        let partial = vm_dir.join(format!("{LAUNCH_FILE}.partial"));
        let mut file = private_file(&partial, true)?;
        file.write_all(&serde_json::to_vec(self)?)
            .with_context(|| format!("writing {}", partial.display()))?;
        fs::rename(&partial, &path).with_context(|| format!("writing {}", path.display()))
    }

    /// Whether the pid still runs this launch's berm-vmm.
    pub fn liveness(&self) -> Liveness {
        liveness(self.pid, self.start_ticks, &self.argv)
    }

    /// The app picked by `--app NAME` or index; the only app when `None`.
    pub fn app(&self, wanted: Option<&str>) -> anyhow::Result<&LaunchApp> {
        let names = || {
            self.apps
                .iter()
                .map(|a| format!("{} ({})", a.index, a.name))
                .collect::<Vec<_>>()
                .join(", ")
        };
        match wanted {
            None if self.apps.len() == 1 => Ok(&self.apps[0]),
            None => bail!(
                "VM \"{}\" serves {} apps: pick one with --app NAME or --app INDEX ({})",
                self.name,
                self.apps.len(),
                names()
            ),
            Some(wanted) => self
                .apps
                .iter()
                .find(|a| a.name == wanted || a.index.to_string() == wanted)
                .with_context(|| {
                    format!(
                        "VM \"{}\" has no app {wanted:?}; it serves {}",
                        self.name,
                        names()
                    )
                }),
        }
    }
}

/// Whether a pid file's berm-vmm still runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Liveness {
    /// The pid runs the berm-vmm `up` started.
    Running,
    /// No process has the pid (or only its zombie is left).
    Gone,
    /// The pid runs something else now (another start time or command line).
    Replaced,
}

impl Liveness {
    /// Why a run that is not [`Liveness::Running`] is stale, in a few words.
    pub fn why(self, pid: u32) -> String {
        match self {
            Self::Running => format!("its berm-vmm, pid {pid}, is running"),
            Self::Gone => format!("its berm-vmm, pid {pid}, is gone"),
            Self::Replaced => format!("pid {pid} is no longer its berm-vmm"),
        }
    }
}

/// `/proc/PID/stat`'s state and start time (field 22).
#[cfg(target_os = "linux")]
fn proc_stat(pid: u32) -> Option<(char, u64)> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: the fields after it start
    // after its last ')'.
    let rest = &text[text.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    // Field 3 is the state; the start time is field 22, 19 after it.
    let start = fields.nth(18)?.parse().ok()?;
    Some((state, start))
}

/// The start time `liveness` will compare against, read right after the spawn.
pub fn start_ticks(pid: u32) -> Option<u64> {
    #[cfg(target_os = "linux")]
    {
        proc_stat(pid).map(|(_, start)| start)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = pid;
        None
    }
}

/// Whether `pid` still runs the process that started at `start_ticks` with `argv`.
fn liveness(pid: u32, start_ticks: Option<u64>, argv: &[String]) -> Liveness {
    // Never 0 or negative (a process group to kill(2)), never init.
    if pid <= 1 || i32::try_from(pid).is_err() {
        return Liveness::Replaced;
    }
    #[cfg(target_os = "linux")]
    {
        let Some((state, start)) = proc_stat(pid) else {
            return Liveness::Gone;
        };
        if matches!(state, 'Z' | 'X' | 'x') {
            return Liveness::Gone;
        }
        if start_ticks.is_some_and(|ticks| ticks != start) {
            return Liveness::Replaced;
        }
        let Ok(cmdline) = fs::read(format!("/proc/{pid}/cmdline")) else {
            return Liveness::Gone;
        };
        let running: Vec<String> = cmdline
            .split(|b| *b == 0)
            .filter(|arg| !arg.is_empty())
            .map(|arg| String::from_utf8_lossy(arg).into_owned())
            .collect();
        let expected: Vec<&String> = argv.iter().filter(|a| !a.is_empty()).collect();
        if running.iter().collect::<Vec<_>>() != expected {
            return Liveness::Replaced;
        }
        Liveness::Running
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (start_ticks, argv);
        // Without /proc only existence is checked.
        // Signal 0 sends nothing; the pid is > 1 (checked above).
        match crate::sys::kill(pid, 0) {
            Ok(()) => Liveness::Running,
            Err(e) if e.raw_os_error() == Some(libc::EPERM) => Liveness::Replaced,
            Err(_) => Liveness::Gone,
        }
    }
}

/// Sends `signal` to the launch's berm-vmm, only while it is still that berm-vmm.
pub fn signal(launch: &Launch, signal: i32) -> bool {
    if launch.liveness() != Liveness::Running {
        return false;
    }
    // The pid is > 1 and was just checked to be the berm-vmm this launch started.
    crate::sys::kill(launch.pid, signal).is_ok()
}

/// Waits until the launch's berm-vmm is gone, up to `timeout`.
pub fn wait_gone(launch: &Launch, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if launch.liveness() != Liveness::Running {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Removes the sockets a berm-vmm that could not clean up left in its run dir (the names
/// berm-vmm makes: `*.sock`, `vsock.sock_<port>`); the logs and the record stay.
pub fn remove_sockets(run_dir: &Path) -> usize {
    let Ok(entries) = fs::read_dir(run_dir) else {
        return 0;
    };
    let mut removed = 0;
    for entry in entries.map_while(Result::ok) {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let socket = entry.file_type().is_ok_and(|t| {
            use std::os::unix::fs::FileTypeExt;
            t.is_socket()
        });
        if socket
            && (name.ends_with(".sock") || name.starts_with("vsock.sock_"))
            && fs::remove_file(entry.path()).is_ok()
        {
            removed += 1;
        }
    }
    removed
}

/// Moves a run that ended out of the way: its sockets removed, `vm.json` kept as
/// `last.json` (for `logs` and `attest`), `stopping` removed.
pub fn retire(vm_dir: &Path, launch: &Launch) -> usize {
    let removed = launch.run_dir.as_deref().map_or(0, remove_sockets);
    let _ = fs::rename(vm_dir.join(LAUNCH_FILE), vm_dir.join(LAST_FILE));
    let _ = fs::remove_file(vm_dir.join(STOPPING));
    removed
}

/// Seconds since the Unix epoch.
pub fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The `endpoints` line: the run's sockets.
pub use berm_vm_protocol::host_event::EndpointsLine as Endpoints;

/// What berm-vmm's stderr said so far.
#[derive(Default)]
pub struct HostLines {
    /// The `hypervisor` line.
    pub hypervisor: Option<HypervisorLine>,
    /// The `endpoints` line.
    pub endpoints: Option<Endpoints>,
    /// Apps that reported `app_ready`, by index.
    pub ready: BTreeSet<u32>,
    /// The first app refused.
    pub refused: Option<AppRefused>,
    /// The first app that exited.
    pub exited: Option<AppExited>,
    /// The guest's `boot_failed`.
    pub boot_failed: Option<BootFailed>,
    /// A stop is under way (`stop_signal`, `shutting_down`, `power_off`).
    pub stopping: bool,
    /// berm-vmm's `exit` line.
    pub exit: Option<ExitLine>,
    /// Lines that are not JSON: berm-vmm's warnings and its last words.
    pub words: Vec<String>,
    partial: Vec<u8>,
}

impl HostLines {
    /// Reads all of `path` (empty when missing).
    pub fn read(path: &Path) -> Self {
        let mut lines = Self::default();
        if let Ok(bytes) = fs::read(path) {
            lines.feed(&bytes);
            lines.finish();
        }
        lines
    }

    /// Takes more of the stream; a line is read once its newline arrives.
    pub fn feed(&mut self, bytes: &[u8]) {
        self.partial.extend_from_slice(bytes);
        while let Some(end) = self.partial.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.partial.drain(..=end).collect();
            self.line(&String::from_utf8_lossy(&line[..end]));
        }
    }

    /// Takes a last line without its newline.
    pub fn finish(&mut self) {
        if !self.partial.is_empty() {
            let line = std::mem::take(&mut self.partial);
            self.line(&String::from_utf8_lossy(&line));
        }
    }

    fn line(&mut self, line: &str) {
        match VmmLine::parse(line) {
            Ok(VmmLine::Host(event)) => match event {
                HostEvent::Hypervisor(hypervisor) => self.hypervisor = Some(hypervisor),
                HostEvent::Endpoints(endpoints) => self.endpoints = Some(endpoints),
                HostEvent::Exit(exit) => self.exit = Some(exit),
                HostEvent::StopSignal(_) => self.stopping = true,
                _ => {}
            },
            Ok(VmmLine::Guest(guest)) => match guest.event {
                Event::AppReady(ready) => {
                    self.ready.insert(ready.index);
                }
                Event::AppRefused(refused) => {
                    self.refused.get_or_insert(refused);
                }
                Event::AppExited(exited) => {
                    self.exited.get_or_insert(exited);
                }
                Event::BootFailed(failed) => self.boot_failed = Some(failed),
                Event::ShuttingDown(_) | Event::PowerOff(_) => self.stopping = true,
                _ => {}
            },
            // berm-vmm's lines for a person: its warnings and last words.
            Err(VmmLineError::NotJson) if !line.trim().is_empty() => {
                self.words.push(line.to_owned());
            }
            // A later berm-vmm's event, or a line that does not parse: nothing to act on.
            Err(_) => {}
        }
    }

    /// berm-vmm's own reason for ending: its `exit` line's message, else its last words.
    pub fn reason(&self) -> Option<String> {
        self.exit
            .as_ref()
            .map(|exit| {
                format!(
                    "{} (berm-vmm exit {}, {})",
                    exit.message, exit.code, exit.status
                )
            })
            .or_else(|| self.words.last().cloned())
    }

    /// The hypervisor as chosen (`qemu (tcg)`, `krun`), once berm-vmm said.
    pub fn hypervisor_text(&self) -> Option<String> {
        self.hypervisor.as_ref().map(|h| match &h.accel {
            Some(accel) => format!("{} ({accel})", h.chosen.name()),
            None => h.chosen.name().to_owned(),
        })
    }
}

/// A VM's status, as `ls` shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// berm-vmm runs; not every app is ready yet.
    Booting,
    /// Every app is ready.
    Ready,
    /// `stop` (or a signal, or the guest) is stopping it.
    Stopping,
    /// Its berm-vmm is gone or is another process now.
    Stale,
}

impl Status {
    /// The word `ls` prints.
    pub fn name(self) -> &'static str {
        match self {
            Self::Booting => "booting",
            Self::Ready => "ready",
            Self::Stopping => "stopping",
            Self::Stale => "stale",
        }
    }
}

/// One VM as `ls` and `up --json` describe it.
#[derive(Debug, Serialize)]
pub struct View {
    /// Its name.
    pub name: String,
    /// Its status.
    pub status: Status,
    /// Why it is stale.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stale: Option<String>,
    /// berm-vmm's pid.
    pub pid: u32,
    /// Seconds since `up` started it.
    pub uptime_s: u64,
    /// The guest's architecture.
    pub arch: String,
    /// The hypervisor: as chosen once berm-vmm said, else as asked.
    pub hypervisor: String,
    /// The state disk, if any.
    pub state: Option<PathBuf>,
    /// The run dir, once known.
    pub run_dir: Option<PathBuf>,
    /// The apps and their sockets.
    pub apps: Vec<AppView>,
}

/// One app of a [`View`].
#[derive(Debug, Serialize)]
pub struct AppView {
    /// App i.
    pub index: u32,
    /// Its name.
    pub name: String,
    /// Whether it reported `app_ready`.
    pub ready: bool,
    /// Its MCP socket (`berm mcp --socket` or `berm mcp --vm`).
    pub socket: Option<PathBuf>,
}

impl View {
    /// The view of the VM in `vm_dir` started by `launch`.
    pub fn of(vm_dir: &Path, launch: &Launch) -> Self {
        let lines = HostLines::read(&vm_dir.join(HOST_LINES));
        let liveness = launch.liveness();
        let status = if liveness != Liveness::Running {
            Status::Stale
        } else if vm_dir.join(STOPPING).exists() || lines.stopping {
            Status::Stopping
        } else if launch
            .apps
            .iter()
            .all(|app| lines.ready.contains(&app.index))
        {
            Status::Ready
        } else {
            Status::Booting
        };
        let run_dir = launch
            .run_dir
            .clone()
            .or_else(|| lines.endpoints.as_ref().map(|e| e.run_dir.clone()));
        Self {
            name: launch.name.clone(),
            status,
            stale: (status == Status::Stale).then(|| liveness.why(launch.pid)),
            pid: launch.pid,
            uptime_s: now_unix().saturating_sub(launch.started_unix),
            arch: launch.arch.clone(),
            hypervisor: lines
                .hypervisor_text()
                .unwrap_or_else(|| launch.hypervisor.clone()),
            state: launch.state.clone(),
            apps: launch
                .apps
                .iter()
                .map(|app| AppView {
                    index: app.index,
                    name: app.name.clone(),
                    ready: lines.ready.contains(&app.index),
                    socket: run_dir
                        .as_ref()
                        .map(|dir| dir.join(format!("rpc-{}.sock", app.index))),
                })
                .collect(),
            run_dir,
        }
    }
}

/// `12s`, `3m04s`, `2h05m`, `3d04h`.
pub fn uptime_text(seconds: u64) -> String {
    match seconds {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m{:02}s", s / 60, s % 60),
        s if s < 86_400 => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
        s => format!("{}d{:02}h", s / 86_400, s % 86_400 / 3600),
    }
}

/// The pid file of the running (else the last) run of `name`, with its VM dir.
pub fn find(name: &str) -> anyhow::Result<(PathBuf, Launch, bool)> {
    let layout = Layout::from_env()?;
    layout.check_name(name)?;
    let vm_dir = layout.vm_dir(name);
    if let Some(launch) = Launch::read(&vm_dir, LAUNCH_FILE)? {
        return Ok((vm_dir, launch, true));
    }
    if let Some(launch) = Launch::read(&vm_dir, LAST_FILE)? {
        return Ok((vm_dir, launch, false));
    }
    bail!(
        "no VM named \"{name}\" under {} (berm vm ls lists them)",
        layout.base.display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(base: &str) -> Layout {
        Layout {
            base: PathBuf::from(base),
            runtime: true,
        }
    }

    #[test]
    fn names_are_plain_not_reserved_and_fit_a_socket_path() {
        let here = layout("/run/user/1000/berm/vm");
        here.check_name("notes").unwrap();
        here.check_name("notes-2.b_x").unwrap();
        for bad in ["", "-x", ".", "..", "a/b", "a b", "é"] {
            assert!(here.check_name(bad).is_err(), "{bad:?}");
        }
        for reserved in ["verify", "key"] {
            let e = here.check_name(reserved).unwrap_err().to_string();
            assert!(e.contains("is a subcommand"), "{e}");
        }
        // /run/user/1000/berm/vm/<name>/run/vsock.sock_6063 in 107 bytes.
        let max = here.max_name();
        assert_eq!(max, 107 - "/run/user/1000/berm/vm".len() - 1 - 5 - 15);
        let fits = "n".repeat(max);
        here.check_name(&fits).unwrap();
        let path = format!("/run/user/1000/berm/vm/{fits}/run/vsock.sock_6063");
        assert_eq!(path.len(), 107);
        let e = here
            .check_name(&"n".repeat(max + 1))
            .unwrap_err()
            .to_string();
        assert!(e.contains("holds at most 107 bytes"), "{e}");
        assert_eq!(layout("/r").max_name(), 64);
    }

    #[test]
    fn host_lines_are_read_with_the_protocol_types() {
        let mut lines = HostLines::default();
        lines.feed(br#"{"source":"berm-vmm","event":"hypervisor","chosen":"qemu","accel":"tcg","reason":"r"}
{"source":"berm-vmm","event":"endpoints","run_dir":"/r","control":"/r/control.sock","logs":"/r/logs.sock","console":"/r/console.log","hypervisor_log":"/r/hypervisor.log","rpc":[],"egress":[]}
{"source":"berm-init","boot_id":"ab-12","uptime_ms":5,"event":"app_ready","app":"notes","index":0,"pid":7,"ms":3,"tools":2,"programs":[]}
not json
{"source":"berm-vmm","event":"exit","status":"refused","code":5,"mess"#);
        assert_eq!(lines.hypervisor_text().as_deref(), Some("qemu (tcg)"));
        assert_eq!(lines.endpoints.as_ref().unwrap().run_dir, Path::new("/r"));
        assert!(lines.ready.contains(&0));
        assert!(lines.exit.is_none());
        lines.feed(b"age\":\"no\"}\nberm-vmm: no\n");
        assert_eq!(lines.exit.as_ref().unwrap().code, 5);
        assert_eq!(lines.words, ["not json", "berm-vmm: no"]);
        assert_eq!(
            lines.reason().as_deref(),
            Some("no (berm-vmm exit 5, refused)")
        );
    }

    #[test]
    fn a_pid_that_is_another_process_is_not_the_vm() {
        let me = std::process::id();
        let argv = vec!["/nonexistent/berm-vmm".to_owned(), "run".to_owned()];
        assert_eq!(liveness(1, None, &argv), Liveness::Replaced);
        if cfg!(target_os = "linux") {
            assert_eq!(liveness(me, start_ticks(me), &argv), Liveness::Replaced);
            assert_eq!(liveness(me, Some(1), &argv), Liveness::Replaced);
            let mine: Vec<String> = std::env::args().collect();
            assert_eq!(liveness(me, start_ticks(me), &mine), Liveness::Running);
        }
        assert_eq!(liveness(999_999_999, None, &argv), Liveness::Gone);
        assert_eq!(uptime_text(3725), "1h02m");
    }
}
