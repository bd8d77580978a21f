//! Signed statements: an [in-toto Statement v1] in a [DSSE] envelope, signed with an ed25519
//! key kept as a PKCS#8 PEM file readable by its owner only.
//!
//! berm signs two kinds of statement with the same host key: the record of what a berm-vmm run
//! booted (berm-attest) and the receipts of the calls bermd served (berm-receipts). Both are
//! read by the supply-chain world's tools, which is why they use these shapes rather than a
//! format of berm's own.
//!
//! A valid signature proves that the holder of the key signed these bytes; it says nothing of
//! whether the holder was honest. docs/threat-model.md says what each signed statement proves.
//!
//! [DSSE]: https://github.com/secure-systems-lab/dsse/blob/master/protocol.md
//! [in-toto Statement v1]: https://github.com/in-toto/attestation/blob/main/spec/v1/statement.md
#![forbid(unsafe_code)]

mod canonical;

use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use ed25519_dalek::pkcs8::spki::der::pem::LineEnding;
use ed25519_dalek::pkcs8::{DecodePrivateKey, DecodePublicKey, EncodePrivateKey, EncodePublicKey};
use ed25519_dalek::{Signature, Signer as _, SigningKey};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest as _, Sha256};

pub use canonical::canonical_json;
pub use ed25519_dalek::VerifyingKey;

/// The DSSE payload type of an in-toto statement.
pub const PAYLOAD_TYPE: &str = "application/vnd.in-toto+json";
/// The in-toto Statement version berm writes.
pub const STATEMENT_TYPE: &str = "https://in-toto.io/Statement/v1";
/// The host key's file name in berm's config dir.
pub const KEY_FILE: &str = "host-key.pem";
/// A key file larger than this is refused rather than read.
const MAX_KEY_FILE: u64 = 16 << 10;

/// DSSE's pre-authentication encoding, the bytes actually signed (DSSE protocol v1,
/// "Signature definition"): `"DSSEv1" SP LEN(type) SP type SP LEN(body) SP body`, where LEN
/// is the byte length in ASCII decimal. Binding the type stops a payload being re-read as
/// another kind of document.
pub fn pae(payload_type: &str, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() + payload_type.len() + 32);
    out.extend_from_slice(b"DSSEv1 ");
    out.extend_from_slice(payload_type.len().to_string().as_bytes());
    out.push(b' ');
    out.extend_from_slice(payload_type.as_bytes());
    out.push(b' ');
    out.extend_from_slice(payload.len().to_string().as_bytes());
    out.push(b' ');
    out.extend_from_slice(payload);
    out
}

/// A DSSE envelope as serialized (`payload` and `sig` are standard base64).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Envelope {
    /// The payload, base64.
    pub payload: String,
    /// [`PAYLOAD_TYPE`].
    pub payload_type: String,
    /// One signature per key.
    pub signatures: Vec<EnvelopeSignature>,
}

/// One signature of an [`Envelope`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnvelopeSignature {
    /// [`key_id`] of the signing key (a hint; the verifier's key decides).
    #[serde(default)]
    pub keyid: String,
    /// The ed25519 signature over [`pae`], base64.
    pub sig: String,
}

/// The id berm gives a public key: sha256 of its SubjectPublicKeyInfo DER, lowercase hex.
pub fn key_id(key: &VerifyingKey) -> String {
    match key.to_public_key_der() {
        Ok(der) => hex::encode(Sha256::digest(der.as_bytes())),
        // Encoding 32 bytes into a fixed SPKI cannot fail; an empty id only weakens a hint.
        Err(_) => String::new(),
    }
}

/// Why the host key could not be had.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// No path was given and there is no config dir to put the key in.
    #[error("no place for the host key: set XDG_CONFIG_HOME or HOME, or give a key file")]
    NoConfigDir,
    /// The key file or its directory could not be read or created.
    #[error("host key {path}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// Others than the owner can read or write the private key.
    #[error(
        "host key {path} has mode {mode:o}; a private key must be readable by its owner only (chmod 600 {path})"
    )]
    Exposed {
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// The file is not what it should hold.
    #[error("{path} is not {what}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What it should be.
        what: &'static str,
        /// What the parser said.
        message: String,
    },
    /// No randomness for a new key.
    #[error("no randomness for a new host key: {0}")]
    Random(String),
}

/// The host's signing key: ed25519, a PKCS#8 PEM file of mode 0600.
pub struct HostKey {
    key: SigningKey,
    path: PathBuf,
}

impl HostKey {
    /// `$XDG_CONFIG_HOME/berm/host-key.pem`, else `~/.config/berm/host-key.pem`.
    pub fn default_path() -> Option<PathBuf> {
        let nonempty = |name| std::env::var_os(name).filter(|v| !v.is_empty());
        let config = nonempty("XDG_CONFIG_HOME")
            .map(PathBuf::from)
            .or_else(|| nonempty("HOME").map(|home| PathBuf::from(home).join(".config")))?;
        Some(config.join("berm").join(KEY_FILE))
    }

    /// The key at `path` (or [`HostKey::default_path`]), created on first use.
    pub fn load_or_create(path: Option<&Path>) -> Result<HostKey, KeyError> {
        let path = match path {
            Some(path) => path.to_owned(),
            None => Self::default_path().ok_or(KeyError::NoConfigDir)?,
        };
        let io = |path: &Path| {
            let path = path.to_owned();
            move |source| KeyError::Io { path, source }
        };
        match std::fs::symlink_metadata(&path) {
            Ok(meta) => {
                let mode = meta.permissions().mode() & 0o777;
                if mode & 0o077 != 0 {
                    return Err(KeyError::Exposed { path, mode });
                }
                let text = read_small(&path)?;
                let key = SigningKey::from_pkcs8_pem(&text).map_err(|e| KeyError::Parse {
                    path: path.clone(),
                    what: "an ed25519 private key (PKCS#8 PEM)",
                    message: e.to_string(),
                })?;
                Ok(HostKey { key, path })
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let mut seed = [0u8; 32];
                getrandom::fill(&mut seed).map_err(|e| KeyError::Random(e.to_string()))?;
                let key = SigningKey::from_bytes(&seed);
                let pem = key
                    .to_pkcs8_pem(LineEnding::LF)
                    .map_err(|e| KeyError::Random(e.to_string()))?;
                if let Some(dir) = path.parent() {
                    std::fs::DirBuilder::new()
                        .recursive(true)
                        .mode(0o700)
                        .create(dir)
                        .map_err(io(dir))?;
                }
                // Written whole under a temporary name, then linked into place: the link fails
                // if another first use got there first, and then its key (complete, since it
                // was linked only once written) is the key.
                let nonce = getrandom::u64().map_err(|e| KeyError::Random(e.to_string()))?;
                let tmp = path.with_extension(format!("tmp.{nonce:016x}"));
                let mut file = std::fs::File::options()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .open(&tmp)
                    .map_err(io(&tmp))?;
                file.write_all(pem.as_bytes())
                    .and_then(|()| file.sync_all())
                    .map_err(io(&tmp))?;
                let linked = std::fs::hard_link(&tmp, &path);
                let _ = std::fs::remove_file(&tmp);
                match linked {
                    Ok(()) => Ok(HostKey { key, path }),
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                        Self::load_or_create(Some(&path))
                    }
                    Err(e) => Err(io(&path)(e)),
                }
            }
            Err(e) => Err(io(&path)(e)),
        }
    }

    /// A key that lives in memory only, made now: for a signer whose public half is
    /// published elsewhere (a VM's bermd, whose key is in the boot's signed record), so that
    /// nothing on disk can sign for it after it is gone.
    pub fn ephemeral() -> Result<HostKey, KeyError> {
        let mut seed = [0u8; 32];
        getrandom::fill(&mut seed).map_err(|e| KeyError::Random(e.to_string()))?;
        Ok(HostKey {
            key: SigningKey::from_bytes(&seed),
            path: PathBuf::new(),
        })
    }

    /// Where the key is (empty for an [`HostKey::ephemeral`] one).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The public half.
    pub fn public(&self) -> VerifyingKey {
        self.key.verifying_key()
    }

    /// The public key as a PEM SubjectPublicKeyInfo, what `berm attest verify --key` reads.
    pub fn public_pem(&self) -> String {
        public_pem(&self.public())
    }

    /// Any statement, signed (its canonical JSON is the payload).
    pub fn sign_statement(&self, statement: &Value) -> Envelope {
        self.sign_payload(canonical_json(statement).into_bytes())
    }

    /// An in-toto payload already serialized, signed as it is: for a signer that hashed or
    /// chained these exact bytes before signing them.
    pub fn sign_payload(&self, payload: Vec<u8>) -> Envelope {
        let signature = self.key.sign(&pae(PAYLOAD_TYPE, &payload));
        Envelope {
            payload: BASE64.encode(&payload),
            payload_type: PAYLOAD_TYPE.into(),
            signatures: vec![EnvelopeSignature {
                keyid: key_id(&self.public()),
                sig: BASE64.encode(signature.to_bytes()),
            }],
        }
    }
}

fn read_small(path: &Path) -> Result<String, KeyError> {
    let io = |source| KeyError::Io {
        path: path.to_owned(),
        source,
    };
    let size = std::fs::metadata(path).map_err(io)?.len();
    if size > MAX_KEY_FILE {
        return Err(KeyError::Parse {
            path: path.to_owned(),
            what: "a key file",
            message: format!("it is {size} bytes"),
        });
    }
    std::fs::read_to_string(path).map_err(io)
}

/// A public key on one line: its SubjectPublicKeyInfo DER in standard base64, the body of
/// its PEM. For line protocols, which refuse the PEM's newlines.
pub fn spki_base64(key: &VerifyingKey) -> String {
    // Encoding 32 bytes into a fixed SPKI cannot fail.
    key.to_public_key_der()
        .map(|der| BASE64.encode(der.as_bytes()))
        .unwrap_or_default()
}

/// The key [`spki_base64`] wrote, or why it is not one.
pub fn from_spki_base64(text: &str) -> Result<VerifyingKey, String> {
    let der = BASE64
        .decode(text.trim())
        .map_err(|e| format!("not base64: {e}"))?;
    VerifyingKey::from_public_key_der(&der).map_err(|e| format!("not an ed25519 public key: {e}"))
}

/// The PEM of a public key, what `--key` options read.
pub fn public_pem(key: &VerifyingKey) -> String {
    key.to_public_key_pem(LineEnding::LF).unwrap_or_default()
}

/// Reads a public key (PEM SubjectPublicKeyInfo, as `berm attest key` prints it).
pub fn read_public_key(path: &Path) -> Result<VerifyingKey, KeyError> {
    let text = read_small(path)?;
    VerifyingKey::from_public_key_pem(&text).map_err(|e| KeyError::Parse {
        path: path.to_owned(),
        what: "an ed25519 public key (PEM, as `berm attest key` prints it)",
        message: e.to_string(),
    })
}

/// Why an envelope's payload was not handed over.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unverified {
    /// The envelope is not one berm reads: its type, or base64 that does not decode.
    #[error("{0}")]
    Malformed(String),
    /// No signature in it verifies with the key.
    #[error("{0}")]
    BadSignature(String),
}

/// The payload of `envelope`, once one of its signatures verifies with `key`: nothing of the
/// payload is handed over before. A signature counts when its key id names this key (or
/// none): the key id is not signed, so a changed one must not pass as a hint that happens to
/// be ignored.
///
/// # Errors
/// [`Unverified::Malformed`] for another payload type or bad base64,
/// [`Unverified::BadSignature`] when no signature verifies.
pub fn verified_payload(envelope: &Envelope, key: &VerifyingKey) -> Result<Vec<u8>, Unverified> {
    let payload = unverified_payload(envelope)?;
    let signed = pae(&envelope.payload_type, &payload);
    let id = key_id(key);
    let verified = envelope.signatures.iter().any(|s| {
        (s.keyid.is_empty() || s.keyid == id)
            && BASE64
                .decode(&s.sig)
                .ok()
                .and_then(|bytes| Signature::from_slice(&bytes).ok())
                .is_some_and(|sig| key.verify_strict(&signed, &sig).is_ok())
    });
    if !verified {
        return Err(Unverified::BadSignature(format!(
            "none of the envelope's {} signatures verifies with key {id}",
            envelope.signatures.len(),
        )));
    }
    Ok(payload)
}

/// The payload of `envelope` with no signature checked, for a reader that says so.
///
/// # Errors
/// [`Unverified::Malformed`] for another payload type or bad base64.
pub fn unverified_payload(envelope: &Envelope) -> Result<Vec<u8>, Unverified> {
    if envelope.payload_type != PAYLOAD_TYPE {
        return Err(Unverified::Malformed(format!(
            "payloadType is {:?}, not {PAYLOAD_TYPE:?}",
            envelope.payload_type
        )));
    }
    BASE64
        .decode(&envelope.payload)
        .map_err(|e| Unverified::Malformed(format!("the payload is not base64: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pae_matches_the_spec_example() {
        // DSSE protocol.md, "Test vectors": type "http://example.com/HelloWorld", body
        // "hello world".
        assert_eq!(
            pae("http://example.com/HelloWorld", b"hello world"),
            b"DSSEv1 29 http://example.com/HelloWorld 11 hello world".to_vec()
        );
    }

    #[test]
    fn a_key_on_one_line_reads_back() {
        let key = HostKey::ephemeral().unwrap().public();
        let line = spki_base64(&key);
        assert!(!line.contains('\n'));
        assert_eq!(from_spki_base64(&line).unwrap(), key);
        assert!(from_spki_base64("bm90IGEga2V5").is_err());
    }

    #[test]
    fn first_uses_at_once_agree_on_one_key() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(KEY_FILE);
        let keys: Vec<VerifyingKey> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..8)
                .map(|_| scope.spawn(|| HostKey::load_or_create(Some(&path)).unwrap().public()))
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(keys.iter().all(|k| *k == keys[0]));
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn a_new_key_is_private_and_loads_again() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("berm").join(KEY_FILE);
        let key = HostKey::load_or_create(Some(&path)).unwrap();
        assert_eq!(berm_fixtures::mode(&path), 0o600);
        let again = HostKey::load_or_create(Some(&path)).unwrap();
        assert_eq!(key.public(), again.public());
        let public = dir.path().join("pub.pem");
        std::fs::write(&public, key.public_pem()).unwrap();
        assert_eq!(read_public_key(&public).unwrap(), key.public());
        // Not a private key file: refused by name.
        // Why a key file with mode `mode` is refused.
        let refused = |key: &Path, mode: u32| {
            std::fs::set_permissions(key, std::fs::Permissions::from_mode(mode)).unwrap();
            HostKey::load_or_create(Some(key))
                .err()
                .unwrap()
                .to_string()
        };
        let err = refused(&public, 0o600);
        assert!(err.contains("not an ed25519 private key"), "{err}");
        let err = refused(&path, 0o644);
        assert!(err.contains("chmod 600"), "{err}");
    }
}
