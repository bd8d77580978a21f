//! One token's check: its size, its form, then as a JWT (RFC 9068) its signature by one of
//! the issuer's keys under an allowed algorithm, its issuer, its audience (this resource)
//! and its lifetime; or, for an opaque token, the issuer's introspection answer.

use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, Validation};
use serde::Deserialize;

use crate::fetch::Fetcher;
use crate::held::{self, Held};
use crate::introspect::Introspector;
use crate::keys::KeyRing;
use crate::{ConfigError, OAuthConfig, Scopes};

/// Who presented a token, as far as bermd records it: never the token itself.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Principal {
    /// The token's subject (`sub`): the user, or the client for a client-credentials token.
    pub subject: Option<String>,
    /// The OAuth client it was issued to (`client_id`, else `azp`).
    pub client_id: Option<String>,
    /// Its `berm:` scopes.
    pub scopes: Scopes,
}

/// Why a token was refused; every refusal is a 401 with `error="invalid_token"` but
/// [`Refusal::Missing`], which carries no error (RFC 6750 §3.1).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// No bearer token.
    #[error("no bearer token")]
    Missing,
    /// Longer than [`crate::MAX_TOKEN_BYTES`]: refused unread.
    #[error("the token is longer than {} bytes", crate::MAX_TOKEN_BYTES)]
    TooLarge,
    /// Anything else wrong with it.
    #[error("{0}")]
    Invalid(&'static str),
}

/// The claims bermd reads of an access token (the rest are checked by `jsonwebtoken`).
#[derive(Deserialize)]
pub(crate) struct Claims {
    pub sub: Option<String>,
    pub client_id: Option<String>,
    pub azp: Option<String>,
    /// When it expires (Unix seconds; a number, which some issuers write with a fraction):
    /// how long its judgement may be held.
    pub exp: Option<f64>,
    #[serde(default)]
    pub scope: Option<ScopeClaim>,
    /// Some issuers (Okta, Azure) put the scopes in `scp`.
    #[serde(default)]
    pub scp: Option<ScopeClaim>,
}

/// A `scope` claim: a space-separated string (RFC 9068), or a list.
#[derive(Deserialize)]
#[serde(untagged)]
pub(crate) enum ScopeClaim {
    Text(String),
    List(Vec<String>),
}

impl Claims {
    pub fn principal(self) -> Principal {
        let scopes = match self.scope.or(self.scp) {
            Some(ScopeClaim::Text(text)) => Scopes::parse(&text),
            Some(ScopeClaim::List(list)) => list.iter().map(String::as_str).collect(),
            None => Scopes::default(),
        };
        Principal {
            subject: self.sub,
            client_id: self.client_id.or(self.azp),
            scopes,
        }
    }
}

/// Checks access tokens for one resource against one issuer.
pub struct ResourceServer {
    config: OAuthConfig,
    ring: KeyRing,
    /// A validation per allowed algorithm, built once.
    validations: Vec<(Algorithm, Validation)>,
    introspector: Option<Introspector>,
    /// JWTs already checked ([`crate::held`]).
    held: Held,
}

impl std::fmt::Debug for ResourceServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResourceServer")
            .field("issuer", &self.config.issuer)
            .field("resource", &self.config.resource)
            .finish_non_exhaustive()
    }
}

impl ResourceServer {
    /// A resource server for `config`, once checked ([`OAuthConfig::check`]). It fetches
    /// nothing yet: call [`ResourceServer::warm`] to fetch the keys before the first token.
    pub fn new(config: OAuthConfig) -> Result<ResourceServer, ConfigError> {
        config.check()?;
        let fetcher = Fetcher::new(&config.tls, config.fetch_timeout);
        let validations = config
            .algorithms
            .iter()
            .map(|&alg| {
                let mut validation = Validation::new(alg);
                validation.set_issuer(&[&config.issuer]);
                validation.set_audience(&[&config.resource]);
                validation.set_required_spec_claims(&["exp", "iss", "aud"]);
                validation.leeway = config.leeway.as_secs();
                validation.validate_nbf = true;
                (alg, validation)
            })
            .collect();
        let introspector = config
            .introspection
            .clone()
            .map(|client| Introspector::new(client, fetcher.clone(), &config));
        Ok(ResourceServer {
            ring: KeyRing::new(&config.issuer, fetcher, config.min_refresh),
            config,
            validations,
            introspector,
            held: Held::default(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &OAuthConfig {
        &self.config
    }

    /// Fetches the issuer's metadata and keys now (a failure is logged; tokens then fetch
    /// them again, bounded by [`OAuthConfig::min_refresh`]).
    pub async fn warm(&self) {
        self.ring.refresh().await;
    }

    /// Who presented `token` (the bytes after `Bearer `), or why it is refused.
    pub async fn verify(&self, token: &[u8]) -> Result<Principal, Refusal> {
        if token.len() > crate::MAX_TOKEN_BYTES {
            return Err(Refusal::TooLarge);
        }
        // RFC 6750's b64token: nothing else is ever parsed.
        let b64token = |b: &u8| b.is_ascii_alphanumeric() || b"-._~+/=".contains(b);
        if token.is_empty() || !token.iter().all(b64token) {
            return Err(Refusal::Invalid(
                "the token is not an RFC 6750 bearer token",
            ));
        }
        // Checked above: ASCII only.
        let token = std::str::from_utf8(token).map_err(|_| Refusal::Invalid("not ASCII"))?;
        if token.bytes().filter(|&b| b == b'.').count() == 2 {
            return self.verify_jwt(token).await;
        }
        match &self.introspector {
            Some(introspector) => introspector.introspect(token, &self.ring).await,
            None => Err(Refusal::Invalid(
                "the token is not a JWT, and bermd introspects no opaque tokens",
            )),
        }
    }

    /// A JWT's principal: the one held if it was checked less than [`held::HOLD`] ago and
    /// has not expired since, else after every check.
    async fn verify_jwt(&self, token: &str) -> Result<Principal, Refusal> {
        let digest = held::digest(token);
        if let Some(principal) = self.held.get(&digest) {
            return Ok(principal);
        }
        let header = jsonwebtoken::decode_header(token)
            .map_err(|_| Refusal::Invalid("the token's JOSE header does not parse"))?;
        let Some((alg, validation)) = self.validations.iter().find(|(a, _)| *a == header.alg)
        else {
            return Err(Refusal::Invalid("the token's algorithm is not allowed"));
        };
        let mut keys = self.ring.candidates(header.kid.as_deref(), *alg);
        if keys.is_empty() {
            // A key not held: the issuer may have rotated. Refetched at most so often.
            self.ring.refresh().await;
            keys = self.ring.candidates(header.kid.as_deref(), *alg);
        }
        if keys.is_empty() {
            return Err(Refusal::Invalid(
                "the token is signed by a key the issuer does not publish",
            ));
        }
        let mut refusal = Refusal::Invalid("the token's signature does not verify");
        for key in keys {
            match jsonwebtoken::decode::<Claims>(token, &key.key, validation) {
                Ok(data) => {
                    // Whole seconds, down: held no longer than the token lives.
                    let exp = data.claims.exp.map(|exp| exp.max(0.0) as u64);
                    let principal = data.claims.principal();
                    self.held.hold(digest, exp, &principal);
                    return Ok(principal);
                }
                Err(e) => {
                    refusal = Refusal::Invalid(match e.kind() {
                        ErrorKind::ExpiredSignature => "the token has expired",
                        ErrorKind::ImmatureSignature => "the token is not valid yet",
                        ErrorKind::InvalidAudience => "the token is for another resource",
                        ErrorKind::InvalidIssuer => "the token is from another issuer",
                        ErrorKind::MissingRequiredClaim(_) => {
                            "the token lacks `exp`, `iss` or `aud`"
                        }
                        ErrorKind::InvalidSignature => "the token's signature does not verify",
                        _ => "the token does not verify",
                    });
                    // A wrong signature may be another key's; anything else is the token's.
                    if *e.kind() != ErrorKind::InvalidSignature {
                        break;
                    }
                }
            }
        }
        Err(refusal)
    }
}
