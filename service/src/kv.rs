//! A program's keyspace: an in-memory map backed by an append-only log that
//! is fsynced before a write is acknowledged, so every `kv.put` a program saw
//! succeed survives `kill -9` and power loss.
//!
//! Each log record is `crc32 | op | key_len | value_len | key | value` (the
//! integers u32 little-endian, the crc over everything after it). On open the
//! log is replayed:
//!
//! - a torn **last** record — what a crash in the middle of an append leaves,
//!   never acknowledged — is cut off;
//! - a record that fails its checksum with more of the log after it is
//!   corruption, not a crash: the log is left exactly as it is and the
//!   keyspace is not served ([`KvError::Corrupt`] says where and how to
//!   recover), because truncating there would silently drop acknowledged
//!   records that follow.
//!
//! When the log holds much more than the live data it is compacted: the live
//! records go to a temporary file, which is synced and opened for appending
//! *before* it is renamed over the log, so the store never switches to a file
//! it cannot write, and never keeps appending to one that has been replaced.
//!
//! Reads never wait on the disk: the map has its own lock, and a write holds
//! it only to apply a record that is already durable.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

const OP_PUT: u8 = 1;
const OP_DELETE: u8 = 2;
const HEADER: usize = 4 + 1 + 4 + 4;

/// What one key costs against [`KvCaps::max_total_bytes`] beyond the bytes
/// of its key and value: its log record's header and the map's bookkeeping.
/// So a keyspace of empty keys is bounded too.
pub const PER_KEY_BYTES: usize = 64;

/// The log is not compacted below this size.
const MIN_COMPACT_BYTES: u64 = 1 << 20;

/// Bounds on one program's keyspace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvCaps {
    /// Largest key, in bytes.
    pub max_key_bytes: usize,
    /// Largest value, in bytes.
    pub max_value_bytes: usize,
    /// Largest total of keys, values and [`PER_KEY_BYTES`] per key.
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

impl KvCaps {
    /// Checks `key` and `value` against the per-item caps, before anything
    /// is copied (either backend).
    pub fn check(&self, key: &[u8], value: Option<&[u8]>) -> Result<(), KvError> {
        if key.len() > self.max_key_bytes {
            return Err(KvError::TooLarge {
                what: "the key",
                size: key.len(),
                cap: self.max_key_bytes,
            });
        }
        if let Some(value) = value
            && value.len() > self.max_value_bytes
        {
            return Err(KvError::TooLarge {
                what: "the value",
                size: value.len(),
                cap: self.max_value_bytes,
            });
        }
        Ok(())
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
    /// A record in the middle of the log fails its checksum. The log is
    /// kept as it is and the keyspace is not served until a person decides.
    #[error(
        "the keyspace log {} is corrupt at byte {offset} of {len}: a record there fails its \
         checksum and is not the last one, so bermd keeps the file untouched and serves no kv \
         for this program. To recover, stop bermd and either truncate the log to {offset} bytes \
         (keeping every record before the damage: `truncate -s {offset} {}`) or move it aside \
         (starting empty), then start bermd again",
        path.display(),
        path.display()
    )]
    Corrupt {
        /// The log.
        path: PathBuf,
        /// Where the bad record starts.
        offset: u64,
        /// The log's length.
        len: u64,
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

/// A program's keyspace as its kv syscalls reach it, in whichever backend bermd keeps it,
/// or why it is not served. Both backends answer with the same semantics and the same
/// errors (tested by one suite against both, `tests/kv.rs`).
#[derive(Clone)]
pub enum Keyspace {
    /// Its log on this machine's disk, served from memory.
    Log(Arc<KvStore>),
    /// Its rows in PostgreSQL (`bermd --kv-url-file`), shared with every replica: every
    /// operation goes to the database.
    Postgres(berm_kv_postgres::Keyspace, KvCaps),
    /// Not served: every operation fails with this message (for example a log corrupt in
    /// the middle, with how to recover).
    Unavailable(Arc<str>),
}

/// Why a keyspace operation failed, as a program is told: the ABI code and a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyspaceError {
    /// `too_large` past a cap, `io` for anything the program cannot fix.
    pub code: berm_abi::word::ErrorCode,
    /// What happened, and what to do where someone can.
    pub message: String,
}

impl From<KvError> for KeyspaceError {
    fn from(error: KvError) -> Self {
        use berm_abi::word::ErrorCode;
        let code = match error {
            KvError::TooLarge { .. } => ErrorCode::TooLarge,
            KvError::Open { .. } | KvError::Write { .. } | KvError::Corrupt { .. } => ErrorCode::Io,
        };
        KeyspaceError {
            code,
            message: berm_errors::chain(&error),
        }
    }
}

impl From<berm_kv_postgres::PgKvError> for KeyspaceError {
    fn from(error: berm_kv_postgres::PgKvError) -> Self {
        use berm_abi::word::ErrorCode;
        let code = match error {
            berm_kv_postgres::PgKvError::TooLarge { .. } => ErrorCode::TooLarge,
            _ => ErrorCode::Io,
        };
        KeyspaceError {
            code,
            message: berm_errors::chain(&error),
        }
    }
}

impl Keyspace {
    fn unavailable(why: &str) -> KeyspaceError {
        KeyspaceError {
            code: berm_abi::word::ErrorCode::Io,
            message: why.to_string(),
        }
    }

    /// Checks `key` and `value` against the per-item caps, before anything is copied.
    pub fn check(&self, key: &[u8], value: Option<&[u8]>) -> Result<(), KvError> {
        match self {
            Keyspace::Log(kv) => kv.check(key, value),
            Keyspace::Postgres(_, caps) => caps.check(key, value),
            Keyspace::Unavailable(_) => Ok(()),
        }
    }

    /// The value under `key`.
    pub async fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, KeyspaceError> {
        match self {
            Keyspace::Log(kv) => Ok(kv.get(key)),
            Keyspace::Postgres(kv, _) => Ok(kv.get(key.to_vec()).await?),
            Keyspace::Unavailable(why) => Err(Self::unavailable(why)),
        }
    }

    /// Stores `value` under `key`: durable (the log synced, or the transaction committed)
    /// when it returns `Ok`.
    pub async fn put(&self, key: Vec<u8>, value: Vec<u8>) -> Result<(), KeyspaceError> {
        self.check(&key, Some(&value))?;
        match self {
            Keyspace::Log(kv) => {
                let kv = kv.clone();
                blocking(move || kv.put(&key, &value)).await
            }
            Keyspace::Postgres(kv, _) => Ok(kv.put(key, value).await?),
            Keyspace::Unavailable(why) => Err(Self::unavailable(why)),
        }
    }

    /// Deletes `key`; returns whether it existed. Durable when it returns.
    pub async fn delete(&self, key: Vec<u8>) -> Result<bool, KeyspaceError> {
        self.check(&key, None)?;
        match self {
            Keyspace::Log(kv) => {
                let kv = kv.clone();
                blocking(move || kv.delete(&key)).await
            }
            Keyspace::Postgres(kv, _) => Ok(kv.delete(key).await?),
            Keyspace::Unavailable(why) => Err(Self::unavailable(why)),
        }
    }

    /// Every key starting with `prefix`, in byte order.
    pub async fn list(&self, prefix: &[u8]) -> Result<Vec<Vec<u8>>, KeyspaceError> {
        match self {
            Keyspace::Log(kv) => Ok(kv.list(prefix)),
            Keyspace::Postgres(kv, _) => Ok(kv.list(prefix.to_vec()).await?),
            Keyspace::Unavailable(why) => Err(Self::unavailable(why)),
        }
    }
}

/// A log write on tokio's blocking threads: it waits on the disk.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, KvError> + Send + 'static,
) -> Result<T, KeyspaceError> {
    match tokio::task::spawn_blocking(work).await {
        Ok(result) => Ok(result?),
        Err(e) => Err(KeyspaceError {
            code: berm_abi::word::ErrorCode::Io,
            message: format!("the keyspace write failed in bermd: {e}"),
        }),
    }
}

/// One program's keyspace.
pub struct KvStore {
    path: PathBuf,
    caps: KvCaps,
    /// Held for a whole write (append, fsync, maybe compaction), so writes
    /// are applied in log order.
    log: Mutex<Log>,
    /// Held only to read, or to apply a record that is already durable.
    map: RwLock<Live>,
}

struct Log {
    file: File,
    /// Bytes of whole records in the log.
    len: u64,
    /// A failed append may have left part of a record after `len`; it is cut
    /// off before anything else is appended.
    dirty: bool,
}

#[derive(Default)]
struct Live {
    map: BTreeMap<Vec<u8>, Vec<u8>>,
    /// Keys, values and [`PER_KEY_BYTES`] per key.
    bytes: usize,
}

fn cost(key: &[u8], value: &[u8]) -> usize {
    key.len() + value.len() + PER_KEY_BYTES
}

impl KvStore {
    /// Opens (or creates) the keyspace logged at `path`, replaying the log.
    pub fn open(path: &Path, caps: KvCaps) -> Result<KvStore, KvError> {
        let fail = |source| KvError::Open {
            path: path.to_path_buf(),
            source,
        };
        let existed = path.exists();
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .mode(0o600)
            .open(path)
            .map_err(fail)?;
        if !existed {
            // The new name must survive a crash along with what is written
            // to it.
            file.sync_all().map_err(fail)?;
            berm_durable::sync_dir(path.parent().unwrap_or(Path::new("."))).map_err(fail)?;
        }
        let mut log = Vec::new();
        file.read_to_end(&mut log).map_err(fail)?;
        let replayed = replay(&log, &caps);
        let good = match replayed.end {
            End::Clean => log.len(),
            End::TornTail(at) => {
                tracing::warn!(
                    log = %path.display(),
                    kept = at,
                    dropped = log.len() - at,
                    "keyspace log ends in a torn record (a crash mid-write, never acknowledged); cutting it off"
                );
                file.set_len(at as u64).map_err(fail)?;
                file.sync_all().map_err(fail)?;
                at
            }
            End::Corrupt(at) => {
                return Err(KvError::Corrupt {
                    path: path.to_path_buf(),
                    offset: at as u64,
                    len: log.len() as u64,
                });
            }
        };
        let bytes = replayed.map.iter().map(|(k, v)| cost(k, v)).sum();
        Ok(KvStore {
            path: path.to_path_buf(),
            caps,
            log: Mutex::new(Log {
                file,
                len: good as u64,
                dirty: false,
            }),
            map: RwLock::new(Live {
                map: replayed.map,
                bytes,
            }),
        })
    }

    /// The log's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// How many keys hold a value.
    pub fn keys(&self) -> usize {
        self.read().map.len()
    }

    fn log(&self) -> MutexGuard<'_, Log> {
        // A panic while holding the lock leaves at worst `dirty` set or a
        // record unapplied to the map; the log is the truth on restart.
        self.log.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Live> {
        self.map.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Live> {
        self.map.write().unwrap_or_else(|p| p.into_inner())
    }

    /// The value under `key`.
    pub fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.read().map.get(key).cloned()
    }

    /// Checks `key` and `value` against the per-item caps, before anything
    /// is copied.
    pub fn check(&self, key: &[u8], value: Option<&[u8]>) -> Result<(), KvError> {
        self.caps.check(key, value)
    }

    /// Stores `value` under `key`; durable when this returns `Ok`.
    pub fn put(&self, key: &[u8], value: &[u8]) -> Result<(), KvError> {
        self.check(key, Some(value))?;
        let mut log = self.log();
        let total = {
            let live = self.read();
            let old = live.map.get(key).map_or(0, |v| cost(key, v));
            live.bytes - old + cost(key, value)
        };
        if total > self.caps.max_total_bytes {
            return Err(KvError::TooLarge {
                what: "the keyspace (keys, values and 64 bytes per key)",
                size: total,
                cap: self.caps.max_total_bytes,
            });
        }
        self.append(&mut log, OP_PUT, key, value)?;
        {
            let mut live = self.write();
            live.map.insert(key.to_vec(), value.to_vec());
            live.bytes = total;
        }
        self.maybe_compact(&mut log);
        Ok(())
    }

    /// Deletes `key`; returns whether it existed. Durable when it returns.
    pub fn delete(&self, key: &[u8]) -> Result<bool, KvError> {
        self.check(key, None)?;
        let mut log = self.log();
        let Some(old) = self.read().map.get(key).map(|v| cost(key, v)) else {
            return Ok(false);
        };
        self.append(&mut log, OP_DELETE, key, &[])?;
        {
            let mut live = self.write();
            live.map.remove(key);
            live.bytes -= old;
        }
        self.maybe_compact(&mut log);
        Ok(true)
    }

    /// Every key starting with `prefix`, sorted.
    pub fn list(&self, prefix: &[u8]) -> Vec<Vec<u8>> {
        self.read()
            .map
            .range(prefix.to_vec()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(k, _)| k.clone())
            .collect()
    }

    fn append(&self, log: &mut Log, op: u8, key: &[u8], value: &[u8]) -> Result<(), KvError> {
        let fail = |source| KvError::Write {
            path: self.path.clone(),
            source,
        };
        if log.dirty {
            // Part of a failed record may follow the last whole one; an
            // append after it would turn a torn tail into corruption in the
            // middle. Nothing is appended until it is gone.
            log.file
                .set_len(log.len)
                .and_then(|()| log.file.sync_data())
                .map_err(fail)?;
            log.dirty = false;
        }
        let record = encode(op, key, value);
        let result = log
            .file
            .write_all(&record)
            .and_then(|()| log.file.sync_data());
        if let Err(source) = result {
            log.dirty = log
                .file
                .set_len(log.len)
                .and_then(|()| log.file.sync_data())
                .is_err();
            return Err(fail(source));
        }
        log.len += record.len() as u64;
        Ok(())
    }

    /// Rewrites the log as one put per live key once it is mostly garbage.
    /// A failure at any step leaves the old log in place and in use, which
    /// is still correct: the write that triggered it is already durable.
    fn maybe_compact(&self, log: &mut Log) {
        let fresh = {
            let live = self.read();
            let live_log = (live.bytes + live.map.len() * HEADER) as u64;
            if log.len < MIN_COMPACT_BYTES || log.len < live_log * 2 {
                return;
            }
            let mut fresh = Vec::with_capacity(live_log as usize);
            for (k, v) in &live.map {
                fresh.extend_from_slice(&encode(OP_PUT, k, v));
            }
            fresh
        };
        match self.switch_to(&fresh) {
            Ok(file) => {
                log.file = file;
                log.len = fresh.len() as u64;
                log.dirty = false;
            }
            Err(e) => tracing::warn!(
                log = %self.path.display(),
                "keyspace compaction failed, the current log stays in use: {e}"
            ),
        }
    }

    /// Writes `records` to a temporary file, syncs it, opens it for
    /// appending and only then renames it over the log: the returned file
    /// is the log, or nothing changed.
    fn switch_to(&self, records: &[u8]) -> std::io::Result<File> {
        let dir = self.path.parent().unwrap_or(Path::new("."));
        let temp = dir.join(".kv.log.compacting");
        let result = (|| {
            let mut file = OpenOptions::new()
                .read(true)
                .append(true)
                .create(true)
                .truncate(false)
                .mode(0o600)
                .open(&temp)?;
            file.set_len(0)?;
            file.write_all(records)?;
            file.sync_all()?;
            std::fs::rename(&temp, &self.path)?;
            Ok(file)
        })();
        match result {
            Ok(file) => {
                // The rename is what a crash might lose; losing it keeps the
                // old log, which holds the same live data.
                if let Err(e) = berm_durable::sync_dir(dir) {
                    tracing::warn!(log = %self.path.display(), "could not sync the directory after compaction: {e}");
                }
                Ok(file)
            }
            Err(e) => {
                let _ = std::fs::remove_file(&temp);
                Err(e)
            }
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

/// How a replay ended.
#[derive(Debug, PartialEq, Eq)]
enum End {
    /// Every byte is a whole, valid record.
    Clean,
    /// The last record, starting here, is torn: cut it off.
    TornTail(usize),
    /// The record starting here is bad and is not the last one.
    Corrupt(usize),
}

struct Replayed {
    map: BTreeMap<Vec<u8>, Vec<u8>>,
    end: End,
}

/// Replays `log`. A bad record is a torn tail only when it is the last
/// thing in the log: it runs past the end, or it ends exactly at the end,
/// and is no longer than one record can be under `caps` (an append writes
/// one record at a time). Anything else is corruption.
/// How many keys the log at `path` holds, replayed without opening it as a store or
/// changing it (a torn or corrupt record ends the count).
pub fn count_keys(path: &Path, caps: &KvCaps) -> std::io::Result<usize> {
    let log = std::fs::read(path)?;
    Ok(replay(&log, caps).map.len())
}

fn replay(log: &[u8], caps: &KvCaps) -> Replayed {
    let mut map = BTreeMap::new();
    let mut at = 0;
    let max_record = HEADER + caps.max_key_bytes + caps.max_value_bytes;
    let end = loop {
        let rest = log.len() - at;
        if rest == 0 {
            break End::Clean;
        }
        if rest < HEADER {
            break End::TornTail(at);
        }
        let field = |i: usize| u32::from_le_bytes([log[i], log[i + 1], log[i + 2], log[i + 3]]);
        let crc = field(at);
        let op = log[at + 4];
        let key_len = field(at + 5) as usize;
        let value_len = field(at + 9) as usize;
        let end = at + HEADER + key_len + value_len;
        let whole = end <= log.len() && crc32fast::hash(&log[at + 4..end]) == crc;
        if !whole || !matches!(op, OP_PUT | OP_DELETE) {
            let last = end >= log.len() && rest <= max_record;
            break if last && !whole {
                End::TornTail(at)
            } else {
                End::Corrupt(at)
            };
        }
        let key = log[at + HEADER..at + HEADER + key_len].to_vec();
        if op == OP_PUT {
            map.insert(key, log[at + HEADER + key_len..end].to_vec());
        } else {
            map.remove(&key);
        }
        at = end;
    };
    Replayed { map, end }
}

#[cfg(test)]
mod tests;
