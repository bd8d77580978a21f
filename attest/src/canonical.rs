//! Canonical JSON: the one byte string a record's hash (and a later signature) covers.
//!
//! Object keys sorted by their UTF-8 bytes, no whitespace, strings and numbers as serde_json
//! writes them. Independent of whether serde_json keeps insertion order (its
//! `preserve_order` feature can be switched on by any crate in the build).

use serde_json::Value;
use sha2::{Digest, Sha256};

/// The canonical form of `value`.
pub fn canonical_json(value: &Value) -> String {
    let mut out = String::new();
    write(value, &mut out);
    out
}

fn write(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                write(&map[key], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keys_are_sorted_at_every_depth_and_nothing_else_changes() {
        let value = json!({"b": [{"z": 1, "a": "x\"y"}], "a": null, "c": {"y": true, "x": -2}});
        assert_eq!(
            canonical_json(&value),
            r#"{"a":null,"b":[{"a":"x\"y","z":1}],"c":{"x":-2,"y":true}}"#
        );
    }

    #[test]
    fn the_hash_ignores_its_own_field_and_nothing_else() {
        let a = json!({"x": 1, "recordSha256": "anything"});
        let b = json!({"x": 1});
        assert_eq!(record_sha256(&a), record_sha256(&b));
        assert_ne!(record_sha256(&a), record_sha256(&json!({"x": 2})));
    }
}
