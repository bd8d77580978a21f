//! berm's own paths: the directories and files berm itself owns or reads — its homes, its
//! keys, its token and configuration files — none of which a secret's value file may be, or
//! lie in ([`crate::secret_file`]).
//!
//! One process-wide set. The places berm uses by default are always in it (`$BERM_HOME` and
//! `~/.berm`; `$XDG_CONFIG_HOME/berm` and `~/.config/berm`); each binary [`register`]s at
//! startup what its flags name besides (`bermd --home`, `--ask-key`, `--http-token-file`, …;
//! `berm-vmm --key`, `--state`, …), before it reads any app folder, and hands the set to a
//! child that reads secrets for it ([`registered`]).

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

/// What berm's data directory holds, as messages name it.
pub const STATE: &str = "bermd's state and its secret store";
/// What berm's configuration directory holds, as messages name it.
pub const CONFIG: &str = "berm's configuration and the host's signing key";

/// One of berm's own directories or files, and what it holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwnPath {
    /// The directory or file, absolute (it need not exist yet).
    pub path: PathBuf,
    /// What it holds, for the message that refuses a secret there (`bermd --ask-key`, …).
    pub what: String,
}

/// What this process registered, beside the defaults.
static REGISTERED: Mutex<Vec<OwnPath>> = Mutex::new(Vec::new());

/// Adds `path` (made absolute against the current directory) to berm's own paths in this
/// process, for the rest of its life: from now on no secret's value file may be it or lie
/// under it. `what` says what it holds, e.g. `"the key that seals asked programs' state
/// (--ask-key)"`.
pub fn register(path: &Path, what: &str) {
    let path = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let own = OwnPath {
        path,
        what: what.to_string(),
    };
    let mut registered = REGISTERED.lock().unwrap_or_else(|e| e.into_inner());
    if !registered.contains(&own) {
        registered.push(own);
    }
}

/// What this process [`register`]ed (not the defaults): what a child that reads secrets for
/// it must register too.
pub fn registered() -> Vec<OwnPath> {
    REGISTERED.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// The places berm uses by default, as the environment names them: both the configured and
/// the default place of each (`$XDG_CONFIG_HOME/berm` and `~/.config/berm`; `$BERM_HOME` and
/// `~/.berm`), since berm run one way or another may keep its key or state in either.
pub fn defaults() -> Vec<OwnPath> {
    let var = |name| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
    };
    let own = |path: PathBuf, what: &str| OwnPath {
        path,
        what: what.to_string(),
    };
    let home = var("HOME");
    let mut dirs = Vec::new();
    if let Some(config) = var("XDG_CONFIG_HOME") {
        dirs.push(own(config.join("berm"), CONFIG));
    }
    if let Some(home) = &home {
        dirs.push(own(home.join(".config").join("berm"), CONFIG));
        dirs.push(own(home.join(".berm"), STATE));
    }
    if let Some(state) = var("BERM_HOME") {
        dirs.push(own(state, STATE));
    }
    dirs
}

/// All of berm's own paths in this process: the [`defaults`], then what was [`register`]ed.
pub fn all() -> Vec<OwnPath> {
    let mut all = defaults();
    all.extend(registered());
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registered_paths_are_absolute_kept_once_and_listed_after_the_defaults() {
        let relative = Path::new("own-paths-test-relative");
        register(relative, "a test's file");
        register(relative, "a test's file");
        let absolute = std::env::current_dir().unwrap().join(relative);
        let mine: Vec<_> = registered()
            .into_iter()
            .filter(|o| o.path == absolute)
            .collect();
        assert_eq!(mine.len(), 1, "{mine:?}");
        assert_eq!(mine[0].what, "a test's file");
        assert!(all().ends_with(&registered()));
    }
}
