//! Signed records: the record as the predicate of an in-toto Statement v1, in a DSSE envelope
//! signed with the host's ed25519 key.
//!
//! The record alone is evidence anyone who can write the run dir can rewrite consistently
//! (`record_sha256` is a hash, not a signature). berm-vmm therefore signs it at the end of the
//! run with a key only it and the user can read, in the shapes the supply-chain world already
//! checks: a [DSSE] envelope (`payloadType` `application/vnd.in-toto+json`) around an
//! [in-toto Statement v1] whose subjects are what booted — the kernel, the rootfs, each app's
//! image and each program, by sha256 — and whose predicate is the record, under
//! [`PREDICATE_TYPE`].
//!
//! What a valid signature proves: the holder of this host key saw this boot and wrote this
//! record. It does not prove the host was honest (there is no hardware root behind the key);
//! docs/threat-model.md says how a TPM or SEV-SNP quote would take its place.
//!
//! [DSSE]: https://github.com/secure-systems-lab/dsse/blob/master/protocol.md
//! [in-toto Statement v1]: https://github.com/in-toto/attestation/blob/main/spec/v1/statement.md

use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use serde_json::{Value, json};

pub use berm_dsse::{
    Envelope, EnvelopeSignature, HostKey, KEY_FILE, KeyError, PAYLOAD_TYPE, STATEMENT_TYPE,
    VerifyingKey, key_id, pae, read_public_key,
};

use crate::problem::{Code, Problem};
use crate::record::Record;
use crate::verify::{Options, Pins, Verdict, verify_with};

/// The predicate type of a berm record: the predicate is a [`Record`] of format
/// [`crate::FORMAT`], documented in docs/vm.md ("Attestation: berm attest").
pub const PREDICATE_TYPE: &str =
    "https://github.com/berm-os/berm/blob/main/docs/vm.md#berm-attest-record-v1";
/// The signed record's file name in a run dir.
pub const ENVELOPE_FILE: &str = "record.dsse.json";

/// The record, signed with `key`: a DSSE envelope over its in-toto statement.
pub fn sign(key: &HostKey, record: &Record) -> Envelope {
    key.sign_statement(&statement(record))
}

/// The in-toto subjects of a record: what booted, by sha256.
pub fn subjects(record: &Record) -> Vec<Value> {
    let subject = |name: String, sha256: &str| json!({"name": name, "digest": {"sha256": sha256}});
    let mut out = vec![
        subject("kernel".into(), &record.kernel.sha256),
        subject("rootfs".into(), &record.rootfs.sha256),
    ];
    for app in &record.apps {
        // A version-1 record may name no app (its conversion leaves the name empty).
        let label = if app.name.is_empty() {
            app.index.to_string()
        } else {
            app.name.clone()
        };
        out.push(subject(format!("app/{label}/image"), &app.image.sha256));
        for program in &app.programs {
            out.push(subject(
                format!("app/{label}/program/{}", program.name),
                &program.sha256,
            ));
        }
    }
    out
}

/// The in-toto Statement v1 of a record.
pub fn statement(record: &Record) -> Value {
    json!({
        "_type": STATEMENT_TYPE,
        "subject": subjects(record),
        "predicateType": PREDICATE_TYPE,
        "predicate": record.to_value(),
    })
}

/// Whether a JSON document is a DSSE envelope rather than a bare record.
pub fn is_envelope(value: &Value) -> bool {
    value.get("payloadType").is_some() || value.get("signatures").is_some()
}

fn problem(code: Code, detail: impl Into<String>) -> Vec<Problem> {
    vec![Problem {
        code,
        detail: detail.into(),
    }]
}

/// The statement inside an envelope, with the signature checked against `key` when one is
/// given (before anything in the payload is looked at) and without when not.
fn statement_of(envelope: &Value, key: Option<&VerifyingKey>) -> Result<Value, Vec<Problem>> {
    let envelope: Envelope = serde_json::from_value(envelope.clone())
        .map_err(|e| problem(Code::EnvelopeMalformed, format!("not a DSSE envelope: {e}")))?;
    let payload = match key {
        Some(key) => berm_dsse::verified_payload(&envelope, key),
        None => berm_dsse::unverified_payload(&envelope),
    }
    .map_err(|e| match e {
        berm_dsse::Unverified::Malformed(m) => problem(Code::EnvelopeMalformed, m),
        berm_dsse::Unverified::BadSignature(m) => problem(Code::SignatureInvalid, m),
    })?;
    let statement: Value = serde_json::from_slice(&payload).map_err(|e| {
        problem(
            Code::EnvelopeMalformed,
            format!("the payload is not JSON: {e}"),
        )
    })?;
    if statement.get("_type").and_then(Value::as_str) != Some(STATEMENT_TYPE)
        || statement.get("predicateType").and_then(Value::as_str) != Some(PREDICATE_TYPE)
    {
        return Err(problem(
            Code::EnvelopeMalformed,
            format!(
                "the payload is not an in-toto {STATEMENT_TYPE} statement with predicateType {PREDICATE_TYPE}"
            ),
        ));
    }
    Ok(statement)
}

/// The record inside a signed envelope.
///
/// With `key`, the signature is checked first: nothing of the payload is read unless one of
/// the envelope's signatures verifies with it. Then the statement's subjects must be exactly
/// those its record names, so a signed subject list cannot disagree with the signed record.
/// Without `key`, the record is returned unchecked (the caller says so).
pub fn open(envelope: &Value, key: Option<&VerifyingKey>) -> Result<Value, Vec<Problem>> {
    let statement = statement_of(envelope, key)?;
    let Some(record) = statement.get("predicate").cloned() else {
        return Err(problem(
            Code::EnvelopeMalformed,
            "the statement has no predicate",
        ));
    };
    // A record of the wrong shape is the verifier's to report (record_malformed).
    if let Ok(parsed) = Record::from_value(&record) {
        let expected = subjects(&parsed);
        let claimed = statement.get("subject").cloned().unwrap_or(Value::Null);
        if claimed != Value::Array(expected.clone()) {
            return Err(problem(
                Code::SubjectMismatch,
                format!(
                    "the statement's subjects {claimed} are not those its record names {}",
                    Value::Array(expected)
                ),
            ));
        }
    }
    Ok(record)
}

/// What [`verify_document`] found.
pub struct Checked {
    /// The verdict.
    pub verdict: Verdict,
    /// The document was an envelope whose signature nobody asked to check (no key).
    pub signature_unchecked: bool,
}

/// Verifies a document that is either a bare record or a signed envelope.
///
/// With `key`, the document must be an envelope with a signature by that key, checked before
/// anything else ([`Code::SignatureMissing`], [`Code::SignatureInvalid`]); then its record is
/// verified like a bare one.
pub fn verify_document(
    document: &Value,
    key: Option<&VerifyingKey>,
    pins: &Pins,
    options: &Options<'_>,
) -> Checked {
    let checked = |verdict, signature_unchecked| Checked {
        verdict,
        signature_unchecked,
    };
    if !is_envelope(document) {
        return match key {
            Some(key) => checked(
                Verdict::of(problem(
                    Code::SignatureMissing,
                    format!(
                        "a bare record, not an envelope signed by key {}: give the record.dsse.json berm-vmm writes",
                        key_id(key)
                    ),
                )),
                false,
            ),
            None => checked(verify_with(document, pins, options), false),
        };
    }
    match open(document, key) {
        Ok(record) => checked(verify_with(&record, pins, options), key.is_none()),
        Err(problems) => checked(Verdict::of(problems), false),
    }
}

/// Writes `envelope` to `path` (mode 0600, temp file then rename).
pub fn write_envelope(envelope: &Envelope, path: &Path) -> std::io::Result<()> {
    let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
    let mut file = std::fs::File::options()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    // Serializing strings cannot fail.
    let mut text = serde_json::to_vec(envelope).unwrap_or_default();
    text.push(b'\n');
    file.write_all(&text)?;
    file.sync_all()?;
    std::fs::rename(&tmp, path)
}
