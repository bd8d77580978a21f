//! The issuer's signing keys: found through its metadata (RFC 8414, else OpenID Connect
//! Discovery), held in memory, and refetched when a token names a key not held — at most
//! once per [`crate::OAuthConfig::min_refresh`], one fetch at a time. A token whose key is
//! held never waits on a fetch, so an issuer that hangs or breaks leaves every token
//! signed by a known key working.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use jsonwebtoken::jwk::{AlgorithmParameters, Jwk, PublicKeyUse};
use jsonwebtoken::{Algorithm, AlgorithmFamily, DecodingKey};

use crate::fetch::{FetchError, Fetcher};

/// What bermd reads of the issuer's metadata.
#[derive(Clone, Debug)]
pub(crate) struct IssuerMetadata {
    /// Where its keys are.
    pub jwks_uri: url::Url,
    /// Where opaque tokens are introspected (RFC 7662), when it offers it.
    pub introspection_endpoint: Option<url::Url>,
}

/// One verification key.
pub(crate) struct Key {
    pub key: DecodingKey,
    pub family: AlgorithmFamily,
    /// The algorithm the JWK pins (`alg`), if any: a token must then use it.
    pub alg: Option<Algorithm>,
}

/// The keys held.
#[derive(Default)]
struct Keys {
    by_kid: HashMap<String, Arc<Key>>,
    unnamed: Vec<Arc<Key>>,
}

/// The issuer's metadata and keys, refreshed as tokens need.
pub(crate) struct KeyRing {
    issuer: String,
    fetcher: Fetcher,
    min_refresh: Duration,
    metadata: RwLock<Option<IssuerMetadata>>,
    keys: RwLock<Arc<Keys>>,
    /// When the last fetch started; held across a fetch, so fetches go one at a time.
    last_fetch: tokio::sync::Mutex<Option<Instant>>,
}

impl KeyRing {
    pub fn new(issuer: &str, fetcher: Fetcher, min_refresh: Duration) -> KeyRing {
        KeyRing {
            issuer: issuer.to_string(),
            fetcher,
            min_refresh,
            metadata: RwLock::new(None),
            keys: RwLock::new(Arc::default()),
            last_fetch: tokio::sync::Mutex::new(None),
        }
    }

    /// The keys a token with `kid` (or none) and `alg` may have been signed by, from what is
    /// held: the named key, or every unnamed key of the algorithm's family.
    pub fn candidates(&self, kid: Option<&str>, alg: Algorithm) -> Vec<Arc<Key>> {
        let keys = self.keys.read().unwrap_or_else(|p| p.into_inner()).clone();
        let fits = |key: &Arc<Key>| key.family == alg.family() && key.alg.is_none_or(|a| a == alg);
        match kid {
            Some(kid) => keys
                .by_kid
                .get(kid)
                .filter(|k| fits(k))
                .cloned()
                .into_iter()
                .collect(),
            None => keys
                .unnamed
                .iter()
                .chain(keys.by_kid.values())
                .filter(|k| fits(k))
                .cloned()
                .collect(),
        }
    }

    /// The metadata, once fetched.
    pub fn metadata(&self) -> Option<IssuerMetadata> {
        self.metadata
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Fetches the metadata (if not yet held) and the keys, unless a fetch started less
    /// than `min_refresh` ago; waits for a fetch already under way instead of starting
    /// another. A failure keeps the keys held and is logged.
    pub async fn refresh(&self) {
        let mut last = self.last_fetch.lock().await;
        if last.is_some_and(|at| at.elapsed() < self.min_refresh) {
            return;
        }
        *last = Some(Instant::now());
        if let Err(e) = self.fetch().await {
            tracing::warn!(issuer = %self.issuer, "could not fetch the issuer's keys: {e}; the keys held stay in use");
        }
    }

    async fn fetch(&self) -> Result<(), RefreshError> {
        let metadata = match self.metadata() {
            Some(metadata) => metadata,
            None => {
                let metadata = self.discover().await?;
                *self.metadata.write().unwrap_or_else(|p| p.into_inner()) = Some(metadata.clone());
                metadata
            }
        };
        let jwks = self.fetcher.get_json(&metadata.jwks_uri).await?;
        let keys = parse_jwks(&jwks).ok_or(RefreshError::NoKeys)?;
        tracing::debug!(issuer = %self.issuer, keys = keys.by_kid.len() + keys.unnamed.len(), "fetched the issuer's keys");
        *self.keys.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(keys);
        Ok(())
    }

    /// The issuer's metadata: RFC 8414's well-known URL first (with the issuer's path after
    /// it), then OpenID Connect's (after the issuer's path); its `issuer` must be the one
    /// configured (RFC 8414 §3.3), or a look-alike could hand out its own keys.
    async fn discover(&self) -> Result<IssuerMetadata, RefreshError> {
        let issuer = url::Url::parse(&self.issuer).map_err(|_| RefreshError::Metadata {
            why: "the issuer is not a URL".into(),
        })?;
        let path = issuer.path().trim_end_matches('/');
        let mut oauth = issuer.clone();
        oauth.set_path(&format!("/.well-known/oauth-authorization-server{path}"));
        let mut openid = issuer.clone();
        openid.set_path(&format!("{path}/.well-known/openid-configuration"));
        let mut last = None;
        for url in [oauth, openid] {
            match self.fetcher.get_json(&url).await {
                Ok(doc) => return self.read_metadata(&doc),
                Err(e) => last = Some(e),
            }
        }
        Err(last.map_or(RefreshError::NoKeys, RefreshError::Fetch))
    }

    fn read_metadata(&self, doc: &serde_json::Value) -> Result<IssuerMetadata, RefreshError> {
        let text = |name: &str| doc.get(name).and_then(serde_json::Value::as_str);
        if text("issuer") != Some(self.issuer.as_str()) {
            return Err(RefreshError::Metadata {
                why: format!(
                    "its metadata names the issuer {:?}, not the one configured",
                    text("issuer")
                ),
            });
        }
        let url = |name: &str| text(name).and_then(|u| url::Url::parse(u).ok());
        let jwks_uri = url("jwks_uri").ok_or_else(|| RefreshError::Metadata {
            why: "its metadata has no jwks_uri".into(),
        })?;
        Ok(IssuerMetadata {
            jwks_uri,
            introspection_endpoint: url("introspection_endpoint"),
        })
    }
}

/// The signing keys of a JWKS document: at most [`crate::MAX_KEYS`], skipping what is not
/// an asymmetric signing key (an encryption key, a symmetric `oct` key, a key that does not
/// parse). `None` when the document holds no `keys` array.
fn parse_jwks(doc: &serde_json::Value) -> Option<Keys> {
    let mut keys = Keys::default();
    for value in doc.get("keys")?.as_array()?.iter().take(crate::MAX_KEYS) {
        let Ok(jwk) = serde_json::from_value::<Jwk>(value.clone()) else {
            continue;
        };
        if matches!(jwk.common.public_key_use, Some(ref u) if *u != PublicKeyUse::Signature) {
            continue;
        }
        let family = match jwk.algorithm {
            AlgorithmParameters::RSA(_) => AlgorithmFamily::Rsa,
            AlgorithmParameters::EllipticCurve(_) => AlgorithmFamily::Ec,
            AlgorithmParameters::OctetKeyPair(_) => AlgorithmFamily::Ed,
            // A symmetric key in a public JWKS is a misconfiguration bermd does not follow.
            _ => continue,
        };
        let alg = match jwk.common.key_algorithm {
            Some(alg) => match Algorithm::try_from(alg) {
                Ok(alg) if alg.family() == family => Some(alg),
                _ => continue,
            },
            None => None,
        };
        let Ok(key) = DecodingKey::from_jwk(&jwk) else {
            continue;
        };
        let key = Arc::new(Key { key, family, alg });
        match jwk.common.key_id {
            Some(kid) => {
                keys.by_kid.insert(kid, key);
            }
            None => keys.unnamed.push(key),
        }
    }
    Some(keys)
}

/// Why the issuer's keys could not be refreshed.
#[derive(Debug, thiserror::Error)]
enum RefreshError {
    #[error(transparent)]
    Fetch(#[from] FetchError),
    #[error("the issuer's metadata was refused: {why}")]
    Metadata { why: String },
    #[error("the issuer's JWKS has no `keys` array")]
    NoKeys,
}
