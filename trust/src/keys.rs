//! cosign's key files: `cosign.key`, a PKCS#8 private key encrypted with scrypt and NaCl
//! secretbox under the PEM label `ENCRYPTED SIGSTORE PRIVATE KEY` (older cosign wrote
//! `ENCRYPTED COSIGN PRIVATE KEY`; both are read), and `cosign.pub`, a PEM public key.

use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use sigstore::crypto::signing_key::SigStoreKeyPair;
use sigstore::crypto::{CosignVerificationKey, Signature, SigningScheme};

use crate::SigningError;

/// The variable cosign reads a private key's password from; berm reads the same.
pub const PASSWORD_ENV: &str = "COSIGN_PASSWORD";

/// The scheme `cosign generate-key-pair` uses, and the only one berm signs with.
const SCHEME: SigningScheme = SigningScheme::ECDSA_P256_SHA256_ASN1;

/// The private key's password from [`PASSWORD_ENV`].
///
/// # Errors
/// [`SigningError::NoPassword`] when it is not set (it may be set empty).
pub fn password_from_env() -> Result<Vec<u8>, SigningError> {
    std::env::var_os(PASSWORD_ENV)
        .map(|p| p.into_encoded_bytes())
        .ok_or(SigningError::NoPassword)
}

/// A private key, decrypted, ready to sign.
pub struct SigningKey {
    signer: sigstore::crypto::SigStoreSigner,
    public: PublicKey,
}

impl SigningKey {
    /// Reads and decrypts a cosign private key.
    ///
    /// # Errors
    /// When the file cannot be read, is not an encrypted cosign key, the password is wrong,
    /// or the key is not ECDSA P-256.
    pub fn load(path: &Path, password: &[u8]) -> Result<SigningKey, SigningError> {
        let pem = std::fs::read(path).map_err(|source| SigningError::ReadKey {
            path: path.to_path_buf(),
            source,
        })?;
        let bad = |message: String| SigningError::Key {
            path: path.to_path_buf(),
            message,
        };
        let text = String::from_utf8_lossy(&pem);
        if !text.contains("ENCRYPTED SIGSTORE PRIVATE KEY")
            && !text.contains("ENCRYPTED COSIGN PRIVATE KEY")
        {
            return Err(bad(
                "not a cosign private key (expected PEM `ENCRYPTED SIGSTORE PRIVATE KEY`, as `berm trust keygen` or `cosign generate-key-pair` write)".into(),
            ));
        }
        let pair = SigStoreKeyPair::from_encrypted_pem(&pem, password).map_err(|e| {
            bad(format!(
                "cannot decrypt it ({e}); is {PASSWORD_ENV} this key's password?"
            ))
        })?;
        SigningKey::from_pair(&pair, &path.display().to_string()).map_err(bad)
    }

    fn from_pair(pair: &SigStoreKeyPair, source: &str) -> Result<SigningKey, String> {
        let signer = pair
            .to_sigstore_signer(&SCHEME)
            .map_err(|e| format!("berm signs with ECDSA P-256 keys only: {e}"))?;
        let der = pair.public_key_to_der().map_err(|e| e.to_string())?;
        let public = PublicKey::from_der(&der, source)?;
        Ok(SigningKey { signer, public })
    }

    /// Signs `message`; the signature is ASN.1 DER, as cosign's.
    ///
    /// # Errors
    /// [`SigningError::Sign`] when the signer fails.
    pub fn sign(&self, message: &[u8]) -> Result<Vec<u8>, SigningError> {
        self.signer
            .sign(message)
            .map_err(|e| SigningError::Sign(e.to_string()))
    }

    /// The public half, which verifies what this key signs.
    pub fn public(&self) -> &PublicKey {
        &self.public
    }
}

/// A public key that signatures are checked against.
#[derive(Clone)]
pub struct PublicKey {
    key: CosignVerificationKey,
    id: String,
    source: String,
}

impl std::fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PublicKey({} from {})", self.id, self.source)
    }
}

impl PublicKey {
    /// Reads a PEM public key (`cosign.pub`).
    ///
    /// # Errors
    /// When the file cannot be read or holds no public key.
    pub fn load(path: &Path) -> Result<PublicKey, SigningError> {
        let pem = std::fs::read(path).map_err(|source| SigningError::ReadKey {
            path: path.to_path_buf(),
            source,
        })?;
        PublicKey::from_pem(&pem, &path.display().to_string()).map_err(|message| {
            SigningError::Key {
                path: path.to_path_buf(),
                message,
            }
        })
    }

    /// Parses a PEM public key; `source` names it in messages.
    ///
    /// # Errors
    /// What is wrong with it.
    pub fn from_pem(pem: &[u8], source: &str) -> Result<PublicKey, String> {
        let text = String::from_utf8_lossy(pem);
        if text.contains("PRIVATE KEY") {
            return Err("this is a private key; verify with the public half (`cosign.pub`)".into());
        }
        let parsed = sigstore::crypto::CosignVerificationKey::try_from_pem(pem)
            .map_err(|e| format!("not a PEM public key: {e}"))?;
        let der = pem_body(&text).ok_or("not a PEM public key: no `PUBLIC KEY` block")?;
        Ok(PublicKey {
            key: parsed,
            id: key_id(&der),
            source: source.to_string(),
        })
    }

    fn from_der(der: &[u8], source: &str) -> Result<PublicKey, String> {
        let key = CosignVerificationKey::try_from_der(der).map_err(|e| e.to_string())?;
        Ok(PublicKey {
            key,
            id: key_id(der),
            source: source.to_string(),
        })
    }

    /// Whether `signature` (base64, as stored) is this key's over `message`.
    pub fn verifies(&self, signature: &str, message: &[u8]) -> bool {
        self.key
            .verify_signature(Signature::Base64Encoded(signature.as_bytes()), message)
            .is_ok()
    }

    /// `sha256:<hex>` of the key's DER (SubjectPublicKeyInfo): names it in output and receipts.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Where the key came from (its file).
    pub fn source(&self) -> &str {
        &self.source
    }
}

fn key_id(der: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(der)))
}

/// The DER inside the first `PUBLIC KEY` PEM block.
fn pem_body(text: &str) -> Option<Vec<u8>> {
    use base64::Engine;
    let start = text.find("-----BEGIN PUBLIC KEY-----")? + "-----BEGIN PUBLIC KEY-----".len();
    let end = start + text[start..].find("-----END PUBLIC KEY-----")?;
    let body: String = text[start..end]
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect();
    base64::engine::general_purpose::STANDARD.decode(body).ok()
}

/// Writes a new key pair into `dir` as `cosign.key` (mode 0600, encrypted with `password`)
/// and `cosign.pub`, the files and format `cosign generate-key-pair` writes. Never
/// overwrites: if either file exists, nothing is written. Returns the two paths.
///
/// # Errors
/// [`SigningError::Exists`] or [`SigningError::WriteKey`]; a failed write removes what it began.
pub fn write_key_pair(dir: &Path, password: &[u8]) -> Result<(PathBuf, PathBuf), SigningError> {
    let private = dir.join("cosign.key");
    let public = dir.join("cosign.pub");
    for path in [&private, &public] {
        if path.exists() {
            return Err(SigningError::Exists { path: path.clone() });
        }
    }
    let signer = SCHEME
        .create_signer()
        .map_err(|e| SigningError::Sign(format!("cannot generate a key: {e}")))?;
    let pair = signer
        .to_sigstore_keypair()
        .map_err(|e| SigningError::Sign(format!("cannot generate a key: {e}")))?;
    let encrypted = pair
        .private_key_to_encrypted_pem(password)
        .map_err(|e| SigningError::Sign(format!("cannot encrypt the key: {e}")))?;
    let public_pem = pair
        .public_key_to_pem()
        .map_err(|e| SigningError::Sign(format!("cannot encode the public key: {e}")))?;
    write_new(&private, encrypted.as_bytes(), 0o600)?;
    if let Err(e) = write_new(&public, public_pem.as_bytes(), 0o644) {
        let _ = std::fs::remove_file(&private);
        return Err(e);
    }
    Ok((private, public))
}

/// Creates `path` (which must not exist) with `mode` from the start, so a private key is
/// never readable by others, not even for an instant; removes it if the write fails.
fn write_new(path: &Path, bytes: &[u8], mode: u32) -> Result<(), SigningError> {
    let error = |source| SigningError::WriteKey {
        path: path.to_path_buf(),
        source,
    };
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .map_err(|e| {
            if e.kind() == std::io::ErrorKind::AlreadyExists {
                SigningError::Exists {
                    path: path.to_path_buf(),
                }
            } else {
                error(e)
            }
        })?;
    if let Err(e) = file.write_all(bytes).and_then(|()| file.sync_all()) {
        let _ = std::fs::remove_file(path);
        return Err(error(e));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keygen_writes_cosign_files_that_sign_and_verify() {
        let dir = tempfile::tempdir().unwrap();
        let (private, public) = write_key_pair(dir.path(), b"pw").unwrap();
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&private).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let text = std::fs::read_to_string(&private).unwrap();
        assert!(text.starts_with("-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----"));
        let key = SigningKey::load(&private, b"pw").unwrap();
        let public = PublicKey::load(&public).unwrap();
        assert_eq!(key.public().id(), public.id());
        use base64::Engine;
        let sig = base64::engine::general_purpose::STANDARD.encode(key.sign(b"msg").unwrap());
        assert!(public.verifies(&sig, b"msg"));
        assert!(!public.verifies(&sig, b"other"));
        let e = SigningKey::load(&private, b"wrong")
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("cannot decrypt") && e.contains(PASSWORD_ENV),
            "{e}"
        );
        let e = write_key_pair(dir.path(), b"pw").unwrap_err().to_string();
        assert!(e.contains("cosign.key") && e.contains("exists"), "{e}");
        let e = PublicKey::load(&private).unwrap_err().to_string();
        assert!(e.contains("private key"), "{e}");
    }
}
