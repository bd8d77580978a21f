//! Where a named VM's files live, and the rules of its name.
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
//! | `vm.json` | the launch record (pid file): berm-vmm's pid, its start time and command line, its configuration, the apps, the run dir |
//! | `vmm.json` | the [`VmConfig`](crate::config::VmConfig) berm-vmm was started with (`berm-vmm run --config`), mode 0600 |
//! | `vmm.stderr` | berm-vmm's stderr: its JSON host lines, then its last words |
//! | `stopping` | present while `stop` stops it |
//! | `clients` | share-`flock`ed by each attached `berm mcp --app` bridge (the kernel drops a killed one's) |
//! | `watch.lock`, `watch.log` | locked by the idle watchdog of a VM `mcp --app` booted; its words |
//! | `last.json` | the `vm.json` of the last run that ended, for `logs` and `attest` |
//! | `run/` | berm-vmm's run dir, when `$XDG_RUNTIME_DIR` is set; else berm-vmm makes its own (a fresh random one under the temp dir) and `vm.json` names it |

use std::fs;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::PathBuf;

use crate::files::env_dir;

/// `sun_path` holds 108 bytes, NUL included.
const SUN_PATH_MAX: usize = 107;
/// The longest socket name berm-vmm makes in a run dir: an egress socket, `vsock.sock_<6000+i>`.
const LONGEST_SOCKET: usize = "vsock.sock_6063".len();
/// The longest VM name, wherever its run dir is.
const NAME_MAX: usize = 64;
/// Names `berm attest NAME` could not tell from its subcommands.
const RESERVED: [&str; 2] = ["verify", "key"];

/// The launch record (pid file).
pub const LAUNCH_FILE: &str = "vm.json";
/// The launch record of the last run that ended.
pub const LAST_FILE: &str = "last.json";
/// The configuration berm-vmm is started with.
pub const CONFIG_FILE: &str = "vmm.json";
/// The lock file.
pub const LOCK_FILE: &str = "lock";
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

/// Where named VMs live in this environment.
pub struct Layout {
    /// The directory holding one VM dir per name.
    pub base: PathBuf,
    /// Whether `base` is under `$XDG_RUNTIME_DIR` (then each run dir is `<VM dir>/run`).
    pub runtime: bool,
}

/// No place for a VM's files: neither variable is set.
#[derive(Debug, thiserror::Error)]
#[error("neither XDG_RUNTIME_DIR nor HOME is set: there is nowhere to keep a VM's files")]
pub struct FindLayoutError;

/// A name that cannot name a VM.
#[derive(Debug, thiserror::Error)]
pub enum CheckNameError {
    /// It is a subcommand of `berm attest`.
    #[error(
        "\"{0}\" cannot name a VM: `berm attest {0}` is a subcommand; choose another with --name"
    )]
    Reserved(String),
    /// It is not a plain word.
    #[error(
        "VM name {0:?} is not a plain name: letters, digits, '-', '_' and '.', starting with a letter or digit"
    )]
    NotPlain(String),
    /// Its sockets' paths would not fit.
    #[error(
        "VM name \"{name}\" is {} bytes, longer than the {max} that fit: a Unix socket path under {} holds at most {SUN_PATH_MAX} bytes",
        name.len(),
        base.display()
    )]
    TooLong {
        /// The name.
        name: String,
        /// The longest that fits.
        max: usize,
        /// Where VMs live.
        base: PathBuf,
    },
}

/// A VM dir that could not be made, or is not the user's.
#[derive(Debug, thiserror::Error)]
pub enum CreateVmDirError {
    /// Creating or reading it failed.
    #[error("{what} {}", dir.display())]
    Io {
        /// `creating` or `reading`.
        what: &'static str,
        /// The VM dir.
        dir: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// It is a link, a file or another user's.
    #[error("{} is not a directory of this user's; move it away", .0.display())]
    NotOurs(PathBuf),
}

impl Layout {
    /// `$XDG_RUNTIME_DIR/berm/vm`, else `$XDG_STATE_HOME/berm/vm`, else
    /// `~/.local/state/berm/vm`.
    pub fn from_env() -> Result<Self, FindLayoutError> {
        if let Some(dir) = env_dir("XDG_RUNTIME_DIR") {
            return Ok(Self {
                base: dir.join("berm/vm"),
                runtime: true,
            });
        }
        let state = env_dir("XDG_STATE_HOME")
            .or_else(|| env_dir("HOME").map(|home| home.join(".local/state")))
            .ok_or(FindLayoutError)?;
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
    pub fn check_name(&self, name: &str) -> Result<(), CheckNameError> {
        if RESERVED.contains(&name) {
            return Err(CheckNameError::Reserved(name.to_owned()));
        }
        let bytes = name.as_bytes();
        let plain = bytes.first().is_some_and(u8::is_ascii_alphanumeric)
            && bytes
                .iter()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
        if !plain {
            return Err(CheckNameError::NotPlain(name.to_owned()));
        }
        let max = self.max_name();
        if name.len() > max {
            return Err(CheckNameError::TooLong {
                name: name.to_owned(),
                max,
                base: self.base.clone(),
            });
        }
        Ok(())
    }

    /// Creates the VM dir of `name` (and the directories above it), mode 0700, and refuses
    /// one that is a symlink or not this user's.
    pub fn create_vm_dir(&self, name: &str) -> Result<PathBuf, CreateVmDirError> {
        let dir = self.vm_dir(name);
        let io = |what, source| CreateVmDirError::Io {
            what,
            dir: dir.clone(),
            source,
        };
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(|e| io("creating", e))?;
        let meta = fs::symlink_metadata(&dir).map_err(|e| io("reading", e))?;
        if !meta.is_dir() || meta.uid() != crate::sys::euid() {
            return Err(CreateVmDirError::NotOurs(dir));
        }
        Ok(dir)
    }

    /// Every VM dir that holds a launch record, by name.
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
}
