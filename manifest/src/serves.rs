//! Resources and prompts: what a tool of a program may serve instead of being called.
//!
//! A program serves an MCP resource, resource template or prompt through one of its tools:
//! the same export, calling convention, grants and caps as any tool, so a read or a prompt
//! costs one fresh instance like a call. The manifest marks such a tool with `serves`; MCP
//! then offers it through `resources/*` or `prompts/*` and not through `tools/*`.
//! `docs/design/resources-and-prompts.md` says why it is built this way.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Most variables a resource template may have.
pub const MAX_TEMPLATE_VARIABLES: usize = 16;

/// What a tool serves, when it is not a tool for the model to call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Serves {
    /// One resource at a fixed URI, read with no arguments.
    Resource {
        /// The resource's URI (`scheme:rest`, at most 2048 bytes).
        uri: String,
        /// Its media type, when known.
        #[serde(default, skip_serializing_if = "String::is_empty")]
        mime_type: String,
    },
    /// Resources at the URIs a template matches; each `{variable}` is an argument.
    ResourceTemplate {
        /// An RFC 6570 level-1 template: literal text and `{name}` expressions.
        uri_template: String,
        /// The media type of what it reads, when known.
        #[serde(default, skip_serializing_if = "String::is_empty")]
        mime_type: String,
    },
    /// A prompt, named like the tool; its arguments are the tool's string arguments.
    Prompt {},
}

/// One piece of a resource template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Segment<'a> {
    /// Text that must appear as written.
    Literal(&'a str),
    /// `{name}`: one non-empty path segment.
    Variable(&'a str),
}

/// The segments of a level-1 URI template, or why it is not one.
///
/// # Errors
/// A message naming the fault: an unclosed or empty brace, an operator (levels 2–4 are not
/// supported), a variable name outside `[A-Za-z0-9_]`, a variable twice or two variables
/// side by side (which could not be told apart when matching).
pub fn template_segments(template: &str) -> Result<Vec<Segment<'_>>, String> {
    let mut segments = Vec::new();
    let mut rest = template;
    while !rest.is_empty() {
        match rest.find(['{', '}']) {
            None => {
                segments.push(Segment::Literal(rest));
                break;
            }
            Some(at) if rest.as_bytes()[at] == b'}' => {
                return Err(format!(
                    "`}}` at byte {} closes nothing",
                    template.len() - rest.len() + at
                ));
            }
            Some(at) => {
                if at > 0 {
                    segments.push(Segment::Literal(&rest[..at]));
                }
                let after = &rest[at + 1..];
                let close = after
                    .find('}')
                    .ok_or_else(|| "a `{` is never closed".to_string())?;
                let name = &after[..close];
                if name.is_empty() {
                    return Err("`{}` names no variable".into());
                }
                if !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
                    return Err(format!(
                        "`{{{name}}}` is not a level-1 expression: a variable is a name of \
                         a-z, A-Z, 0-9 and `_` (operators such as `+`, `#`, `/`, `?` are not supported)"
                    ));
                }
                if matches!(segments.last(), Some(Segment::Variable(_))) {
                    return Err(format!(
                        "`{{{name}}}` follows another variable directly; put literal text between them"
                    ));
                }
                if segments.contains(&Segment::Variable(name)) {
                    return Err(format!("variable `{name}` appears twice"));
                }
                segments.push(Segment::Variable(name));
                rest = &after[close + 1..];
            }
        }
    }
    let variables = segments
        .iter()
        .filter(|s| matches!(s, Segment::Variable(_)))
        .count();
    if variables == 0 {
        return Err("it has no `{variable}`; declare a fixed URI as a resource".into());
    }
    if variables > MAX_TEMPLATE_VARIABLES {
        return Err(format!(
            "it has {variables} variables, over the cap of {MAX_TEMPLATE_VARIABLES}"
        ));
    }
    Ok(segments)
}

/// The variables' values, percent-decoded, when `uri` matches the template's segments;
/// `None` when it does not. A variable's raw text runs up to the next literal, and what it
/// decodes to must be one path segment ([`segment_value`]), so `..%2F..%2Fetc` matches nothing
/// rather than reaching the program as `../../etc`. This is the one place a template variable
/// is checked: bermd's reads and subscriptions both go through it.
pub fn match_template(segments: &[Segment<'_>], uri: &str) -> Option<Vec<String>> {
    let mut values = Vec::new();
    let mut rest = uri;
    for (i, segment) in segments.iter().enumerate() {
        match segment {
            Segment::Literal(text) => rest = rest.strip_prefix(text)?,
            Segment::Variable(_) => {
                let end = match segments.get(i + 1) {
                    Some(Segment::Literal(next)) => rest.find(next)?,
                    _ => rest.len(),
                };
                values.push(segment_value(&rest[..end])?);
                rest = &rest[end..];
            }
        }
    }
    rest.is_empty().then_some(values)
}

/// What a variable's raw (percent-encoded) text `raw` decodes to, when that is one path
/// segment: UTF-8, not empty, not `.` or `..`, and holding no `/`, `?`, `#` or NUL. The check
/// is on the decoded text, which is what the program gets: `%2F` is as much a `/` as `/` is.
fn segment_value(raw: &str) -> Option<String> {
    let value = percent_encoding::percent_decode_str(raw)
        .decode_utf8()
        .ok()?;
    let one_segment = !value.is_empty()
        && value != "."
        && value != ".."
        && !value.contains(['/', '?', '#', '\0']);
    one_segment.then(|| value.into_owned())
}

/// Holds what a tool serves against its own declaration, for [`crate::Manifest::check`].
pub(crate) fn check(
    serves: &Serves,
    input_schema: &Value,
    output_schema: Option<&Value>,
) -> Result<(), String> {
    if output_schema.is_some() {
        return Err(
            "a resource or prompt returns content, not a structured result: drop output_schema"
                .into(),
        );
    }
    let properties: Vec<(&String, &Value)> = input_schema
        .get("properties")
        .and_then(Value::as_object)
        .map(|p| p.iter().collect())
        .unwrap_or_default();
    let required = input_schema
        .get("required")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    let all_strings = || match properties
        .iter()
        .find(|(_, schema)| schema.get("type") != Some(&Value::from("string")))
    {
        Some((name, _)) => Err(format!(
            "argument `{name}` must be a string (MCP passes prompt arguments and template variables as strings)"
        )),
        None => Ok(()),
    };
    let media_type = |mime: &str| {
        if mime.is_empty() || berm_abi::content::is_media_type(mime) {
            Ok(())
        } else {
            Err(format!("`{mime}` is not a media type (type/subtype)"))
        }
    };
    match serves {
        Serves::Resource { uri, mime_type } => {
            if !berm_abi::content::is_uri(uri) {
                return Err(format!(
                    "`{uri}` is not a URI (scheme:rest, at most {} bytes, no spaces)",
                    berm_abi::content::MAX_URI
                ));
            }
            if required > 0 {
                return Err("a resource is read with no arguments: require none".into());
            }
            media_type(mime_type)
        }
        Serves::ResourceTemplate {
            uri_template,
            mime_type,
        } => {
            if !berm_abi::content::is_uri(uri_template) {
                return Err(format!(
                    "`{uri_template}` is not a URI template (scheme:rest, at most {} bytes, no spaces)",
                    berm_abi::content::MAX_URI
                ));
            }
            let segments = template_segments(uri_template)
                .map_err(|e| format!("URI template `{uri_template}`: {e}"))?;
            let variables: Vec<&str> = segments
                .iter()
                .filter_map(|s| match s {
                    Segment::Variable(name) => Some(*name),
                    Segment::Literal(_) => None,
                })
                .collect();
            if let Some(missing) = variables
                .iter()
                .find(|v| !properties.iter().any(|(name, _)| name.as_str() == **v))
            {
                return Err(format!(
                    "the template's variable `{missing}` is not one of the tool's arguments"
                ));
            }
            if let Some((extra, _)) = properties
                .iter()
                .find(|(name, _)| !variables.contains(&name.as_str()))
            {
                return Err(format!(
                    "argument `{extra}` is not a variable of the template `{uri_template}`"
                ));
            }
            all_strings()?;
            media_type(mime_type)
        }
        Serves::Prompt {} => all_strings(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn level_one_templates_match_one_segment_per_variable() {
        let segments = template_segments("test://template/{id}/data").unwrap();
        assert_eq!(
            match_template(&segments, "test://template/123/data"),
            Some(vec!["123".to_string()])
        );
        assert_eq!(match_template(&segments, "test://template//data"), None);
        assert_eq!(match_template(&segments, "test://template/1/2/data"), None);
        assert_eq!(match_template(&segments, "test://template/1/datax"), None);
        let two = template_segments("db://{table}/rows/{key}").unwrap();
        assert_eq!(
            match_template(&two, "db://users/rows/a%20b"),
            Some(vec!["users".to_string(), "a b".to_string()])
        );
        assert_eq!(match_template(&two, "db://users/rows/"), None);
    }

    #[test]
    fn a_variable_is_checked_as_it_decodes() {
        let segments = template_segments("db://{table}/rows").unwrap();
        let value = |uri: &str| match_template(&segments, uri).map(|v| v[0].clone());
        assert_eq!(value("db://%2e%2e.x/rows"), Some("...x".to_string()));
        assert_eq!(value("db://caf%C3%A9/rows"), Some("café".to_string()));
        for refused in [
            "db://../rows",
            "db://./rows",
            "db://%2e%2e/rows",
            "db://%2E/rows",
            "db://..%2F..%2Fetc/rows",
            "db://a%2Fb/rows",
            "db://a%3Fb/rows",
            "db://a%23b/rows",
            "db://a%00b/rows",
            "db://%FF/rows",
            "db://a?b/rows",
        ] {
            assert_eq!(value(refused), None, "{refused}");
        }
    }

    #[test]
    fn templates_beyond_level_one_are_refused_with_the_reason() {
        for (template, says) in [
            ("x://{+path}", "not a level-1 expression"),
            ("x://{a}{b}", "follows another variable"),
            ("x://{a}/{a}", "appears twice"),
            ("x://{a", "never closed"),
            ("x://a}", "closes nothing"),
            ("x://{}", "names no variable"),
            ("x://fixed", "no `{variable}`"),
        ] {
            let err = template_segments(template).unwrap_err();
            assert!(err.contains(says), "{template}: {err}");
        }
    }

    #[test]
    fn a_serving_tool_must_fit_what_it_serves() {
        use serde_json::json;
        let strings =
            json!({"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]});
        let template = Serves::ResourceTemplate {
            uri_template: "t://{id}".into(),
            mime_type: "application/json".into(),
        };
        check(&template, &strings, None).unwrap();
        let other = Serves::ResourceTemplate {
            uri_template: "t://{key}".into(),
            mime_type: String::new(),
        };
        assert!(check(&other, &strings, None).unwrap_err().contains("`key`"));
        let fixed = Serves::Resource {
            uri: "t://x".into(),
            mime_type: String::new(),
        };
        assert!(
            check(&fixed, &strings, None)
                .unwrap_err()
                .contains("no arguments")
        );
        let number = json!({"type": "object", "properties": {"n": {"type": "integer"}}});
        assert!(
            check(&Serves::Prompt {}, &number, None)
                .unwrap_err()
                .contains("`n` must be a string")
        );
        let bad_uri = Serves::Resource {
            uri: "no scheme".into(),
            mime_type: String::new(),
        };
        assert!(check(&bad_uri, &json!({"type": "object"}), None).is_err());
        let out = json!({"type": "object"});
        assert!(
            check(&Serves::Prompt {}, &out, Some(&out))
                .unwrap_err()
                .contains("output_schema")
        );
    }
}
