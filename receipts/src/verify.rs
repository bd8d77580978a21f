//! Offline verification of a receipt log: every checkpoint's signature, the chain, and that
//! nothing is missing, reordered or edited; and one call's receipt against what its client
//! kept.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use berm_dsse::VerifyingKey;
use serde::Serialize;

use crate::format::{
    CHECKPOINT_FORMAT, CHECKPOINT_PREDICATE, CheckpointStatement, ReceiptStatement,
    arguments_sha256, text_sha256,
};
use crate::log::{Line, log_files, parse_line};

/// What kind of problem a verification found: a closed list, so scripts can match on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Code {
    /// A file ends in the middle of a line: it was cut.
    Truncated,
    /// A line is neither a receipt nor a checkpoint.
    Malformed,
    /// A checkpoint's signature does not verify with the key.
    SignatureInvalid,
    /// A receipt's bytes are not those its checkpoint signed, or not those the next receipt
    /// names as the one before it.
    Edited,
    /// A sequence number is absent: a receipt was deleted.
    Missing,
    /// Receipts are not in sequence order, or one appears twice.
    Reordered,
    /// Receipts no checkpoint signed with the key covers.
    Unsealed,
    /// A receipt or checkpoint of another log.
    ForeignLog,
    /// No receipt matches the call asked about.
    NotFound,
    /// The call's receipt names other arguments than those given.
    ArgumentsMismatch,
    /// The call's receipt names another result than the one given.
    ResultMismatch,
}

impl Code {
    /// The code as `--json` and the messages spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Code::Truncated => "truncated",
            Code::Malformed => "malformed",
            Code::SignatureInvalid => "signature_invalid",
            Code::Edited => "edited",
            Code::Missing => "missing",
            Code::Reordered => "reordered",
            Code::Unsealed => "unsealed",
            Code::ForeignLog => "foreign_log",
            Code::NotFound => "not_found",
            Code::ArgumentsMismatch => "arguments_mismatch",
            Code::ResultMismatch => "result_mismatch",
        }
    }
}

/// One problem, with what and where.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Problem {
    /// Its kind.
    pub code: Code,
    /// What exactly, naming the receipt or the file and line.
    pub detail: String,
}

/// One receipt as the verification saw it.
#[derive(Clone, Debug)]
pub struct Entry {
    /// sha256 of its line.
    pub sha256: String,
    /// A valid checkpoint signed exactly these bytes.
    pub sealed: bool,
    /// It (or the link to it) was found edited.
    pub edited: bool,
    /// The receipt itself.
    pub receipt: ReceiptStatement,
    /// Where it is: file and line.
    pub at: String,
}

/// What [`verify_dir`] found.
#[derive(Debug, Default)]
pub struct Report {
    /// The log's id (of its first receipt).
    pub log: Option<String>,
    /// Receipts read.
    pub receipts: u64,
    /// Checkpoints whose signature verified.
    pub checkpoints: u64,
    /// Every problem, most serious kind first.
    pub problems: Vec<Problem>,
    entries: BTreeMap<u64, Entry>,
}

impl Report {
    /// Whether the log verified: no problem at all.
    pub fn ok(&self) -> bool {
        self.problems.is_empty()
    }

    /// The receipt with sequence number `seq`, if the log holds one.
    pub fn receipt(&self, seq: u64) -> Option<&Entry> {
        self.entries.get(&seq)
    }

    /// Every receipt, by sequence number.
    pub fn receipts(&self) -> impl Iterator<Item = (&u64, &Entry)> {
        self.entries.iter()
    }

    /// Checks one call against what its client kept: the arguments it sent and the text it
    /// got back. With `seq`, that receipt; without, the receipts whose arguments and result
    /// both match. The receipt must be sealed and unedited. Returns the receipt's sequence
    /// number, or the problems.
    ///
    /// # Errors
    /// The problems: [`Code::NotFound`], [`Code::ArgumentsMismatch`],
    /// [`Code::ResultMismatch`], [`Code::Unsealed`], [`Code::Edited`].
    pub fn check_call(
        &self,
        seq: Option<u64>,
        arguments: &serde_json::Value,
        result: &str,
    ) -> Result<u64, Vec<Problem>> {
        let (want_args, want_result) = (arguments_sha256(arguments), text_sha256(result));
        let entry = match seq {
            Some(seq) => match self.entries.get(&seq) {
                Some(entry) => (seq, entry),
                None => {
                    return Err(vec![problem(
                        Code::NotFound,
                        format!("the log holds no receipt {seq}"),
                    )]);
                }
            },
            None => {
                let found = self.entries.iter().find(|(_, e)| {
                    let call = &e.receipt.predicate.call;
                    call.arguments_sha256 == want_args && call.result_sha256 == want_result
                });
                match found {
                    Some((seq, entry)) => (*seq, entry),
                    None => {
                        return Err(vec![problem(
                            Code::NotFound,
                            format!(
                                "no receipt has these arguments (sha256 {want_args}) and this result (sha256 {want_result})"
                            ),
                        )]);
                    }
                }
            }
        };
        let (seq, entry) = entry;
        let call = &entry.receipt.predicate.call;
        let mut problems = Vec::new();
        if call.arguments_sha256 != want_args {
            problems.push(problem(
                Code::ArgumentsMismatch,
                format!(
                    "receipt {seq} names arguments with sha256 {}, the given ones have {want_args}",
                    call.arguments_sha256
                ),
            ));
        }
        if call.result_sha256 != want_result {
            problems.push(problem(
                Code::ResultMismatch,
                format!(
                    "receipt {seq} names a result with sha256 {}, the given one has {want_result}",
                    call.result_sha256
                ),
            ));
        }
        if entry.edited {
            problems.push(problem(
                Code::Edited,
                format!("receipt {seq} ({}) was edited", entry.at),
            ));
        } else if !entry.sealed {
            problems.push(problem(
                Code::Unsealed,
                format!("receipt {seq} ({}) is not signed by a checkpoint", entry.at),
            ));
        }
        if problems.is_empty() {
            Ok(seq)
        } else {
            Err(problems)
        }
    }
}

/// Why a log could not be read at all.
#[derive(Debug, thiserror::Error)]
#[error("cannot read the receipt log {path}")]
pub struct ReadError {
    /// The file or directory.
    pub path: PathBuf,
    /// Why.
    #[source]
    pub source: std::io::Error,
}

struct Read {
    seq: u64,
    sha256: String,
    at: String,
    statement: ReceiptStatement,
}

/// Verifies the log in `dir` with the public key its checkpoints must be signed with.
///
/// # Errors
/// [`ReadError`] when the directory or a file cannot be read; everything wrong inside them
/// is a [`Problem`] of the report.
pub fn verify_dir(dir: &Path, key: &VerifyingKey) -> Result<Report, ReadError> {
    let files = log_files(dir).map_err(|source| ReadError {
        path: dir.into(),
        source,
    })?;
    let mut report = Report::default();
    let mut read: Vec<Read> = Vec::new();
    // seq -> (the sha256 signed, where the checkpoint is)
    let mut signed: BTreeMap<u64, (String, String)> = BTreeMap::new();
    let mut checkpoint_logs: Vec<(String, String)> = Vec::new();
    if files.is_empty() {
        report.problems.push(problem(
            Code::Missing,
            format!("{} holds no receipt log file", dir.display()),
        ));
    }
    for path in &files {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let bytes = std::fs::read(path).map_err(|source| ReadError {
            path: path.clone(),
            source,
        })?;
        let whole = bytes
            .iter()
            .rposition(|b| *b == b'\n')
            .map_or(0, |at| at + 1);
        if whole < bytes.len() {
            report.problems.push(problem(
                Code::Truncated,
                format!(
                    "{name} ends in the middle of a line ({} bytes after its last newline): it was cut",
                    bytes.len() - whole
                ),
            ));
        }
        for (n, line) in bytes[..whole].split(|b| *b == b'\n').enumerate() {
            if line.is_empty() {
                continue;
            }
            let at = format!("{name}:{}", n + 1);
            match parse_line(line) {
                Err(why) => report
                    .problems
                    .push(problem(Code::Malformed, format!("{at}: {why}"))),
                Ok(Line::Receipt(statement, sha256)) => {
                    report.receipts += 1;
                    read.push(Read {
                        seq: statement.predicate.seq,
                        sha256,
                        at,
                        statement: *statement,
                    });
                }
                Ok(Line::Checkpoint(envelope)) => match checkpoint(&envelope, key) {
                    Err(bad) => report.problems.push(Problem {
                        code: bad.code,
                        detail: format!("{at}: checkpoint: {}", bad.detail),
                    }),
                    Ok(statement) => {
                        report.checkpoints += 1;
                        checkpoint_logs.push((statement.predicate.log.clone(), at.clone()));
                        for (i, subject) in statement.subject.iter().enumerate() {
                            let seq = statement.predicate.first + i as u64;
                            let previous =
                                signed.insert(seq, (subject.digest.sha256.clone(), at.clone()));
                            if let Some((other, other_at)) = previous
                                && other != subject.digest.sha256
                            {
                                report.problems.push(problem(
                                        Code::Edited,
                                        format!(
                                            "checkpoints {other_at} and {at} sign receipt {seq} with different contents"
                                        ),
                                    ));
                            }
                        }
                    }
                },
            }
        }
    }
    check_chain(&mut report, read, &signed, &checkpoint_logs);
    report.problems.sort_by_key(|p| p.code);
    Ok(report)
}

/// A checkpoint envelope's statement, its signature checked first.
fn checkpoint(
    envelope: &berm_dsse::Envelope,
    key: &VerifyingKey,
) -> Result<CheckpointStatement, Problem> {
    let payload = berm_dsse::verified_payload(envelope, key).map_err(|e| match e {
        berm_dsse::Unverified::Malformed(m) => problem(Code::Malformed, m),
        berm_dsse::Unverified::BadSignature(m) => problem(Code::SignatureInvalid, m),
    })?;
    let statement: CheckpointStatement = serde_json::from_slice(&payload)
        .map_err(|e| problem(Code::Malformed, format!("not a checkpoint statement: {e}")))?;
    let p = &statement.predicate;
    let count = p.last.checked_sub(p.first).map(|n| n + 1);
    let names_match = statement
        .subject
        .iter()
        .enumerate()
        .all(|(i, s)| s.name == format!("receipt/{}", p.first + i as u64));
    if statement.predicate_type != CHECKPOINT_PREDICATE
        || p.format != CHECKPOINT_FORMAT
        || count != Some(statement.subject.len() as u64)
        || !names_match
    {
        return Err(problem(
            Code::Malformed,
            format!(
                "a signed statement that is not a {CHECKPOINT_FORMAT} over receipts {}..={}",
                p.first, p.last
            ),
        ));
    }
    Ok(statement)
}

/// The chain: order, gaps, edits and what no checkpoint covers.
fn check_chain(
    report: &mut Report,
    read: Vec<Read>,
    signed: &BTreeMap<u64, (String, String)>,
    checkpoint_logs: &[(String, String)],
) {
    let log = read.first().map(|r| r.statement.predicate.log.clone());
    if let Some(log) = &log {
        for r in &read {
            if r.statement.predicate.log != *log {
                report.problems.push(problem(
                    Code::ForeignLog,
                    format!(
                        "receipt {} ({}) belongs to log {}, not {log}",
                        r.seq, r.at, r.statement.predicate.log
                    ),
                ));
            }
        }
        for (other, at) in checkpoint_logs {
            if other != log {
                report.problems.push(problem(
                    Code::ForeignLog,
                    format!("checkpoint {at} belongs to log {other}, not {log}"),
                ));
            }
        }
    }
    report.log = log;
    for pair in read.windows(2) {
        let [before, after] = pair else { continue };
        if after.seq == before.seq {
            report.problems.push(problem(
                Code::Reordered,
                format!(
                    "receipt {} appears twice ({} and {})",
                    after.seq, before.at, after.at
                ),
            ));
        } else if after.seq < before.seq {
            report.problems.push(problem(
                Code::Reordered,
                format!(
                    "receipt {} ({}) is written after receipt {} ({})",
                    after.seq, after.at, before.seq, before.at
                ),
            ));
        }
    }
    for r in read {
        let sealed = signed.get(&r.seq).map(|(sha, _)| sha == &r.sha256);
        let entry = Entry {
            sealed: sealed == Some(true),
            edited: sealed == Some(false),
            sha256: r.sha256,
            receipt: r.statement,
            at: r.at,
        };
        if entry.edited {
            let (sha, at) = &signed[&r.seq];
            report.problems.push(problem(
                Code::Edited,
                format!(
                    "receipt {} ({}) was changed after it was signed: its sha256 is {}, checkpoint {at} signed {sha}",
                    r.seq, entry.at, entry.sha256
                ),
            ));
        }
        report.entries.entry(r.seq).or_insert(entry);
    }
    // Gaps, up to the highest sequence number a receipt or a checkpoint names.
    let highest = report
        .entries
        .keys()
        .next_back()
        .copied()
        .max(signed.keys().next_back().copied());
    if let Some(highest) = highest {
        let missing: Vec<u64> = (0..=highest)
            .filter(|seq| !report.entries.contains_key(seq))
            .collect();
        for run in runs(&missing) {
            let what = match run {
                (a, b) if a == b => format!("receipt {a} is missing"),
                (a, b) => format!("receipts {a}..={b} are missing"),
            };
            report.problems.push(problem(Code::Missing, what));
        }
    }
    // Each receipt names the one before it; an edit the signatures did not catch (in the
    // unsealed tail) shows here.
    let mut broken = Vec::new();
    for (seq, entry) in &report.entries {
        let previous = entry.receipt.predicate.previous.as_deref();
        if *seq == 0 {
            if previous.is_some() {
                broken.push((*seq, "receipt 0 names a receipt before it".to_string()));
            }
            continue;
        }
        let Some(before) = report.entries.get(&(seq - 1)) else {
            continue;
        };
        if before.edited || entry.edited {
            continue;
        }
        if previous != Some(before.sha256.as_str()) {
            broken.push((
                *seq,
                format!(
                    "receipt {} ({}) names {} as the one before it, but receipt {} ({}) has sha256 {}: one of them was changed",
                    seq,
                    entry.at,
                    previous.unwrap_or("none"),
                    seq - 1,
                    before.at,
                    before.sha256
                ),
            ));
        }
    }
    for (seq, detail) in broken {
        if let Some(entry) = report.entries.get_mut(&seq) {
            entry.edited = true;
        }
        report.problems.push(problem(Code::Edited, detail));
    }
    // What no valid checkpoint covers, in runs.
    let unsealed: Vec<u64> = report
        .entries
        .iter()
        .filter(|(_, e)| !e.sealed && !e.edited)
        .map(|(seq, _)| *seq)
        .collect();
    for run in runs(&unsealed) {
        let what = match run {
            (a, b) if a == b => format!("receipt {a} is"),
            (a, b) => format!("receipts {a}..={b} are"),
        };
        report.problems.push(problem(
            Code::Unsealed,
            format!(
                "{what} not covered by a checkpoint signed with this key: bermd stopped before sealing them (opening the directory with bermd again seals them), or they were added afterwards"
            ),
        ));
    }
}

/// Consecutive runs in sorted numbers.
fn runs(numbers: &[u64]) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    for &n in numbers {
        match out.last_mut() {
            Some((_, end)) if *end + 1 == n => *end = n,
            _ => out.push((n, n)),
        }
    }
    out
}

fn problem(code: Code, detail: impl Into<String>) -> Problem {
    Problem {
        code,
        detail: detail.into(),
    }
}
