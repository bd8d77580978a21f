//! What an app folder offered the last time bermd served it from this home, so that a folder
//! that changed between two starts cannot silently change a tool.
//!
//! `berm deploy` compares a new version with the running one before it lands. A folder that
//! bermd loads itself (`bermd --app DIR`, and so every app of a microVM, whose home is on the
//! state disk) has no running version to compare with: what ran is gone with the last bermd.
//! So bermd keeps one record per app in its home (`apps/<app>.json`, written through a rename
//! once the folder's programs are deployed), and at the next start compares each program's
//! manifest and grants with it ([`berm_manifest::upgrade::compare`], the comparison `berm
//! deploy` and `berm diff` make). A change that needs acceptance stops bermd before anything
//! is deployed, unless `--accept` or the program's `accept = "sha256:…"` in berm.toml names
//! exactly these bytes. A first start (no record) has nothing to compare with and needs none.

use std::path::{Path, PathBuf};
use std::str::FromStr;

use berm_app::App;
use berm_control::Grant;
use berm_manifest::Manifest;
use berm_manifest::upgrade::compare;
use serde::{Deserialize, Serialize};

use crate::home::{Home, HomeError};

/// The record's format, checked on read: another format is refused rather than guessed at.
const FORMAT: &str = "berm-app-record/1";

/// Why an app's record could not be checked or kept.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// The record exists but is not one bermd wrote.
    #[error(
        "app `{app}`: the record of what it offered when it last ran here, {}, cannot be read ({reason}); nothing was started: remove the file to take the folder as it is now",
        path.display()
    )]
    Unreadable {
        /// The app.
        app: String,
        /// The record.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The folder changed what the model reads or what a program may reach.
    #[error(
        "app `{app}` ({}) changed since it last ran here (recorded in {}): what the model reads or what a program may reach is not what it was; nothing was started:\n{}\nReview it, then start again with --accept, or record the acceptance in berm.toml (`accept = \"sha256:…\"` in the program's [[program]]).",
        dir.display(),
        record.display(),
        changes.join("\n")
    )]
    NotAccepted {
        /// The app.
        app: String,
        /// Its folder.
        dir: PathBuf,
        /// The record.
        record: PathBuf,
        /// Each change that needs acceptance, one line each.
        changes: Vec<String>,
    },
    /// The new record could not be written.
    #[error("app `{app}`: could not keep the record of what it offers")]
    Write {
        /// The app.
        app: String,
        /// Why.
        #[source]
        source: HomeError,
    },
}

/// One app's record, as kept in `apps/<app>.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Record {
    format: String,
    app: String,
    programs: Vec<RecordedProgram>,
}

/// What one program offered: its bytes' sha256, its manifest and its grants as text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct RecordedProgram {
    name: String,
    sha256: String,
    grants: Vec<String>,
    manifest: Manifest,
}

/// An app whose folder was judged against its record: the changes found, and the record to
/// keep once its programs are deployed ([`Checked::keep`]).
#[derive(Debug)]
pub struct Checked {
    app: String,
    path: PathBuf,
    /// The record to write: `None` when it is already on disk, or when a program could not
    /// be measured (its deploy refuses it).
    record: Option<Record>,
    /// Every change from the record, accepted or narrower, one line each, to print.
    pub changes: Vec<String>,
}

impl Checked {
    /// Writes the record of what the folder offers now, replacing the last one (unless it is
    /// the same).
    ///
    /// # Errors
    /// [`RecordError::Write`] when the file cannot be written.
    pub fn keep(&self) -> Result<(), RecordError> {
        let Some(record) = &self.record else {
            return Ok(());
        };
        let fail = |source| RecordError::Write {
            app: self.app.clone(),
            source,
        };
        if let Some(dir) = self.path.parent() {
            crate::home::create_private_dir(dir).map_err(fail)?;
        }
        // Plain strings, numbers and JSON values: serializing cannot fail.
        let bytes = serde_json::to_vec_pretty(record).unwrap_or_default();
        crate::home::write_atomic(&self.path, &bytes).map_err(fail)
    }
}

/// Where `home` keeps the record of the app named `app`.
pub fn path(home: &Home, app: &str) -> PathBuf {
    home.root().join("apps").join(format!("{app}.json"))
}

/// Judges `app` against what it offered when it last ran from `home`: the changes that need
/// acceptance refuse it unless `accept` or its berm.toml `accept` names the new bytes.
///
/// # Errors
/// [`RecordError::NotAccepted`] with every such change; [`RecordError::Unreadable`] for a
/// record bermd did not write.
pub fn check(home: &Home, app: &App, accept: bool) -> Result<Checked, RecordError> {
    let path = path(home, &app.name);
    // A program that cannot be read or has no manifest is refused by the deploy that follows,
    // with its own words; there is nothing to judge or record.
    let Some(now) = measure(home, app) else {
        return Ok(Checked {
            app: app.name.clone(),
            path,
            record: None,
            changes: Vec::new(),
        });
    };
    let was = read(&path, &app.name)?;
    let mut changes = Vec::new();
    let mut needing = Vec::new();
    if let Some(was) = &was {
        for gone in was
            .programs
            .iter()
            .filter(|p| !now.programs.iter().any(|n| n.name == p.name))
        {
            needing.push(format!("  program `{}` removed", gone.name));
        }
        for (program, recorded) in app.programs.iter().zip(&now.programs) {
            let Some(before) = was.programs.iter().find(|p| p.name == recorded.name) else {
                let line = format!("  program `{}` added", recorded.name);
                match program.accept.as_deref() == Some(recorded.sha256.as_str()) {
                    true => changes.push(format!("{line} (accepted in berm.toml)")),
                    false => needing.push(line),
                }
                continue;
            };
            if before.sha256 == recorded.sha256 && before.grants == recorded.grants {
                continue;
            }
            let grants = |texts: &[String]| -> Result<Vec<Grant>, RecordError> {
                texts
                    .iter()
                    .map(|text| {
                        Grant::from_str(text).map_err(|e| RecordError::Unreadable {
                            app: app.name.clone(),
                            path: path.clone(),
                            reason: format!("grant {text:?}: {e}"),
                        })
                    })
                    .collect()
            };
            let (old_grants, new_grants) = (grants(&before.grants)?, grants(&recorded.grants)?);
            let found = compare(
                &before.manifest,
                &recorded.manifest,
                Some((&old_grants, &new_grants)),
            );
            let in_toml = program.accept.as_deref() == Some(recorded.sha256.as_str());
            let refused_before = needing.len();
            for change in found {
                let line = format!("  program `{}`: {change}", recorded.name);
                match (change.needs_acceptance(), in_toml) {
                    (false, _) => changes.push(format!("{line} (narrower)")),
                    (true, true) => changes.push(format!("{line} (accepted in berm.toml)")),
                    (true, false) => needing.push(line),
                }
            }
            if let Some(other) = program.accept.as_deref()
                && needing.len() > refused_before
            {
                needing.push(format!(
                    "  (berm.toml's `accept` for `{}` names sha256:{other}, not this version, sha256:{})",
                    recorded.name, recorded.sha256
                ));
            }
        }
    }
    if !needing.is_empty() {
        if !accept {
            return Err(RecordError::NotAccepted {
                app: app.name.clone(),
                dir: app.dir.clone(),
                record: path,
                changes: needing,
            });
        }
        changes.extend(needing.into_iter().map(|line| format!("{line} (--accept)")));
    }
    // An unchanged folder's record is already right: no write (and no fsync) at start.
    let record = (was.as_ref() != Some(&now)).then_some(now);
    Ok(Checked {
        app: app.name.clone(),
        path,
        record,
        changes,
    })
}

/// What `app` offers now: each program's sha256, manifest and grants (as bermd resolves them);
/// `None` when a program cannot be read or has no manifest.
fn measure(home: &Home, app: &App) -> Option<Record> {
    let mut programs = Vec::with_capacity(app.programs.len());
    for program in &app.programs {
        let bytes = program.read().ok()?;
        let manifest = Manifest::from_image(&bytes).ok()?;
        let mut grants: Vec<String> = program
            .resolve_grants(&home.app_data())
            .iter()
            .map(ToString::to_string)
            .collect();
        grants.sort();
        programs.push(RecordedProgram {
            name: program.name.clone(),
            sha256: berm_app::sha256_hex(&bytes),
            grants,
            manifest,
        });
    }
    Some(Record {
        format: FORMAT.to_owned(),
        app: app.name.clone(),
        programs,
    })
}

/// The record at `path`, `None` when there is none yet.
fn read(path: &Path, app: &str) -> Result<Option<Record>, RecordError> {
    let unreadable = |reason: String| RecordError::Unreadable {
        app: app.to_owned(),
        path: path.to_path_buf(),
        reason,
    };
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(unreadable(e.to_string())),
    };
    let record: Record = serde_json::from_slice(&bytes).map_err(|e| unreadable(e.to_string()))?;
    if record.format != FORMAT || record.app != app {
        return Err(unreadable(format!(
            "it is a {:?} record of app {:?}, not a {FORMAT} record of app {app:?}",
            record.format, record.app
        )));
    }
    Ok(Some(record))
}
