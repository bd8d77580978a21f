//! State disks and the app folders their workspaces belong to.
//!
//! In the guest, app `A`'s home is `/workspace/A` on the state disk: its files, keyspaces,
//! receipts and `ask.key`. Whichever folder named `A` boots on the disk is given that
//! workspace, and a folder's own berm.toml can pass the guest's check of what changed
//! (`accept = "sha256:…"` naming its own bytes). So a downloaded folder that reuses the name
//! of one of the user's apps would take over that app's state. To stop it, `berm vm up` and
//! `berm mcp --app` bind each workspace on a disk to the folder that first booted with it,
//! and refuse another folder of the same name before anything starts, unless the command
//! line says `--inherit-state` (never berm.toml: the folder asking is the one not trusted).
//!
//! **What identifies a folder**: its canonical path, as recorded by berm in the user's own
//! data directory, in `$XDG_DATA_HOME/berm/state/owners/` (else
//! `~/.local/share/berm/state/owners/`, mode 0700), one record per disk, keyed by the disk's
//! canonical path. A folder controls its contents and its `name`, but neither where the user
//! put it nor this record: a folder elsewhere is another folder, whatever it claims. A folder
//! replaced in place (the same path) is the user's own doing, and keeps the workspace. The
//! path is chosen over an inode or a digest of the contents, which change when a folder is
//! cloned again or edited — a refusal a user meets at every edit teaches them to add
//! `--inherit-state` by habit.
//!
//! **A disk with no record** (made before berm kept them): the first boot binds it and says
//! so, to the folders of the last run of that VM that berm recorded on this disk (`last.json`,
//! `vm.json`) when there is one, else to the folders booting now. A disk that no longer
//! exists has nothing to take over: its record is replaced by the next boot's.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::files::{OpenPrivateError, env_dir, now_unix, private_file};
use crate::layout::{LAST_FILE, LAUNCH_FILE};
use crate::record::Launch;

/// A file or directory of the state records that could not be reached.
#[derive(Debug, thiserror::Error)]
#[error("{what} {}", path.display())]
pub struct StateIoError {
    /// `creating`, `reading` or `writing`.
    pub what: &'static str,
    /// The path.
    pub path: PathBuf,
    /// Why.
    #[source]
    pub source: std::io::Error,
}

fn io(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> StateIoError {
    let path = path.to_owned();
    move |source| StateIoError { what, path, source }
}

/// The state directory (default disks, owner records) could not be used.
#[derive(Debug, thiserror::Error)]
pub enum StateDirError {
    /// Neither variable is set.
    #[error(
        "neither XDG_DATA_HOME nor HOME is set: give --no-state, or set one (berm keeps the state disks there, and which app folder each workspace on a disk belongs to)"
    )]
    NoHome,
    /// It could not be made or read.
    #[error(transparent)]
    Io(#[from] StateIoError),
    /// Another user owns it, or could write in it.
    #[error(
        "{} is not a directory of this user's that only this user can write (owner uid {uid}, mode {mode:o}); berm keeps state disks and their owners there: chmod go-w it, or move it away",
        dir.display()
    )]
    NotPrivate {
        /// The directory.
        dir: PathBuf,
        /// Its owner.
        uid: u32,
        /// Its mode.
        mode: u32,
    },
    /// The records' directory is not private to the user.
    #[error(
        "{} {why}: berm keeps there which app folder each workspace on a state disk belongs to, so only this user may reach it (chmod 700 it if it is yours, else move it away)",
        dir.display()
    )]
    OwnersNotPrivate {
        /// The directory.
        dir: PathBuf,
        /// What is wrong with it.
        why: String,
    },
}

/// The workspaces of a state disk could not be bound to the folders booting.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    /// The state directory could not be used.
    #[error(transparent)]
    StateDir(#[from] StateDirError),
    /// A file could not be reached.
    #[error(transparent)]
    Io(#[from] StateIoError),
    /// The disk's path names no file.
    #[error("state disk {} names no file", .0.display())]
    NoFileName(PathBuf),
    /// The disk's directory is not there.
    #[error("the directory of state disk {} does not exist", disk.display())]
    NoDirectory {
        /// The disk.
        disk: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The disk could not be read.
    #[error("reading state disk {}", disk.display())]
    ReadDisk {
        /// The disk.
        disk: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The record is not one berm wrote.
    #[error(
        "{} is not a record berm wrote: move it away, and the next boot binds state disk {} again as on its first use",
        path.display(),
        disk.display()
    )]
    NotARecord {
        /// The record.
        path: PathBuf,
        /// The disk.
        disk: PathBuf,
        /// Why, when it did not parse.
        #[source]
        source: Option<serde_json::Error>,
    },
    /// The record names another disk.
    #[error(
        "{} names state disk {}, not {}: {} is not a record berm wrote: move it away, and the next boot binds state disk {} again as on its first use",
        path.display(),
        named.display(),
        disk.display(),
        path.display(),
        disk.display()
    )]
    OtherDisk {
        /// The record.
        path: PathBuf,
        /// The disk it names.
        named: PathBuf,
        /// The disk.
        disk: PathBuf,
    },
    /// Workspaces on the disk belong to other folders of the same names.
    #[error(
        "state disk {} holds workspaces of other app folders with the same names:\n{lines}\na folder that reuses an app's name would read and rewrite that app's files, keyspaces, receipts and keys, so nothing was started: add --inherit-state if these folders are to take them over, or give them a disk of their own (--name OTHER, --state FILE or --no-state); the owners are recorded in {}",
        disk.display(),
        path.display()
    )]
    Taken {
        /// The disk.
        disk: PathBuf,
        /// One line per workspace taken.
        lines: String,
        /// The record.
        path: PathBuf,
    },
    /// The record could not be opened.
    #[error(transparent)]
    Open(#[from] OpenPrivateError),
}

/// The directory of the records, under the state directory.
const OWNERS: &str = "owners";

/// The directory the default state disks and the records live in:
/// `$XDG_DATA_HOME/berm/state`, else `~/.local/share/berm/state`, made mode 0700 and refused
/// if another user owns it or could write in it.
fn state_dir() -> Result<PathBuf, StateDirError> {
    let data = env_dir("XDG_DATA_HOME")
        .or_else(|| env_dir("HOME").map(|home| home.join(".local/share")))
        .ok_or(StateDirError::NoHome)?;
    let dir = data.join("berm/state");
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .map_err(io("creating", &dir))?;
    let meta = fs::symlink_metadata(&dir).map_err(io("reading", &dir))?;
    let user = crate::sys::euid();
    if !meta.is_dir() || meta.uid() != user || meta.mode() & 0o022 != 0 {
        return Err(StateDirError::NotPrivate {
            dir,
            uid: meta.uid(),
            mode: meta.mode() & 0o7777,
        });
    }
    Ok(dir)
}

/// The default state disk of VM `name`: `<state dir>/<name>.img`.
pub fn default_disk(name: &str) -> Result<PathBuf, StateDirError> {
    Ok(state_dir()?.join(format!("{name}.img")))
}

/// The records' directory, made mode 0700 and refused unless private to the user.
fn owners_dir() -> Result<PathBuf, StateDirError> {
    let dir = state_dir()?.join(OWNERS);
    match fs::DirBuilder::new().mode(0o700).create(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(io("creating", &dir)(e).into()),
    }
    let meta = fs::symlink_metadata(&dir).map_err(io("reading", &dir))?;
    if let Err(why) = berm_vm_protocol::private_dir::check(&meta, crate::sys::euid()) {
        return Err(StateDirError::OwnersNotPrivate {
            dir,
            why: why.to_string(),
        });
    }
    Ok(dir)
}

/// How a folder came to own a workspace.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum How {
    /// It booted when the disk was made.
    Created,
    /// It was the first with its name on a disk that already had a record.
    Added,
    /// The disk had no record (an older berm made it): it was bound to the folder of the
    /// last run berm recorded on it.
    LastRun,
    /// The disk had no record and no recorded run: it was bound on its first boot since.
    Adopted,
    /// It took the workspace over with `--inherit-state`.
    Inherited,
}

impl How {
    fn words(self) -> &'static str {
        match self {
            Self::Created => "which made it",
            Self::Added => "which made it",
            Self::LastRun => "which last booted on it (as berm recorded that run)",
            Self::Adopted => "the first to boot on it since berm records owners",
            Self::Inherited => "which took it over with --inherit-state",
        }
    }
}

/// One workspace's owner.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Owner {
    /// The app folder, canonical.
    dir: PathBuf,
    /// Since when, in seconds since the Unix epoch.
    since_unix: u64,
    /// How.
    how: How,
}

/// The record of one disk: `owners/<disk file name>-<16 hex digits>.json`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Record {
    /// The disk, canonical.
    disk: PathBuf,
    /// Each workspace on it, by app name.
    apps: BTreeMap<String, Owner>,
}

/// The disk's canonical path: the file's own when it exists, else its directory's with its
/// name (berm-vmm creates it there).
fn canonical_disk(disk: &Path) -> Result<PathBuf, BindError> {
    match fs::canonicalize(disk) {
        Ok(path) => Ok(path),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let name = disk
                .file_name()
                .ok_or_else(|| BindError::NoFileName(disk.to_owned()))?;
            let parent = disk
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .unwrap_or(Path::new("."));
            let parent = fs::canonicalize(parent).map_err(|source| BindError::NoDirectory {
                disk: disk.to_owned(),
                source,
            })?;
            Ok(parent.join(name))
        }
        Err(source) => Err(BindError::ReadDisk {
            disk: disk.to_owned(),
            source,
        }),
    }
}

/// Where the record of the disk at canonical path `disk` is: its file name, for a person,
/// then the start of its path's sha256, so two disks of the same name never share one.
fn record_path(owners: &Path, disk: &Path) -> PathBuf {
    let name: String = disk
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
        .chars()
        .map(|c| match c {
            'a'..='z' | 'A'..='Z' | '0'..='9' | '.' | '-' | '_' => c,
            _ => '_',
        })
        .take(64)
        .collect();
    let digest = Sha256::digest(disk.as_os_str().as_encoded_bytes());
    owners.join(format!("{name}-{}.json", &hex::encode(digest)[..16]))
}

impl Record {
    /// Reads the record at `path`; `None` when there is none.
    fn read(path: &Path, disk: &Path) -> Result<Option<Self>, BindError> {
        let meta = match fs::symlink_metadata(path) {
            Ok(meta) => meta,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io("reading", path)(e).into()),
        };
        let not_berms = |source| BindError::NotARecord {
            path: path.to_owned(),
            disk: disk.to_owned(),
            source,
        };
        if !meta.is_file() {
            return Err(not_berms(None));
        }
        let bytes = fs::read(path).map_err(io("reading", path))?;
        let record: Self = serde_json::from_slice(&bytes).map_err(|e| not_berms(Some(e)))?;
        if record.disk != disk {
            return Err(BindError::OtherDisk {
                path: path.to_owned(),
                named: record.disk,
                disk: disk.to_owned(),
            });
        }
        Ok(Some(record))
    }

    /// Writes it to `path` (mode 0600, through a rename).
    fn write(&self, path: &Path) -> Result<(), BindError> {
        let partial = path.with_extension("json.partial");
        let mut file = private_file(&partial, true)?;
        serde_json::to_vec_pretty(self)
            .map_err(std::io::Error::from)
            .and_then(|bytes| file.write_all(&bytes))
            .map_err(io("writing", &partial))?;
        fs::rename(&partial, path).map_err(io("writing", path))?;
        Ok(())
    }
}

/// What [`bind`] is asked: boot `apps` (name and canonical folder) on `disk`.
pub struct Binding<'a> {
    /// The state disk.
    pub disk: &'a Path,
    /// Each app's name and canonical folder.
    pub apps: Vec<(&'a str, &'a Path)>,
    /// `--inherit-state`.
    pub inherit: bool,
    /// The VM dir, whose pid files say which folders last ran (for a disk without a record).
    pub vm_dir: &'a Path,
    /// Who says what happened (`berm vm up`, `berm mcp`).
    pub who: &'a str,
}

/// The folders the last recorded run of the VM in `vm_dir` booted on `disk`, by app name.
fn last_run_on(vm_dir: &Path, disk: &Path) -> Vec<(String, PathBuf)> {
    [LAUNCH_FILE, LAST_FILE]
        .into_iter()
        .filter_map(|file| Launch::read(vm_dir, file).ok().flatten())
        .find(|launch| {
            launch
                .state
                .as_deref()
                .and_then(|state| fs::canonicalize(state).ok())
                .is_some_and(|state| state == disk)
        })
        .map(|launch| {
            launch
                .apps
                .into_iter()
                .map(|app| (app.name, app.dir))
                .collect()
        })
        .unwrap_or_default()
}

/// Checks that each app of `binding` may have its workspace on the disk, and records the
/// folders: a workspace bound to another folder of the same name refuses the boot (nothing
/// is written) unless `--inherit-state`, which rebinds it and says so; a workspace not yet
/// bound is bound to the folder now booting.
pub fn bind(binding: &Binding) -> Result<(), BindError> {
    let who = binding.who;
    let disk = canonical_disk(binding.disk)?;
    let path = record_path(&owners_dir()?, &disk);
    let exists = fs::symlink_metadata(&disk).is_ok();
    // A record of a disk that is gone is of a disk this boot does not use.
    let old = match exists {
        true => Record::read(&path, &disk)?,
        false => None,
    };
    let now = now_unix();
    let owner = |dir: &Path, how| Owner {
        dir: dir.to_owned(),
        since_unix: now,
        how,
    };
    let mut record = old.clone().unwrap_or_else(|| Record {
        disk: disk.clone(),
        apps: BTreeMap::new(),
    });
    let mut adopted_from_last = false;
    if exists && old.is_none() {
        for (name, dir) in last_run_on(binding.vm_dir, &disk) {
            record.apps.insert(name, owner(dir.as_path(), How::LastRun));
            adopted_from_last = true;
        }
    }
    let mut taken = Vec::new();
    for &(name, dir) in &binding.apps {
        match record.apps.get(name) {
            Some(bound) if bound.dir == dir => {}
            Some(bound) => taken.push((name, dir, bound.clone())),
            None => {
                let how = match (exists, &old) {
                    (false, _) => How::Created,
                    (true, None) => How::Adopted,
                    (true, Some(_)) => How::Added,
                };
                record.apps.insert(name.to_owned(), owner(dir, how));
            }
        }
    }
    let lines: Vec<String> = taken
        .iter()
        .map(|(name, dir, bound)| {
            format!(
                "  workspace `{name}` belongs to the app folder {}, {}, not to {}",
                bound.dir.display(),
                bound.how.words(),
                dir.display()
            )
        })
        .collect();
    if !taken.is_empty() && !binding.inherit {
        return Err(BindError::Taken {
            disk,
            lines: lines.join("\n"),
            path,
        });
    }
    for &(name, dir, _) in &taken {
        record
            .apps
            .insert(name.to_owned(), owner(dir, How::Inherited));
    }
    if old.as_ref() == Some(&record) {
        return Ok(());
    }
    record.write(&path)?;
    if !taken.is_empty() {
        eprintln!(
            "{who}: --inherit-state: on state disk {}:\n{}\nthey are taken over by the folders booting now (recorded in {})",
            disk.display(),
            lines.join("\n"),
            path.display()
        );
    }
    if exists && old.is_none() {
        let bound: Vec<String> = record
            .apps
            .iter()
            .map(|(name, owner)| format!("`{name}` to {}", owner.dir.display()))
            .collect();
        let from = match adopted_from_last {
            true => "the folders of its last recorded run",
            false => "the folders booting now",
        };
        eprintln!(
            "{who}: state disk {} had no record of the app folders its workspaces belong to (an older berm made it); bound it to {from}: {}; from now on another folder with one of these names is refused unless --inherit-state (recorded in {})",
            disk.display(),
            bound.join(", "),
            path.display()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_disks_of_the_same_name_have_two_records() {
        let owners = Path::new("/o");
        let a = record_path(owners, Path::new("/home/u/a/notes.img"));
        let b = record_path(owners, Path::new("/home/u/b/notes.img"));
        assert_ne!(a, b);
        let name = a.file_name().unwrap().to_str().unwrap();
        assert!(
            name.starts_with("notes.img-") && name.ends_with(".json"),
            "{name}"
        );
        let odd = record_path(owners, Path::new("/d/a b\n.img"));
        assert!(odd.to_str().unwrap().starts_with("/o/a_b_.img-"), "{odd:?}");
    }
}
