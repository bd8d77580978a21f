//! `x-mcp-header` (SEP-2243, MCP 2026-07-28): a tool's input schema can ask clients to mirror
//! an argument into the HTTP header `Mcp-Param-<Name>`, so that a proxy or gateway routes on it
//! without reading the body. A server must then check that each mirrored header says what the
//! body says, and refuse the request when it does not (HTTP 400, JSON-RPC `-32020`): otherwise
//! whatever routed on the header and whatever runs on the body could be told two different
//! things.
//!
//! Deploy refuses a schema whose annotations a client would reject ([`check_schema`]); the HTTP
//! listener reads every POST body first ([`read_head`], [`read_call`]) and checks each
//! `tools/call` against its tool's [`ParamHeader`]s ([`check_request`]), whatever protocol
//! version the request claims: what a proxy routed on must be what the program runs on. A
//! body bermd cannot read (not JSON, a key written twice) is refused rather than passed on
//! unchecked. Written here rather than taken from rmcp: rmcp checks the standard `Mcp-Method`
//! and `Mcp-Name` headers, but knows nothing of a tool's schema.

use std::borrow::Cow;

use base64::Engine as _;
use serde::Deserialize;
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

/// The protocol version from which a client must mirror arguments into headers.
pub const MIRRORING_VERSION: &str = "2026-07-28";

/// What bermd reads of a POST body before rmcp does: its method, the name a `tools/call`
/// names, and the protocol version its `_meta` claims. Borrowed: most requests cost no more
/// than finding these.
#[derive(Debug, Deserialize)]
pub struct Head<'a> {
    /// The JSON-RPC method; none for a response.
    #[serde(borrow, default)]
    pub method: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    params: Option<HeadParams<'a>>,
}

#[derive(Debug, Deserialize)]
struct HeadParams<'a> {
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow, default, rename = "_meta")]
    meta: Option<HeadMeta<'a>>,
}

#[derive(Debug, Deserialize)]
struct HeadMeta<'a> {
    #[serde(borrow, default, rename = "io.modelcontextprotocol/protocolVersion")]
    protocol_version: Option<Cow<'a, str>>,
}

impl Head<'_> {
    /// The tool a `tools/call` names; `None` for any other message.
    pub fn called_tool(&self) -> Option<&str> {
        if self.method.as_deref() != Some("tools/call") {
            return None;
        }
        self.params.as_ref()?.name.as_deref()
    }

    /// Whether the request speaks a version whose clients must mirror arguments into headers,
    /// by its `MCP-Protocol-Version` header (any of them) or by its body's `_meta`: either
    /// one saying so is enough, so claiming an older version in one place does not lift the
    /// check on a missing header.
    pub fn mirrors(&self, headers: &axum::http::HeaderMap) -> bool {
        let says = |version: &str| version.trim() >= MIRRORING_VERSION;
        let in_body = self
            .params
            .as_ref()
            .and_then(|p| p.meta.as_ref())
            .and_then(|m| m.protocol_version.as_deref())
            .is_some_and(says);
        in_body
            || headers
                .get_all("mcp-protocol-version")
                .iter()
                .filter_map(|v| v.to_str().ok())
                .any(says)
    }
}

/// A POST body bermd cannot read, so cannot check: it is refused, never passed on.
#[derive(Debug, thiserror::Error)]
#[error(
    "bermd cannot read this request's body: {0}; send one JSON-RPC message, each key in it once"
)]
pub struct Unreadable(#[source] serde_json::Error);

impl Unreadable {
    /// The JSON-RPC error code: `-32700` (parse error) for text that is not JSON, `-32600`
    /// (invalid request) for JSON that is not a message bermd can read.
    pub fn code(&self) -> i64 {
        match self.0.classify() {
            serde_json::error::Category::Syntax | serde_json::error::Category::Eof => -32700,
            _ => -32600,
        }
    }
}

/// The [`Head`] of a POST body.
///
/// # Errors
/// [`Unreadable`] when it is not JSON, or names `method`, `params`, `name` or `_meta` twice,
/// or one of them is not of its type.
pub fn read_head(body: &[u8]) -> Result<Head<'_>, Unreadable> {
    serde_json::from_slice(body).map_err(Unreadable)
}

/// What a `tools/call` carries that its headers must agree with.
#[derive(Debug, Deserialize)]
pub struct Call {
    /// The request's id, for the refusal.
    #[serde(default)]
    pub id: Option<Value>,
    #[serde(default)]
    params: Option<CallParams>,
}

#[derive(Debug, Deserialize)]
struct CallParams {
    #[serde(default)]
    arguments: Option<Arguments>,
}

impl Call {
    /// The call's arguments, when it has any.
    pub fn arguments(&self) -> Option<&serde_json::Map<String, Value>> {
        Some(&self.params.as_ref()?.arguments.as_ref()?.0)
    }
}

/// The [`Call`] of a `tools/call` body.
///
/// # Errors
/// [`Unreadable`] when it names `id`, `params` or `arguments` twice, or an argument twice
/// (which whatever reads the body next might take one way and a proxy another).
pub fn read_call(body: &[u8]) -> Result<Call, Unreadable> {
    serde_json::from_slice(body).map_err(Unreadable)
}

/// A call's arguments, each named once.
#[derive(Debug)]
struct Arguments(serde_json::Map<String, Value>);

impl<'de> Deserialize<'de> for Arguments {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = Arguments;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object of arguments")
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Arguments, A::Error> {
                let mut arguments = serde_json::Map::new();
                while let Some(key) = map.next_key::<String>()? {
                    let value: Value = map.next_value()?;
                    if arguments.contains_key(&key) {
                        return Err(serde::de::Error::custom(format!(
                            "argument `{key}` is written twice"
                        )));
                    }
                    arguments.insert(key, value);
                }
                Ok(Arguments(arguments))
            }
        }
        deserializer.deserialize_map(Visitor)
    }
}

/// Why a request's `Mcp-Param-*` headers do not say what its body says.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum Mismatch {
    /// The header is sent more than once: whatever routed on one of them may not have read
    /// the one checked.
    #[error("header Mcp-Param-{header} is sent {times} times; send it once")]
    Repeated {
        /// The header's name after `Mcp-Param-`.
        header: String,
        /// How many times.
        times: usize,
    },
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
/// `params.arguments`): a header sent must be sent once and say what the argument says, and
/// one sent for an absent argument is refused. A header missing for an argument in the body
/// is refused when `required` (a client speaking [`MIRRORING_VERSION`] or later, which must
/// send it); an older client does not know to send it.
pub fn check_request(
    params: &[ParamHeader],
    headers: &axum::http::HeaderMap,
    arguments: Option<&serde_json::Map<String, Value>>,
    required: bool,
) -> Result<(), Mismatch> {
    for ParamHeader { param, header } in params {
        let all = headers.get_all(format!("mcp-param-{header}").as_str());
        let times = all.iter().count();
        if times > 1 {
            return Err(Mismatch::Repeated {
                header: header.clone(),
                times,
            });
        }
        let sent = all.iter().next();
        let value = arguments
            .and_then(|a| a.get(param))
            .filter(|v| !v.is_null());
        let (sent, value) = match (sent, value) {
            (None, None) => continue,
            (None, Some(_)) if !required => continue,
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
            check_request(&params, &map, args.as_object(), true)
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

    #[test]
    fn a_repeated_header_is_refused_and_a_missing_one_only_when_required() {
        let params = of_schema(&json!({"type": "object", "properties": {
            "region": {"type": "string", "x-mcp-header": "Region"}}}));
        let args = json!({"region": "eu"});
        let mut twice = axum::http::HeaderMap::new();
        for value in ["eu", "us"] {
            twice.append("mcp-param-region", value.parse().unwrap());
        }
        for required in [true, false] {
            assert_eq!(
                check_request(&params, &twice, args.as_object(), required),
                Err(Mismatch::Repeated {
                    header: "Region".into(),
                    times: 2
                })
            );
        }
        let none = axum::http::HeaderMap::new();
        assert!(matches!(
            check_request(&params, &none, args.as_object(), true),
            Err(Mismatch::Missing { .. })
        ));
        assert_eq!(
            check_request(&params, &none, args.as_object(), false),
            Ok(())
        );
        let mut other = axum::http::HeaderMap::new();
        other.insert("mcp-param-region", "us".parse().unwrap());
        assert!(matches!(
            check_request(&params, &other, args.as_object(), false),
            Err(Mismatch::Differs { .. })
        ));
    }

    #[test]
    fn bodies_with_a_key_twice_are_unreadable() {
        let head = read_head(br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#).unwrap();
        assert_eq!(head.called_tool(), Some("t"));
        assert!(head.mirrors(&axum::http::HeaderMap::new()));
        let old = read_head(br#"{"method":"tools/call","params":{"name":"t"}}"#).unwrap();
        assert!(!old.mirrors(&axum::http::HeaderMap::new()));
        let mut modern = axum::http::HeaderMap::new();
        modern.append("mcp-protocol-version", "2025-11-25".parse().unwrap());
        modern.append("mcp-protocol-version", "2026-07-28".parse().unwrap());
        assert!(old.mirrors(&modern));
        for twice in [
            &br#"{"method":"ping","method":"tools/call","params":{"name":"t"}}"#[..],
            br#"{"method":"tools/call","params":{"name":"a"},"params":{"name":"t"}}"#,
            br#"{"method":"tools/call","params":{"name":"a","name":"t"}}"#,
        ] {
            let e = read_head(twice).unwrap_err();
            assert_eq!(e.code(), -32600, "{e}");
        }
        assert_eq!(read_head(b"{not json").unwrap_err().code(), -32700);
        let call =
            read_call(br#"{"id":3,"params":{"name":"t","arguments":{"region":"eu"}}}"#).unwrap();
        assert_eq!(call.arguments().unwrap()["region"], "eu");
        assert_eq!(call.id, Some(json!(3)));
        let e = read_call(br#"{"id":3,"params":{"arguments":{"region":"eu","region":"us"}}}"#)
            .unwrap_err();
        assert!(
            e.to_string().contains("argument `region` is written twice"),
            "{e}"
        );
        assert!(read_call(br#"{"id":3,"id":4,"params":{}}"#).is_err());
    }
}
