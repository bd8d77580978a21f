//! The command-line surface of distribution, as clap argument structs and
//! the functions that run them, so that the `berm` binary wires
//! `berm push`, `berm pull` and the pull inside `berm deploy NAME REF` in a
//! few lines and every behaviour stays testable here.
//!
//! ```text
//! berm push REF FILE [--insecure]
//! berm pull REF -o FILE [--insecure]
//! berm deploy NAME REF      # the CLI calls `fetch_for_deploy`, then hands bermd the bytes
//! ```

use std::path::PathBuf;

use crate::error::{PullError, PushError};
use crate::pull::Pulled;
use crate::push::Pushed;
use crate::registry::{RegistryOptions, parse_reference};
use crate::{MAX_PROGRAM_BYTES, file};

/// Options shared by every command that talks to a registry.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct RegistryArgs {
    /// Speak plain HTTP to a registry that is not on this machine's loopback
    /// (loopback registries are always spoken to over HTTP). Credentials and
    /// bytes then cross the network in the clear; pulled bytes are still
    /// verified against their digests.
    #[arg(long)]
    pub insecure: bool,
}

impl RegistryArgs {
    /// The options these flags and the environment select
    /// (`BERM_REGISTRY_USER`, `BERM_REGISTRY_PASSWORD`, `DOCKER_CONFIG`).
    pub fn options(&self) -> RegistryOptions {
        RegistryOptions::from_environment(self.insecure)
    }
}

/// `berm push REF FILE`: publish a program to a registry.
#[derive(Debug, Clone, clap::Args)]
pub struct PushArgs {
    /// Where to push, e.g. `ghcr.io/org/echo:v1` or `127.0.0.1:5000/echo:v1`.
    #[arg(value_name = "REF")]
    pub reference: String,
    /// The program: a `.wasm` module built with berm-guest.
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// Registry access.
    #[command(flatten)]
    pub registry: RegistryArgs,
}

/// `berm pull REF -o FILE`: fetch a program and write it, verified.
#[derive(Debug, Clone, clap::Args)]
pub struct PullArgs {
    /// What to pull: `host/repo:tag` or `host/repo@sha256:<manifest digest>`.
    #[arg(value_name = "REF")]
    pub reference: String,
    /// Where to write the module; replaced atomically, untouched on failure.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: PathBuf,
    /// Registry access.
    #[command(flatten)]
    pub registry: RegistryArgs,
}

/// Runs `berm push`: reads the file, refuses a module that would not
/// deploy, pushes it. Print the returned [`Pushed`] (its `Display` is the
/// command's output).
///
/// # Errors
/// See [`PushError`].
pub async fn push(args: &PushArgs) -> Result<Pushed, PushError> {
    let read_error = |source| PushError::ReadFile {
        path: args.file.clone(),
        source,
    };
    let size = std::fs::metadata(&args.file).map_err(read_error)?.len();
    if size > MAX_PROGRAM_BYTES {
        return Err(PushError::TooLarge {
            what: args.file.display().to_string(),
            size,
            cap: MAX_PROGRAM_BYTES,
        });
    }
    let bytes = std::fs::read(&args.file).map_err(read_error)?;
    let what = args.file.display().to_string();
    crate::push(&args.reference, &bytes, &what, &args.registry.options()).await
}

/// Runs `berm pull`: pulls and verifies, then writes the file atomically.
/// Print the returned [`Pulled`].
///
/// # Errors
/// See [`PullError`]; on any error the output file is left as it was.
pub async fn pull(args: &PullArgs) -> Result<Pulled, PullError> {
    let pulled = crate::pull(&args.reference, &args.registry.options()).await?;
    file::write_atomic(&args.output, &pulled.bytes).map_err(|source| PullError::Write {
        path: args.output.clone(),
        source,
    })?;
    Ok(pulled)
}

/// The pull inside `berm deploy NAME REF`: returns verified bytes for the
/// CLI to hand to bermd (which never talks to a registry). Deploy should
/// send `pulled.bytes` and may show `pulled.described.pinned`.
///
/// # Errors
/// See [`PullError`].
pub async fn fetch_for_deploy(
    reference: &str,
    registry: &RegistryArgs,
) -> Result<Pulled, PullError> {
    crate::pull(reference, &registry.options()).await
}

/// Whether `berm deploy NAME ARG` means a registry reference rather than a
/// file. An existing path is always a file, and so is anything that looks
/// like one (starts with `.` or `/`, ends with `.wasm`), so that a mistyped
/// path is reported as a missing file rather than looked up on Docker Hub;
/// otherwise anything with a `/` that parses as a reference is one.
pub fn is_reference(arg: &str) -> bool {
    let looks_like_a_path = arg.starts_with(['.', '/']) || arg.ends_with(".wasm");
    !looks_like_a_path
        && !std::path::Path::new(arg).exists()
        && arg.contains('/')
        && parse_reference(arg).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    enum Cmd {
        Push(PushArgs),
        Pull(PullArgs),
    }

    #[test]
    fn flags_parse() {
        let Cmd::Pull(p) = Cmd::parse_from(["t", "pull", "h/r:t", "-o", "x.wasm", "--insecure"])
        else {
            panic!("not pull")
        };
        assert!(p.registry.insecure);
        assert_eq!(p.output, PathBuf::from("x.wasm"));
        let Cmd::Push(p) = Cmd::parse_from(["t", "push", "h/r:t", "f.wasm"]) else {
            panic!("not push")
        };
        assert!(!p.registry.insecure);
        assert_eq!(p.reference, "h/r:t");
    }

    #[test]
    fn references_and_files() {
        assert!(is_reference("127.0.0.1:5000/echo:v1"));
        assert!(is_reference("ghcr.io/org/echo:v1"));
        assert!(is_reference(&format!(
            "127.0.0.1:5000/echo@sha256:{}",
            "a".repeat(64)
        )));
        for path in [
            "echo.wasm",
            "./missing",
            "/abs/missing",
            "target/missing/echo.wasm",
        ] {
            assert!(!is_reference(path), "{path}");
        }
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("a.wasm");
        std::fs::write(&f, b"").unwrap();
        assert!(!is_reference(f.to_str().unwrap()));
    }
}
