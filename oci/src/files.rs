//! Pushing from and pulling into files: what `berm push FILE` and `berm pull -o FILE` do
//! beyond the registry exchange, with typed options (the CLI owns the flags).

use std::path::Path;

use crate::MAX_PROGRAM_BYTES;
use crate::error::{PullError, PushError};
use crate::pull::{Pulled, pull};
use crate::push::{Pushed, push};
use crate::registry::{RegistryOptions, parse_reference};

/// Reads the module at `file`, refuses one larger than [`MAX_PROGRAM_BYTES`] before reading
/// it, and pushes it to `reference`.
///
/// # Errors
/// [`PushError::ReadFile`] or [`PushError::TooLarge`] for the file; otherwise see [`push`].
pub async fn push_file(
    reference: &str,
    file: &Path,
    options: &RegistryOptions,
) -> Result<Pushed, PushError> {
    let read_error = |source| PushError::ReadFile {
        path: file.to_path_buf(),
        source,
    };
    let size = std::fs::metadata(file).map_err(read_error)?.len();
    if size > MAX_PROGRAM_BYTES {
        return Err(PushError::TooLarge {
            what: file.display().to_string(),
            size,
            cap: MAX_PROGRAM_BYTES,
        });
    }
    let bytes = std::fs::read(file).map_err(read_error)?;
    push(reference, &bytes, &file.display().to_string(), options).await
}

/// Pulls and verifies `reference`, then writes the module to `output` atomically.
///
/// # Errors
/// See [`pull`], and [`PullError::Write`]; on any error `output` is left as it was.
pub async fn pull_to(
    reference: &str,
    output: &Path,
    options: &RegistryOptions,
) -> Result<Pulled, PullError> {
    let pulled = pull(reference, options).await?;
    berm_durable::write_atomic(output, &pulled.bytes).map_err(|source| PullError::Write {
        path: output.to_path_buf(),
        source,
    })?;
    Ok(pulled)
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
