//! Opaque access tokens, through the issuer's RFC 7662 introspection endpoint: asked once per
//! token and the answer held ([`crate::held`]) until the token expires or a minute passes,
//! whichever is first.

use std::time::SystemTime;

use base64::Engine as _;

use crate::fetch::Fetcher;
use crate::held::{self, Held};
use crate::keys::KeyRing;
use crate::verify::{Claims, Principal, Refusal};
use crate::{Introspection, OAuthConfig};

pub(crate) struct Introspector {
    credentials: String,
    fetcher: Fetcher,
    issuer: String,
    resource: String,
    held: Held,
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
            held: Held::default(),
        }
    }

    pub async fn introspect(&self, token: &str, ring: &KeyRing) -> Result<Principal, Refusal> {
        let digest = held::digest(token);
        if let Some(principal) = self.held.get(&digest) {
            return Ok(principal);
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
        self.held.hold(digest, expires, &principal);
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
