//! Canonical JSON: the one byte string a hash or a signature covers.
//!
//! Object keys sorted by their UTF-8 bytes, no whitespace, strings and numbers as serde_json
//! writes them. Independent of whether serde_json keeps insertion order (its
//! `preserve_order` feature can be switched on by any crate in the build).

use serde_json::Value;

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
}
