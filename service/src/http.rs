//! MCP over Streamable HTTP: loopback by default; any other address only
//! when explicitly allowed and guarded by a bearer token.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::Request;
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};

use crate::mcp::McpServer;
use crate::service::Service;

/// Where and how to serve MCP over HTTP.
#[derive(Debug, Clone)]
pub struct HttpConfig {
    /// The address to listen on.
    pub addr: SocketAddr,
    /// Allow an address other than loopback (requires `token`).
    pub allow_remote: bool,
    /// A bearer token every request must carry.
    pub token: Option<String>,
}

impl HttpConfig {
    /// Whether serving on this address is allowed: loopback always; any
    /// other address only when explicitly allowed and guarded by a token.
    pub fn permitted(&self) -> bool {
        self.addr.ip().is_loopback() || (self.allow_remote && self.token.is_some())
    }
}

/// Why HTTP could not be served.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// A non-loopback address without the explicit permission and a token.
    #[error(
        "refusing to serve MCP on {addr}: it is not a loopback address; pass --http-allow-remote and a bearer token (--http-token-file) to serve it anyway"
    )]
    NotLoopback {
        /// The address.
        addr: SocketAddr,
    },
    /// The listener could not be bound.
    #[error("could not listen on {addr}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// Checks the config and binds the listener.
pub async fn bind(config: &HttpConfig) -> Result<tokio::net::TcpListener, HttpError> {
    if !config.permitted() {
        return Err(HttpError::NotLoopback { addr: config.addr });
    }
    tokio::net::TcpListener::bind(config.addr)
        .await
        .map_err(|source| HttpError::Bind {
            addr: config.addr,
            source,
        })
}

/// The router serving MCP at `/mcp`.
pub fn router(service: Arc<Service>, config: &HttpConfig) -> axum::Router {
    let mut http = StreamableHttpServerConfig::default().with_legacy_session_mode(true);
    if !config.addr.ip().is_loopback() {
        // The token guards a remote endpoint; the Host check guards a local
        // one against DNS rebinding and would refuse remote clients.
        let host = config.addr.ip().to_string();
        http = http.with_allowed_hosts([host.clone(), format!("{host}:{}", config.addr.port())]);
    }
    let mcp: StreamableHttpService<McpServer, LocalSessionManager> = StreamableHttpService::new(
        move || Ok(McpServer::new(service.clone())),
        Default::default(),
        http,
    );
    let router = axum::Router::new().nest_service("/mcp", mcp);
    match config.token.clone() {
        Some(token) => router.layer(axum::middleware::from_fn(
            move |request: Request, next: Next| {
                let token = token.clone();
                async move { require_bearer(&token, request, next).await }
            },
        )),
        None => router,
    }
}

async fn require_bearer(token: &str, request: Request, next: Next) -> Response {
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    if presented.is_some_and(|p| constant_time_eq(p.as_bytes(), token.as_bytes())) {
        next.run(request).await
    } else {
        (StatusCode::UNAUTHORIZED, "missing or wrong bearer token").into_response()
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
