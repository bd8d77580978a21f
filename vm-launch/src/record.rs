//! The launch record (`vm.json`): what `up` started under a name, and whether that
//! berm-vmm still runs — a run whose pid is gone or is another process now is *stale*.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::config::VmConfig;
use crate::files::{OpenPrivateError, private_file};
use crate::layout::{FindLayoutError, LAST_FILE, LAUNCH_FILE, Layout, STOPPING};
use crate::measure::Measured;

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

/// The launch record, `vm.json`: what `up` started.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Launch {
    /// The VM's name.
    pub name: String,
    /// berm-vmm's pid.
    pub pid: u32,
    /// berm-vmm's start time in clock ticks after boot (`/proc/PID/stat` field 22), where
    /// there is a `/proc`.
    pub start_ticks: Option<u64>,
    /// berm-vmm's command line, as `/proc/PID/cmdline` shows it (`berm-vmm run --config
    /// FILE`; a record an older berm wrote holds the flags it built by hand).
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
    pub measured: Vec<Measured>,
    /// The configuration berm-vmm was started with (also in `vmm.json`), which a reboot
    /// starts again; absent in a record an older berm wrote, whose VM a reboot starts
    /// afresh from the options of the command that reboots it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<VmConfig>,
}

/// A launch record that could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadLaunchError {
    /// The file could not be read.
    #[error("reading {}", path.display())]
    Read {
        /// The record.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a record.
    #[error("{} is not a pid file berm wrote", path.display())]
    Parse {
        /// The record.
        path: PathBuf,
        /// Why.
        #[source]
        source: serde_json::Error,
    },
}

/// A launch record that could not be written.
#[derive(Debug, thiserror::Error)]
pub enum WriteLaunchError {
    /// The temporary file could not be opened.
    #[error(transparent)]
    Open(#[from] OpenPrivateError),
    /// Writing or renaming it failed.
    #[error("writing {}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// An app `--app NAME|INDEX` does not pick.
#[derive(Debug, thiserror::Error)]
pub enum PickAppError {
    /// None was named and there are several.
    #[error("VM \"{name}\" serves {count} apps: pick one with --app NAME or --app INDEX ({apps})")]
    Several {
        /// The VM.
        name: String,
        /// How many apps it serves.
        count: usize,
        /// Its apps, `index (name)`, comma-separated.
        apps: String,
    },
    /// The one named is not there.
    #[error("VM \"{name}\" has no app {wanted:?}; it serves {apps}")]
    NoSuch {
        /// The VM.
        name: String,
        /// What was asked for.
        wanted: String,
        /// Its apps, `index (name)`, comma-separated.
        apps: String,
    },
}

impl Launch {
    /// Reads `<vm_dir>/<file>`; `None` when it does not exist.
    pub fn read(vm_dir: &Path, file: &str) -> Result<Option<Self>, ReadLaunchError> {
        let path = vm_dir.join(file);
        match fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|source| ReadLaunchError::Parse { path, source }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(ReadLaunchError::Read { path, source }),
        }
    }

    /// Writes it to `<vm_dir>/vm.json` (mode 0600, through a rename).
    pub fn write(&self, vm_dir: &Path) -> Result<(), WriteLaunchError> {
        use std::io::Write;
        let path = vm_dir.join(LAUNCH_FILE);
        let partial = vm_dir.join(format!("{LAUNCH_FILE}.partial"));
        let mut file = private_file(&partial, true)?;
        // A record is plain fields: serializing it cannot fail.
        let bytes = serde_json::to_vec(self).map_err(std::io::Error::from);
        bytes
            .and_then(|bytes| file.write_all(&bytes))
            .map_err(|source| WriteLaunchError::Write {
                path: partial.clone(),
                source,
            })?;
        fs::rename(&partial, &path).map_err(|source| WriteLaunchError::Write { path, source })
    }

    /// Whether the pid still runs this launch's berm-vmm.
    pub fn liveness(&self) -> Liveness {
        liveness(self.pid, self.start_ticks, &self.argv)
    }

    /// The app picked by `--app NAME` or index; the only app when `None`.
    pub fn app(&self, wanted: Option<&str>) -> Result<&LaunchApp, PickAppError> {
        let names = || {
            self.apps
                .iter()
                .map(|a| format!("{} ({})", a.index, a.name))
                .collect::<Vec<_>>()
                .join(", ")
        };
        match wanted {
            None if self.apps.len() == 1 => Ok(&self.apps[0]),
            None => Err(PickAppError::Several {
                name: self.name.clone(),
                count: self.apps.len(),
                apps: names(),
            }),
            Some(wanted) => self
                .apps
                .iter()
                .find(|a| a.name == wanted || a.index.to_string() == wanted)
                .ok_or_else(|| PickAppError::NoSuch {
                    name: self.name.clone(),
                    wanted: wanted.to_owned(),
                    apps: names(),
                }),
        }
    }
}

/// Whether a launch record's berm-vmm still runs.
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

/// A VM's launch record that could not be found.
#[derive(Debug, thiserror::Error)]
pub enum FindLaunchError {
    /// There is no place for VMs here.
    #[error(transparent)]
    Layout(#[from] FindLayoutError),
    /// The name is not a VM's.
    #[error(transparent)]
    Name(#[from] crate::layout::CheckNameError),
    /// A record could not be read.
    #[error(transparent)]
    Read(#[from] ReadLaunchError),
    /// No run of the name was recorded.
    #[error("no VM named \"{name}\" under {} (berm vm ls lists them)", base.display())]
    None {
        /// The name.
        name: String,
        /// Where VMs live.
        base: PathBuf,
    },
}

/// The launch record of the running (else the last) run of `name`, with its VM dir and
/// whether it is the running one's.
pub fn find(name: &str) -> Result<(PathBuf, Launch, bool), FindLaunchError> {
    let layout = Layout::from_env()?;
    layout.check_name(name)?;
    let vm_dir = layout.vm_dir(name);
    if let Some(launch) = Launch::read(&vm_dir, LAUNCH_FILE)? {
        return Ok((vm_dir, launch, true));
    }
    if let Some(launch) = Launch::read(&vm_dir, LAST_FILE)? {
        return Ok((vm_dir, launch, false));
    }
    Err(FindLaunchError::None {
        name: name.to_owned(),
        base: layout.base,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
    }

    fn record(argv: &[&str]) -> serde_json::Value {
        serde_json::json!({
            "name": "notes", "pid": 999_999_999u32, "start_ticks": null,
            "argv": argv, "started_unix": 0,
            "apps": [{"index": 0, "name": "notes", "dir": "/nonexistent/notes"}],
            "arch": "x86_64", "hypervisor": "auto", "state": null, "run_dir": null,
        })
    }

    #[test]
    fn a_record_an_older_berm_wrote_is_read_without_a_configuration() {
        let dir = tempfile::tempdir().unwrap();
        let old = record(&[
            "/nonexistent/berm-vmm",
            "run",
            "--app",
            "/nonexistent/notes",
        ]);
        fs::write(dir.path().join(LAUNCH_FILE), old.to_string()).unwrap();
        let launch = Launch::read(dir.path(), LAUNCH_FILE).unwrap().unwrap();
        assert!(launch.config.is_none());
        assert!(launch.measured.is_empty());
        assert_eq!(launch.liveness(), Liveness::Gone);
        assert!(Launch::read(dir.path(), LAST_FILE).unwrap().is_none());
        fs::write(dir.path().join(LAST_FILE), "{").unwrap();
        let e = Launch::read(dir.path(), LAST_FILE).unwrap_err().to_string();
        assert!(e.ends_with("last.json is not a pid file berm wrote"), "{e}");
    }

    #[test]
    fn a_record_round_trips_with_its_configuration() {
        let dir = tempfile::tempdir().unwrap();
        let mut launch: Launch =
            serde_json::from_value(record(&["/b/berm-vmm", "run", "--config", "/v/vmm.json"]))
                .unwrap();
        let config = VmConfig {
            apps: vec![PathBuf::from("/nonexistent/notes")],
            accept: true,
            cpus: 2,
            ..VmConfig::default()
        };
        launch.config = Some(config.clone());
        launch.write(dir.path()).unwrap();
        let again = Launch::read(dir.path(), LAUNCH_FILE).unwrap().unwrap();
        assert_eq!(again.config, Some(config));
        assert_eq!(again.argv, launch.argv);
        use std::os::unix::fs::MetadataExt;
        let mode = fs::metadata(dir.path().join(LAUNCH_FILE)).unwrap().mode();
        assert_eq!(mode & 0o777, 0o600);
        // Retired, it is the last run's record, for `logs` and `attest`.
        retire(dir.path(), &again);
        assert!(Launch::read(dir.path(), LAUNCH_FILE).unwrap().is_none());
        assert!(Launch::read(dir.path(), LAST_FILE).unwrap().is_some());
    }

    #[test]
    fn an_app_is_picked_by_name_or_index() {
        let mut launch: Launch = serde_json::from_value(record(&["x"])).unwrap();
        assert_eq!(launch.app(None).unwrap().name, "notes");
        assert_eq!(launch.app(Some("0")).unwrap().name, "notes");
        launch.apps.push(LaunchApp {
            index: 1,
            name: "tags".into(),
            dir: PathBuf::from("/t"),
        });
        let e = launch.app(None).unwrap_err().to_string();
        assert!(e.contains("serves 2 apps"), "{e}");
        let e = launch.app(Some("x")).unwrap_err().to_string();
        assert!(
            e.contains("has no app \"x\"; it serves 0 (notes), 1 (tags)"),
            "{e}"
        );
    }
}
