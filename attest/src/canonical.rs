//! A record's own hash: sha256 of its canonical JSON without the hash field, and the shape
//! every sha256 in a record must have.

use berm_dsse::canonical_json;
use serde_json::Value;
use sha2::{Digest, Sha256};

/// sha256 (hex) of the canonical form of `record` without its hash field: `record_sha256`
/// (format `berm-attest/2`) or `recordSha256` (`berm-attest/1`). Either is left out: a record
/// holding the other format's is refused for its shape anyway.
pub fn record_sha256(record: &Value) -> String {
    let mut body = record.clone();
    if let Value::Object(map) = &mut body {
        map.remove("record_sha256");
        map.remove("recordSha256");
    }
    hex::encode(Sha256::digest(canonical_json(&body).as_bytes()))
}

/// Whether `s` is a sha256 as records write it: 64 lower-case hex digits.
pub(crate) fn is_sha256(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_hash_ignores_its_own_field_and_nothing_else() {
        let a = json!({"x": 1, "recordSha256": "anything"});
        let b = json!({"x": 1});
        assert_eq!(record_sha256(&a), record_sha256(&b));
        assert_ne!(record_sha256(&a), record_sha256(&json!({"x": 2})));
    }
}
