//! What a receipt and a checkpoint say, as they are written: one JSON line each.
//!
//! A receipt is an [in-toto Statement v1] whose subject is the program that ran (by the
//! sha256 of its wasm) and whose predicate ([`Receipt`]) says what the call did. It is not
//! signed on its own: it names the sha256 of the receipt before it, and a [`Checkpoint`]
//! (a statement in a DSSE envelope, signed) lists the sha256 of every receipt it seals.
//!
//! [in-toto Statement v1]: https://github.com/in-toto/attestation/blob/main/spec/v1/statement.md

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

/// The predicate type of a receipt.
pub const RECEIPT_PREDICATE: &str =
    "https://github.com/berm-os/berm/blob/main/docs/receipts.md#berm-receipt-v1";
/// The predicate type of a checkpoint.
pub const CHECKPOINT_PREDICATE: &str =
    "https://github.com/berm-os/berm/blob/main/docs/receipts.md#berm-receipt-checkpoint-v1";
/// The format a receipt's predicate declares.
pub const RECEIPT_FORMAT: &str = "berm-receipt/1";
/// The format a checkpoint's predicate declares.
pub const CHECKPOINT_FORMAT: &str = "berm-receipt-checkpoint/1";

/// Most fetches, and most calls, one receipt lists.
pub const MAX_LISTED: usize = 256;

/// An in-toto Statement v1 with a typed predicate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Statement<P> {
    /// `https://in-toto.io/Statement/v1`.
    #[serde(rename = "_type")]
    pub statement_type: String,
    /// What the statement is about, by sha256.
    pub subject: Vec<Subject>,
    /// [`RECEIPT_PREDICATE`] or [`CHECKPOINT_PREDICATE`].
    #[serde(rename = "predicateType")]
    pub predicate_type: String,
    /// The receipt or checkpoint itself.
    pub predicate: P,
}

/// One in-toto subject: a name and its sha256.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Subject {
    /// `program/<name>` for a receipt, `receipt/<seq>` for a checkpoint.
    pub name: String,
    /// Its digest.
    pub digest: DigestSet,
}

/// An in-toto digest set; berm writes sha256 only.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DigestSet {
    /// Lowercase hex.
    pub sha256: String,
}

/// A receipt's predicate: where it sits in the log, and the call.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Receipt {
    /// [`RECEIPT_FORMAT`].
    pub format: String,
    /// The log's id, chosen when its first receipt was written: receipts of one log cannot
    /// pass as another's.
    pub log: String,
    /// Its place in the log, from 0, with no gaps.
    pub seq: u64,
    /// The sha256 of the receipt before it (its whole line), `None` for the first.
    pub previous: Option<String>,
    /// The call.
    pub call: Call,
}

/// What one call did, as bermd saw it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Call {
    /// The program's deployed name.
    pub program: String,
    /// sha256 of the wasm that ran.
    pub program_sha256: String,
    /// sha256 of the native code that ran (the precompiled or cached `.cwasm`), when bermd
    /// could read it.
    pub code_sha256: Option<String>,
    /// The tool.
    pub tool: String,
    /// The grants in force, as `berm deploy --grant` spells them.
    pub grants: Vec<String>,
    /// The program that made this call with `berm.call`; `None` for a call from outside.
    pub caller: Option<String>,
    /// The subject (`sub`) of the OAuth access token the call came with (bermd
    /// `--oauth-issuer`): who called. Absent without OAuth, and in receipts written before
    /// the field existed, which read and verify as before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    /// The OAuth client that access token was issued to (`client_id`, else `azp`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_id: Option<String>,
    /// sha256 of the arguments' canonical JSON ([`arguments_sha256`]).
    pub arguments_sha256: String,
    /// sha256 of the text the client got: the result, the program's failure message or the
    /// host's error message ([`text_sha256`]).
    pub result_sha256: String,
    /// sha256 of the content blocks the result carried beside its text (images, audio,
    /// resources: `berm.content`), each as the program wrote it, the four frames
    /// `[kind, uri, mime_type, body]` one after another (`berm_abi::content::encode`).
    /// Absent when the result had none, so receipts of text results read as before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_sha256: Option<String>,
    /// How the call ended.
    pub outcome: Outcome,
    /// Every `http.fetch`, in order.
    pub http: Vec<Fetch>,
    /// The secrets its requests named, by name only, sorted.
    pub secrets: Vec<String>,
    /// The calls it made with `berm.call`, each with its own receipt's sha256.
    pub calls: Vec<Callee>,
    /// Fetches and calls past [`MAX_LISTED`] each, counted rather than listed, so that a
    /// receipt stays small whatever the program does.
    pub omitted: u64,
    /// When it started (RFC 3339, UTC).
    pub started: String,
    /// How long it took, in microseconds.
    pub duration_us: u64,
}

/// How a call ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The tool returned a result.
    Ok,
    /// The tool returned its own failure.
    Failed,
    /// The host stopped or refused it (trap, deadline, memory cap, arguments, busy).
    Error,
    /// Its caller went away before it ended: no client got a result.
    Cancelled,
}

/// One `http.fetch`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fetch {
    /// The requested URL's host (and port, when not the scheme's), as the program asked.
    pub host: String,
    /// The final response's status; `None` when none came.
    pub status: Option<u16>,
    /// Why no response came (the error code the program got).
    pub error: Option<String>,
}

/// One `berm.call` the call made.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Callee {
    /// The program called.
    pub program: String,
    /// Its tool.
    pub tool: String,
    /// The sha256 of the callee's receipt.
    pub receipt: String,
}

/// A checkpoint's predicate: which receipts it seals.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Checkpoint {
    /// [`CHECKPOINT_FORMAT`].
    pub format: String,
    /// The log's id.
    pub log: String,
    /// The first receipt sealed.
    pub first: u64,
    /// The last receipt sealed; the statement's subjects are `first..=last`, in order.
    pub last: u64,
    /// When it was signed (RFC 3339, UTC).
    pub sealed: String,
}

/// A receipt as written: the statement around its predicate.
pub type ReceiptStatement = Statement<Receipt>;
/// A checkpoint's statement, the payload of its envelope.
pub type CheckpointStatement = Statement<Checkpoint>;

/// sha256 (hex) of bytes.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// The sha256 a receipt gives arguments: of their canonical JSON (keys sorted, no
/// whitespace), so a client that kept the arguments it sent, in any key order or spacing,
/// can check them.
pub fn arguments_sha256(arguments: &serde_json::Value) -> String {
    sha256_hex(berm_dsse::canonical_json(arguments).as_bytes())
}

/// The sha256 a receipt gives a result: of the text as the client got it.
pub fn text_sha256(text: &str) -> String {
    sha256_hex(text.as_bytes())
}

/// Now, as a receipt writes times.
pub fn now_rfc3339() -> String {
    rfc3339(std::time::SystemTime::now())
}

/// A time as a receipt writes it: RFC 3339, UTC, microseconds.
pub fn rfc3339(at: std::time::SystemTime) -> String {
    let at = time::OffsetDateTime::from(at);
    let format = time::macros::format_description!(
        "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:6]Z"
    );
    // Formatting a valid UTC time with a fixed description cannot fail.
    at.format(&format).unwrap_or_default()
}
