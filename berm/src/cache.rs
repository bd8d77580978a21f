//! Compiled code on disk: the writable cache a restart deploys from without
//! compiling, and the read-only directory of precompiled code a microVM's
//! bermd is given.
//!
//! Files are `<digest hex>-<engine fingerprint>.cwasm` in both. The
//! fingerprint is a sha256 of Wasmtime's own compatibility hash, so code
//! compiled with other settings, for another target or by another Wasmtime
//! is never looked at.

use std::fs;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

use sha2::{Digest as _, Sha256};

use crate::{DeployError, Digest};

/// Compiled code of a program: a core module or a component.
#[derive(Clone)]
pub(crate) enum Compiled {
    Module(wasmtime::Module),
    Component(wasmtime::component::Component),
}

impl Compiled {
    /// The bytes a `.cwasm` file holds.
    pub fn serialize(&self) -> wasmtime::Result<Vec<u8>> {
        match self {
            Compiled::Module(module) => module.serialize(),
            Compiled::Component(component) => component.serialize(),
        }
    }
}

/// One directory of compiled code.
pub(crate) struct CodeCache {
    dir: PathBuf,
    fingerprint: String,
    /// Whether berm owns the directory: it stores code there and removes
    /// files Wasmtime refuses. A read-only (precompiled) directory is only
    /// read; a refused file there is logged and skipped.
    writable: bool,
}

/// The fingerprint of the code `engine` compiles and loads.
pub(crate) fn fingerprint(engine: &wasmtime::Engine) -> String {
    let mut hasher = Sha256Hasher(Sha256::new());
    engine.precompile_compatibility_hash().hash(&mut hasher);
    hex::encode(&hasher.0.finalize()[..8])
}

/// The file name of `digest`'s code for an engine with `fingerprint`.
pub(crate) fn file_name(digest: &Digest, fingerprint: &str) -> String {
    format!("{}-{fingerprint}.cwasm", digest.hex())
}

/// Feeds `Hash` output into sha256, so the fingerprint is stable across
/// processes (std's hashers are seeded per process).
struct Sha256Hasher(Sha256);

impl Hasher for Sha256Hasher {
    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    fn finish(&self) -> u64 {
        let digest = self.0.clone().finalize();
        u64::from_le_bytes(digest[..8].try_into().unwrap_or([0; 8]))
    }
}

impl CodeCache {
    /// The writable cache in `dir`, for code of `fingerprint`.
    pub fn writable(dir: PathBuf, fingerprint: &str) -> CodeCache {
        CodeCache {
            dir,
            fingerprint: fingerprint.to_string(),
            writable: true,
        }
    }

    /// A read-only directory of precompiled code of `fingerprint`.
    pub fn read_only(dir: PathBuf, fingerprint: &str) -> CodeCache {
        CodeCache {
            dir,
            fingerprint: fingerprint.to_string(),
            writable: false,
        }
    }

    pub fn path(&self, digest: &Digest) -> PathBuf {
        self.dir.join(file_name(digest, &self.fingerprint))
    }

    /// The module stored for `digest`, if there is a usable one. A file that
    /// Wasmtime refuses is removed from a writable cache (a fresh compile
    /// replaces it) and left alone in a read-only directory; either way it
    /// is logged and the caller goes on to the next source.
    pub fn load(
        &self,
        engine: &wasmtime::Engine,
        digest: &Digest,
        component: bool,
    ) -> Option<Compiled> {
        let path = self.path(digest);
        if !path.exists() {
            return None;
        }
        let loaded = match component {
            false => crate::sys::deserialize_file(engine, &path).map(Compiled::Module),
            true => crate::sys::deserialize_component_file(engine, &path).map(Compiled::Component),
        };
        match loaded {
            Ok(code) => Some(code),
            Err(e) if self.writable => {
                tracing::warn!(path = %path.display(), "discarding unusable compiled code: {e:#}");
                let _ = fs::remove_file(&path);
                None
            }
            Err(e) => {
                tracing::warn!(path = %path.display(), "skipping unusable precompiled code: {e:#}");
                None
            }
        }
    }

    /// Stores compiled code atomically (temp file, fsync, rename, fsync dir).
    ///
    /// # Errors
    /// [`DeployError::Cache`] when the code cannot be serialized or written.
    pub fn store(&self, digest: &Digest, module: &Compiled) -> Result<(), DeployError> {
        let err = |path: &Path, message: String| DeployError::Cache {
            path: path.to_path_buf(),
            message,
        };
        let bytes = module
            .serialize()
            .map_err(|e| err(&self.dir, format!("could not serialize compiled code: {e}")))?;
        fs::create_dir_all(&self.dir).map_err(|e| err(&self.dir, e.to_string()))?;
        let path = self.path(digest);
        berm_durable::write_atomic(&path, &bytes).map_err(|e| err(&path, e.to_string()))?;
        Ok(())
    }
}
