//! bermd as an OAuth 2.1 resource server, the way the MCP authorization spec (2025-11-25)
//! has remote clients authenticate: each request's access token is checked against the
//! issuer it names ([`ResourceServer::verify`]), its scopes say which programs and tools
//! the client may call ([`scopes`]), and the documents a client discovers all that by
//! ([`challenge`]) are built here.
//!
//! It knows nothing of bermd's internals: it takes a token and gives back who presented it
//! ([`Principal`]) or why not ([`Refusal`]); bermd's HTTP layer decides what a refusal
//! answers and what a principal may reach.
//!
//! A token checked once is held by its SHA-256 for up to a minute (never past its `exp`), so
//! a client presenting the same token on every request pays one signature check a minute.
//!
//! Signatures are checked by `jsonwebtoken` (its pure-Rust backend): the most used JOSE
//! crate in Rust, kept up, with JWK support and a per-call algorithm allow-list; `josekit`
//! needs OpenSSL, which bermd's static musl builds do not link. Nothing here hand-writes a
//! signature check.

pub mod challenge;
mod fetch;
mod held;
mod introspect;
mod keys;
pub mod scopes;
mod verify;

use std::sync::Arc;
use std::time::Duration;

pub use jsonwebtoken::Algorithm;
pub use scopes::Scopes;
pub use verify::{Principal, Refusal, ResourceServer};

/// The longest token read at all: a token past it is refused before any parse (the
/// largest real access tokens, RSA-signed with many scopes, are a few KiB).
pub const MAX_TOKEN_BYTES: usize = 16 * 1024;

/// The largest metadata, JWKS or introspection answer read from an issuer; past it the
/// answer is dropped and the keys already held stay in use.
pub const MAX_DOCUMENT_BYTES: usize = 256 * 1024;

/// The most signing keys held from one JWKS; the rest are ignored.
pub const MAX_KEYS: usize = 64;

/// The algorithms accepted when none are configured: every asymmetric one `jsonwebtoken`
/// checks. Never `none`, never an HMAC one: an HS256 token "signed" with the issuer's
/// public key must not pass.
pub const DEFAULT_ALGORITHMS: [Algorithm; 9] = [
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
    Algorithm::ES256,
    Algorithm::ES384,
    Algorithm::EdDSA,
];

/// A confidential client's credentials for RFC 7662 introspection of opaque tokens.
#[derive(Clone)]
pub struct Introspection {
    /// The client id bermd introspects as.
    pub client_id: String,
    /// Its secret (sent with HTTP Basic authentication, never logged).
    pub client_secret: String,
}

impl std::fmt::Debug for Introspection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Introspection {{ client_id: {:?}, .. }}", self.client_id)
    }
}

/// What a resource server trusts and how it talks to its issuer.
#[derive(Clone, Debug)]
pub struct OAuthConfig {
    /// The authorization server's issuer identifier: the `iss` every token must carry, and
    /// where its RFC 8414 / OpenID metadata is found. HTTPS, or HTTP on a loopback host.
    pub issuer: String,
    /// This server's resource identifier (its canonical MCP URL): the audience every token
    /// must name (RFC 8707).
    pub resource: String,
    /// The signature algorithms accepted ([`DEFAULT_ALGORITHMS`] unless configured).
    pub algorithms: Vec<Algorithm>,
    /// The clock skew allowed on `exp` and `nbf`.
    pub leeway: Duration,
    /// Credentials to introspect opaque (non-JWT) tokens with; without them only JWTs pass.
    pub introspection: Option<Introspection>,
    /// The TLS roots the issuer's endpoints are verified against.
    pub tls: Arc<rustls::ClientConfig>,
    /// How long one fetch from the issuer (metadata, keys, introspection) may take.
    pub fetch_timeout: Duration,
    /// The least time between two fetches of the issuer's keys: a token naming an unknown
    /// key refetches them at most this often.
    pub min_refresh: Duration,
}

impl OAuthConfig {
    /// A config for `issuer` and `resource` with the defaults: every asymmetric algorithm,
    /// 60 s of skew, 5 s per fetch, keys refetched at most every 30 s, no introspection.
    pub fn new(issuer: &str, resource: &str, tls: Arc<rustls::ClientConfig>) -> OAuthConfig {
        OAuthConfig {
            issuer: issuer.to_string(),
            resource: resource.to_string(),
            algorithms: DEFAULT_ALGORITHMS.to_vec(),
            leeway: Duration::from_secs(60),
            introspection: None,
            tls,
            fetch_timeout: Duration::from_secs(5),
            min_refresh: Duration::from_secs(30),
        }
    }

    /// Checks the issuer and resource URLs and the algorithms.
    pub fn check(&self) -> Result<(), ConfigError> {
        let issuer = url::Url::parse(&self.issuer).map_err(|_| ConfigError::Url {
            what: "issuer",
            url: self.issuer.clone(),
        })?;
        if !secure_or_loopback(&issuer) {
            return Err(ConfigError::Insecure {
                url: self.issuer.clone(),
            });
        }
        let resource = url::Url::parse(&self.resource).map_err(|_| ConfigError::Url {
            what: "resource",
            url: self.resource.clone(),
        })?;
        if resource.fragment().is_some() {
            return Err(ConfigError::Url {
                what: "resource (RFC 8707 forbids a fragment)",
                url: self.resource.clone(),
            });
        }
        if self.algorithms.is_empty() {
            return Err(ConfigError::NoAlgorithm);
        }
        if let Some(alg) = self
            .algorithms
            .iter()
            .find(|a| a.family() == jsonwebtoken::AlgorithmFamily::Hmac)
        {
            return Err(ConfigError::Symmetric { alg: *alg });
        }
        Ok(())
    }
}

/// Parses an algorithm allow-list such as `RS256,ES256,EdDSA`: refused when it names no
/// algorithm, `none`, or an HMAC one.
pub fn parse_algorithms(list: &str) -> Result<Vec<Algorithm>, ConfigError> {
    let mut algorithms = Vec::new();
    for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let alg: Algorithm = name.parse().map_err(|_| ConfigError::Algorithm {
            name: name.to_string(),
        })?;
        if alg.family() == jsonwebtoken::AlgorithmFamily::Hmac {
            return Err(ConfigError::Symmetric { alg });
        }
        algorithms.push(alg);
    }
    if algorithms.is_empty() {
        return Err(ConfigError::NoAlgorithm);
    }
    Ok(algorithms)
}

/// Whether `url` is HTTPS, or HTTP to a loopback host (an issuer on the same machine).
pub(crate) fn secure_or_loopback(url: &url::Url) -> bool {
    match url.scheme() {
        "https" => true,
        "http" => match url.host() {
            Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
            Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
            Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
            None => false,
        },
        _ => false,
    }
}

/// Why an OAuth configuration was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A URL that does not parse.
    #[error("the OAuth {what} `{url}` is not a URL")]
    Url {
        /// Which URL.
        what: &'static str,
        /// The URL given.
        url: String,
    },
    /// An issuer reached over plain HTTP off this machine.
    #[error(
        "the OAuth issuer `{url}` is not HTTPS: tokens and keys must come over TLS (plain HTTP only to a loopback host)"
    )]
    Insecure {
        /// The URL given.
        url: String,
    },
    /// An algorithm `jsonwebtoken` does not know (or `none`).
    #[error(
        "`{name}` is not a signature algorithm bermd accepts (RS256, RS384, RS512, PS256, PS384, PS512, ES256, ES384, EdDSA)"
    )]
    Algorithm {
        /// The name given.
        name: String,
    },
    /// An HMAC algorithm: its key would be a secret shared with the issuer.
    #[error(
        "refusing {alg:?}: a resource server checks tokens with the issuer's public keys, never a shared secret"
    )]
    Symmetric {
        /// The algorithm.
        alg: Algorithm,
    },
    /// An empty allow-list.
    #[error("no signature algorithm is allowed: name at least one (for example RS256,ES256)")]
    NoAlgorithm,
}
