//! The on-disk compiled-code cache: a restart deploys from it without
//! compiling.
//!
//! Files are `<digest hex>-<engine fingerprint>.cwasm`. The fingerprint is a
//! sha256 of Wasmtime's own compatibility hash, so code compiled with other
//! settings or another Wasmtime is never looked at.

use std::fs;
use std::hash::{Hash, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};

use sha2::{Digest as _, Sha256};

use crate::{DeployError, Digest};

pub(crate) struct CodeCache {
    dir: PathBuf,
    fingerprint: String,
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
    pub fn new(dir: PathBuf, engine: &wasmtime::Engine) -> CodeCache {
        let mut hasher = Sha256Hasher(Sha256::new());
        engine.precompile_compatibility_hash().hash(&mut hasher);
        let fingerprint = hex::encode(&hasher.0.finalize()[..8]);
        CodeCache { dir, fingerprint }
    }

    pub fn path(&self, digest: &Digest) -> PathBuf {
        self.dir
            .join(format!("{}-{}.cwasm", digest.hex(), self.fingerprint))
    }

    /// The cached module, if there is a usable one. A file that Wasmtime
    /// refuses is removed so that it is replaced by a fresh compile.
    pub fn load(&self, engine: &wasmtime::Engine, digest: &Digest) -> Option<wasmtime::Module> {
        let path = self.path(digest);
        if !path.exists() {
            return None;
        }
        match crate::sys::deserialize_file(engine, &path) {
            Ok(module) => Some(module),
            Err(e) => {
                tracing::warn!(path = %path.display(), "discarding unusable compiled code: {e}");
                let _ = fs::remove_file(&path);
                None
            }
        }
    }

    /// Stores compiled code atomically (temp file, fsync, rename, fsync dir).
    pub fn store(&self, digest: &Digest, module: &wasmtime::Module) -> Result<(), DeployError> {
        let err = |path: &Path, message: String| DeployError::Cache {
            path: path.to_path_buf(),
            message,
        };
        let bytes = module
            .serialize()
            .map_err(|e| err(&self.dir, format!("could not serialize compiled code: {e}")))?;
        fs::create_dir_all(&self.dir).map_err(|e| err(&self.dir, e.to_string()))?;
        let path = self.path(digest);
        let mut tmp = tempfile::NamedTempFile::new_in(&self.dir)
            .map_err(|e| err(&self.dir, e.to_string()))?;
        tmp.write_all(&bytes)
            .and_then(|()| tmp.as_file().sync_all())
            .map_err(|e| err(tmp.path(), e.to_string()))?;
        tmp.persist(&path)
            .map_err(|e| err(&path, e.error.to_string()))?;
        if let Ok(dir) = fs::File::open(&self.dir) {
            let _ = dir.sync_all();
        }
        Ok(())
    }
}
