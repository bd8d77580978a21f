//! One program's egress: its rules, its secrets, and the fetch itself.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

use berm_abi::net::{NetRule, Target, refused_range};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::header::{HeaderName, HeaderValue};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::sync::Semaphore;
use url::{Host, Url};

use crate::holding::{Holding, Unbounded};
use crate::secret::{self, Binding, SecretStore};
use crate::{Caps, ErrorCode, FetchError, Request, Response, Trust};

/// Headers a program may not set: the host sets framing and the target
/// itself, and a connection-level header could smuggle a second request.
const HOST_SET_HEADERS: [&str; 10] = [
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "upgrade",
    "te",
    "trailer",
    "proxy-authorization",
    "proxy-connection",
];

/// What one deployment may reach.
#[derive(Debug, Clone)]
pub struct EgressConfig {
    /// The `net=` rules.
    pub rules: Vec<NetRule>,
    /// The `secret:` bindings.
    pub secrets: Vec<Binding>,
    /// Where the program's secret values are.
    pub store: Option<SecretStore>,
    /// The caps.
    pub caps: Caps,
    /// The CAs HTTPS trusts.
    pub trust: Trust,
    /// Inside the microVM: where a checked request goes instead of being dialed here (the
    /// host dialer, [`crate::remote`]). The rules above still refuse early; the host enforces
    /// its own copy of them and holds the secrets.
    pub forward: Option<Arc<dyn Forward>>,
}

/// A way to hand a request this side has checked to another that dials it (the microVM's
/// host dialer). Blocking: it runs on a blocking thread, and gives up once `left` has passed.
pub trait Forward: Send + Sync + std::fmt::Debug {
    /// Sends `request` and waits for the reply, counting its bytes in `holding` before it
    /// holds them.
    fn forward(
        &self,
        request: &Request,
        left: std::time::Duration,
        holding: &dyn Holding,
    ) -> Result<Response, FetchError>;
}

/// One program's egress, shared by all its calls.
pub struct Egress {
    config: EgressConfig,
    in_flight: Arc<Semaphore>,
}

/// Where one hop of a fetch goes, once its URL is checked.
struct Hop<'a> {
    url: &'a Url,
    target: Target<'a>,
    port: u16,
    default_port: u16,
    tls: bool,
}

impl Hop<'_> {
    /// This hop as the secret check sees it.
    fn dest<'a>(&'a self, host_text: &'a str) -> secret::Dest<'a> {
        secret::Dest {
            target: self.target.clone(),
            port: self.port,
            default_port: self.default_port,
            tls: self.tls,
            host_text,
        }
    }
}

fn denied(message: impl Into<String>) -> FetchError {
    FetchError::new(ErrorCode::Denied, message)
}

fn io(message: impl Into<String>) -> FetchError {
    FetchError::new(ErrorCode::Io, message)
}

impl Egress {
    /// Egress for one deployment.
    pub fn new(config: EgressConfig) -> Egress {
        let in_flight = Arc::new(Semaphore::new(config.caps.max_in_flight.max(1)));
        Egress { config, in_flight }
    }

    /// The caps in force.
    pub fn caps(&self) -> &Caps {
        &self.config.caps
    }

    /// Sends `request` and reads the whole response, following allowed
    /// redirects, ending by `deadline` at the latest (see
    /// [`crate::fetch_deadline`] for when it gives up).
    pub async fn fetch(&self, request: Request, deadline: Instant) -> Result<Response, FetchError> {
        self.fetch_holding(request, deadline, Arc::new(Unbounded))
            .await
    }

    /// [`Egress::fetch`], counting the response's bytes in `holding` as they arrive, before
    /// they are kept: past the host's budget the fetch stops at once with `too_large`.
    /// `holding` holds them until the host drops it.
    pub async fn fetch_holding(
        &self,
        request: Request,
        deadline: Instant,
        holding: Arc<dyn Holding>,
    ) -> Result<Response, FetchError> {
        let caps = self.config.caps;
        let until = crate::fetch_deadline(Instant::now(), deadline, caps.max_time);
        let timeout = || {
            FetchError::new(
                ErrorCode::Timeout,
                format!(
                    "no complete response before the fetch's deadline (at most {} s, \
                     and before the call's deadline)",
                    caps.max_time.as_secs_f64()
                ),
            )
        };
        let until = tokio::time::Instant::from_std(until);
        let _permit = match tokio::time::timeout_at(until, self.in_flight.acquire()).await {
            Ok(Ok(permit)) => permit,
            Ok(Err(_)) => return Err(io("this program's egress is shutting down")),
            Err(_) => {
                return Err(FetchError::new(
                    ErrorCode::Timeout,
                    format!(
                        "the program already has {} requests in flight (the cap) and none \
                         finished in time",
                        caps.max_in_flight
                    ),
                ));
            }
        };
        let fetched = async {
            match &self.config.forward {
                Some(forward) => self.forwarded(forward, request, until, holding).await,
                None => self.follow(request, &*holding).await,
            }
        };
        tokio::time::timeout_at(until, fetched)
            .await
            .unwrap_or_else(|_| Err(timeout()))
    }

    /// The guest's side of a forwarded fetch: refused here if this side's rules refuse it
    /// (the URL's host, and every secret placeholder toward it), else handed on.
    async fn forwarded(
        &self,
        forward: &Arc<dyn Forward>,
        request: Request,
        until: tokio::time::Instant,
        holding: Arc<dyn Holding>,
    ) -> Result<Response, FetchError> {
        let url = parse_url(&request.url)?;
        let hop = self.check(&url)?;
        let mut names = Vec::new();
        for (_, value) in &request.headers {
            secret::placeholders(value, &mut names)?;
        }
        secret::placeholders(&request.body, &mut names)?;
        secret::check_bound(&names, &self.config.secrets, &hop.dest(&host_text(&hop)))?;
        let forward = Arc::clone(forward);
        let left = until.saturating_duration_since(tokio::time::Instant::now());
        tokio::task::spawn_blocking(move || forward.forward(&request, left, &*holding))
            .await
            .unwrap_or_else(|e| Err(io(format!("forwarding the request failed: {e}"))))
    }

    async fn follow(
        &self,
        mut request: Request,
        holding: &dyn Holding,
    ) -> Result<Response, FetchError> {
        let mut url = parse_url(&request.url)?;
        let mut redirects = 0;
        loop {
            // A redirect's response is dropped before the next hop's is counted.
            let response = self.once(&request, &url, holding).await?;
            let location = match response.status {
                301 | 302 | 303 | 307 | 308 => response
                    .headers
                    .iter()
                    .find(|(name, _)| name == "location")
                    .map(|(_, value)| value.clone()),
                _ => None,
            };
            let Some(location) = location else {
                return Ok(response);
            };
            if redirects == self.config.caps.max_redirects {
                return Err(io(format!(
                    "more than {} redirects; stopped at {}",
                    self.config.caps.max_redirects,
                    url.as_str()
                )));
            }
            redirects += 1;
            let location = std::str::from_utf8(&location)
                .map_err(|_| io("a redirect's Location is not valid UTF-8"))?;
            if let Some(c) = control_char(location) {
                return Err(io(format!(
                    "a redirect's Location holds the control character {c:?}; not followed"
                )));
            }
            let next = url
                .join(location)
                .map_err(|e| io(format!("a redirect's Location is not a URL: {e}")))?;
            check_scheme(&next)?;
            // Like browsers: 303, and 301/302 after a POST, become a GET
            // without a body.
            let to_get = response.status == 303
                || (matches!(response.status, 301 | 302) && request.method == "POST");
            if to_get && request.method != "HEAD" {
                request.method = "GET".into();
                request.body.clear();
                request.headers.retain(|(name, _)| name != "content-type");
            }
            url = next;
        }
    }

    /// One request to `url`: check, resolve, connect, send, read.
    async fn once(
        &self,
        request: &Request,
        url: &Url,
        holding: &dyn Holding,
    ) -> Result<Response, FetchError> {
        let hop = self.check(url)?;
        let host_text = host_text(&hop);
        // Secrets are checked against this hop's host before anything leaves.
        let mut names = Vec::new();
        for (_, value) in &request.headers {
            secret::placeholders(value, &mut names)?;
        }
        secret::placeholders(&request.body, &mut names)?;
        let values = secret::values_for(
            &names,
            &self.config.secrets,
            self.config.store.as_ref(),
            &hop.dest(&host_text),
        )?;
        let outgoing = build(request, &hop, &values)?;
        let addrs = self.resolve(&hop, &host_text).await?;
        let stream = connect(&addrs, &host_text).await?;
        if hop.tls {
            let name = match &hop.target {
                Target::Name(name) => rustls_pki_types::ServerName::try_from(name.to_string())
                    .map_err(|e| io(format!("{host_text}: {e}")))?,
                Target::Ip(ip) => rustls_pki_types::ServerName::IpAddress((*ip).into()),
            };
            let tls = tokio_rustls::TlsConnector::from(self.config.trust.config.clone())
                .connect(name, stream)
                .await
                .map_err(|e| io(format!("TLS with {host_text} failed: {e}")))?;
            self.exchange(TokioIo::new(tls), outgoing, &host_text, holding)
                .await
        } else {
            self.exchange(TokioIo::new(stream), outgoing, &host_text, holding)
                .await
        }
    }

    /// The URL's host against the rules: refused before anything is
    /// resolved or connected.
    fn check<'u>(&self, url: &'u Url) -> Result<Hop<'u>, FetchError> {
        let tls = url.scheme() == "https";
        let default_port = if tls { 443 } else { 80 };
        let port = url.port().unwrap_or(default_port);
        let target = match url.host() {
            Some(Host::Domain(name)) => Target::Name(name.strip_suffix('.').unwrap_or(name)),
            Some(Host::Ipv4(ip)) => Target::Ip(IpAddr::V4(ip)),
            Some(Host::Ipv6(ip)) => Target::Ip(IpAddr::V6(ip)),
            None => return Err(invalid_url("it has no host")),
        };
        let hop = Hop {
            url,
            target,
            port,
            default_port,
            tls,
        };
        let allowed = self
            .config
            .rules
            .iter()
            .any(|rule| rule.allows(&hop.target, port, default_port));
        if !allowed {
            let host = host_text(&hop);
            let why = match hop.target {
                Target::Ip(ip) if refused_range(ip).is_some() => format!(
                    " ({ip} is {}: only a grant naming this address and port reaches it)",
                    refused_range(ip).unwrap_or_default()
                ),
                _ => String::new(),
            };
            return Err(denied(format!(
                "{host} is not in this program's net grants{why}"
            )));
        }
        Ok(hop)
    }

    /// The addresses to connect to: a literal one as is (the rules already
    /// decided), a name's resolved once, without any in a refused range.
    async fn resolve(&self, hop: &Hop<'_>, host_text: &str) -> Result<Vec<SocketAddr>, FetchError> {
        let name = match hop.target {
            Target::Ip(ip) => return Ok(vec![SocketAddr::new(ip, hop.port)]),
            Target::Name(name) => name,
        };
        let found: Vec<SocketAddr> = tokio::net::lookup_host((name, hop.port))
            .await
            .map_err(|e| io(format!("could not resolve {name}: {e}")))?
            .collect();
        let (allowed, refused): (Vec<_>, Vec<_>) = found
            .into_iter()
            .partition(|addr| refused_range(addr.ip()).is_none());
        if allowed.is_empty() {
            let why = match refused.first() {
                Some(addr) => format!(
                    "{host_text} resolves to {} ({}); a name never leads to a private, loopback, \
                     link-local or metadata address",
                    addr.ip(),
                    refused_range(addr.ip()).unwrap_or_default()
                ),
                None => format!("{host_text} resolves to no address"),
            };
            return Err(if refused.is_empty() {
                io(why)
            } else {
                denied(why)
            });
        }
        Ok(allowed)
    }

    async fn exchange<IO>(
        &self,
        io_stream: IO,
        request: hyper::Request<Full<Bytes>>,
        host_text: &str,
        holding: &dyn Holding,
    ) -> Result<Response, FetchError>
    where
        IO: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    {
        let head_too_large = |size: String| {
            FetchError::new(
                ErrorCode::TooLarge,
                format!(
                    "the response head from {host_text} is {size} bytes, over the cap of \
                     {MAX_HEAD_BYTES} bytes"
                ),
            )
        };
        let broke = |e: hyper::Error| match e.is_parse_too_large() {
            true => head_too_large(format!("more than {MAX_HEAD_BYTES}")),
            false => io(format!("HTTP exchange with {host_text} failed: {e}")),
        };
        let (mut sender, connection) = hyper::client::conn::http1::Builder::new()
            .max_buf_size(MAX_HEAD_BYTES)
            .handshake(io_stream)
            .await
            .map_err(broke)?;
        let driver = AbortOnDrop(tokio::spawn(connection));
        let response = sender.send_request(request).await.map_err(broke)?;
        // hyper bounds its read buffer only between reads, so a head that arrives in one
        // read may pass its bound: the head is measured as received (status line, and
        // `name: value\r\n` per header) and refused past the cap.
        let head: usize = 16
            + response
                .headers()
                .iter()
                .map(|(name, value)| name.as_str().len() + value.len() + 4)
                .sum::<usize>();
        if head > MAX_HEAD_BYTES {
            return Err(head_too_large(head.to_string()));
        }
        let status = response.status().as_u16();
        let cap = self.config.caps.max_response_bytes;
        let too_large = |size: String| {
            FetchError::new(
                ErrorCode::TooLarge,
                format!(
                    "the response from {host_text} is {size} bytes, over the cap of {cap} bytes"
                ),
            )
        };
        let declared = response
            .headers()
            .get(hyper::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if let Some(declared) = declared
            && declared > cap as u64
        {
            return Err(too_large(declared.to_string()));
        }
        // What this response holds is counted before it is kept: its head, then its body as
        // each part arrives.
        let over_budget = |held: usize, why: String| {
            FetchError::new(
                ErrorCode::TooLarge,
                format!("the response from {host_text} was stopped at {held} bytes: {why}"),
            )
        };
        holding.hold(head).map_err(|why| over_budget(head, why))?;
        let headers = response
            .headers()
            .iter()
            .map(|(name, value)| (name.as_str().to_string(), value.as_bytes().to_vec()))
            .collect();
        let mut body = response.into_body();
        let mut bytes = Vec::new();
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(broke)?;
            if let Some(data) = frame.data_ref() {
                if bytes.len() + data.len() > cap {
                    return Err(too_large(format!("more than {cap}")));
                }
                let held = head + bytes.len() + data.len();
                holding.hold(held).map_err(|why| over_budget(held, why))?;
                bytes.extend_from_slice(data);
            }
        }
        drop(driver);
        Ok(Response {
            status,
            headers,
            body: bytes,
        })
    }
}

/// Largest response head (status line and headers) accepted, 64 KiB (`docs/design/abi.md`):
/// a larger one is `too_large`.
const MAX_HEAD_BYTES: usize = 64 << 10;

/// The connection's task, stopped when the exchange ends or is dropped (at
/// the deadline), so no connection outlives its fetch.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn invalid_url(problem: &str) -> FetchError {
    FetchError::new(
        ErrorCode::Invalid,
        format!("the URL is not valid: {problem}"),
    )
}

/// The control character `text` holds, if any. URL parsing would drop CR, LF and tab and
/// percent-encode the rest, sending a request the program did not write; it is refused.
fn control_char(text: &str) -> Option<char> {
    text.chars().find(|c| c.is_control())
}

fn parse_url(text: &str) -> Result<Url, FetchError> {
    if let Some(c) = control_char(text) {
        return Err(invalid_url(&format!(
            "it holds the control character {c:?}; a URL is sent as written or not at all \
             (percent-encode it, e.g. %0D%0A)"
        )));
    }
    let url = Url::parse(text).map_err(|e| invalid_url(&e.to_string()))?;
    check_scheme(&url)?;
    if !url.username().is_empty() || url.password().is_some() {
        return Err(invalid_url(
            "it holds a user name or password; send credentials in a header \
             (with a {{secret:NAME}} placeholder)",
        ));
    }
    Ok(url)
}

fn check_scheme(url: &Url) -> Result<(), FetchError> {
    match url.scheme() {
        "http" | "https" => Ok(()),
        other => Err(denied(format!(
            "scheme `{other}` is not fetched: only http and https"
        ))),
    }
}

/// `host:port` as a person reads it in a message.
fn host_text(hop: &Hop<'_>) -> String {
    match hop.target {
        Target::Name(name) => format!("{name}:{}", hop.port),
        Target::Ip(IpAddr::V6(ip)) => format!("[{ip}]:{}", hop.port),
        Target::Ip(ip) => format!("{ip}:{}", hop.port),
    }
}

/// The outgoing request, with secrets substituted for this hop.
fn build(
    request: &Request,
    hop: &Hop<'_>,
    values: &[(&str, Vec<u8>)],
) -> Result<hyper::Request<Full<Bytes>>, FetchError> {
    let invalid = |message: String| FetchError::new(ErrorCode::Invalid, message);
    let path = match hop.url.query() {
        Some(query) => format!("{}?{query}", hop.url.path()),
        None => hop.url.path().to_string(),
    };
    let method = hyper::Method::from_bytes(request.method.as_bytes())
        .map_err(|_| invalid(format!("method `{}` is not valid", request.method)))?;
    let mut builder = hyper::Request::builder().method(method).uri(path);
    let authority = match hop.url.port() {
        Some(port) => format!("{}:{port}", hop.url.host_str().unwrap_or_default()),
        None => hop.url.host_str().unwrap_or_default().to_string(),
    };
    builder = builder.header(hyper::header::HOST, authority);
    let mut agent = false;
    for (name, value) in &request.headers {
        if HOST_SET_HEADERS.contains(&name.as_str()) {
            return Err(invalid(format!(
                "header `{name}` is set by the host, not the program"
            )));
        }
        let header = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| invalid(format!("`{name}` is not a valid header name")))?;
        let value = secret::substitute(value, values);
        // The message names the header only: the value may hold a secret.
        let value = HeaderValue::from_bytes(&value)
            .map_err(|_| invalid(format!("the value of header `{name}` is not valid")))?;
        agent |= header == hyper::header::USER_AGENT;
        builder = builder.header(header, value);
    }
    if !agent {
        builder = builder.header(hyper::header::USER_AGENT, USER_AGENT);
    }
    let body = secret::substitute(&request.body, values).into_owned();
    builder
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| invalid(format!("the request is not valid: {e}")))
}

/// What requests say they are, unless the program says otherwise.
const USER_AGENT: &str = concat!("berm/", env!("CARGO_PKG_VERSION"));

async fn connect(addrs: &[SocketAddr], host_text: &str) -> Result<TcpStream, FetchError> {
    let mut last = None;
    for addr in addrs {
        match TcpStream::connect(addr).await {
            Ok(stream) => {
                let _ = stream.set_nodelay(true);
                return Ok(stream);
            }
            Err(e) => last = Some(e),
        }
    }
    Err(io(match last {
        Some(e) => format!("could not connect to {host_text}: {e}"),
        None => format!("{host_text} has no address to connect to"),
    }))
}
