//! bermd's HTTP listener as an OAuth 2.1 resource server (`bermd --oauth-issuer URL`): every
//! request to `/mcp` and `/metrics` carries an access token the issuer made for this
//! resource, checked by [`berm_oauth::ResourceServer`]; what its scopes allow is checked
//! per JSON-RPC request, before anything runs ([`OAuthGate::scope_refusal`]); and the
//! protected resource's metadata (RFC 9728) is served without a token, at
//! `/.well-known/oauth-protected-resource` and its path-suffixed form.
//!
//! The scope check sits at the HTTP layer, where a refusal can be what the MCP spec's
//! step-up wants: HTTP 403 with `WWW-Authenticate: Bearer error="insufficient_scope"`,
//! naming the scope to ask for. It reads the request's JSON-RPC method and tool name from the
//! body the session cap reads anyway ([`crate::http`]).
//!
//! The token itself stops here: what passes on, in the request's extensions, is the
//! [`Principal`] (subject, client id, scopes), which `tools/list` filters by and receipts
//! record. No log line, span, metric label or receipt holds a token.

use std::sync::Arc;

use axum::extract::Request;
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use berm_oauth::challenge;
use berm_oauth::scopes;
use berm_oauth::{Principal, Refusal, ResourceServer};

use crate::service::Service;

/// The scope a 401 tells a client to ask for: reading, and calling every tool; a client
/// that wants less asks for less.
pub const CHALLENGE_SCOPE: &str = "berm:read berm:call";

/// The access token's principal, as a request's extensions carry it past the gate.
#[derive(Clone, Debug)]
pub struct Authorized(pub Arc<Principal>);

/// The token check and the scope check of one listener.
#[derive(Clone)]
pub struct OAuthGate {
    server: Arc<ResourceServer>,
    service: Arc<Service>,
}

impl std::fmt::Debug for OAuthGate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("OAuthGate").field(&self.server).finish()
    }
}

impl OAuthGate {
    /// A gate checking tokens with `server`, scopes against `service`'s catalog.
    pub fn new(server: Arc<ResourceServer>, service: Arc<Service>) -> OAuthGate {
        OAuthGate { server, service }
    }

    /// The resource server.
    pub fn server(&self) -> &Arc<ResourceServer> {
        &self.server
    }

    /// `router` with every request's token checked: 401 with the challenge when it has none
    /// or a refused one, else on with its [`Authorized`] principal.
    pub fn layer(&self, router: axum::Router) -> axum::Router {
        let gate = self.clone();
        router.layer(axum::middleware::from_fn(
            move |request: Request, next: Next| {
                let gate = gate.clone();
                async move { gate.authenticate(request, next).await }
            },
        ))
    }

    async fn authenticate(&self, mut request: Request, next: Next) -> Response {
        let presented = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.as_bytes().strip_prefix(b"Bearer "));
        let verdict = match presented {
            Some(token) => self.server.verify(token).await,
            None => Err(Refusal::Missing),
        };
        match verdict {
            Ok(principal) => {
                request
                    .extensions_mut()
                    .insert(Authorized(Arc::new(principal)));
                next.run(request).await
            }
            Err(refusal) => {
                tracing::debug!("refused an access token: {refusal}");
                let challenge =
                    challenge::unauthorized(self.server.config(), CHALLENGE_SCOPE, &refusal);
                (
                    StatusCode::UNAUTHORIZED,
                    [(header::WWW_AUTHENTICATE, challenge)],
                    format!("unauthorized: {refusal}"),
                )
                    .into_response()
            }
        }
    }

    /// The 403 for a JSON-RPC request `method` (naming tool `name`, for a call) that the
    /// principal's scopes do not allow, or `None`:
    /// - `tools/call` needs `berm:call`, `berm:call:<program>` or `berm:call:<tool>`;
    /// - resources, prompts and completions need `berm:read`;
    /// - anything else (`initialize`, `ping`, `tools/list`, notifications, tasks) a valid
    ///   token.
    pub fn scope_refusal(
        &self,
        principal: &Principal,
        method: Option<&str>,
        name: Option<&str>,
    ) -> Option<Response> {
        let needed = match method? {
            "tools/call" => {
                let name = name.unwrap_or_default();
                if principal.scopes.may_call(name) {
                    return None;
                }
                scopes::tool_scope(name)
            }
            "resources/list"
            | "resources/templates/list"
            | "resources/read"
            | "resources/subscribe"
            | "resources/unsubscribe"
            | "prompts/list"
            | "prompts/get"
            | "completion/complete" => {
                if principal.scopes.may_read() {
                    return None;
                }
                scopes::READ.to_string()
            }
            _ => return None,
        };
        let description = format!("this request needs the scope {needed}");
        let challenge = challenge::insufficient_scope(
            self.server.config(),
            &principal.scopes.with(&needed),
            &description,
        );
        Some(
            (
                StatusCode::FORBIDDEN,
                [(header::WWW_AUTHENTICATE, challenge)],
                format!("forbidden: {description}"),
            )
                .into_response(),
        )
    }

    /// The scopes the metadata lists: `berm:read`, `berm:call`, and `berm:call:<program>`
    /// for each program deployed now.
    fn scopes_supported(&self) -> Vec<String> {
        let mut supported = vec![scopes::READ.to_string(), scopes::CALL.to_string()];
        supported.extend(
            self.service
                .list()
                .iter()
                .map(|program| scopes::program_scope(&program.name)),
        );
        supported
    }

    /// The protected resource's metadata (RFC 9728), at the well-known path and at the
    /// well-known path followed by the resource's own path, without a token.
    pub fn metadata_router(&self) -> axum::Router {
        let gate = self.clone();
        let serve = move || {
            let gate = gate.clone();
            async move {
                let doc = challenge::metadata(gate.server.config(), &gate.scopes_supported());
                ([(header::CACHE_CONTROL, "max-age=60")], axum::Json(doc))
            }
        };
        let mut router =
            axum::Router::new().route(challenge::METADATA_PATH, axum::routing::get(serve.clone()));
        let suffixed =
            challenge::metadata_url(&self.server.config().resource).and_then(|u| url_path(&u));
        if let Some(path) = suffixed.filter(|p| p != challenge::METADATA_PATH) {
            router = router.route(&path, axum::routing::get(serve));
        }
        router
    }
}

/// The path of `url`.
fn url_path(url: &str) -> Option<String> {
    url.parse::<axum::http::Uri>()
        .ok()
        .map(|uri| uri.path().to_string())
}

/// The principal an MCP request came with over HTTP with OAuth, from the HTTP request's
/// extensions rmcp hands on.
pub fn principal_of(extensions: &rmcp::model::Extensions) -> Option<Arc<Principal>> {
    extensions
        .get::<axum::http::request::Parts>()?
        .extensions
        .get::<Authorized>()
        .map(|a| a.0.clone())
}

/// Whether `scopes` let a client see and call `served` (no principal: no OAuth, every tool).
pub fn may_call(principal: Option<&Principal>, served: &str) -> bool {
    principal.is_none_or(|p| p.scopes.may_call(served))
}
