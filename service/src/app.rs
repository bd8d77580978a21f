//! App folders (`bermd --app DIR`): every program of a folder deployed at
//! start with its grants and bounds, and the ready line a supervisor waits
//! for (`--ready-fd`).
//!
//! The folder is read where it is (read-only, never copied into the store):
//! its programs are deployed without a record, so they exist exactly while
//! bermd runs with that folder. berm-init reads the ready line to emit
//! `app_ready`; readiness is never guessed from logs.

use std::io::Write;
use std::os::fd::OwnedFd;
use std::time::Instant;

use berm_app::App;
use berm_control::inherit::{Leftovers, Takeover};
use berm_control::{Grant, LimitsSpec};

use crate::service::{InstallError, Service, StateError};

/// Why an app's program could not be deployed.
#[derive(Debug, thiserror::Error)]
pub enum AppDeployError {
    /// The program's wasm file could not be read.
    #[error("app `{app}`: {source}")]
    Read {
        /// The app.
        app: String,
        /// Why (boxed: it is large and this path is cold).
        source: Box<berm_app::AppError>,
    },
    /// The directory an `fs` grant points at could not be created.
    #[error("app `{app}`: program `{program}`: cannot create {}: {source}", dir.display())]
    FsDir {
        /// The app.
        app: String,
        /// The program.
        program: String,
        /// The directory.
        dir: std::path::PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// bermd refused the program.
    #[error("app `{app}`: program `{program}` ({}) was not deployed", wasm.display())]
    Deploy {
        /// The app.
        app: String,
        /// The program.
        program: String,
        /// Its wasm file.
        wasm: std::path::PathBuf,
        /// Why (boxed: it is large and this path is cold).
        #[source]
        source: Box<InstallError>,
    },
}

/// Why several app folders cannot run in one bermd.
#[derive(Debug, thiserror::Error)]
pub enum AppsError {
    /// Two folders have the same name (tag).
    #[error("two app folders are named `{name}` ({} and {}): an app's name must be unique", first.display(), second.display())]
    SameName {
        /// The name.
        name: String,
        /// One folder.
        first: std::path::PathBuf,
        /// The other.
        second: std::path::PathBuf,
    },
    /// Two folders deploy a program under the same name.
    #[error(
        "apps `{first}` and `{second}` both have a program named `{program}`: one would replace the other"
    )]
    SameProgram {
        /// The program.
        program: String,
        /// One app.
        first: String,
        /// The other.
        second: String,
    },
}

/// Checks that `apps` can run side by side in one bermd: distinct app names
/// and no program name in two of them.
pub fn check_distinct(apps: &[App]) -> Result<(), AppsError> {
    let mut names = std::collections::HashMap::new();
    let mut programs = std::collections::HashMap::new();
    for app in apps {
        if let Some(first) = names.insert(app.name.as_str(), &app.dir) {
            return Err(AppsError::SameName {
                name: app.name.clone(),
                first: first.clone(),
                second: app.dir.clone(),
            });
        }
        for program in &app.programs {
            if let Some(first) = programs.insert(program.name.as_str(), app.name.as_str()) {
                return Err(AppsError::SameProgram {
                    program: program.name.clone(),
                    first: first.to_string(),
                    second: app.name.clone(),
                });
            }
        }
    }
    Ok(())
}

/// What the folders would take over from deployments stored in `service`'s home, one
/// [`Takeover`] per folder with something in it. bermd records nothing for a folder's
/// programs, so state with no deployment behind it was left by this folder's earlier runs
/// ([`Leftovers::Own`]); what counts is a stored deployment (a plain `berm deploy`, or
/// `berm deploy --app` of another folder) under one of its program names.
///
/// # Errors
/// [`StateError`] when what a name holds cannot be read.
pub fn takeovers(service: &Service, apps: &[App]) -> Result<Vec<Takeover>, StateError> {
    let mut takeovers = Vec::new();
    for app in apps {
        let mut takeover = Takeover::new(&app.name, &app.dir);
        for program in &app.programs {
            // The folder's [program.secrets] files are read before stored values.
            let sets: Vec<&str> = program.secret_files.keys().map(String::as_str).collect();
            let state = service.name_state(&program.name)?;
            takeover.add(&state, &sets, Leftovers::Own);
        }
        if !takeover.is_empty() {
            takeovers.push(takeover);
        }
    }
    Ok(takeovers)
}

use berm_vm_protocol::host::CodeSource;
/// The ready line `--ready-fd` receives, typed once in berm-vm-protocol (berm-init reads it).
pub use berm_vm_protocol::host::{BermdReady as Ready, ReadyProgram as ProgramReady};

/// The one vocabulary for where a program's code came from, as the ready line says it: the
/// runtime's in-memory reuse counts as the cache.
fn code_source(source: berm::CompileSource) -> CodeSource {
    match source {
        berm::CompileSource::Precompiled => CodeSource::Precompiled,
        berm::CompileSource::Compiled => CodeSource::Compiled,
        berm::CompileSource::DiskCache | berm::CompileSource::Memory => CodeSource::Cache,
    }
}

/// Deploys every program of `app`, in order. The folder was checked whole
/// by [`berm_app::load`]; a program the runtime refuses stops here, naming
/// it.
pub fn deploy(service: &Service, app: &App) -> Result<Vec<ProgramReady>, AppDeployError> {
    let mut ready = Vec::with_capacity(app.programs.len());
    for program in &app.programs {
        let image = program.read().map_err(|source| AppDeployError::Read {
            app: app.name.clone(),
            source: Box::new(source),
        })?;
        let grants = program.resolve_grants(&service.home().app_data());
        for grant in &grants {
            if let Grant::Fs { dir, .. } = grant {
                std::fs::create_dir_all(dir).map_err(|source| AppDeployError::FsDir {
                    app: app.name.clone(),
                    program: program.name.clone(),
                    dir: dir.clone(),
                    source,
                })?;
            }
        }
        let limits = LimitsSpec {
            deadline_ms: app.call_deadline_ms,
            memory_bytes: program.memory_mb.map(|mb| mb << 20),
        };
        service.use_secret_files(&program.name, program.secret_files.clone());
        service
            .deploy_transient(
                &program.name,
                &image,
                grants,
                limits,
                program.serve_as.clone(),
            )
            .map_err(|source| AppDeployError::Deploy {
                app: app.name.clone(),
                program: program.name.clone(),
                wasm: program.wasm.clone(),
                source: Box::new(source),
            })?;
        // Deployed just above, and nothing else deploys or removes while
        // bermd starts, so the program is there.
        let info = service.berm().get(&program.name);
        let (code, ms) = match &info {
            Some(info) => (
                code_source(info.source),
                info.code_time.as_secs_f64() * 1000.0,
            ),
            None => (CodeSource::Compiled, 0.0),
        };
        tracing::info!(app = %app.name, program = %program.name, ?code, ms, "deployed from the app folder");
        // The code came from this file (read-only in the VM); hashing it again reads what was
        // mapped. An unreadable file reports no digest, which the verifier refuses.
        let code_sha256 = match &info {
            Some(info) if info.source == berm::CompileSource::Precompiled => service
                .berm()
                .precompiled_file(&info.digest)
                .and_then(|path| std::fs::read(path).ok())
                .map(|bytes| berm_app::sha256_hex(&bytes)),
            _ => None,
        };
        ready.push(ProgramReady {
            name: program.name.clone(),
            // The runtime hashed these bytes as it deployed them: under emulation in the
            // microVM every extra pass over a program costs milliseconds of boot.
            sha256: info
                .as_ref()
                .map_or_else(|| berm_app::sha256_hex(&image), |info| info.digest.hex()),
            code,
            code_sha256,
            ms,
        });
    }
    Ok(ready)
}

/// Writes `ready` as one JSON line to `fd` and closes it.
pub fn announce(fd: OwnedFd, ready: &Ready, started: Instant) -> std::io::Result<()> {
    let mut ready = ready.clone();
    ready.ms = started.elapsed().as_secs_f64() * 1000.0;
    // Serializing plain strings and numbers cannot fail.
    let mut line = serde_json::to_vec(&ready).unwrap_or_default();
    line.push(b'\n');
    let mut file = std::fs::File::from(fd);
    file.write_all(&line)
    // Dropping the file closes the descriptor: the reader sees EOF.
}

#[cfg(test)]
mod tests {
    use super::*;

    fn app(name: &str, programs: &[&str]) -> App {
        App {
            dir: std::path::PathBuf::from(format!("/apps/{name}")),
            name: name.to_string(),
            programs: programs
                .iter()
                .map(|p| berm_app::Program {
                    name: p.to_string(),
                    wasm: std::path::PathBuf::from(format!("/apps/{name}/{p}.wasm")),
                    wasm_relative: format!("{p}.wasm"),
                    image: None,
                    expected_sha256: None,
                    accept: None,
                    grants: Vec::new(),
                    memory_mb: None,
                    secret_files: Default::default(),
                    serve_as: Default::default(),
                })
                .collect(),
            limits: berm_app::Limits::default(),
            call_deadline_ms: None,
        }
    }

    #[test]
    fn apps_side_by_side_need_distinct_names_and_programs() {
        check_distinct(&[app("a", &["x", "y"]), app("b", &["z"])]).unwrap();
        let clash = check_distinct(&[app("a", &["x", "y"]), app("b", &["y"])]).unwrap_err();
        assert_eq!(
            clash.to_string(),
            "apps `a` and `b` both have a program named `y`: one would replace the other"
        );
        let clash = check_distinct(&[app("a", &["x"]), app("a", &["z"])]).unwrap_err();
        assert_eq!(
            clash.to_string(),
            "two app folders are named `a` (/apps/a and /apps/a): an app's name must be unique"
        );
    }
}
