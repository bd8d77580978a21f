//! Signatures that held for a program in a program store, kept beside it with the repository
//! they were found in, so that whatever uses the stored program later is held to the policy
//! and keys in force *then*, without asking a registry.
//!
//! A record is the signature itself (payload and signature, as the registry stored them), not
//! a verdict: it is verified again, against the keys required now, every time it is used. So
//! a key dropped from the policy or replaced by another no longer passes, and a record edited
//! by hand proves nothing without the signer's private key. Each record names the normalised
//! `registry/repository` ([`PolicyName`]) whose `.sig` tag held it, and only satisfies a
//! requirement for that same name: a program stored under one reference never passes for
//! another, even when the bytes are the same.

use std::io::Read;
use std::path::Path;

use base64::Engine;
use berm_oci::StoredSignature;

use crate::verify::check;
use crate::{PolicyName, Signer, SigningError, Verified};

/// Largest record file read; a record is under a few kilobytes.
const MAX_BYTES: u64 = 1 << 20;

/// Most signatures kept per program; the oldest go first.
const MAX_RECORDS: usize = 64;

/// The signatures recorded for one stored program.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Provenance {
    signatures: Vec<Recorded>,
}

/// One signature, where it was found, as it was stored.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Recorded {
    /// The normalised `registry/repository` whose `.sig` tag held it.
    repository: String,
    /// The signature layer's digest, which names it.
    layer_digest: String,
    /// The simple-signing payload, base64.
    payload: String,
    /// The signature over the payload, base64, as stored.
    signature: String,
    /// The key that verified it when it was recorded (`sha256:` of its public half). Only
    /// information: the signature is verified again against the keys required each time.
    key: String,
}

impl Provenance {
    /// Reads the record at `path`; empty when there is none.
    ///
    /// # Errors
    /// [`SigningError::Provenance`] when it cannot be read, is too large or does not parse.
    pub fn load(path: &Path) -> Result<Provenance, SigningError> {
        let bad = |message: String| SigningError::Provenance {
            path: path.to_path_buf(),
            message,
        };
        let mut bytes = Vec::new();
        match std::fs::File::open(path) {
            Ok(file) => file
                .take(MAX_BYTES + 1)
                .read_to_end(&mut bytes)
                .map_err(|e| bad(format!("cannot read it: {e}")))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(Provenance::default());
            }
            Err(e) => return Err(bad(format!("cannot read it: {e}"))),
        };
        if bytes.len() as u64 > MAX_BYTES {
            return Err(bad(format!("it is larger than {MAX_BYTES} bytes")));
        }
        serde_json::from_slice(&bytes).map_err(|e| bad(format!("it does not parse: {e}")))
    }

    /// Writes the record to `path` atomically (temporary file, sync, rename).
    ///
    /// # Errors
    /// [`SigningError::Provenance`] when it cannot be written; the old record is left whole.
    pub fn save(&self, path: &Path) -> Result<(), SigningError> {
        let bytes = serde_json::to_vec_pretty(self).map_err(|e| SigningError::Provenance {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        berm_durable::write_atomic(path, &bytes).map_err(|e| SigningError::Provenance {
            path: path.to_path_buf(),
            message: format!("cannot write it: {e}"),
        })
    }

    /// Records `verified`, found in the repository `name` names. The same signature found
    /// in the same repository is kept once.
    pub fn record(&mut self, name: &PolicyName, verified: &Verified) {
        let engine = base64::engine::general_purpose::STANDARD;
        let recorded = Recorded {
            repository: name.to_string(),
            layer_digest: verified.stored.layer_digest.clone(),
            payload: engine.encode(&verified.stored.payload),
            signature: verified.stored.signature.clone(),
            key: verified.key.clone(),
        };
        self.signatures.retain(|r| {
            (r.repository.as_str(), r.layer_digest.as_str())
                != (recorded.repository.as_str(), recorded.layer_digest.as_str())
        });
        self.signatures.push(recorded);
        if self.signatures.len() > MAX_RECORDS {
            self.signatures.drain(..self.signatures.len() - MAX_RECORDS);
        }
    }

    /// The first recorded signature that was found in the repository `name` names, was made
    /// by one of `signer`'s keys and names `manifest_digest`; `None` when none holds, so the
    /// registry must be asked.
    pub fn verified_by(
        &self,
        name: &PolicyName,
        manifest_digest: &str,
        signer: &Signer,
    ) -> Option<Verified> {
        let repository = name.to_string();
        let engine = base64::engine::general_purpose::STANDARD;
        self.signatures
            .iter()
            .filter(|r| r.repository == repository)
            .find_map(|r| {
                let stored = StoredSignature {
                    payload: engine.decode(&r.payload).ok()?,
                    signature: r.signature.clone(),
                    layer_digest: r.layer_digest.clone(),
                };
                check(manifest_digest, &stored, &signer.keys).ok()
            })
    }
}
