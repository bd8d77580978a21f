//! A program's keyspace: an in-memory map backed by an append-only log that
//! is fsynced before a write is acknowledged, so every `kv.put` a program saw
//! succeed survives `kill -9` and power loss.
//!
//! Each log record is `crc32 | op | key_len | value_len | key | value` (the
//! integers u32 little-endian, the crc over everything after it). Replay
//! stops at the first record that is torn or fails its checksum — what a
//! crash in the middle of an append leaves — and truncates the log there;
//! nothing after it was ever acknowledged. When the log holds much more than
//! the live data it is compacted into a fresh log with the same atomic
//! rename every other bermd write uses.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::home;

const OP_PUT: u8 = 1;
const OP_DELETE: u8 = 2;
const HEADER: usize = 4 + 1 + 4 + 4;

/// Bounds on one program's keyspace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvCaps {
    /// Largest key, in bytes.
    pub max_key_bytes: usize,
    /// Largest value, in bytes.
    pub max_value_bytes: usize,
    /// Largest total of keys and values, in bytes.
    pub max_total_bytes: usize,
}

impl Default for KvCaps {
    fn default() -> Self {
        KvCaps {
            max_key_bytes: 1 << 10,
            max_value_bytes: 1 << 20,
            max_total_bytes: 64 << 20,
        }
    }
}

/// Why a keyspace operation failed.
#[derive(Debug, thiserror::Error)]
pub enum KvError {
    /// The log could not be opened or replayed.
    #[error("could not open the keyspace log {}", path.display())]
    Open {
        /// The log.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A write could not be made durable; it was not applied.
    #[error("could not write the keyspace log {}", path.display())]
    Write {
        /// The log.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The key, the value or the keyspace would exceed its cap.
    #[error("{what} is {size} bytes, over the cap of {cap} bytes")]
    TooLarge {
        /// What is too large.
        what: &'static str,
        /// Its size.
        size: usize,
        /// The cap.
        cap: usize,
    },
}

/// One program's keyspace.
pub struct KvStore {
    path: PathBuf,
    caps: KvCaps,
    inner: Mutex<Inner>,
}

struct Inner {
    map: BTreeMap<Vec<u8>, Vec<u8>>,
    file: File,
    log_bytes: u64,
    live_bytes: usize,
}

impl KvStore {
    /// Opens (or creates) the keyspace logged at `path`, replaying the log.
    pub fn open(path: &Path, caps: KvCaps) -> Result<KvStore, KvError> {
        let fail = |source| KvError::Open {
            path: path.to_path_buf(),
            source,
        };
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .mode(0o600)
            .open(path)
            .map_err(fail)?;
        let mut log = Vec::new();
        file.read_to_end(&mut log).map_err(fail)?;
        let (map, good) = replay(&log);
        if good < log.len() {
            tracing::warn!(
                log = %path.display(),
                kept = good,
                dropped = log.len() - good,
                "keyspace log ends in a torn or corrupt record; truncating to the last whole one"
            );
            file.set_len(good as u64).map_err(fail)?;
            file.sync_all().map_err(fail)?;
        }
        let live_bytes = map.iter().map(|(k, v)| k.len() + v.len()).sum();
        Ok(KvStore {
            path: path.to_path_buf(),
            caps,
            inner: Mutex::new(Inner {
                map,
                file,
                log_bytes: good as u64,
                live_bytes,
            }),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave the map and the log
        // disagreeing in a way that matters: the log is the truth on restart.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The value under `key`.
    pub fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.lock().map.get(key).cloned()
    }

    /// Stores `value` under `key`; durable when this returns `Ok`.
    pub fn put(&self, key: &[u8], value: &[u8]) -> Result<(), KvError> {
        self.check_key(key)?;
        if value.len() > self.caps.max_value_bytes {
            return Err(KvError::TooLarge {
                what: "the value",
                size: value.len(),
                cap: self.caps.max_value_bytes,
            });
        }
        let mut inner = self.lock();
        let old = inner.map.get(key).map_or(0, |v| key.len() + v.len());
        let total = inner.live_bytes - old + key.len() + value.len();
        if total > self.caps.max_total_bytes {
            return Err(KvError::TooLarge {
                what: "the keyspace",
                size: total,
                cap: self.caps.max_total_bytes,
            });
        }
        self.append(&mut inner, OP_PUT, key, value)?;
        inner.map.insert(key.to_vec(), value.to_vec());
        inner.live_bytes = total;
        self.maybe_compact(&mut inner);
        Ok(())
    }

    /// Deletes `key`; returns whether it existed. Durable when it returns.
    pub fn delete(&self, key: &[u8]) -> Result<bool, KvError> {
        self.check_key(key)?;
        let mut inner = self.lock();
        let Some(old) = inner.map.get(key).map(Vec::len) else {
            return Ok(false);
        };
        self.append(&mut inner, OP_DELETE, key, &[])?;
        inner.map.remove(key);
        inner.live_bytes -= key.len() + old;
        self.maybe_compact(&mut inner);
        Ok(true)
    }

    /// Every key starting with `prefix`, sorted.
    pub fn list(&self, prefix: &[u8]) -> Vec<Vec<u8>> {
        self.lock()
            .map
            .range(prefix.to_vec()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(k, _)| k.clone())
            .collect()
    }

    fn check_key(&self, key: &[u8]) -> Result<(), KvError> {
        if key.len() > self.caps.max_key_bytes {
            return Err(KvError::TooLarge {
                what: "the key",
                size: key.len(),
                cap: self.caps.max_key_bytes,
            });
        }
        Ok(())
    }

    fn append(&self, inner: &mut Inner, op: u8, key: &[u8], value: &[u8]) -> Result<(), KvError> {
        let record = encode(op, key, value);
        let result = inner
            .file
            .write_all(&record)
            .and_then(|()| inner.file.sync_data());
        if let Err(source) = result {
            // Cut off whatever part of the record reached the file, so the
            // log stays a sequence of whole records.
            let _ = inner.file.set_len(inner.log_bytes);
            return Err(KvError::Write {
                path: self.path.clone(),
                source,
            });
        }
        inner.log_bytes += record.len() as u64;
        Ok(())
    }

    /// Rewrites the log as one put per live key once it is mostly garbage.
    /// A failure leaves the old log in place, which is still correct.
    fn maybe_compact(&self, inner: &mut Inner) {
        const MIN_LOG_BYTES: u64 = 1 << 20;
        let live_log = (inner.live_bytes + inner.map.len() * HEADER) as u64;
        if inner.log_bytes < MIN_LOG_BYTES || inner.log_bytes < live_log * 2 {
            return;
        }
        let mut fresh = Vec::with_capacity(live_log as usize);
        for (k, v) in &inner.map {
            fresh.extend_from_slice(&encode(OP_PUT, k, v));
        }
        let reopened = home::write_atomic(&self.path, &fresh)
            .map_err(|e| std::io::Error::other(e.to_string()))
            .and_then(|()| OpenOptions::new().read(true).append(true).open(&self.path));
        match reopened {
            Ok(file) => {
                inner.file = file;
                inner.log_bytes = fresh.len() as u64;
            }
            Err(e) => tracing::warn!(log = %self.path.display(), "keyspace compaction failed: {e}"),
        }
    }
}

fn encode(op: u8, key: &[u8], value: &[u8]) -> Vec<u8> {
    let mut body = Vec::with_capacity(HEADER + key.len() + value.len());
    body.extend_from_slice(&[0; 4]);
    body.push(op);
    // Keys and values are bounded by KvCaps far below 4 GiB.
    body.extend_from_slice(&(key.len() as u32).to_le_bytes());
    body.extend_from_slice(&(value.len() as u32).to_le_bytes());
    body.extend_from_slice(key);
    body.extend_from_slice(value);
    let crc = crc32fast::hash(&body[4..]);
    body[..4].copy_from_slice(&crc.to_le_bytes());
    body
}

/// Replays `log`; returns the map and how many bytes were whole records.
fn replay(log: &[u8]) -> (BTreeMap<Vec<u8>, Vec<u8>>, usize) {
    let mut map = BTreeMap::new();
    let mut at = 0;
    while log.len() - at >= HEADER {
        let field = |i: usize| u32::from_le_bytes([log[i], log[i + 1], log[i + 2], log[i + 3]]);
        let crc = field(at);
        let op = log[at + 4];
        let key_len = field(at + 5) as usize;
        let value_len = field(at + 9) as usize;
        let end = at + HEADER + key_len + value_len;
        if end > log.len() || crc32fast::hash(&log[at + 4..end]) != crc {
            break;
        }
        let key = log[at + HEADER..at + HEADER + key_len].to_vec();
        match op {
            OP_PUT => {
                map.insert(key, log[at + HEADER + key_len..end].to_vec());
            }
            OP_DELETE => {
                map.remove(&key);
            }
            _ => break,
        }
        at = end;
    }
    (map, at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_survive_reopen_and_a_torn_tail_is_cut() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kv.log");
        let kv = KvStore::open(&path, KvCaps::default()).unwrap();
        kv.put(b"a", b"1").unwrap();
        kv.put(b"b", b"2").unwrap();
        kv.put(b"a", b"3").unwrap();
        assert!(kv.delete(b"b").unwrap());
        assert!(!kv.delete(b"b").unwrap());
        drop(kv);
        // A crash mid-append leaves half a record.
        let mut file = OpenOptions::new().append(true).open(&path).unwrap();
        file.write_all(&encode(OP_PUT, b"c", b"torn")[..10])
            .unwrap();
        drop(file);
        let kv = KvStore::open(&path, KvCaps::default()).unwrap();
        assert_eq!(kv.get(b"a"), Some(b"3".to_vec()));
        assert_eq!(kv.get(b"b"), None);
        assert_eq!(kv.list(b""), vec![b"a".to_vec()]);
        kv.put(b"c", b"ok").unwrap();
        drop(kv);
        let kv = KvStore::open(&path, KvCaps::default()).unwrap();
        assert_eq!(kv.list(b""), vec![b"a".to_vec(), b"c".to_vec()]);
    }

    #[test]
    fn caps_are_enforced_with_the_sizes() {
        let dir = tempfile::tempdir().unwrap();
        let caps = KvCaps {
            max_key_bytes: 4,
            max_value_bytes: 8,
            max_total_bytes: 20,
        };
        let kv = KvStore::open(&dir.path().join("kv.log"), caps).unwrap();
        let err = kv.put(b"toolong", b"x").unwrap_err();
        assert_eq!(
            err.to_string(),
            "the key is 7 bytes, over the cap of 4 bytes"
        );
        let err = kv.put(b"k", &[0; 9]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "the value is 9 bytes, over the cap of 8 bytes"
        );
        kv.put(b"k1", &[0; 8]).unwrap();
        kv.put(b"k2", &[0; 8]).unwrap();
        let err = kv.put(b"k3", &[0; 8]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "the keyspace is 30 bytes, over the cap of 20 bytes"
        );
        kv.put(b"k1", &[0; 1]).unwrap();
    }

    #[test]
    fn compaction_keeps_the_live_data() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kv.log");
        let kv = KvStore::open(&path, KvCaps::default()).unwrap();
        for i in 0..300u32 {
            kv.put(b"same", &vec![i as u8; 8 << 10]).unwrap();
        }
        kv.put(b"other", b"v").unwrap();
        assert!(std::fs::metadata(&path).unwrap().len() < 2 << 20);
        drop(kv);
        let kv = KvStore::open(&path, KvCaps::default()).unwrap();
        assert_eq!(kv.get(b"same"), Some(vec![43u8; 8 << 10]));
        assert_eq!(kv.get(b"other"), Some(b"v".to_vec()));
    }
}
