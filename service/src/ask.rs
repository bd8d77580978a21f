//! Sealing the state of a program that asked its client for input (`berm.ask`).
//!
//! On 2026-07-28 an input-required result hands the program's state to the client, which
//! echoes it back with its answers. bermd seals it with ChaCha20-Poly1305 under a key of its
//! own: the client can neither read nor change it, and a sealed state opens only for the
//! same program digest and served tool, within [`MAX_AGE`] of being sealed. The key is made
//! once into `$BERM_HOME/ask.key` as bermd's other secrets are ([`crate::home::secret_file`]),
//! so a state survives a restart; replicas that should accept each other's states are given
//! the same file (`bermd --ask-key FILE`).
//!
//! `ring` is already in bermd (rustls uses it), so this adds no crypto crate of its own.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use ring::aead::{Aad, CHACHA20_POLY1305, LessSafeKey, Nonce, UnboundKey};
use ring::rand::{SecureRandom, SystemRandom};

/// How long a sealed state may wait for the client's answers: a person may take a while.
pub const MAX_AGE: Duration = Duration::from_secs(60 * 60);

/// The key file's name under `$BERM_HOME`.
pub const KEY_FILE: &str = "ask.key";

/// Version of the sealed form, first byte of what is sealed.
const VERSION: u8 = 1;

/// Nonce, then ciphertext with its tag; the plaintext is `VERSION`, the time sealed (seconds,
/// big-endian) and the state.
const OVERHEAD: usize = 12 + 1 + 8 + 16;

/// Longest sealed state accepted, as Base64 text: a longer one is refused unread.
pub const MAX_SEALED: usize = (berm_abi::ask::MAX_STATE_BYTES + OVERHEAD).div_ceil(3) * 4;

/// Why the key could not be had.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// The file could not be read or made.
    #[error("{path}: {source}")]
    Io {
        /// The key file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file in `$BERM_HOME` is open to others.
    #[error("{path}: {problem}; {fix}")]
    Insecure {
        /// The key file.
        path: PathBuf,
        /// What is wrong with it.
        problem: String,
        /// The command that fixes it.
        fix: String,
    },
    /// The file does not hold a key.
    #[error(
        "{path} is not an ask key: it must hold 64 hex digits (32 bytes), as bermd writes into $BERM_HOME/ask.key"
    )]
    Malformed {
        /// The key file.
        path: PathBuf,
    },
    /// No random bytes for a nonce.
    #[error("the system gave no random bytes")]
    Random,
}

/// Why a sealed state was refused; the client gets this as `-32602`.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum OpenError {
    /// Not something this bermd sealed for this program and tool: changed, cut, made up, or
    /// sealed under another key or for another program version.
    #[error(
        "requestState failed its integrity check: it was changed, or not sealed by this server for this tool"
    )]
    Integrity,
    /// Sealed longer ago than [`MAX_AGE`].
    #[error("requestState expired: it was sealed {0} s ago, over the {max} s allowed; call the tool again without it", max = MAX_AGE.as_secs())]
    Expired(u64),
}

/// The key that seals states; cheap to share.
pub struct AskKey {
    key: LessSafeKey,
    random: SystemRandom,
}

impl std::fmt::Debug for AskKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AskKey(..)")
    }
}

impl AskKey {
    /// The key in `path` (bermd's `$BERM_HOME/ask.key`) when it exists, else a new one
    /// written there ([`crate::home::secret_file`]).
    ///
    /// # Errors
    /// [`KeyError`] when the file cannot be read or made, is open to others, or does not
    /// hold a key.
    pub fn load_or_create(path: &Path) -> Result<AskKey, KeyError> {
        use crate::home::SecretFileError;
        let text = crate::home::secret_file(path, 32).map_err(|e| match e {
            SecretFileError::Io(source) => KeyError::Io {
                path: path.to_path_buf(),
                source,
            },
            SecretFileError::Insecure { problem, fix } => KeyError::Insecure {
                path: path.to_path_buf(),
                problem,
                fix,
            },
        })?;
        AskKey::parse(path, &text)
    }

    /// The key in `path` (64 hex digits).
    ///
    /// # Errors
    /// [`KeyError`] when the file cannot be read or does not hold a key.
    pub fn load(path: &Path) -> Result<AskKey, KeyError> {
        let text = std::fs::read(path).map_err(|source| KeyError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let text = std::str::from_utf8(&text).map_err(|_| KeyError::Malformed {
            path: path.to_path_buf(),
        })?;
        AskKey::parse(path, text)
    }

    /// The key `text` holds (64 hex digits), read from `path`.
    fn parse(path: &Path, text: &str) -> Result<AskKey, KeyError> {
        let malformed = || KeyError::Malformed {
            path: path.to_path_buf(),
        };
        let bytes: [u8; 32] = hex::decode(text.trim())
            .ok()
            .and_then(|b| b.try_into().ok())
            .ok_or_else(malformed)?;
        Ok(AskKey::from_bytes(bytes))
    }

    fn from_bytes(bytes: [u8; 32]) -> AskKey {
        // CHACHA20_POLY1305 takes exactly 32 bytes, so this cannot fail.
        let unbound = UnboundKey::new(&CHACHA20_POLY1305, &bytes)
            .unwrap_or_else(|_| unreachable!("a 32-byte ChaCha20-Poly1305 key"));
        AskKey {
            key: LessSafeKey::new(unbound),
            random: SystemRandom::new(),
        }
    }

    /// `state` sealed for `tool` (its served name) of the program at `digest`, as URL-safe
    /// Base64.
    ///
    /// # Errors
    /// [`KeyError::Random`] when the system gives no random bytes for the nonce.
    pub fn seal(
        &self,
        digest: &berm::Digest,
        tool: &str,
        state: &[u8],
    ) -> Result<String, KeyError> {
        let mut nonce = [0u8; 12];
        self.random.fill(&mut nonce).map_err(|_| KeyError::Random)?;
        let mut sealed = Vec::with_capacity(OVERHEAD + state.len());
        sealed.extend_from_slice(&nonce);
        sealed.push(VERSION);
        sealed.extend_from_slice(&now().to_be_bytes());
        sealed.extend_from_slice(state);
        let mut body = sealed.split_off(12);
        let aad = associated(digest, tool);
        // Sealing in place fails only for inputs past ChaCha20's 256 GiB.
        let tag = self
            .key
            .seal_in_place_separate_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(&aad),
                &mut body,
            )
            .unwrap_or_else(|_| unreachable!("a state is at most 16 KiB"));
        sealed.extend_from_slice(&body);
        sealed.extend_from_slice(tag.as_ref());
        Ok(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(sealed))
    }

    /// The state `sealed` holds, if this key sealed it for `tool` of the program at `digest`
    /// less than [`MAX_AGE`] ago.
    ///
    /// # Errors
    /// [`OpenError`] naming why it was refused.
    pub fn open(
        &self,
        digest: &berm::Digest,
        tool: &str,
        sealed: &str,
    ) -> Result<Vec<u8>, OpenError> {
        if sealed.len() > MAX_SEALED {
            return Err(OpenError::Integrity);
        }
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(sealed)
            .map_err(|_| OpenError::Integrity)?;
        if bytes.len() < OVERHEAD {
            return Err(OpenError::Integrity);
        }
        let (nonce, body) = bytes.split_at(12);
        let nonce: [u8; 12] = nonce.try_into().map_err(|_| OpenError::Integrity)?;
        let mut body = body.to_vec();
        let aad = associated(digest, tool);
        let plain = self
            .key
            .open_in_place(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(&aad),
                &mut body,
            )
            .map_err(|_| OpenError::Integrity)?;
        let Some((&VERSION, rest)) = plain.split_first() else {
            return Err(OpenError::Integrity);
        };
        let (time, state) = rest.split_at(8);
        let sealed_at = u64::from_be_bytes(time.try_into().map_err(|_| OpenError::Integrity)?);
        let age = now().saturating_sub(sealed_at);
        if age > MAX_AGE.as_secs() {
            return Err(OpenError::Expired(age));
        }
        Ok(state.to_vec())
    }
}

/// What a sealed state is bound to: the program's digest and the served tool.
fn associated(digest: &berm::Digest, tool: &str) -> Vec<u8> {
    let mut aad = b"berm-ask/1\0".to_vec();
    aad.extend_from_slice(digest.to_string().as_bytes());
    aad.push(0);
    aad.extend_from_slice(tool.as_bytes());
    aad
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_state_opens_only_unchanged_for_its_program_and_tool() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(KEY_FILE);
        let key = AskKey::load_or_create(&path).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let digest = berm::Digest::of(b"program");
        let sealed = key.seal(&digest, "test_ask", b"round 1").unwrap();
        assert_eq!(key.open(&digest, "test_ask", &sealed).unwrap(), b"round 1");
        // The same file gives the same key: a restart opens what was sealed before it.
        let again = AskKey::load_or_create(&path).unwrap();
        assert_eq!(
            again.open(&digest, "test_ask", &sealed).unwrap(),
            b"round 1"
        );

        assert_eq!(
            key.open(&digest, "test_other", &sealed),
            Err(OpenError::Integrity)
        );
        let other = berm::Digest::of(b"another version");
        assert_eq!(
            key.open(&other, "test_ask", &sealed),
            Err(OpenError::Integrity)
        );
        let tampered = format!("{sealed}-TAMPERED");
        assert_eq!(
            key.open(&digest, "test_ask", &tampered),
            Err(OpenError::Integrity)
        );
        let mut flipped = sealed.clone().into_bytes();
        let last = flipped.len() - 2;
        flipped[last] = if flipped[last] == b'A' { b'B' } else { b'A' };
        let flipped = String::from_utf8(flipped).unwrap();
        assert_eq!(
            key.open(&digest, "test_ask", &flipped),
            Err(OpenError::Integrity)
        );
        assert_eq!(key.open(&digest, "test_ask", ""), Err(OpenError::Integrity));
        assert_eq!(
            key.open(&digest, "test_ask", &"A".repeat(MAX_SEALED + 4)),
            Err(OpenError::Integrity)
        );
        let stranger = AskKey::load_or_create(&dir.path().join("other.key")).unwrap();
        assert_eq!(
            stranger.open(&digest, "test_ask", &sealed),
            Err(OpenError::Integrity)
        );
    }

    #[test]
    fn a_file_that_is_not_a_key_is_refused_with_what_it_must_hold() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.key");
        std::fs::write(&path, "not hex").unwrap();
        let err = AskKey::load(&path).unwrap_err().to_string();
        assert!(err.contains("must hold 64 hex digits"), "{err}");
    }
}
