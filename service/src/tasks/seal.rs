//! Sealing what replicas share of a task in PostgreSQL: what `tasks/get` shows (a program's
//! result, its questions) and the answers waiting for the replica that runs it. The database
//! holds them only sealed, so whoever reads its tables or backups reads no program's or
//! client's data.
//!
//! The key is derived (HKDF-SHA256) from the ask key ([`crate::ask::AskKey`]), which replicas
//! that share tasks already share (`bermd --ask-key FILE`): no second secret to hand out, and
//! a key of its own, so a sealed task is never mistaken for a sealed request state. Each
//! sealed value is ChaCha20-Poly1305 with a random nonce, bound to its task id and to what it
//! is (`detail`, or the answer under a key), so a row cannot be moved to another task or
//! field. Each carries a short id of the key that sealed it, so a replica given another key
//! says so instead of reporting tampering.
//!
//! What it does not stop: whoever can write the table can delete a row, or put back an older
//! sealed value of the same task and field (a task's earlier state).

use ring::aead::{Aad, CHACHA20_POLY1305, LessSafeKey, Nonce, UnboundKey};
use ring::hkdf;
use ring::rand::{SecureRandom, SystemRandom};

/// First byte of a sealed value: its form.
const VERSION: u8 = 1;

/// Bytes of the key id that follows the version.
const KEY_ID_BYTES: usize = 8;

/// Version, key id, nonce; then the ciphertext and its 16-byte tag.
const HEADER: usize = 1 + KEY_ID_BYTES + 12;

/// The tag's bytes.
const TAG: usize = 16;

/// The HKDF salt: what the derived keys are for.
const SALT: &[u8] = b"berm tasks at rest";

/// Why a sealed value did not open.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum UnsealError {
    /// Sealed by a replica holding another key.
    #[error(
        "task {task}: its {what} in PostgreSQL was sealed by a replica with another key (key id \
         {theirs}; this replica's is {ours}): give every replica that shares the database the \
         same key file (bermd --ask-key FILE)"
    )]
    OtherKey {
        /// The task.
        task: String,
        /// Which of its values.
        what: String,
        /// The id of the key that sealed it.
        theirs: String,
        /// This replica's key id.
        ours: String,
    },
    /// Changed, cut, made up, or moved from another task or field.
    #[error(
        "task {task}: its {what} in PostgreSQL failed its integrity check: it was changed, or \
         not sealed by bermd for this task"
    )]
    Integrity {
        /// The task.
        task: String,
        /// Which of its values.
        what: String,
    },
}

/// The system gave no random bytes for a nonce.
#[derive(Debug, thiserror::Error)]
#[error("sealing task {task}'s {what}: the system gave no random bytes")]
pub struct SealError {
    /// The task.
    pub task: String,
    /// Which of its values.
    pub what: String,
}

/// The key that seals tasks at rest; derived from the ask key.
pub struct TaskSeal {
    key: LessSafeKey,
    id: [u8; KEY_ID_BYTES],
    random: SystemRandom,
}

impl std::fmt::Debug for TaskSeal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TaskSeal({})", hex::encode(self.id))
    }
}

/// An HKDF output length.
struct Len(usize);

impl hkdf::KeyType for Len {
    fn len(&self) -> usize {
        self.0
    }
}

impl TaskSeal {
    /// The sealing key and its id, derived from the 32 bytes of the ask key.
    pub fn derive(secret: &[u8; 32]) -> TaskSeal {
        let prk = hkdf::Salt::new(hkdf::HKDF_SHA256, SALT).extract(secret);
        // Both lengths are far below HKDF-SHA256's 8160 bytes, so neither expand can fail.
        let key = prk
            .expand(&[b"seal/1".as_slice()], &CHACHA20_POLY1305)
            .map(UnboundKey::from)
            .unwrap_or_else(|_| unreachable!("a 32-byte HKDF output"));
        let mut id = [0u8; KEY_ID_BYTES];
        prk.expand(&[b"key id/1".as_slice()], Len(KEY_ID_BYTES))
            .and_then(|okm| okm.fill(&mut id))
            .unwrap_or_else(|_| unreachable!("an 8-byte HKDF output"));
        TaskSeal {
            key: LessSafeKey::new(key),
            id,
            random: SystemRandom::new(),
        }
    }

    /// `plain`, the `what` of task `task`, sealed.
    ///
    /// # Errors
    /// [`SealError`] when the system gives no random bytes for the nonce.
    pub fn seal(&self, task: &str, what: &str, plain: &[u8]) -> Result<Vec<u8>, SealError> {
        let mut nonce = [0u8; 12];
        self.random.fill(&mut nonce).map_err(|_| SealError {
            task: task.to_string(),
            what: what.to_string(),
        })?;
        let mut sealed = Vec::with_capacity(HEADER + plain.len() + TAG);
        sealed.push(VERSION);
        sealed.extend_from_slice(&self.id);
        sealed.extend_from_slice(&nonce);
        let mut body = plain.to_vec();
        // Sealing fails only for inputs past ChaCha20's 256 GiB; a task's value is capped far
        // below that (its result by the result cap, answers at 1 MiB).
        self.key
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(associated(task, what)),
                &mut body,
            )
            .unwrap_or_else(|_| unreachable!("a task's value is far below 256 GiB"));
        sealed.extend_from_slice(&body);
        Ok(sealed)
    }

    /// What `sealed`, the `what` of task `task`, holds, if this key sealed it for them.
    ///
    /// # Errors
    /// [`UnsealError`] naming why not.
    pub fn open(&self, task: &str, what: &str, sealed: &[u8]) -> Result<Vec<u8>, UnsealError> {
        let integrity = || UnsealError::Integrity {
            task: task.to_string(),
            what: what.to_string(),
        };
        if sealed.len() < HEADER + TAG || sealed[0] != VERSION {
            return Err(integrity());
        }
        let id = &sealed[1..1 + KEY_ID_BYTES];
        if id != self.id {
            return Err(UnsealError::OtherKey {
                task: task.to_string(),
                what: what.to_string(),
                theirs: hex::encode(id),
                ours: hex::encode(self.id),
            });
        }
        let nonce: [u8; 12] = sealed[1 + KEY_ID_BYTES..HEADER]
            .try_into()
            .map_err(|_| integrity())?;
        let mut body = sealed[HEADER..].to_vec();
        let plain = self
            .key
            .open_in_place(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(associated(task, what)),
                &mut body,
            )
            .map_err(|_| integrity())?;
        let len = plain.len();
        body.truncate(len);
        Ok(body)
    }
}

/// What a sealed value is bound to: its task and what it is.
fn associated(task: &str, what: &str) -> Vec<u8> {
    let mut aad = b"berm-task/1\0".to_vec();
    aad.extend_from_slice(task.as_bytes());
    aad.push(0);
    aad.extend_from_slice(what.as_bytes());
    aad
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_opens_only_unchanged_for_its_task_and_field_under_its_key() {
        let seal = TaskSeal::derive(&[7u8; 32]);
        let sealed = seal.seal("t1", "detail", b"the result").unwrap();
        assert!(
            !sealed.windows(6).any(|w| w == b"result"),
            "the plaintext shows"
        );
        assert_eq!(seal.open("t1", "detail", &sealed).unwrap(), b"the result");
        // The same secret gives the same key: another replica opens it.
        let again = TaskSeal::derive(&[7u8; 32]);
        assert_eq!(again.open("t1", "detail", &sealed).unwrap(), b"the result");

        let integrity = |task: &str, what: &str| UnsealError::Integrity {
            task: task.into(),
            what: what.into(),
        };
        assert_eq!(
            seal.open("t2", "detail", &sealed),
            Err(integrity("t2", "detail"))
        );
        assert_eq!(
            seal.open("t1", "answer a", &sealed),
            Err(integrity("t1", "answer a"))
        );
        let mut flipped = sealed.clone();
        *flipped.last_mut().unwrap() ^= 1;
        assert_eq!(
            seal.open("t1", "detail", &flipped),
            Err(integrity("t1", "detail"))
        );
        assert_eq!(
            seal.open("t1", "detail", &sealed[..HEADER + TAG - 1]),
            Err(integrity("t1", "detail"))
        );
        assert_eq!(
            seal.open("t1", "detail", b""),
            Err(integrity("t1", "detail"))
        );

        let other = TaskSeal::derive(&[8u8; 32]);
        let refused = other.open("t1", "detail", &sealed).unwrap_err();
        assert!(
            matches!(refused, UnsealError::OtherKey { .. }),
            "{refused:?}"
        );
        assert!(
            refused.to_string().contains("bermd --ask-key FILE"),
            "{refused}"
        );
    }
}
