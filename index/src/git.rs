//! `berm index update`: clone the index repository, or fast-forward an
//! existing clone, with the `git` on PATH.
//!
//! Shelling out rather than linking gix (~6.5 min of build here, design §7):
//! the index is a plain public repository and `git` is on every machine a
//! developer publishes from. Only fast-forwards are taken, so a clone with
//! local entries not yet upstream is never rewritten.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::error::UpdateError;

/// The index cloned when none is configured (`--index`, `BERM_INDEX_URL`).
pub const DEFAULT_INDEX_URL: &str = "https://github.com/berm-os/index.git";

/// Where the clone lives when `--index-dir`/`BERM_INDEX_DIR` are not given:
/// `$BERM_HOME/index`, else `~/.berm/index`.
pub fn default_index_dir() -> PathBuf {
    let var = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    var("BERM_HOME")
        .or_else(|| var("HOME").map(|h| h.join(".berm")))
        .unwrap_or_else(|| PathBuf::from(".berm"))
        .join("index")
}

/// What `update` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Updated {
    /// A fresh clone into the directory, at this commit.
    Cloned {
        /// The clone.
        dir: PathBuf,
        /// HEAD after cloning.
        commit: String,
    },
    /// An existing clone moved from one commit to another (equal when
    /// there was nothing new).
    Pulled {
        /// The clone.
        dir: PathBuf,
        /// HEAD before.
        from: String,
        /// HEAD after.
        to: String,
    },
}

impl std::fmt::Display for Updated {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let short = |c: &str| c.chars().take(12).collect::<String>();
        match self {
            Updated::Cloned { dir, commit } => write!(
                f,
                "cloned the index into {} at {}",
                dir.display(),
                short(commit)
            ),
            Updated::Pulled { dir, from, to } if from == to => {
                write!(
                    f,
                    "the index in {} is up to date at {}",
                    dir.display(),
                    short(to)
                )
            }
            Updated::Pulled { dir, from, to } => {
                write!(
                    f,
                    "updated the index in {} from {} to {}",
                    dir.display(),
                    short(from),
                    short(to)
                )
            }
        }
    }
}

/// Clones `source` (URL or path) into `dir`, or fast-forwards `dir` from its
/// origin when it is already a clone.
///
/// # Errors
/// [`UpdateError`] when `git` is missing, fails, or `dir` exists and is not
/// a git clone.
pub fn update(source: &str, dir: &Path) -> Result<Updated, UpdateError> {
    if dir.join(".git").exists() {
        let from = head(dir)?;
        git(Some(dir), &["pull", "--ff-only", "--quiet"])?;
        let to = head(dir)?;
        return Ok(Updated::Pulled {
            dir: dir.to_path_buf(),
            from,
            to,
        });
    }
    if dir.exists()
        && std::fs::read_dir(dir)
            .map(|mut d| d.next().is_some())
            .unwrap_or(true)
    {
        return Err(UpdateError::NotAClone {
            dir: dir.to_path_buf(),
        });
    }
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|source| UpdateError::CreateDir {
            dir: parent.to_path_buf(),
            source,
        })?;
    }
    let dir_text = dir.to_string_lossy();
    git(None, &["clone", "--quiet", "--", source, &dir_text])?;
    Ok(Updated::Cloned {
        dir: dir.to_path_buf(),
        commit: head(dir)?,
    })
}

fn head(dir: &Path) -> Result<String, UpdateError> {
    Ok(git(Some(dir), &["rev-parse", "HEAD"])?.trim().to_string())
}

/// Runs `git [-C dir] args`, never prompting for credentials (the index is
/// public; a prompt would hang a script).
fn git(dir: Option<&Path>, args: &[&str]) -> Result<String, UpdateError> {
    let mut command = Command::new("git");
    if let Some(dir) = dir {
        command.arg("-C").arg(dir);
    }
    command.args(args).env("GIT_TERMINAL_PROMPT", "0");
    let shown = format!("git {}", args.join(" "));
    let output = command
        .output()
        .map_err(|source| UpdateError::Spawn { source })?;
    if !output.status.success() {
        return Err(UpdateError::Git {
            command: shown,
            status: output.status.to_string(),
            stderr: String::from_utf8_lossy(&output.stderr)
                .trim()
                .chars()
                .take(2000)
                .collect(),
        });
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}
