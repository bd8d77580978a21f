//! `x-mcp-header` (SEP-2243, MCP 2026-07-28): a tool's input schema can ask clients to mirror
//! an argument into the HTTP header `Mcp-Param-<Name>`, so that a proxy or gateway routes on it
//! without reading the body. A server must then check that each mirrored header says what the
//! body says, and refuse the request when it does not (HTTP 400, JSON-RPC `-32020`): otherwise
//! whatever routed on the header and whatever runs on the body could be told two different
//! things.
//!
//! Deploy refuses a schema whose annotations a client would reject ([`check_schema`]); the HTTP
//! listener checks each 2026-07-28 `tools/call` against its tool's [`ParamHeader`]s
//! ([`check_request`]). Written here rather than taken from rmcp: rmcp checks the standard
//! `Mcp-Method` and `Mcp-Name` headers, but knows nothing of a tool's schema.

use base64::Engine as _;
use serde_json::Value;

/// The JSON-RPC error code SEP-2243 names for a header that does not match the body.
pub const HEADER_MISMATCH: i64 = -32020;

/// One argument mirrored into a header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParamHeader {
    /// The argument (a top-level property of the input schema).
    pub param: String,
    /// What follows `Mcp-Param-` in the header's name.
    pub header: String,
}

/// The mirrored arguments of a tool's input schema (checked at deploy by [`check_schema`]).
pub fn of_schema(schema: &Value) -> Vec<ParamHeader> {
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
        return Vec::new();
    };
    properties
        .iter()
        .filter_map(|(param, property)| {
            let header = property.get(berm_abi::MCP_HEADER_KEYWORD)?.as_str()?;
            Some(ParamHeader {
                param: param.clone(),
                header: header.to_owned(),
            })
        })
        .collect()
}

/// Refuses what SEP-2243 says a client must reject: a header name that is empty or not an
/// HTTP token, one on a property that is not a string, an integer or a boolean, and two
/// properties mirrored into the same header (names compare without case).
pub fn check_schema(schema: &Value) -> Result<(), String> {
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
        return Ok(());
    };
    let mut seen: Vec<(String, &str)> = Vec::new();
    for (param, property) in properties {
        let Some(annotation) = property.get(berm_abi::MCP_HEADER_KEYWORD) else {
            continue;
        };
        let at = format!("property `{param}`: {}", berm_abi::MCP_HEADER_KEYWORD);
        let Some(name) = annotation
            .as_str()
            .filter(|n| berm_abi::is_valid_mcp_header_name(n))
        else {
            return Err(format!(
                "{at} {annotation} is not a header name (1 to 64 of HTTP's token characters: no space, colon, control character or non-ASCII)"
            ));
        };
        match property.get("type").and_then(Value::as_str) {
            Some("string" | "integer" | "boolean") => {}
            other => {
                return Err(format!(
                    "{at} is on a property of type {}: only a string, an integer or a boolean is mirrored into a header",
                    other.map_or_else(|| "(none)".to_owned(), |t| format!("`{t}`"))
                ));
            }
        }
        if let Some((first, _)) = seen.iter().find(|(_, n)| n.eq_ignore_ascii_case(name)) {
            return Err(format!(
                "{at} \"{name}\" is also property `{first}`'s header (header names compare without case)"
            ));
        }
        seen.push((param.clone(), name));
    }
    Ok(())
}

/// Why a request's `Mcp-Param-*` headers do not say what its body says.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum Mismatch {
    /// The argument is in the body, the header is not.
    #[error("argument `{param}` is in the body but header Mcp-Param-{header} is missing")]
    Missing {
        /// The argument.
        param: String,
        /// The header's name after `Mcp-Param-`.
        header: String,
    },
    /// The header is there, the argument is not.
    #[error("header Mcp-Param-{header} is sent but argument `{param}` is not in the body")]
    Unexpected {
        /// The argument.
        param: String,
        /// The header's name after `Mcp-Param-`.
        header: String,
    },
    /// The header's `=?base64?…?=` value does not decode to UTF-8 text.
    #[error("header Mcp-Param-{header} is not valid Base64 of UTF-8 text: {why}")]
    BadBase64 {
        /// The header's name after `Mcp-Param-`.
        header: String,
        /// What is wrong with it.
        why: String,
    },
    /// The header and the argument differ.
    #[error("header Mcp-Param-{header} does not match argument `{param}` in the body")]
    Differs {
        /// The argument.
        param: String,
        /// The header's name after `Mcp-Param-`.
        header: String,
    },
}

/// Checks each of `params`' headers in `headers` against `arguments` (the body's
/// `params.arguments`).
pub fn check_request(
    params: &[ParamHeader],
    headers: &axum::http::HeaderMap,
    arguments: Option<&serde_json::Map<String, Value>>,
) -> Result<(), Mismatch> {
    for ParamHeader { param, header } in params {
        let sent = headers.get(format!("mcp-param-{header}").as_str());
        let value = arguments
            .and_then(|a| a.get(param))
            .filter(|v| !v.is_null());
        let (sent, value) = match (sent, value) {
            (None, None) => continue,
            (None, Some(_)) => {
                return Err(Mismatch::Missing {
                    param: param.clone(),
                    header: header.clone(),
                });
            }
            (Some(_), None) => {
                return Err(Mismatch::Unexpected {
                    param: param.clone(),
                    header: header.clone(),
                });
            }
            (Some(sent), Some(value)) => (sent, value),
        };
        let differs = || Mismatch::Differs {
            param: param.clone(),
            header: header.clone(),
        };
        // A header value is visible ASCII; anything else cannot mirror the argument.
        let sent = sent.to_str().map_err(|_| differs())?;
        let sent = decode(sent.trim_matches([' ', '\t'])).map_err(|why| Mismatch::BadBase64 {
            header: header.clone(),
            why,
        })?;
        let expected = match value {
            Value::String(text) => text.clone(),
            Value::Bool(b) => b.to_string(),
            Value::Number(n) => n.to_string(),
            // The schema allows only those three; the input schema's check refuses the rest.
            _ => return Err(differs()),
        };
        if sent != expected {
            return Err(differs());
        }
    }
    Ok(())
}

/// A header value as text: `=?base64?B64?=` is Base64 (padded, standard alphabet) of UTF-8;
/// anything else is the text itself.
fn decode(value: &str) -> Result<String, String> {
    let Some(inner) = value
        .strip_prefix("=?base64?")
        .and_then(|rest| rest.strip_suffix("?="))
    else {
        return Ok(value.to_owned());
    };
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(inner)
        .map_err(|e| e.to_string())?;
    String::from_utf8(bytes).map_err(|_| "it decodes to bytes that are not UTF-8".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn schemas_a_client_would_reject_are_refused() {
        let schema = |property: Value| json!({"type": "object", "properties": {"p": property}});
        assert!(check_schema(&schema(json!({"type": "string", "x-mcp-header": "Region"}))).is_ok());
        assert!(check_schema(&schema(json!({"type": "integer", "x-mcp-header": "N"}))).is_ok());
        for (bad, why) in [
            (
                json!({"type": "string", "x-mcp-header": ""}),
                "is not a header name",
            ),
            (
                json!({"type": "string", "x-mcp-header": "My Region"}),
                "is not a header name",
            ),
            (
                json!({"type": "string", "x-mcp-header": "Region:1"}),
                "is not a header name",
            ),
            (
                json!({"type": "string", "x-mcp-header": "Région"}),
                "is not a header name",
            ),
            (
                json!({"type": "string", "x-mcp-header": "Region\t1"}),
                "is not a header name",
            ),
            (
                json!({"type": "string", "x-mcp-header": 7}),
                "is not a header name",
            ),
            (
                json!({"type": "number", "x-mcp-header": "Score"}),
                "of type `number`",
            ),
            (
                json!({"type": "object", "x-mcp-header": "Data"}),
                "of type `object`",
            ),
            (
                json!({"type": "array", "x-mcp-header": "Items"}),
                "of type `array`",
            ),
            (
                json!({"type": "null", "x-mcp-header": "Nil"}),
                "of type `null`",
            ),
        ] {
            let err = check_schema(&schema(bad.clone())).unwrap_err();
            assert!(err.contains(why), "{bad}: {err}");
        }
        let twice = json!({"type": "object", "properties": {
            "a": {"type": "string", "x-mcp-header": "MyField"},
            "b": {"type": "string", "x-mcp-header": "myfield"}}});
        assert!(
            check_schema(&twice)
                .unwrap_err()
                .contains("also property `a`")
        );
    }

    #[test]
    fn headers_must_say_what_the_body_says() {
        let params = of_schema(&json!({"type": "object", "properties": {
            "region": {"type": "string", "x-mcp-header": "Region"},
            "n": {"type": "integer", "x-mcp-header": "N"},
            "q": {"type": "string"}}}));
        assert_eq!(params.len(), 2);
        let check = |headers: &[(&str, &str)], args: Value| {
            let mut map = axum::http::HeaderMap::new();
            for (k, v) in headers {
                map.insert(
                    axum::http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                    axum::http::HeaderValue::from_str(v).unwrap(),
                );
            }
            check_request(&params, &map, args.as_object())
        };
        let args = json!({"region": "Hello", "n": 3, "q": "x"});
        assert_eq!(
            check(
                &[("Mcp-Param-Region", "Hello"), ("mcp-param-n", "3")],
                args.clone()
            ),
            Ok(())
        );
        // Base64 of the same text, and whitespace around it.
        assert_eq!(
            check(
                &[
                    ("Mcp-Param-Region", " =?base64?SGVsbG8=?= "),
                    ("Mcp-Param-N", "3")
                ],
                args.clone()
            ),
            Ok(())
        );
        // Without the wrapper, Base64 is literal text, which here differs.
        assert!(matches!(
            check(
                &[("Mcp-Param-Region", "SGVsbG8="), ("Mcp-Param-N", "3")],
                args.clone()
            ),
            Err(Mismatch::Differs { .. })
        ));
        for bad in ["=?base64?SGVsbG8?=", "=?base64?SGVs!!!bG8=?="] {
            assert!(
                matches!(
                    check(
                        &[("Mcp-Param-Region", bad), ("Mcp-Param-N", "3")],
                        args.clone()
                    ),
                    Err(Mismatch::BadBase64 { .. })
                ),
                "{bad}"
            );
        }
        assert!(matches!(
            check(&[("Mcp-Param-N", "3")], args.clone()),
            Err(Mismatch::Missing { .. })
        ));
        assert!(matches!(
            check(&[("Mcp-Param-Region", "Hello"), ("Mcp-Param-N", "4")], args),
            Err(Mismatch::Differs { .. })
        ));
        // An argument that is absent or null has no header; one sent anyway is refused.
        assert_eq!(check(&[], json!({"q": "x", "region": null})), Ok(()));
        assert!(matches!(
            check(&[("Mcp-Param-N", "1")], json!({"q": "x"})),
            Err(Mismatch::Unexpected { .. })
        ));
    }
}
