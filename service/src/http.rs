//! MCP over Streamable HTTP: loopback by default; any other address only
//! when explicitly allowed. Every request carries a bearer token, even on
//! loopback (any local process can reach a loopback port): the one given
//! with `--http-token-file`, else one bermd generates into
//! `$BERM_HOME/http-token`; only `--no-auth` turns it off, and only on
//! loopback. With `--oauth-issuer`, the token is instead an OAuth access token that issuer
//! made for this resource ([`crate::resource_server`]).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::extract::Request;
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use sha2::{Digest, Sha256};

use crate::mcp::McpServer;
use crate::service::Service;
use crate::transport::SessionRate;

/// The shortest bearer token accepted: 32 bytes, as many as the digest it
/// is compared by.
pub const MIN_TOKEN_BYTES: usize = 32;

/// The names a loopback listener answers to (`Host`, and the host of a
/// browser's `Origin`).
const LOOPBACK_HOSTS: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

/// A bearer token, kept only as its SHA-256 digest: every presented token
/// is hashed and the two 32-byte digests are compared in constant time, so
/// neither the token's bytes nor its length show in how long a refusal
/// takes.
#[derive(Clone)]
pub struct Token {
    digest: [u8; 32],
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(..)")
    }
}

impl Token {
    /// The token in a token file's `contents` (surrounding whitespace
    /// ignored): refused when empty or shorter than [`MIN_TOKEN_BYTES`].
    pub fn parse(contents: &str) -> Result<Token, HttpError> {
        let token = contents.trim();
        if token.len() < MIN_TOKEN_BYTES {
            return Err(HttpError::WeakToken { len: token.len() });
        }
        Ok(Token {
            digest: Sha256::digest(token.as_bytes()).into(),
        })
    }

    /// Whether `presented` is the token.
    pub fn matches(&self, presented: &[u8]) -> bool {
        let digest: [u8; 32] = Sha256::digest(presented).into();
        digest
            .iter()
            .zip(&self.digest)
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
    }
}

/// Where and how to serve MCP over HTTP.
#[derive(Debug, Clone)]
pub struct HttpConfig {
    /// The address to listen on.
    pub addr: SocketAddr,
    /// Allow an address other than loopback (requires `token` and
    /// `allowed_hosts`).
    pub allow_remote: bool,
    /// The bearer token every request must carry (`--http-token-file`);
    /// when none, [`home_token`] makes or reuses one, unless `no_auth`.
    pub token: Option<Token>,
    /// The file `token` was read from, recorded in `$BERM_HOME/http.json`
    /// for `berm http` (absolute, so it names the file from any directory).
    pub token_file: Option<PathBuf>,
    /// Serve without any token (`--no-auth`): loopback only, and every
    /// local process can then call every tool.
    pub no_auth: bool,
    /// The host names clients reach a non-loopback listener by
    /// (`--allowed-host`): a request whose `Host`, or whose browser
    /// `Origin`, names anything else is refused (DNS rebinding). A loopback
    /// listener answers to `localhost`, `127.0.0.1` and `::1` as well.
    pub allowed_hosts: Vec<String>,
    /// Access tokens from an OAuth issuer instead of the static token (`--oauth-issuer`);
    /// an empty `resource` stands for this listener's URL ([`HttpConfig::url`]).
    pub oauth: Option<berm_oauth::OAuthConfig>,
    /// Whether the public server card lists the catalog's tools (`--server-card-tools`;
    /// [`crate::server_card`]).
    pub server_card_tools: bool,
}

impl HttpConfig {
    /// Checks the address: loopback always; any other address only when
    /// explicitly allowed, guarded by a token, and given the names clients
    /// use to reach it.
    pub fn check(&self) -> Result<(), HttpError> {
        if let Some(oauth) = &self.oauth {
            self.resolved_oauth(self.addr, oauth.clone()).check()?;
        }
        if self.no_auth && !self.addr.ip().is_loopback() {
            return Err(HttpError::NoAuthRemote { addr: self.addr });
        }
        if self.addr.ip().is_loopback() {
            return Ok(());
        }
        if !self.allow_remote || (self.token.is_none() && self.oauth.is_none()) {
            return Err(HttpError::NotLoopback { addr: self.addr });
        }
        if self.allowed_hosts.is_empty() {
            return Err(HttpError::NoAllowedHost { addr: self.addr });
        }
        Ok(())
    }

    /// The URL clients use once bound to `local` (the actual port when
    /// `addr` asked for port 0): a non-loopback listener by its first
    /// allowed host name, since requests for any other `Host` are refused.
    pub fn url(&self, local: SocketAddr) -> String {
        match self.allowed_hosts.first() {
            Some(host) if !local.ip().is_loopback() => {
                format!("http://{host}:{}/mcp", local.port())
            }
            _ => format!("http://{local}/mcp"),
        }
    }

    /// `oauth` with its resource settled: the one configured, else this listener's URL
    /// once bound to `local`.
    pub fn resolved_oauth(
        &self,
        local: SocketAddr,
        mut oauth: berm_oauth::OAuthConfig,
    ) -> berm_oauth::OAuthConfig {
        if oauth.resource.is_empty() {
            oauth.resource = self.url(local);
        }
        oauth
    }

    /// The `Host` names requests may carry.
    fn hosts(&self) -> AllowedHosts {
        AllowedHosts::new(self.addr, &self.allowed_hosts)
    }
}

/// Where and how to serve `/metrics` alone, without a token (`bermd --metrics ADDR`).
#[derive(Debug, Clone)]
pub struct MetricsConfig {
    /// The address to listen on (loopback unless `--metrics-allow-remote`, checked by the
    /// caller).
    pub addr: SocketAddr,
    /// The host names scrapers reach it by (`--allowed-host`), beside the loopback names on
    /// a loopback address and any IP address on another ([`AllowedHosts::for_metrics`]).
    pub allowed_hosts: Vec<String>,
}

/// The hosts a listener answers to: a request whose `Host`, or whose browser `Origin`, names
/// any other is refused with 403. This is what stops DNS rebinding — a page whose own name
/// the attacker points at bermd's address, so that the browser lets it read the answers —
/// on every route but the probes, of the MCP listener and the `--metrics` listener alike
/// ([`AllowedHosts::layer`]).
#[derive(Debug, Clone)]
pub struct AllowedHosts {
    /// The names (lowercase, IPv6 without brackets).
    names: Arc<Vec<String>>,
    /// Whether any IP address literal is admitted too: no rebound name ever arrives as one
    /// (a browser sends the name its page was loaded by), and a scraper in a cluster names
    /// a pod by its address.
    ip_literals: bool,
}

impl AllowedHosts {
    /// For a listener on `addr`: `names` (`--allowed-host`), and `localhost`, `127.0.0.1`
    /// and `::1` when `addr` is loopback.
    pub fn new(addr: SocketAddr, names: &[String]) -> AllowedHosts {
        let mut all: Vec<String> = names.iter().map(|n| normalize(n)).collect();
        if addr.ip().is_loopback() {
            all.extend(LOOPBACK_HOSTS.map(String::from));
        }
        AllowedHosts {
            names: Arc::new(all),
            ip_literals: false,
        }
    }

    /// For the `--metrics` listener: as [`AllowedHosts::new`], and on an address that is
    /// not loopback (`--metrics-allow-remote`) any IP address as well, which is how a
    /// scraper in a cluster reaches a pod.
    pub fn for_metrics(config: &MetricsConfig) -> AllowedHosts {
        AllowedHosts {
            ip_literals: !config.addr.ip().is_loopback(),
            ..AllowedHosts::new(config.addr, &config.allowed_hosts)
        }
    }

    /// The names, as rmcp's own check on `/mcp` takes them.
    fn names(&self) -> Vec<String> {
        self.names.to_vec()
    }

    /// Whether `host` (as a `Host` or an `Origin` names it, without the port) is one of
    /// these.
    fn admits(&self, host: &str) -> bool {
        let host = normalize(host);
        self.names.contains(&host) || (self.ip_literals && host.parse::<std::net::IpAddr>().is_ok())
    }

    /// Why `request` is refused, or `None` when its `Host` (or, over HTTP/2, its
    /// `:authority`) and its `Origin`, if any, name hosts these admit.
    fn refusal(&self, request: &Request) -> Option<Response> {
        let forbidden = |what: &str| {
            (
                StatusCode::FORBIDDEN,
                format!(
                    "forbidden: the {what} names a host this listener does not answer to \
                     (bermd --allowed-host NAME adds one)"
                ),
            )
                .into_response()
        };
        let host = match request.headers().get(header::HOST) {
            Some(value) => value
                .to_str()
                .ok()
                .and_then(|v| axum::http::uri::Authority::try_from(v).ok()),
            None => request.uri().authority().cloned(),
        };
        let Some(host) = host else {
            return Some(
                (StatusCode::BAD_REQUEST, "bad request: no valid Host header").into_response(),
            );
        };
        if !self.admits(host.host()) {
            return Some(forbidden("Host header"));
        }
        let origin = request.headers().get(header::ORIGIN)?;
        let admitted = origin
            .to_str()
            .ok()
            .and_then(|v| axum::http::Uri::try_from(v).ok())
            .filter(|uri| matches!(uri.scheme_str(), Some("http" | "https")))
            .and_then(|uri| uri.authority().map(|a| self.admits(a.host())))
            .unwrap_or(false);
        (!admitted).then(|| forbidden("Origin header"))
    }

    /// `router` with every request checked first ([`AllowedHosts`]).
    pub fn layer(&self, router: axum::Router) -> axum::Router {
        let hosts = self.clone();
        router.layer(axum::middleware::from_fn(
            move |request: Request, next: Next| {
                let refusal = hosts.refusal(&request);
                async move {
                    match refusal {
                        Some(refusal) => refusal,
                        None => next.run(request).await,
                    }
                }
            },
        ))
    }
}

/// A host name as compared: lowercase, an IPv6 address without its brackets.
fn normalize(host: &str) -> String {
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .to_ascii_lowercase()
}

/// Why HTTP could not be served.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// A non-loopback address without the explicit permission and a token.
    #[error(
        "refusing to serve MCP on {addr}: it is not a loopback address; pass --http-allow-remote, a bearer token (--http-token-file) and the host names clients use (--allowed-host) to serve it anyway"
    )]
    NotLoopback {
        /// The address.
        addr: SocketAddr,
    },
    /// `--no-auth` on an address other people's machines can reach.
    #[error(
        "refusing --no-auth on {addr}: it is not a loopback address; a listener other machines reach needs a bearer token (--http-token-file)"
    )]
    NoAuthRemote {
        /// The address.
        addr: SocketAddr,
    },
    /// The token file in `$BERM_HOME` is not one only this user can read.
    #[error("refusing the token file {}: {problem}; {fix}", path.display())]
    InsecureTokenFile {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        problem: String,
        /// The command that fixes it.
        fix: String,
    },
    /// The token file could not be read or written.
    #[error("could not read or create the token file {}", path.display())]
    TokenFile {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A non-loopback address without a host name to answer to.
    #[error(
        "refusing to serve MCP on {addr}: name the host clients reach it by with --allowed-host NAME (for example --allowed-host $(hostname)); requests for any other Host are refused"
    )]
    NoAllowedHost {
        /// The address.
        addr: SocketAddr,
    },
    /// The token file is empty or its token too short to resist guessing.
    #[error(
        "the bearer token is {len} bytes; at least {MIN_TOKEN_BYTES} are required (make one with `head -c 32 /dev/urandom | base64 > FILE`)"
    )]
    WeakToken {
        /// The token's length.
        len: usize,
    },
    /// The OAuth configuration was refused.
    #[error(transparent)]
    OAuth(#[from] berm_oauth::ConfigError),
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

/// The token in `path` (bermd's `$BERM_HOME/http-token`), made when there
/// is none: 32 random bytes, hex, written atomically with mode 0600. An
/// existing file is reused so clients configured once keep working across
/// restarts, but only if it is a regular file owned by this user and closed
/// to group and others; anything else is refused with the command that
/// fixes it, since a token others can read guards nothing.
pub fn home_token(path: &Path) -> Result<Token, HttpError> {
    use crate::home::SecretFileError;
    let text = crate::home::secret_file(path, MIN_TOKEN_BYTES).map_err(|e| match e {
        SecretFileError::Io(source) => HttpError::TokenFile {
            path: path.to_path_buf(),
            source,
        },
        SecretFileError::Insecure { problem, fix } => HttpError::InsecureTokenFile {
            path: path.to_path_buf(),
            problem,
            fix,
        },
    })?;
    Token::parse(&text)
}

/// Checks the config and binds the listener.
pub async fn bind(config: &HttpConfig) -> Result<tokio::net::TcpListener, HttpError> {
    config.check()?;
    tokio::net::TcpListener::bind(config.addr)
        .await
        .map_err(|source| HttpError::Bind {
            addr: config.addr,
            source,
        })
}

/// What `/readyz` holds bermd to: the programs it was started to serve (its app folders'),
/// each by name and wasm sha256 (lowercase hex). An orchestrator then sends no traffic to a
/// replica whose declared program is missing or was replaced by hand.
#[derive(Clone, Debug, Default)]
pub struct Declared(Arc<Vec<(String, String)>>);

impl Declared {
    /// The declared programs, by name and wasm sha256 (lowercase hex).
    pub fn new(programs: Vec<(String, String)>) -> Self {
        Declared(Arc::new(programs))
    }

    /// Every declared program is deployed with its digest (deploying compiles, so it is
    /// compiled too).
    fn ready(&self, service: &Service) -> bool {
        self.0.iter().all(|(name, sha256)| {
            service
                .berm()
                .get(name)
                .is_some_and(|info| info.digest.hex() == *sha256)
        })
    }
}

/// `/healthz` (the process answers) and `/readyz` (every declared program is served), for
/// orchestrators' probes. They answer before the token, cap and Host checks, since a probe
/// carries no token and names the pod by IP, and they reveal only a status: `ok`, `ready` or
/// `not ready`, never which program is missing.
fn health(service: Arc<Service>, declared: Declared) -> axum::Router {
    axum::Router::new()
        .route("/healthz", axum::routing::get(|| async { "ok\n" }))
        .route(
            "/readyz",
            axum::routing::get(move || async move {
                if declared.ready(&service) {
                    (StatusCode::OK, "ready\n")
                } else {
                    (StatusCode::SERVICE_UNAVAILABLE, "not ready\n")
                }
            }),
        )
}

/// The router serving MCP at `/mcp`, `/metrics` ([`metrics_router`]) behind the same token,
/// and the probes `/healthz` and `/readyz` ([`health`]).
///
/// For `/mcp`, in order: the bearer token (401 with `WWW-Authenticate: Bearer`), or with
/// `oauth` the access token (401 with the challenge naming the resource's metadata, which is
/// served before any token), the
/// session cap (503: at most `max_sessions` sessions open and requests in
/// flight), the session rate (429: at most `per_second` new sessions a
/// second), then rmcp's `Host` and `Origin` checks against the allowed hosts
/// (403).
pub fn router(
    service: Arc<Service>,
    config: &HttpConfig,
    max_sessions: usize,
    per_second: u32,
    declared: Declared,
    oauth: Option<crate::resource_server::OAuthGate>,
) -> axum::Router {
    let probes = health(service.clone(), declared);
    let service_for_metrics = service.clone();
    let service_for_headers = service.clone();
    let service_for_card = service.clone();
    let allowed = config.hosts();
    let hosts = allowed.names();
    let origins: Vec<String> = hosts
        .iter()
        .flat_map(|host| {
            let host = if host.contains(':') {
                format!("[{host}]")
            } else {
                host.clone()
            };
            [format!("http://{host}:*"), format!("https://{host}:*")]
        })
        .collect();
    let http = StreamableHttpServerConfig::default();
    let max_body = http.max_request_body_bytes;
    let http = http
        .with_legacy_session_mode(true)
        .with_allowed_hosts(hosts)
        .with_allowed_origins(origins)
        .enforce_origin_validation();
    let sessions = Arc::new(LocalSessionManager::default());
    let mcp: StreamableHttpService<McpServer, LocalSessionManager> = StreamableHttpService::new(
        move || Ok(McpServer::over_http(service.clone())),
        sessions.clone(),
        http,
    );
    let cap = HttpCap {
        service: service_for_headers,
        sessions,
        in_flight: Arc::new(tokio::sync::Semaphore::new(max_sessions.max(1))),
        max: max_sessions.max(1),
        rate: SessionRate::new(per_second),
        max_body,
        oauth: oauth.clone(),
    };
    let router = axum::Router::new()
        .nest_service("/mcp", mcp)
        .merge(metrics_router(service_for_metrics))
        .layer(axum::middleware::from_fn(
            move |request: Request, next: Next| {
                let cap = cap.clone();
                async move { cap.admit(request, next).await }
            },
        ));
    // The server card, like the resource metadata, is discovery: served without a token.
    let card = crate::server_card::router(
        service_for_card,
        crate::server_card::CardConfig {
            url: match &oauth {
                Some(gate) => gate.server().config().resource.clone(),
                None => config.url(config.addr),
            },
            auth: match (&oauth, &config.token) {
                (Some(_), _) => crate::server_card::CardAuth::OAuth,
                (None, Some(_)) => crate::server_card::CardAuth::Bearer,
                (None, None) => crate::server_card::CardAuth::None,
            },
            tools: config.server_card_tools,
        },
    );
    let router = match (config.token.clone(), &oauth) {
        (_, Some(gate)) => gate.layer(router).merge(gate.metadata_router()),
        (Some(token), None) => router.layer(axum::middleware::from_fn(
            move |request: Request, next: Next| {
                let token = token.clone();
                async move { require_bearer(&token, request, next).await }
            },
        )),
        (None, None) => router,
    };
    let router = router.merge(card);
    // The Host check first, on /metrics as on /mcp (where rmcp checks the same names again).
    let router = allowed.layer(router);
    // Merged after the layers above, which therefore do not apply to the probes.
    probes.merge(router)
}

/// The `--metrics` listener's router: [`metrics_router`] alone, without a token, behind
/// the same Host check as the MCP listener ([`AllowedHosts::for_metrics`]), so that a page
/// rebinding its name to bermd's address cannot read program and tool names.
pub fn metrics_only_router(service: Arc<Service>, config: &MetricsConfig) -> axum::Router {
    AllowedHosts::for_metrics(config).layer(metrics_router(service))
}

/// `/metrics`: the Prometheus text format of [`crate::metrics::Metrics`]. On the MCP listener
/// it sits behind the same token as `/mcp`; `bermd --metrics ADDR` serves it alone, without
/// one, for a scraper that cannot hold the token (it reveals program and tool names and call
/// counts, never arguments or results). Both check the Host first ([`AllowedHosts`]).
pub fn metrics_router(service: Arc<Service>) -> axum::Router {
    axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || async move {
            (
                [(
                    header::CONTENT_TYPE,
                    "text/plain; version=0.0.4; charset=utf-8",
                )],
                service.metrics().encode(),
            )
        }),
    )
}

/// Bounds HTTP the way [`crate::transport::SessionCap`] bounds a socket:
/// sessions open (an idle one lasts until rmcp's keep-alive ends it) and
/// requests in flight, each at most `max`. Past either, 503 saying which
/// cap and which flag. New sessions past the rate get 429 with how long to
/// wait: an HTTP request cannot be left in a backlog the way a socket
/// connection can.
#[derive(Clone)]
struct HttpCap {
    /// Whose catalog says which arguments a call mirrors into headers.
    service: Arc<Service>,
    sessions: Arc<LocalSessionManager>,
    in_flight: Arc<tokio::sync::Semaphore>,
    max: usize,
    rate: SessionRate,
    /// rmcp's own cap on one request's body, so reading it first refuses nothing rmcp takes.
    max_body: usize,
    /// With OAuth, what checks each request's method against its token's scopes.
    oauth: Option<crate::resource_server::OAuthGate>,
}

impl HttpCap {
    async fn admit(&self, request: Request, next: Next) -> Response {
        let busy = |what: &str| {
            (
                StatusCode::SERVICE_UNAVAILABLE,
                [(header::RETRY_AFTER, "1")],
                format!(
                    "bermd already has {} {what}, its cap (bermd --max-connections); try again later",
                    self.max
                ),
            )
                .into_response()
        };
        let Ok(_permit) = self.in_flight.clone().try_acquire_owned() else {
            return busy("HTTP requests in flight");
        };
        // Only an `initialize` opens a session (rmcp routes every other request without a
        // session id statelessly, as 2026-07-28 has it, or refuses it), so only an
        // initialize counts against the session cap and rate: a 2026-07-28 client's every
        // call is a POST without a session id, and must not be rate-limited as a new session.
        let mut request = request;
        let mut opens_session = false;
        // Every POST's body is read here: a tools/call's `Mcp-Param-*` headers are checked
        // against it (SEP-2243) whatever protocol version the request claims, and a body this
        // cannot read is refused rather than passed on unchecked.
        if request.method() == axum::http::Method::POST {
            let (parts, body) = request.into_parts();
            let Ok(bytes) = axum::body::to_bytes(body, self.max_body).await else {
                return (
                    StatusCode::PAYLOAD_TOO_LARGE,
                    format!(
                        "the request is over {} bytes, bermd's cap on one MCP message",
                        self.max_body
                    ),
                )
                    .into_response();
            };
            let head = match crate::param_headers::read_head(&bytes) {
                Ok(head) => head,
                Err(unreadable) => return refusal(None, unreadable.code(), &unreadable),
            };
            opens_session = head.method.as_deref() == Some("initialize");
            // Before anything runs: a request its token's scopes do not allow is a step-up.
            if let (Some(gate), Some(authorized)) = (
                &self.oauth,
                parts.extensions.get::<crate::resource_server::Authorized>(),
            ) && let Some(refused) =
                gate.scope_refusal(&authorized.0, head.method.as_deref(), head.called_tool())
            {
                return refused;
            }
            if let Some(refused) = self.param_headers(&parts.headers, &head, &bytes) {
                return refused;
            }
            request = Request::from_parts(parts, axum::body::Body::from(bytes));
        }
        if opens_session && self.sessions.sessions.read().await.len() >= self.max {
            return busy("HTTP sessions open");
        }
        // The bucket refills a token within a second at any rate.
        if opens_session && self.rate.try_take("HTTP").is_err() {
            return (
                StatusCode::TOO_MANY_REQUESTS,
                [(header::RETRY_AFTER, "1")],
                format!(
                    "bermd starts at most {} new HTTP sessions a second, its cap \
                     (bermd --max-session-rate); try again in a second",
                    self.rate.per_second()
                ),
            )
                .into_response();
        }
        next.run(request).await
    }
}

impl HttpCap {
    /// For a `tools/call` of a tool with mirrored arguments, the refusal when its
    /// `Mcp-Param-*` headers do not say what the body says, whatever version the request
    /// claims: HTTP 400 with JSON-RPC error [`crate::param_headers::HEADER_MISMATCH`], as
    /// SEP-2243 has it; a body whose arguments cannot be read is refused too. Anything else
    /// passes on to rmcp, which answers an unknown tool itself.
    fn param_headers(
        &self,
        headers: &axum::http::HeaderMap,
        head: &crate::param_headers::Head<'_>,
        body: &[u8],
    ) -> Option<Response> {
        // Most tools mirror nothing, and their calls pay no more than the head's parse.
        let catalog = self.service.catalog();
        let tool = catalog.get(head.called_tool()?)?;
        if tool.headers.is_empty() {
            return None;
        }
        let call = match crate::param_headers::read_call(body) {
            Ok(call) => call,
            Err(unreadable) => return Some(refusal(None, unreadable.code(), &unreadable)),
        };
        let mismatch = crate::param_headers::check_request(
            &tool.headers,
            headers,
            call.arguments(),
            head.mirrors(headers),
        )
        .err()?;
        Some(refusal(
            call.id,
            crate::param_headers::HEADER_MISMATCH,
            &mismatch,
        ))
    }
}

/// A request refused before rmcp sees it: HTTP 400 with a JSON-RPC error `code` saying why.
fn refusal(id: Option<serde_json::Value>, code: i64, why: &dyn std::fmt::Display) -> Response {
    let body = serde_json::json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": {"code": code, "message": why.to_string()},
    });
    (StatusCode::BAD_REQUEST, axum::Json(body)).into_response()
}

async fn require_bearer(token: &Token, request: Request, next: Next) -> Response {
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.as_bytes().strip_prefix(b"Bearer "));
    if presented.is_some_and(|p| token.matches(p)) {
        next.run(request).await
    } else {
        (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer")],
            "missing or wrong bearer token",
        )
            .into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_long_and_compared_by_digest() {
        for short in ["", "  \n", "short", &"x".repeat(31)] {
            let err = Token::parse(short).unwrap_err().to_string();
            assert!(err.starts_with("the bearer token is"), "{err}");
        }
        let token = Token::parse(&format!("  {}\n", "k".repeat(32))).unwrap();
        assert!(token.matches("k".repeat(32).as_bytes()));
        assert!(!token.matches("k".repeat(33).as_bytes()));
        assert!(!token.matches(b""));
        assert_eq!(format!("{token:?}"), "Token(..)");
    }
}
