//! Sealing the state of a program that asked its client for input (`berm.ask`).
//!
//! On 2026-07-28 an input-required result hands the program's state to the client, which
//! echoes it back with its answers. bermd seals it with ChaCha20-Poly1305 under a key of its
//! own: the client can neither read nor change it, and a sealed state opens only for the
//! request it was sealed for ([`SealedFor`]: the same program digest, MCP method, served name
//! and arguments, or URI for a read), within [`MAX_AGE`] of being sealed. The key is made
//! once into `$BERM_HOME/ask.key` as bermd's other secrets are ([`crate::home::secret_file`]),
//! so a state survives a restart; replicas that should accept each other's states are given
//! the same file (`bermd --ask-key FILE`).
//!
//! The same key, through a key derived from it, seals the tasks replicas share in PostgreSQL
//! ([`crate::tasks::seal`]).
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

/// Version of the sealed form, first byte of what is sealed. Version 1 bound only the digest
/// and the served name; its states do not open (their additional data had another tag).
const VERSION: u8 = 2;

/// The tag the additional data starts with, naming the version of what a state is bound to.
const AAD_TAG: &[u8] = b"berm-ask/2\0";

/// Nonce, then ciphertext with its tag; the plaintext is `VERSION`, the time sealed (seconds,
/// big-endian), the SHA-256 of the request's canonical arguments and the state.
const OVERHEAD: usize = 12 + 1 + 8 + 32 + 16;

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
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OpenStateError {
    /// Not something this bermd sealed for this program, method and served name: changed,
    /// cut, made up, sealed under another key, for another program version, for another
    /// method or entry, or by a bermd whose states had another form.
    #[error(
        "requestState failed its integrity check: it was changed, or not sealed by this server for this {method} of `{served}`; send the request again without requestState"
    )]
    Integrity {
        /// The method of the request it came with.
        method: String,
        /// The served name it came with.
        served: String,
    },
    /// Sealed for this program and entry, but for a request with other arguments (for a
    /// read, another URI): answers given to one request do not carry over to another.
    #[error(
        "requestState was sealed for a {method} of `{served}` with {what} than this one: answers to one request do not carry over to another; send the request that was answered, unchanged, or this one without requestState"
    )]
    OtherArguments {
        /// The method of the request it came with.
        method: String,
        /// The served name it came with.
        served: String,
        /// What differs: `other arguments`, or for a read `another URI`.
        what: &'static str,
    },
    /// Sealed longer ago than [`MAX_AGE`].
    #[error("requestState expired: it was sealed {0} s ago, over the {max} s allowed; call the tool again without it", max = MAX_AGE.as_secs())]
    Expired(u64),
}

/// The request a state is sealed for, and which it must come back with to open.
#[derive(Clone, Copy, Debug)]
pub struct SealedFor<'a> {
    /// The program's digest: a new version of it opens no state of the old.
    pub digest: &'a berm::Digest,
    /// The MCP method (`tools/call`, `prompts/get`, `resources/read`).
    pub method: &'a str,
    /// The served name of the entry the request runs.
    pub served: &'a str,
    /// What the request named: a call's or a prompt's arguments (an object; absent is `{}`),
    /// a read's URI (a string). Bound as the SHA-256 of its canonical JSON
    /// ([`berm_dsse::canonical_json`]: keys sorted by their UTF-8 bytes, no whitespace,
    /// strings and numbers as serde_json writes them), so key order and spacing do not
    /// matter and anything else does.
    pub sent: &'a serde_json::Value,
}

impl SealedFor<'_> {
    /// What a sealed state is bound to besides its arguments: the version's tag, the
    /// program's digest, the method and the served name, each ended by NUL (none holds one).
    fn associated(&self) -> Vec<u8> {
        let mut aad = AAD_TAG.to_vec();
        for part in [self.digest.to_string().as_str(), self.method, self.served] {
            aad.extend_from_slice(part.as_bytes());
            aad.push(0);
        }
        aad
    }

    /// The SHA-256 of what the request sent, in canonical JSON.
    fn arguments_digest(&self) -> [u8; 32] {
        use sha2::Digest as _;
        sha2::Sha256::digest(berm_dsse::canonical_json(self.sent).as_bytes()).into()
    }

    /// The refusal of a state that did not open for this request.
    fn integrity(&self) -> OpenStateError {
        OpenStateError::Integrity {
            method: self.method.to_string(),
            served: self.served.to_string(),
        }
    }
}

/// The key that seals states; cheap to share.
pub struct AskKey {
    key: LessSafeKey,
    random: SystemRandom,
    /// The key derived from it that seals tasks at rest.
    tasks: std::sync::Arc<crate::tasks::seal::TaskSeal>,
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
            tasks: std::sync::Arc::new(crate::tasks::seal::TaskSeal::derive(&bytes)),
        }
    }

    /// The key derived from this one that seals the tasks replicas share in PostgreSQL:
    /// replicas given the same ask key open each other's tasks.
    pub fn task_seal(&self) -> std::sync::Arc<crate::tasks::seal::TaskSeal> {
        self.tasks.clone()
    }

    /// `state` sealed for the request `request`, as URL-safe Base64.
    ///
    /// # Errors
    /// [`KeyError::Random`] when the system gives no random bytes for the nonce.
    pub fn seal(&self, request: &SealedFor<'_>, state: &[u8]) -> Result<String, KeyError> {
        let mut nonce = [0u8; 12];
        self.random.fill(&mut nonce).map_err(|_| KeyError::Random)?;
        let mut sealed = Vec::with_capacity(OVERHEAD + state.len());
        sealed.extend_from_slice(&nonce);
        sealed.push(VERSION);
        sealed.extend_from_slice(&now().to_be_bytes());
        sealed.extend_from_slice(&request.arguments_digest());
        sealed.extend_from_slice(state);
        let mut body = sealed.split_off(12);
        let aad = request.associated();
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

    /// The state `sealed` holds, if this key sealed it for `request` (the same program,
    /// method, served name and arguments) less than [`MAX_AGE`] ago.
    ///
    /// # Errors
    /// [`OpenStateError`] naming why it was refused.
    pub fn open(&self, request: &SealedFor<'_>, sealed: &str) -> Result<Vec<u8>, OpenStateError> {
        let integrity = || request.integrity();
        if sealed.len() > MAX_SEALED {
            return Err(integrity());
        }
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(sealed)
            .map_err(|_| integrity())?;
        if bytes.len() < OVERHEAD {
            return Err(integrity());
        }
        let (nonce, body) = bytes.split_at(12);
        let nonce: [u8; 12] = nonce.try_into().map_err(|_| integrity())?;
        let mut body = body.to_vec();
        let aad = request.associated();
        let plain = self
            .key
            .open_in_place(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(&aad),
                &mut body,
            )
            .map_err(|_| integrity())?;
        // Authenticated: what follows is what this bermd sealed, for this program and entry.
        let Some((&VERSION, rest)) = plain.split_first() else {
            return Err(integrity());
        };
        // The length checked above leaves room for both; a short one is refused, not a panic.
        let Some((time, rest)) = rest.split_first_chunk::<8>() else {
            return Err(integrity());
        };
        let Some((arguments, state)) = rest.split_first_chunk::<32>() else {
            return Err(integrity());
        };
        if *arguments != request.arguments_digest() {
            return Err(OpenStateError::OtherArguments {
                method: request.method.to_string(),
                served: request.served.to_string(),
                what: if request.sent.is_string() {
                    "another URI"
                } else {
                    "other arguments"
                },
            });
        }
        let sealed_at = u64::from_be_bytes(*time);
        let age = now().saturating_sub(sealed_at);
        if age > MAX_AGE.as_secs() {
            return Err(OpenStateError::Expired(age));
        }
        Ok(state.to_vec())
    }
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_state_opens_only_unchanged_for_the_request_it_was_sealed_for() {
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
        let args = json!({"target": "a", "n": 1});
        let request = SealedFor {
            digest: &digest,
            method: "tools/call",
            served: "test_ask",
            sent: &args,
        };
        let sealed = key.seal(&request, b"round 1").unwrap();
        assert_eq!(key.open(&request, &sealed).unwrap(), b"round 1");
        // Key order is not the arguments': the canonical form is bound.
        let reordered: serde_json::Value = serde_json::from_str(r#"{"n":1,"target":"a"}"#).unwrap();
        let same = SealedFor {
            sent: &reordered,
            ..request
        };
        assert_eq!(key.open(&same, &sealed).unwrap(), b"round 1");
        // The same file gives the same key: a restart opens what was sealed before it.
        let again = AskKey::load_or_create(&path).unwrap();
        assert_eq!(again.open(&request, &sealed).unwrap(), b"round 1");

        let integrity = |method: &str, served: &str| OpenStateError::Integrity {
            method: method.into(),
            served: served.into(),
        };
        let other_tool = SealedFor {
            served: "test_other",
            ..request
        };
        assert_eq!(
            key.open(&other_tool, &sealed),
            Err(integrity("tools/call", "test_other"))
        );
        let other_method = SealedFor {
            method: "prompts/get",
            ..request
        };
        assert_eq!(
            key.open(&other_method, &sealed),
            Err(integrity("prompts/get", "test_ask"))
        );
        let other = berm::Digest::of(b"another version");
        let other_version = SealedFor {
            digest: &other,
            ..request
        };
        assert_eq!(
            key.open(&other_version, &sealed),
            Err(integrity("tools/call", "test_ask"))
        );
        for changed in [
            json!({"target": "b", "n": 1}),
            json!({"target": "a", "n": 1.0}),
            json!({"target": "a"}),
            json!({}),
        ] {
            let replayed = SealedFor {
                sent: &changed,
                ..request
            };
            let refused = key.open(&replayed, &sealed).unwrap_err();
            assert!(
                matches!(
                    refused,
                    OpenStateError::OtherArguments {
                        what: "other arguments",
                        ..
                    }
                ),
                "{changed}"
            );
            assert!(
                refused
                    .to_string()
                    .contains("with other arguments than this one"),
                "{refused}"
            );
        }
        let read = json!("test://template/1/data");
        let read_request = SealedFor {
            method: "resources/read",
            served: "test_template_data",
            sent: &read,
            ..request
        };
        let read_state = key.seal(&read_request, b"").unwrap();
        let elsewhere = json!("test://template/2/data");
        let refused = key
            .open(
                &SealedFor {
                    sent: &elsewhere,
                    ..read_request
                },
                &read_state,
            )
            .unwrap_err();
        assert!(
            refused
                .to_string()
                .contains("with another URI than this one"),
            "{refused}"
        );

        let tampered = format!("{sealed}-TAMPERED");
        let broken = integrity("tools/call", "test_ask");
        assert_eq!(key.open(&request, &tampered), Err(broken.clone()));
        let mut flipped = sealed.clone().into_bytes();
        let last = flipped.len() - 2;
        flipped[last] = if flipped[last] == b'A' { b'B' } else { b'A' };
        let flipped = String::from_utf8(flipped).unwrap();
        assert_eq!(key.open(&request, &flipped), Err(broken.clone()));
        assert_eq!(key.open(&request, ""), Err(broken.clone()));
        assert_eq!(
            key.open(&request, &"A".repeat(MAX_SEALED + 4)),
            Err(broken.clone())
        );
        let stranger = AskKey::load_or_create(&dir.path().join("other.key")).unwrap();
        assert_eq!(stranger.open(&request, &sealed), Err(broken));
    }

    /// A state sealed by a bermd whose states were bound to the digest and the served name
    /// only (`berm-ask/1`) does not open.
    #[test]
    fn a_state_of_the_first_form_is_refused() {
        let key = AskKey::from_bytes([7; 32]);
        let digest = berm::Digest::of(b"program");
        let mut aad = b"berm-ask/1\0".to_vec();
        aad.extend_from_slice(digest.to_string().as_bytes());
        aad.push(0);
        aad.extend_from_slice(b"test_ask");
        let nonce = [3u8; 12];
        let mut body = vec![1u8];
        body.extend_from_slice(&now().to_be_bytes());
        // Long enough to be read as the new form, were it not for the tag.
        body.extend_from_slice(&[b'x'; 64]);
        let tag = key
            .key
            .seal_in_place_separate_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(&aad),
                &mut body,
            )
            .unwrap();
        let mut sealed = nonce.to_vec();
        sealed.extend_from_slice(&body);
        sealed.extend_from_slice(tag.as_ref());
        let sealed = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(sealed);
        let args = json!({});
        let request = SealedFor {
            digest: &digest,
            method: "tools/call",
            served: "test_ask",
            sent: &args,
        };
        assert!(matches!(
            key.open(&request, &sealed),
            Err(OpenStateError::Integrity { .. })
        ));
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
