//! The receipt log bermd writes: receipts appended before each reply, made durable and
//! sealed by signed checkpoints in groups, off the calls' path.
//!
//! A call appends its receipt with one `write(2)` under the log's lock (the lock assigns the
//! sequence number and the previous receipt's hash, so the file order is the chain order).
//! Nothing on that path signs or syncs: a thread wakes every [`LogOptions::interval`] (or
//! when [`LogOptions::max_batch`] receipts wait), `fdatasync`s the file, signs one
//! checkpoint over the receipts written since the last one, and appends it.
//!
//! What survives what:
//! - bermd killed (SIGKILL, a panic): every receipt written is in the page cache, so every
//!   replied call's receipt is kept. Those not yet sealed are sealed when bermd next opens
//!   the directory, after it has checked that they chain.
//! - the machine crashing: receipts written in the last interval (and their checkpoint) may
//!   be lost; a line torn by the crash is cut at the next open, with a warning.

use std::fs::File;
use std::io::{Read as _, Seek as _, SeekFrom, Write as _};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use berm_dsse::{HostKey, STATEMENT_TYPE};

use crate::format::{
    CHECKPOINT_FORMAT, CHECKPOINT_PREDICATE, Call, Checkpoint, DigestSet, RECEIPT_FORMAT,
    RECEIPT_PREDICATE, Receipt, ReceiptStatement, Statement, Subject, now_rfc3339, sha256_hex,
};

/// The lock file that keeps two bermds off one directory.
pub const LOCK_FILE: &str = ".lock";
/// How log files are named: `receipts-<first seq, 20 digits>.jsonl`.
const FILE_PREFIX: &str = "receipts-";
const FILE_SUFFIX: &str = ".jsonl";
/// The longest line the log reads back; a receipt is a few KiB at most (its lists are capped).
pub const MAX_LINE_BYTES: usize = 1 << 20;

/// How the log groups its work.
#[derive(Debug, Clone, Copy)]
pub struct LogOptions {
    /// How often written receipts are synced and sealed: the most a machine crash loses.
    pub interval: Duration,
    /// Most receipts one checkpoint seals; more waiting wake the sealer at once.
    pub max_batch: usize,
    /// A file past this size is closed (synced and sealed) and the next receipt starts a
    /// new one.
    pub max_file_bytes: u64,
}

impl Default for LogOptions {
    fn default() -> Self {
        LogOptions {
            interval: Duration::from_millis(200),
            max_batch: 1024,
            max_file_bytes: 16 << 20,
        }
    }
}

/// Why the log could not be opened or written.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// A file or the directory could not be read, created or written.
    #[error("receipt log {path}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// Another process writes this directory.
    #[error(
        "receipt log {0} is in use by another bermd (its {LOCK_FILE} is locked): give each bermd its own directory"
    )]
    InUse(PathBuf),
    /// What is there does not chain: new receipts would extend a log that cannot be checked.
    #[error(
        "receipt log {path}: {why}; bermd will not chain new receipts onto it: check it with `berm receipts verify`, then move it aside"
    )]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
    /// The log was closed.
    #[error("the receipt log is closed")]
    Closed,
}

/// Where one receipt is: its sequence number and the sha256 of its line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceiptRef {
    /// Its place in the log.
    pub seq: u64,
    /// sha256 of its line, what the next receipt and its checkpoint name.
    pub sha256: String,
}

/// An open receipt log. Appending is safe from any thread.
pub struct ReceiptLog {
    shared: Arc<Shared>,
    sealer: Mutex<Option<std::thread::JoinHandle<()>>>,
}

struct Shared {
    state: Mutex<State>,
    wake: Condvar,
    key: HostKey,
    options: LogOptions,
    dir: PathBuf,
    /// Files on a disk, synced before each checkpoint; not for a stream (a pipe), whose
    /// reader keeps the lines.
    files: bool,
}

struct State {
    log: String,
    next_seq: u64,
    previous: Option<String>,
    file: File,
    file_path: PathBuf,
    file_bytes: u64,
    unsealed: Vec<ReceiptRef>,
    closing: bool,
    /// Held for the log's life: the directory's lock (none for a stream).
    _lock: Option<File>,
}

impl ReceiptLog {
    /// Opens (creating when needed) the log in `dir`, signing checkpoints with `key`.
    /// Receipts an earlier bermd wrote but did not seal are checked to chain, then sealed.
    ///
    /// # Errors
    /// [`LogError::InUse`] when another bermd has it, [`LogError::Corrupt`] when its last
    /// file does not chain, [`LogError::Io`].
    pub fn open(dir: &Path, key: HostKey, options: LogOptions) -> Result<ReceiptLog, LogError> {
        let io = |path: &Path| {
            let path = path.to_owned();
            move |source| LogError::Io { path, source }
        };
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(io(dir))?;
        let lock_path = dir.join(LOCK_FILE);
        let lock = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(&lock_path)
            .map_err(io(&lock_path))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => return Err(LogError::InUse(dir.into())),
            Err(std::fs::TryLockError::Error(e)) => return Err(io(&lock_path)(e)),
        }
        let found = recover(dir)?;
        let (file_path, log, next_seq, previous, unsealed) = match found {
            Some(found) => (
                found.last_file,
                found.log,
                found.next_seq,
                Some(found.previous),
                found.unsealed,
            ),
            None => {
                let mut id = [0u8; 16];
                getrandom::fill(&mut id).map_err(|e| LogError::Io {
                    path: dir.into(),
                    source: std::io::Error::other(format!("no randomness for a log id: {e}")),
                })?;
                (file_name(dir, 0), hex::encode(id), 0, None, Vec::new())
            }
        };
        let file = open_append(&file_path)?;
        let file_bytes = file.metadata().map_err(io(&file_path))?.len();
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                log,
                next_seq,
                previous,
                file,
                file_path,
                file_bytes,
                unsealed,
                closing: false,
                _lock: Some(lock),
            }),
            wake: Condvar::new(),
            key,
            options: LogOptions {
                max_batch: options.max_batch.max(1),
                ..options
            },
            dir: dir.to_owned(),
            files: true,
        });
        // What an earlier bermd left unsealed is sealed before anything new is written.
        {
            let mut state = shared.lock();
            while !state.unsealed.is_empty() {
                shared.seal_now(&mut state)?;
            }
        }
        ReceiptLog::start(shared)
    }

    /// A log written to `stream` (a pipe whose reader keeps the lines: in the microVM,
    /// berm-init relays them to the host), new, signed with `key`. Nothing is synced and
    /// nothing rotates; `name` says what the stream is in messages.
    ///
    /// # Errors
    /// [`LogError::Io`] when there is no randomness for its id or no thread for its sealer.
    pub fn stream(
        stream: File,
        name: &str,
        key: HostKey,
        options: LogOptions,
    ) -> Result<ReceiptLog, LogError> {
        let mut id = [0u8; 16];
        getrandom::fill(&mut id).map_err(|e| LogError::Io {
            path: name.into(),
            source: std::io::Error::other(format!("no randomness for a log id: {e}")),
        })?;
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                log: hex::encode(id),
                next_seq: 0,
                previous: None,
                file: stream,
                file_path: name.into(),
                file_bytes: 0,
                unsealed: Vec::new(),
                closing: false,
                _lock: None,
            }),
            wake: Condvar::new(),
            key,
            options: LogOptions {
                max_batch: options.max_batch.max(1),
                max_file_bytes: u64::MAX,
                ..options
            },
            dir: name.into(),
            files: false,
        });
        ReceiptLog::start(shared)
    }

    fn start(shared: Arc<Shared>) -> Result<ReceiptLog, LogError> {
        let dir = shared.dir.clone();
        let sealer = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("berm-receipts".into())
                .spawn(move || shared.run_sealer())
                .map_err(|source| LogError::Io { path: dir, source })?
        };
        Ok(ReceiptLog {
            shared,
            sealer: Mutex::new(Some(sealer)),
        })
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.shared.dir
    }

    /// The log's id.
    pub fn log_id(&self) -> String {
        self.shared.lock().log.clone()
    }

    /// The public half of the key its checkpoints are signed with.
    pub fn public_key(&self) -> berm_dsse::VerifyingKey {
        self.shared.key.public()
    }

    /// Appends the receipt of `call` and returns where it is. Written (to the page cache)
    /// when this returns: reply only after.
    ///
    /// # Errors
    /// [`LogError::Io`] when it could not be written (nothing of it counts then),
    /// [`LogError::Closed`] after [`ReceiptLog::close`].
    pub fn append(&self, call: Call) -> Result<ReceiptRef, LogError> {
        let mut state = self.shared.lock();
        if state.closing {
            return Err(LogError::Closed);
        }
        let statement = ReceiptStatement {
            statement_type: STATEMENT_TYPE.into(),
            subject: vec![Subject {
                name: format!("program/{}", call.program),
                digest: DigestSet {
                    sha256: call.program_sha256.clone(),
                },
            }],
            predicate_type: RECEIPT_PREDICATE.into(),
            predicate: Receipt {
                format: RECEIPT_FORMAT.into(),
                log: state.log.clone(),
                seq: state.next_seq,
                previous: state.previous.clone(),
                call,
            },
        };
        // Serializing strings and numbers cannot fail.
        let mut line = serde_json::to_vec(&statement).unwrap_or_default();
        let sha256 = sha256_hex(&line);
        line.push(b'\n');
        if state.file_bytes > 0
            && state.file_bytes + line.len() as u64 > self.shared.options.max_file_bytes
        {
            self.shared.rotate(&mut state)?;
        }
        if let Err(source) = state.file.write_all(&line) {
            // A partial line may be there: cut it, so the next receipt starts a line.
            let _ = state.file.set_len(state.file_bytes);
            return Err(LogError::Io {
                path: state.file_path.clone(),
                source,
            });
        }
        state.file_bytes += line.len() as u64;
        let receipt = ReceiptRef {
            seq: state.next_seq,
            sha256,
        };
        state.next_seq += 1;
        state.previous = Some(receipt.sha256.clone());
        state.unsealed.push(receipt.clone());
        if state.unsealed.len() >= self.shared.options.max_batch {
            self.shared.wake.notify_one();
        }
        Ok(receipt)
    }

    /// Syncs and seals everything written so far, now: for a clean shutdown and for tests.
    ///
    /// # Errors
    /// [`LogError::Io`] when syncing or writing the checkpoint failed.
    pub fn seal(&self) -> Result<(), LogError> {
        let mut state = self.shared.lock();
        while !state.unsealed.is_empty() {
            self.shared.seal_now(&mut state)?;
        }
        Ok(())
    }

    /// Seals what is left and stops the sealer; appends fail afterwards.
    pub fn close(&self) {
        self.shared.lock().closing = true;
        self.shared.wake.notify_one();
        let handle = self.sealer.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(handle) = handle {
            let _ = handle.join();
        }
    }
}

impl std::fmt::Debug for ReceiptLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReceiptLog")
            .field("dir", &self.shared.dir)
            .finish_non_exhaustive()
    }
}

impl Drop for ReceiptLog {
    fn drop(&mut self) {
        self.close();
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The sealer: every interval (sooner when a batch is full), sync the file and seal what
    /// was written, outside the lock so that calls keep appending meanwhile.
    fn run_sealer(&self) {
        let mut state = self.lock();
        loop {
            let interval = self.options.interval;
            let max_batch = self.options.max_batch;
            state = self
                .wake
                .wait_timeout_while(state, interval, |s| {
                    !s.closing && s.unsealed.len() < max_batch
                })
                .map(|(guard, _)| guard)
                .unwrap_or_else(|p| p.into_inner().0);
            if state.unsealed.is_empty() {
                if state.closing {
                    return;
                }
                continue;
            }
            let take = state.unsealed.len().min(max_batch);
            let batch: Vec<ReceiptRef> = state.unsealed.drain(..take).collect();
            let (log, path) = (state.log.clone(), state.file_path.clone());
            let file = state.file.try_clone();
            drop(state);
            let synced = match self.files {
                true => file.and_then(|file| file.sync_data()),
                false => Ok(()),
            };
            let line = checkpoint_line(&self.key, &log, &batch);
            state = self.lock();
            let written = synced.and_then(|()| state.file.write_all(&line));
            match written {
                Ok(()) => state.file_bytes += line.len() as u64,
                Err(e) => {
                    // Put them back: the next round (or the next open) seals them.
                    let _ = state.file.set_len(state.file_bytes);
                    let mut batch = batch;
                    batch.append(&mut state.unsealed);
                    state.unsealed = batch;
                    tracing::error!(
                        "receipt log {}: could not sync and seal {take} receipts: {e}",
                        path.display()
                    );
                }
            }
        }
    }

    /// Syncs and seals the oldest batch of what is unsealed, holding the lock (open, rotate,
    /// [`ReceiptLog::seal`]).
    fn seal_now(&self, state: &mut State) -> Result<(), LogError> {
        let io = |path: &Path| {
            let path = path.to_owned();
            move |source| LogError::Io { path, source }
        };
        let take = state.unsealed.len().min(self.options.max_batch);
        if take == 0 {
            return Ok(());
        }
        if self.files {
            state.file.sync_data().map_err(io(&state.file_path))?;
        }
        let line = checkpoint_line(&self.key, &state.log, &state.unsealed[..take]);
        if let Err(e) = state.file.write_all(&line) {
            let _ = state.file.set_len(state.file_bytes);
            return Err(io(&state.file_path)(e));
        }
        state.file_bytes += line.len() as u64;
        state.unsealed.drain(..take);
        Ok(())
    }

    /// Closes the current file (every receipt in it sealed and synced) and starts the next,
    /// named after the receipt about to be written.
    fn rotate(&self, state: &mut State) -> Result<(), LogError> {
        while !state.unsealed.is_empty() {
            self.seal_now(state)?;
        }
        state.file.sync_data().map_err(|source| LogError::Io {
            path: state.file_path.clone(),
            source,
        })?;
        let path = file_name(&self.dir, state.next_seq);
        state.file = open_append(&path)?;
        state.file_path = path;
        state.file_bytes = 0;
        Ok(())
    }
}

/// A signed checkpoint over `batch`, as one line.
fn checkpoint_line(key: &HostKey, log: &str, batch: &[ReceiptRef]) -> Vec<u8> {
    let (first, last) = match (batch.first(), batch.last()) {
        (Some(first), Some(last)) => (first.seq, last.seq),
        _ => (0, 0),
    };
    let statement = Statement {
        statement_type: STATEMENT_TYPE.into(),
        subject: batch
            .iter()
            .map(|r| Subject {
                name: format!("receipt/{}", r.seq),
                digest: DigestSet {
                    sha256: r.sha256.clone(),
                },
            })
            .collect(),
        predicate_type: CHECKPOINT_PREDICATE.into(),
        predicate: Checkpoint {
            format: CHECKPOINT_FORMAT.into(),
            log: log.into(),
            first,
            last,
            sealed: now_rfc3339(),
        },
    };
    let payload = serde_json::to_vec(&statement).unwrap_or_default();
    let mut line = serde_json::to_vec(&key.sign_payload(payload)).unwrap_or_default();
    line.push(b'\n');
    line
}

fn file_name(dir: &Path, first_seq: u64) -> PathBuf {
    dir.join(format!("{FILE_PREFIX}{first_seq:020}{FILE_SUFFIX}"))
}

fn open_append(path: &Path) -> Result<File, LogError> {
    File::options()
        .create(true)
        .append(true)
        .read(true)
        .mode(0o600)
        .open(path)
        .map_err(|source| LogError::Io {
            path: path.to_owned(),
            source,
        })
}

/// The log's files, oldest first.
pub fn log_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|entry| entry.ok())
        .map(|entry| entry.path())
        .filter(|path| {
            path.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(FILE_PREFIX) && n.ends_with(FILE_SUFFIX))
        })
        .collect();
    files.sort();
    Ok(files)
}

/// One line of a log file, read back.
pub(crate) enum Line {
    /// A receipt: its statement and the sha256 of its bytes.
    Receipt(Box<ReceiptStatement>, String),
    /// A checkpoint envelope.
    Checkpoint(berm_dsse::Envelope),
}

/// Reads one line: a checkpoint (a DSSE envelope) or a receipt.
pub(crate) fn parse_line(line: &[u8]) -> Result<Line, String> {
    if line.len() > MAX_LINE_BYTES {
        return Err(format!(
            "a line of {} bytes, over {MAX_LINE_BYTES}",
            line.len()
        ));
    }
    let value: serde_json::Value =
        serde_json::from_slice(line).map_err(|e| format!("not JSON: {e}"))?;
    if value.get("payloadType").is_some() {
        return serde_json::from_value(value)
            .map(Line::Checkpoint)
            .map_err(|e| format!("not a DSSE envelope: {e}"));
    }
    let statement: ReceiptStatement =
        serde_json::from_value(value).map_err(|e| format!("not a receipt: {e}"))?;
    if statement.predicate_type != RECEIPT_PREDICATE || statement.predicate.format != RECEIPT_FORMAT
    {
        return Err(format!(
            "predicateType {:?} with format {:?} is not a {RECEIPT_FORMAT} receipt",
            statement.predicate_type, statement.predicate.format
        ));
    }
    Ok(Line::Receipt(Box::new(statement), sha256_hex(line)))
}

/// Where the log stands when bermd opens it.
struct Recovered {
    last_file: PathBuf,
    log: String,
    next_seq: u64,
    previous: String,
    unsealed: Vec<ReceiptRef>,
}

/// Reads back the end of the log: the last receipt, and those after the last checkpoint,
/// which must chain. A torn last line (bermd or the machine died while writing it; no client
/// got its reply) is cut.
fn recover(dir: &Path) -> Result<Option<Recovered>, LogError> {
    let files = log_files(dir).map_err(|source| LogError::Io {
        path: dir.into(),
        source,
    })?;
    for path in files.iter().rev() {
        let io = |source| LogError::Io {
            path: path.clone(),
            source,
        };
        let mut file = File::options()
            .read(true)
            .write(true)
            .open(path)
            .map_err(io)?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).map_err(io)?;
        let whole = bytes
            .iter()
            .rposition(|b| *b == b'\n')
            .map_or(0, |at| at + 1);
        if whole < bytes.len() {
            tracing::warn!(
                "receipt log {}: cut a torn last line of {} bytes (its call got no reply)",
                path.display(),
                bytes.len() - whole
            );
            file.set_len(whole as u64).map_err(io)?;
            file.seek(SeekFrom::End(0)).map_err(io)?;
            file.sync_data().map_err(io)?;
            bytes.truncate(whole);
        }
        let corrupt = |why: String| LogError::Corrupt {
            path: path.clone(),
            why,
        };
        let mut receipts: Vec<(ReceiptRef, Option<String>, String)> = Vec::new();
        let mut sealed: Vec<(u64, u64)> = Vec::new();
        for (n, line) in bytes.split(|b| *b == b'\n').enumerate() {
            if line.is_empty() {
                continue;
            }
            match parse_line(line).map_err(|why| corrupt(format!("line {}: {why}", n + 1)))? {
                Line::Receipt(statement, sha256) => {
                    let receipt = statement.predicate;
                    receipts.push((
                        ReceiptRef {
                            seq: receipt.seq,
                            sha256,
                        },
                        receipt.previous,
                        receipt.log,
                    ));
                }
                Line::Checkpoint(envelope) => {
                    let payload = berm_dsse::unverified_payload(&envelope)
                        .map_err(|e| corrupt(format!("line {}: {e}", n + 1)))?;
                    let statement: Statement<Checkpoint> = serde_json::from_slice(&payload)
                        .map_err(|e| corrupt(format!("line {}: not a checkpoint: {e}", n + 1)))?;
                    sealed.push((statement.predicate.first, statement.predicate.last));
                }
            }
        }
        let Some((last, _, log)) = receipts.last().cloned() else {
            continue;
        };
        // The file's receipts follow each other, each naming the one before; only the
        // unsealed ones matter here (they are about to be signed), but a break anywhere in
        // the file means it was edited.
        for pair in receipts.windows(2) {
            let [(before, _, _), (after, previous, after_log)] = pair else {
                continue;
            };
            if after.seq != before.seq + 1 || previous.as_deref() != Some(&before.sha256) {
                return Err(corrupt(format!(
                    "receipt {} does not follow receipt {}",
                    after.seq, before.seq
                )));
            }
            if *after_log != log {
                return Err(corrupt(format!(
                    "receipt {} belongs to another log ({after_log})",
                    after.seq
                )));
            }
        }
        let unsealed: Vec<ReceiptRef> = receipts
            .into_iter()
            .map(|(r, _, _)| r)
            .filter(|r| !sealed.iter().any(|(a, b)| (*a..=*b).contains(&r.seq)))
            .collect();
        return Ok(Some(Recovered {
            last_file: path.clone(),
            log,
            next_seq: last.seq + 1,
            previous: last.sha256,
            unsealed,
        }));
    }
    Ok(None)
}
