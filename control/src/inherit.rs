//! What deploying an app folder takes over that the folder did not create, and the one
//! `--accept` that admits it.
//!
//! A program's keyspace and stored secrets are kept by name (`$BERM_HOME/state/<name>`,
//! `$BERM_HOME/secrets/<name>`) and outlive its deployment, so a folder that reuses a name
//! inherits them. Deploying a folder over a name that a plain `berm deploy`, another folder,
//! or a since removed deployment left state under is refused, with one list of what would
//! be taken over, unless `--accept` is given; redeploying the same folder needs nothing.
//! `berm deploy --app` and `bermd --app` both judge with [`inherited`] and speak through
//! [`Takeover`], so they refuse and accept in the same words.

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::NameState;

/// How state under a name with no deployment behind it is judged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Leftovers {
    /// Someone else's: a removed deployment left it (`berm deploy --app`, whose
    /// deployments are recorded, so a folder's own are always found).
    Foreign,
    /// The folder's own: `bermd --app` records nothing, so an earlier run of it is what
    /// left state in its home.
    Own,
}

/// What a program of the app folder `dir` would take over under its name, given what the
/// name holds (`state`): `None` when the name is free or holds this folder's deployment.
/// The secrets named in `sets` are the folder's own (its `[program.secrets]`): they are
/// replaced, not inherited, and are left out.
pub fn inherited(
    state: &NameState,
    dir: &Path,
    sets: &[&str],
    leftovers: Leftovers,
) -> Option<NameState> {
    let mut taken = state.clone();
    taken.secrets.retain(|name| !sets.contains(&name.as_str()));
    match &state.deployment {
        Some(deployed) if deployed.app_dir.as_deref() == Some(dir) => None,
        Some(_) => Some(taken),
        None if leftovers == Leftovers::Own => None,
        None => {
            let keys = taken.keyspace.is_some_and(|k| k.keys > 0);
            (keys || !taken.secrets.is_empty()).then_some(taken)
        }
    }
}

/// Everything one app folder would take over, program by program: the one list `--accept`
/// admits, printed whole whether refused or accepted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Takeover {
    /// The app's name.
    pub app: String,
    /// The folder, canonical.
    pub dir: PathBuf,
    /// What each program takes over, in the order of `berm.toml`.
    pub programs: Vec<NameState>,
}

impl Takeover {
    /// Nothing taken over yet, for app `app` in folder `dir`.
    pub fn new(app: &str, dir: &Path) -> Takeover {
        Takeover {
            app: app.to_string(),
            dir: dir.to_path_buf(),
            programs: Vec::new(),
        }
    }

    /// Adds what a program takes over under its name ([`inherited`]), if anything.
    pub fn add(&mut self, state: &NameState, sets: &[&str], leftovers: Leftovers) {
        if let Some(taken) = inherited(state, &self.dir, sets, leftovers) {
            self.programs.push(taken);
        }
    }

    /// Whether the folder takes over nothing.
    pub fn is_empty(&self) -> bool {
        self.programs.is_empty()
    }

    /// One line per program, each starting `  program `NAME`: `.
    pub fn list(&self) -> String {
        let lines: Vec<String> = self.programs.iter().map(line).collect();
        lines.join("\n")
    }

    /// `Ok` with the list when `accept` is given or nothing is taken over; else the
    /// refusal, which prints the list.
    ///
    /// # Errors
    /// [`NotAccepted`] when something is taken over and `accept` is false.
    pub fn check(self, accept: bool) -> Result<Takeover, NotAccepted> {
        match accept || self.is_empty() {
            true => Ok(self),
            false => Err(NotAccepted(Box::new(self))),
        }
    }

    /// What is printed when `--accept` admitted a non-empty list.
    pub fn notice(&self) -> String {
        format!(
            "app `{}` ({}): --accept: taking over what the folder did not create:\n{}",
            self.app,
            self.dir.display(),
            self.list()
        )
    }
}

/// An app folder refused because it would take over state it did not create, and
/// `--accept` was not given.
#[derive(Debug, thiserror::Error)]
#[error(
    "app `{}` ({}) would take over what the folder did not create:\n{}\nnothing was deployed: \
     add --accept to deploy the folder over it and keep that state, or give these programs \
     other names in berm.toml",
    .0.app,
    .0.dir.display(),
    .0.list()
)]
pub struct NotAccepted(pub Box<Takeover>);

/// `  program `NAME`: WHERE FROM; KEYSPACE; SECRETS`.
fn line(state: &NameState) -> String {
    let from = match &state.deployment {
        Some(deployed) => match &deployed.app_dir {
            Some(dir) => format!(
                "deployed from the app folder {} as {}",
                dir.display(),
                deployed.digest
            ),
            None => format!("deployed by a plain `berm deploy` as {}", deployed.digest),
        },
        None => "left by a removed deployment".into(),
    };
    let keyspace = match state.keyspace {
        Some(k) => format!(
            "keyspace: {} key{}, {} bytes",
            k.keys,
            if k.keys == 1 { "" } else { "s" },
            k.bytes
        ),
        None => "no keyspace".into(),
    };
    let secrets = match state.secrets.is_empty() {
        true => "no stored secrets".into(),
        false => format!("stored secrets: {}", state.secrets.join(", ")),
    };
    format!(
        "  program `{}`: {from}; {keyspace}; {secrets}",
        state.program
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DeployedFrom, KeyspaceSize};

    const DIGEST: &str = "sha256:00ff";

    fn state(app_dir: Option<&str>, deployed: bool, keys: u64, secrets: &[&str]) -> NameState {
        NameState {
            program: "notes".into(),
            deployment: deployed.then(|| DeployedFrom {
                digest: DIGEST.into(),
                app_dir: app_dir.map(PathBuf::from),
            }),
            keyspace: (keys > 0).then_some(KeyspaceSize {
                keys,
                bytes: keys * 40,
            }),
            secrets: secrets.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn refusal(states: Vec<NameState>) -> String {
        let mut takeover = Takeover::new("notes", Path::new("/apps/notes"));
        takeover.programs = states;
        takeover.check(false).unwrap_err().to_string()
    }

    #[test]
    fn the_same_folder_and_a_free_name_take_over_nothing() {
        let dir = Path::new("/apps/notes");
        for leftovers in [Leftovers::Foreign, Leftovers::Own] {
            let same = state(Some("/apps/notes"), true, 3, &["TOKEN"]);
            assert_eq!(inherited(&same, dir, &[], leftovers), None);
            assert_eq!(inherited(&NameState::default(), dir, &[], leftovers), None);
        }
        // State with no deployment: the folder's own under bermd --app, and nothing but
        // secrets the folder sets itself counts for nothing either.
        let left = state(None, false, 3, &["TOKEN"]);
        assert_eq!(inherited(&left, dir, &[], Leftovers::Own), None);
        let only_set = state(None, false, 0, &["TOKEN"]);
        assert_eq!(
            inherited(&only_set, dir, &["TOKEN"], Leftovers::Foreign),
            None
        );
    }

    #[test]
    fn another_folder_a_plain_deploy_or_leftovers_are_taken_over() {
        let dir = Path::new("/apps/notes");
        let plain = state(None, true, 0, &[]);
        assert_eq!(
            inherited(&plain, dir, &[], Leftovers::Own),
            Some(plain.clone())
        );
        let other = state(Some("/apps/other"), true, 2, &["TOKEN", "KEY"]);
        let taken = inherited(&other, dir, &["KEY"], Leftovers::Foreign).unwrap();
        assert_eq!(taken.secrets, ["TOKEN"]);
        let left = state(None, false, 1, &[]);
        assert_eq!(
            inherited(&left, dir, &[], Leftovers::Foreign),
            Some(left.clone())
        );
    }

    #[test]
    fn the_refusal_lists_every_program_and_says_both_ways_out() {
        let mut other = state(Some("/apps/other"), true, 2, &["TOKEN"]);
        other.program = "tags".into();
        let mut left = state(None, false, 1, &["KEY", "TOKEN"]);
        left.program = "todo".into();
        assert_eq!(
            refusal(vec![state(None, true, 0, &[]), other, left]),
            "app `notes` (/apps/notes) would take over what the folder did not create:\n  \
             program `notes`: deployed by a plain `berm deploy` as sha256:00ff; no keyspace; \
             no stored secrets\n  \
             program `tags`: deployed from the app folder /apps/other as sha256:00ff; keyspace: \
             2 keys, 80 bytes; stored secrets: TOKEN\n  \
             program `todo`: left by a removed deployment; keyspace: 1 key, 40 bytes; stored \
             secrets: KEY, TOKEN\n\
             nothing was deployed: add --accept to deploy the folder over it and keep that \
             state, or give these programs other names in berm.toml"
        );
    }

    #[test]
    fn accept_admits_the_list_and_prints_it() {
        let mut takeover = Takeover::new("notes", Path::new("/apps/notes"));
        assert!(takeover.clone().check(false).is_ok(), "nothing to accept");
        takeover.programs.push(state(None, true, 0, &[]));
        let accepted = takeover.check(true).unwrap();
        assert_eq!(
            accepted.notice(),
            "app `notes` (/apps/notes): --accept: taking over what the folder did not create:\n  \
             program `notes`: deployed by a plain `berm deploy` as sha256:00ff; no keyspace; no \
             stored secrets"
        );
    }
}
