//! What bermd tells a client that has no token, or not the right one: the protected
//! resource's metadata (RFC 9728) and the `WWW-Authenticate` challenges (RFC 6750 §3) that
//! point to it, as the MCP authorization spec has a client discover the issuer.

use crate::{OAuthConfig, Refusal};

/// The metadata document's path, before the resource's own path (RFC 9728 §3.1).
pub const METADATA_PATH: &str = "/.well-known/oauth-protected-resource";

/// Where the metadata of `resource` is: the well-known path inserted between the host and
/// the resource's path (`https://h/.well-known/oauth-protected-resource/mcp` for
/// `https://h/mcp`). `None` when `resource` is not a URL.
pub fn metadata_url(resource: &str) -> Option<String> {
    let url = url::Url::parse(resource).ok()?;
    let path = url.path().trim_end_matches('/');
    let mut metadata = url.clone();
    metadata.set_path(&format!("{METADATA_PATH}{path}"));
    metadata.set_query(None);
    Some(metadata.to_string())
}

/// RFC 9728's document for `config`, with `scopes` as `scopes_supported`. It names no
/// `resource_signing_alg_values_supported`: bermd signs no response, and RFC 9728 has the
/// member omitted then rather than empty.
pub fn metadata(config: &OAuthConfig, scopes: &[String]) -> serde_json::Value {
    serde_json::json!({
        "resource": config.resource,
        "authorization_servers": [config.issuer],
        "scopes_supported": scopes,
        "bearer_methods_supported": ["header"],
        "resource_name": "bermd",
        "resource_documentation": "https://github.com/berm-os/berm/blob/main/docs/service.md",
    })
}

/// The challenge of a 401: the metadata URL and the scope to ask for, and, when a token was
/// presented and refused, `error="invalid_token"` with why.
pub fn unauthorized(config: &OAuthConfig, scope: &str, refusal: &Refusal) -> String {
    let mut challenge = format!(
        "Bearer resource_metadata=\"{}\", scope=\"{scope}\"",
        metadata_url(&config.resource).unwrap_or_default()
    );
    if *refusal != Refusal::Missing {
        challenge.push_str(&format!(
            ", error=\"invalid_token\", error_description=\"{}\"",
            quoted(&refusal.to_string())
        ));
    }
    challenge
}

/// The challenge of a 403 for a step-up: `error="insufficient_scope"` and the scopes to ask
/// for (RFC 6750 §3.1; the MCP spec's step-up).
pub fn insufficient_scope(config: &OAuthConfig, scope: &str, description: &str) -> String {
    format!(
        "Bearer error=\"insufficient_scope\", scope=\"{scope}\", resource_metadata=\"{}\", error_description=\"{}\"",
        metadata_url(&config.resource).unwrap_or_default(),
        quoted(description)
    )
}

/// `text` safe inside a quoted-string: RFC 6750 allows no `"` or `\` there.
fn quoted(text: &str) -> String {
    text.chars()
        .filter(|c| *c != '"' && *c != '\\' && (' '..='~').contains(c))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_metadata_url_puts_the_well_known_path_before_the_resources() {
        assert_eq!(
            metadata_url("https://mcp.example.com/mcp").as_deref(),
            Some("https://mcp.example.com/.well-known/oauth-protected-resource/mcp")
        );
        assert_eq!(
            metadata_url("http://127.0.0.1:8080/").as_deref(),
            Some("http://127.0.0.1:8080/.well-known/oauth-protected-resource")
        );
    }
}
