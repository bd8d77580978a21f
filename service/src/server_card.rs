//! bermd's MCP server card (SEP-2127), served without a token at
//! `/.well-known/mcp/server-card.json` (and `/.well-known/mcp/server-card`, the SEP's own
//! spelling): what a client needs to connect before it connects — who bermd is, the
//! Streamable HTTP URL, the protocol versions, how it authenticates, and the capabilities.
//!
//! The card is public, so it lists only what a stranger may read: the catalog's tools only
//! when the operator says so (`bermd --server-card-tools`); otherwise `tools.listChanged`
//! says the tools are dynamic, learnt from `tools/list` once authorized (where, with OAuth,
//! the token's scopes filter them). Never a program's digest, grants, hosts or secrets.

use std::sync::Arc;

use axum::http::header;
use serde_json::{Value, json};

use crate::service::Service;

/// Where the card is served (the path the issue and most servers use).
pub const CARD_PATH: &str = "/.well-known/mcp/server-card.json";

/// The SEP's own spelling of the path, without the extension.
pub const CARD_PATH_BARE: &str = "/.well-known/mcp/server-card";

/// The card's schema (SEP-2127).
pub const CARD_SCHEMA: &str =
    "https://static.modelcontextprotocol.io/schemas/v1/server-card.schema.json";

/// bermd's name in reverse-DNS form, as the MCP Registry and the card spell a server's name.
pub const SERVER_NAME: &str = "io.github.berm-os/bermd";

/// How a client authenticates to the listener the card describes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CardAuth {
    /// OAuth 2.1 access tokens (`--oauth-issuer`).
    OAuth,
    /// The static bearer token.
    Bearer,
    /// None (`--no-auth`, loopback only).
    None,
}

/// What the card says about one listener.
#[derive(Clone, Debug)]
pub struct CardConfig {
    /// The URL clients reach `/mcp` by.
    pub url: String,
    /// How they authenticate.
    pub auth: CardAuth,
    /// Whether the catalog's tools are listed (`--server-card-tools`).
    pub tools: bool,
}

/// The card for `service`'s catalog now.
pub fn card(service: &Service, config: &CardConfig) -> Value {
    let versions: Vec<&str> = rmcp::model::ProtocolVersion::KNOWN_VERSIONS
        .iter()
        .map(|v| v.as_str())
        .collect();
    let authentication = match config.auth {
        CardAuth::OAuth => json!({"required": true, "schemes": ["oauth2"]}),
        CardAuth::Bearer => json!({"required": true, "schemes": ["bearer"]}),
        CardAuth::None => json!({"required": false, "schemes": []}),
    };
    let mut card = json!({
        "$schema": CARD_SCHEMA,
        "name": SERVER_NAME,
        "version": env!("CARGO_PKG_VERSION"),
        "title": "bermd",
        "description": "MCP tools that are WebAssembly programs pinned by sha256, reaching only what they are granted",
        "websiteUrl": "https://github.com/berm-os/berm",
        "repository": {"url": "https://github.com/berm-os/berm", "source": "github"},
        "remotes": [{
            "type": "streamable-http",
            "url": config.url,
            "supportedProtocolVersions": versions,
            "authentication": authentication,
        }],
        "capabilities": {
            "logging": {},
            "completions": {},
            "prompts": {"listChanged": true},
            "resources": {"subscribe": true, "listChanged": true},
            "tools": {"listChanged": true},
        },
    });
    if config.tools {
        let catalog = service.catalog();
        let tools: Vec<Value> = catalog
            .list()
            .iter()
            .filter_map(|tool| serde_json::to_value(tool).ok())
            .map(|mut tool| {
                // A tool's `_meta` is for connected clients; the card carries the tool alone.
                if let Some(object) = tool.as_object_mut() {
                    object.remove("_meta");
                }
                tool
            })
            .collect();
        card["tools"] = Value::Array(tools);
    }
    card
}

/// The card's routes, without a token: JSON, readable by any origin (the SEP's CORS), cached
/// for a minute (deploys change it).
pub fn router(service: Arc<Service>, config: CardConfig) -> axum::Router {
    let serve = move || {
        let (service, config) = (service.clone(), config.clone());
        async move {
            (
                [
                    (header::ACCESS_CONTROL_ALLOW_ORIGIN, "*"),
                    (header::ACCESS_CONTROL_ALLOW_METHODS, "GET"),
                    (header::ACCESS_CONTROL_ALLOW_HEADERS, "Content-Type"),
                    (header::CACHE_CONTROL, "public, max-age=60"),
                ],
                axum::Json(card(&service, &config)),
            )
        }
    };
    axum::Router::new()
        .route(CARD_PATH, axum::routing::get(serve.clone()))
        .route(CARD_PATH_BARE, axum::routing::get(serve))
}
