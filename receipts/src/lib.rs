//! berm-receipts: a receipt for every call bermd serves, hash-chained and signed in
//! checkpoints, verifiable offline.
//!
//! A receipt ([`format::Receipt`]) records what one call did: the program's and its native
//! code's sha256, the tool, the grants in force, the sha256 of the arguments and of the
//! result, the outcome, every `http.fetch` host and status, the secrets named, the calls it
//! made (by their receipts' sha256), when it started and how long it took. Each names the
//! sha256 of the one before, so the log is a chain; [`ReceiptLog`] writes them before the
//! reply and seals them in groups with signed checkpoints, off the calls' path (why, and what
//! that trades: docs/receipts.md). [`verify_dir`] checks a log with the public key alone.
#![forbid(unsafe_code)]

pub mod format;
mod log;
mod verify;

pub use format::{
    Call, Callee, Fetch, MAX_LISTED, Outcome, arguments_sha256, now_rfc3339, rfc3339, text_sha256,
};
pub use log::{LOCK_FILE, LogError, LogOptions, ReceiptLog, ReceiptRef, log_files};
pub use verify::{Code, Entry, Problem, ReadError, Report, verify_dir};
