//! The signed record: at the end of a run berm-vmm builds the run's record from `vmm.jsonl`
//! (berm-attest) and signs it with the host key, writing `<run-dir>/record.dsse.json`.
//!
//! The key is loaded — or created, on first use — before anything boots: berm-vmm confines
//! itself later (Landlock grants it the run dir, not the user's config dir), and a run that
//! could not be signed should be refused before it starts, not discovered afterwards.
//! Signing comes after the `exit` line, so the signed record says how the run ended.

use std::path::{Path, PathBuf};

use berm_attest::Record;
use berm_attest::dsse::{self, ENVELOPE_FILE, HostKey, KeyError};

/// Why the record could not be signed.
#[derive(Debug, thiserror::Error)]
pub enum SignError {
    /// The run dir holds no record (the run stopped before berm-vmm measured anything).
    #[error(transparent)]
    Record(#[from] berm_attest::BuildError),
    /// The envelope could not be written.
    #[error("writing the signed record {path} failed")]
    Write {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

/// The host key (`--key FILE`, else the user's berm config dir), created on first use.
pub fn host_key(path: Option<&Path>) -> Result<HostKey, KeyError> {
    HostKey::load_or_create(path)
}

/// What was signed.
#[derive(Debug)]
pub struct Signed {
    /// `<run-dir>/record.dsse.json`.
    pub path: PathBuf,
    /// The signed record's `record_sha256`.
    pub record_sha256: String,
    /// The signing key's id.
    pub key_id: String,
}

/// Builds the record of the run in `run_dir` and writes it signed beside `vmm.jsonl`.
pub fn sign_run(key: &HostKey, run_dir: &Path) -> Result<Signed, SignError> {
    let record = Record::from_run_dir(run_dir)?;
    let envelope = dsse::sign(key, &record);
    let path = run_dir.join(ENVELOPE_FILE);
    dsse::write_envelope(&envelope, &path).map_err(|source| SignError::Write {
        path: path.clone(),
        source,
    })?;
    Ok(Signed {
        path,
        record_sha256: record.record_sha256,
        key_id: dsse::key_id(&key.public()),
    })
}
