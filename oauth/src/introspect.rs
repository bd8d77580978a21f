//! Opaque access tokens, through the issuer's RFC 7662 introspection endpoint: asked once per
//! token and the answer held until the token expires or a minute passes, whichever is
//! first. Held by the token's SHA-256, never the token.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use base64::Engine as _;
use sha2::Digest as _;

use crate::fetch::Fetcher;
use crate::keys::KeyRing;
use crate::verify::{Claims, Principal, Refusal};
use crate::{Introspection, OAuthConfig};

/// The longest an introspection answer is trusted.
const HOLD: Duration = Duration::from_secs(60);

/// The most answers held; past it the oldest half is dropped.
const MAX_HELD: usize = 10_000;

pub(crate) struct Introspector {
    credentials: String,
    fetcher: Fetcher,
    issuer: String,
    resource: String,
    held: Mutex<HashMap<[u8; 32], (Instant, Principal)>>,
}

impl Introspector {
    pub fn new(client: Introspection, fetcher: Fetcher, config: &OAuthConfig) -> Introspector {
        // RFC 6749 §2.3.1: each part form-encoded before Basic's base64.
        let encode =
            |s: &str| url::form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>();
        let credentials = base64::engine::general_purpose::STANDARD.encode(format!(
            "{}:{}",
            encode(&client.client_id),
            encode(&client.client_secret)
        ));
        Introspector {
            credentials,
            fetcher,
            issuer: config.issuer.clone(),
            resource: config.resource.clone(),
            held: Mutex::new(HashMap::new()),
        }
    }

    pub async fn introspect(&self, token: &str, ring: &KeyRing) -> Result<Principal, Refusal> {
        let digest: [u8; 32] = sha2::Sha256::digest(token.as_bytes()).into();
        if let Some((until, principal)) = self
            .held
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&digest)
            && Instant::now() < *until
        {
            return Ok(principal.clone());
        }
        if ring.metadata().is_none() {
            ring.refresh().await;
        }
        let endpoint = ring
            .metadata()
            .and_then(|m| m.introspection_endpoint)
            .ok_or(Refusal::Invalid("the issuer offers no token introspection"))?;
        let body = url::form_urlencoded::Serializer::new(String::new())
            .append_pair("token", token)
            .append_pair("token_type_hint", "access_token")
            .finish();
        let answer = self
            .fetcher
            .post_form(&endpoint, &self.credentials, body)
            .await
            .map_err(|e| {
                tracing::warn!("token introspection failed: {e}");
                Refusal::Invalid("the issuer could not be asked about the token")
            })?;
        let (principal, expires) = self.judge(&answer)?;
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        let hold = expires.map_or(HOLD, |exp| {
            Duration::from_secs(exp.saturating_sub(now)).min(HOLD)
        });
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        if held.len() >= MAX_HELD {
            let now = Instant::now();
            held.retain(|_, (until, _)| *until > now);
            if held.len() >= MAX_HELD {
                held.clear();
            }
        }
        held.insert(digest, (Instant::now() + hold, principal.clone()));
        Ok(principal)
    }

    /// The principal of an introspection answer, with its `exp`: refused when inactive,
    /// from another issuer, not for this resource, or expired.
    fn judge(&self, answer: &serde_json::Value) -> Result<(Principal, Option<u64>), Refusal> {
        if answer.get("active") != Some(&serde_json::Value::Bool(true)) {
            return Err(Refusal::Invalid("the issuer says the token is not active"));
        }
        if let Some(iss) = answer.get("iss")
            && iss.as_str() != Some(self.issuer.as_str())
        {
            return Err(Refusal::Invalid("the token is from another issuer"));
        }
        let for_us = match answer.get("aud") {
            Some(serde_json::Value::String(aud)) => *aud == self.resource,
            Some(serde_json::Value::Array(auds)) => {
                auds.iter().any(|a| a.as_str() == Some(&self.resource))
            }
            _ => false,
        };
        if !for_us {
            return Err(Refusal::Invalid("the token is for another resource"));
        }
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        let exp = answer.get("exp").and_then(serde_json::Value::as_u64);
        if exp.is_some_and(|exp| exp <= now) {
            return Err(Refusal::Invalid("the token has expired"));
        }
        let claims: Claims = serde_json::from_value(answer.clone())
            .map_err(|_| Refusal::Invalid("the introspection answer does not parse"))?;
        Ok((claims.principal(), exp))
    }
}
