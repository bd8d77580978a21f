//! Entry points for the fuzz targets in `fuzz/`, which live outside the workspace and so can
//! reach only what this crate makes public. Each takes the fuzzer's bytes, drives bermd's own
//! code with them as a hostile client would, and panics when a property that code promises
//! does not hold. Here rather than in `fuzz/` so that the workspace compiles them (a change to
//! what they call breaks the build, not a fuzz run weeks later) and the tests below run them.
//! Not an API: nothing else should call them.

use std::sync::OnceLock;

use base64::Engine as _;
use serde_json::{Map, Value, json};

use crate::ask::AskKey;
use crate::param_headers::{self, ParamHeader};

/// Reads the fuzzer's bytes front to back; past the end every read gives zeros or nothing,
/// so any input is a whole case.
struct Bytes<'a>(&'a [u8]);

impl<'a> Bytes<'a> {
    fn byte(&mut self) -> u8 {
        let (&first, rest) = self.0.split_first().unwrap_or((&0, &[]));
        self.0 = rest;
        first
    }

    fn take(&mut self, n: usize) -> &'a [u8] {
        let (taken, rest) = self.0.split_at(n.min(self.0.len()));
        self.0 = rest;
        taken
    }

    /// A length byte, then that many bytes.
    fn chunk(&mut self) -> &'a [u8] {
        let n = self.byte() as usize;
        self.take(n)
    }

    fn text(&mut self) -> String {
        String::from_utf8_lossy(self.chunk()).into_owned()
    }
}

/// The key every fuzzed state is opened with: fixed, so that a crash reproduces. Loaded from
/// a key file the way bermd loads its own, so that this module needs nothing of `crate::ask`
/// beyond what bermd itself calls.
fn fuzz_key() -> &'static AskKey {
    static KEY: OnceLock<AskKey> = OnceLock::new();
    KEY.get_or_init(|| {
        let path = std::env::temp_dir().join(format!("berm-fuzz-ask-{}.key", std::process::id()));
        std::fs::write(&path, "07".repeat(32)).expect("writing the fuzzing key file");
        let key = AskKey::load(&path).expect("the fuzzing key file holds a key");
        let _ = std::fs::remove_file(&path);
        key
    })
}

/// A client's `requestState` against bermd's sealing (`crate::ask`): text a client made up,
/// opened the way bermd opens what a `tools/call` sends back. It must be refused, and never
/// panic, whatever its length, alphabet or padding. One call into [`AskKey::open`], so that
/// a change of what a state is bound to changes one line here.
pub fn sealed_state(data: &[u8]) {
    // A requestState arrives as a JSON string: always UTF-8.
    let text = String::from_utf8_lossy(data);
    let request = crate::ask::SealedFor {
        digest: &berm::Digest::of(b"the program"),
        method: "tools/call",
        served: "notes_add",
        sent: &json!({"text": "a note"}),
    };
    let opened = fuzz_key().open(&request, &text);
    assert!(opened.is_err(), "made-up text {text:?} opened: {opened:?}");
}

/// One argument of the fuzzed schema and what the fuzzed client sends for it.
struct Mirrored {
    param: String,
    header: String,
    /// The argument in the body, if any.
    value: Option<Value>,
    /// The header's value: `None` for what a conforming client sends.
    sent: Option<Vec<u8>>,
}

/// What SEP-2243 says a client sends in `Mcp-Param-<Name>` for `value`: the text itself when
/// it is plain visible ASCII that cannot be mistaken for the Base64 form, else the Base64
/// form. `None` for an argument that has no header (absent or null).
fn conforming_header(value: &Value) -> Option<String> {
    let text = match value {
        Value::String(text) => text.clone(),
        Value::Null => return None,
        other => other.to_string(),
    };
    let visible = text.bytes().all(|b| (0x20..0x7f).contains(&b));
    let padded = text.starts_with([' ', '\t']) || text.ends_with([' ', '\t']);
    let looks_encoded = text.starts_with("=?base64?") && text.ends_with("?=");
    let plain = visible && !padded && !looks_encoded;
    Some(if plain {
        text
    } else {
        format!(
            "=?base64?{}?=",
            base64::engine::general_purpose::STANDARD.encode(text)
        )
    })
}

/// Whether header bytes `sent` say what `value` says, read by SEP-2243's rule independently
/// of `param_headers`: visible ASCII, spaces and tabs around it dropped, `=?base64?B64?=`
/// being padded standard Base64 of UTF-8 and anything else the text itself.
fn header_says(sent: &[u8], value: &Value) -> bool {
    let Ok(sent) = std::str::from_utf8(sent) else {
        return false;
    };
    if !sent
        .bytes()
        .all(|b| b == b'\t' || (0x20..0x7f).contains(&b))
    {
        return false;
    }
    let sent = sent.trim_matches([' ', '\t']);
    let text = match sent
        .strip_prefix("=?base64?")
        .and_then(|rest| rest.strip_suffix("?="))
    {
        Some(inner) => match base64::engine::general_purpose::STANDARD.decode(inner) {
            Ok(bytes) => match String::from_utf8(bytes) {
                Ok(text) => text,
                Err(_) => return false,
            },
            Err(_) => return false,
        },
        None => sent.to_owned(),
    };
    match value {
        Value::String(expected) => text == *expected,
        Value::Bool(_) | Value::Number(_) => {
            // As JSON prints it (`true`, `-3`); not `Value == String`, which compares
            // with a JSON string.
            let printed = value.to_string();
            text == printed
        }
        _ => false,
    }
}

/// A 2026-07-28 `tools/call` over HTTP against bermd's `Mcp-Param-*` checks
/// (`crate::param_headers`): a schema with up to four mirrored arguments, a body and headers,
/// all from the fuzzer's bytes. At most one argument's header is made up; the others are what
/// a conforming client sends. Checked: [`param_headers::check_schema`] and
/// [`param_headers::check_request`] never panic; a request from a conforming client passes;
/// and a request passes exactly when the made-up header says what the body says (or is
/// absent while the argument is).
pub fn param_headers(data: &[u8]) {
    let mut input = Bytes(data);
    let count = input.byte() % 5;
    let made_up = input.byte() % 8;
    let mut properties = Map::new();
    let mut mirrored = Vec::new();
    for i in 0..count {
        let param = input.text();
        let header = input.text();
        let kind = input.byte();
        let ty = ["string", "integer", "boolean", "number"][kind as usize % 4];
        properties.insert(param.clone(), json!({"type": ty, "x-mcp-header": header}));
        let value = match input.byte() % 6 {
            0 => None,
            1 => Some(Value::Null),
            2 => Some(json!(input.byte() % 2 == 1)),
            3 => {
                let bytes: [u8; 8] = std::array::from_fn(|_| input.byte());
                Some(json!(i64::from_le_bytes(bytes)))
            }
            _ => Some(Value::String(input.text())),
        };
        let sent = (made_up == i).then(|| input.chunk().to_vec());
        mirrored.push(Mirrored {
            param,
            header,
            value,
            sent,
        });
    }
    let schema = json!({"type": "object", "properties": properties});
    if param_headers::check_schema(&schema).is_err() {
        return;
    }
    let params = param_headers::of_schema(&schema);
    // The schema's properties are a map: a name given twice keeps its last property.
    let mirrored: Vec<&Mirrored> = params
        .iter()
        .map(|ParamHeader { param, .. }| {
            mirrored
                .iter()
                .rev()
                .find(|m| &m.param == param)
                .expect("every mirrored parameter came from the input")
        })
        .collect();
    let mut arguments = Map::new();
    let mut headers = axum::http::HeaderMap::new();
    let mut expected = true;
    for m in &mirrored {
        if let Some(value) = &m.value {
            arguments.insert(m.param.clone(), value.clone());
        }
        let name = axum::http::HeaderName::from_bytes(format!("mcp-param-{}", m.header).as_bytes())
            .expect("check_schema accepts only token header names");
        let present = m.value.as_ref().filter(|v| !v.is_null());
        match &m.sent {
            None => {
                if let Some(text) = m.value.as_ref().and_then(conforming_header) {
                    let value = axum::http::HeaderValue::from_str(&text)
                        .expect("a conforming header value is visible ASCII");
                    headers.insert(name, value);
                }
            }
            Some(sent) => match axum::http::HeaderValue::from_bytes(sent) {
                Ok(value) => {
                    headers.insert(name, value);
                    expected &= present.is_some_and(|v| header_says(sent, v));
                }
                // HTTP cannot carry it (a line break, NUL): the header is not sent.
                Err(_) => expected &= present.is_none(),
            },
        }
    }
    let outcome = param_headers::check_request(&params, &headers, Some(&arguments), true);
    assert_eq!(
        outcome.is_ok(),
        expected,
        "schema {schema}, arguments {arguments:?}, headers {headers:?}: {outcome:?}"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn made_up_sealed_states_are_refused() {
        for text in [
            &b""[..],
            b"eyJub3QiOiJzZWFsZWQifQ",
            b"====",
            b"\xff\xfe",
            &[b'A'; 40],
            &[b'A'; crate::ask::MAX_SEALED + 4],
        ] {
            sealed_state(text);
        }
    }

    #[test]
    fn param_headers_pass_exactly_when_they_say_what_the_body_says() {
        param_headers(b"");
        // One string argument, its header made up as the Base64 form of the same text.
        let mut case = vec![1, 0, 6];
        case.extend_from_slice(b"region");
        case.push(6);
        case.extend_from_slice(b"Region");
        case.extend_from_slice(&[0, 5, 6]);
        case.extend_from_slice(b"H\xc3\xa9llo");
        let sent = b" =?base64?SMOpbGxv?= ";
        case.push(sent.len() as u8);
        case.extend_from_slice(sent);
        param_headers(&case);
        // The same with a header that differs, and one with a line break.
        for sent in [
            &b"Hello"[..],
            b"H\xc3\xa9llo",
            b"a\nb",
            b"=?base64?SMOpbGxv?=",
        ] {
            let mut other = case[..case.len() - 1 - 21].to_vec();
            other.push(sent.len() as u8);
            other.extend_from_slice(sent);
            param_headers(&other);
        }
        // Four conforming arguments of each kind.
        param_headers(&[
            4, 7, 1, b'a', 1, b'A', 0, 5, 3, b' ', b'x', b' ', 1, b'b', 1, b'B', 1, 3, 1, 2, 3, 4,
            5, 6, 7, 8, 1, b'c', 1, b'C', 2, 2, 1, 1, b'd', 1, b'D', 0, 1,
        ]);
    }
}
