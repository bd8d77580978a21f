//! Tokens already judged, held by their SHA-256 (never the token) with the principal they
//! gave, until the token expires or [`HOLD`] passes, whichever is first: a client that
//! presents the same token on every request pays one signature check (or one introspection)
//! per minute, not one per request.
//!
//! Hand-written over a map rather than an LRU crate: what retires an entry is its deadline,
//! not its age in use, and a map swept of the expired when full is all that needs.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use sha2::Digest as _;

use crate::verify::Principal;

/// The longest a judgement is trusted without judging the token again.
pub(crate) const HOLD: Duration = Duration::from_secs(60);

/// The most tokens held; past it the expired are dropped, then all if none were.
const MAX_HELD: usize = 10_000;

/// A token's SHA-256: what is held instead of it.
pub(crate) type Digest = [u8; 32];

/// The digest of `token`.
pub(crate) fn digest(token: &str) -> Digest {
    sha2::Sha256::digest(token.as_bytes()).into()
}

/// Principals of tokens judged good, by digest.
#[derive(Default)]
pub(crate) struct Held {
    entries: Mutex<HashMap<Digest, (Instant, Principal)>>,
}

impl Held {
    /// The principal of the token with `digest`, if it is held and not past its deadline.
    pub fn get(&self, digest: &Digest) -> Option<Principal> {
        let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries
            .get(digest)
            .filter(|(until, _)| Instant::now() < *until)
            .map(|(_, principal)| principal.clone())
    }

    /// Holds `principal` for the token with `digest`, which expires at `exp` (Unix seconds)
    /// if it says: until then or for [`HOLD`], whichever is sooner.
    pub fn hold(&self, digest: Digest, exp: Option<u64>, principal: &Principal) {
        let now_unix = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        let hold = exp.map_or(HOLD, |exp| {
            Duration::from_secs(exp.saturating_sub(now_unix)).min(HOLD)
        });
        if hold.is_zero() {
            return;
        }
        let now = Instant::now();
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if entries.len() >= MAX_HELD {
            entries.retain(|_, (until, _)| *until > now);
            if entries.len() >= MAX_HELD {
                entries.clear();
            }
        }
        entries.insert(digest, (now + hold, principal.clone()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn principal(subject: &str) -> Principal {
        Principal {
            subject: Some(subject.into()),
            ..Principal::default()
        }
    }

    fn now() -> u64 {
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_secs()
    }

    #[test]
    fn a_held_token_gives_its_principal_and_no_other_token_does() {
        let held = Held::default();
        held.hold(digest("a.b.c"), Some(now() + 3600), &principal("alice"));
        assert_eq!(held.get(&digest("a.b.c")), Some(principal("alice")));
        assert_eq!(held.get(&digest("a.b.d")), None);
    }

    #[test]
    fn an_expired_token_is_not_held() {
        let held = Held::default();
        held.hold(
            digest("a.b.c"),
            Some(now().saturating_sub(1)),
            &principal("alice"),
        );
        assert_eq!(held.get(&digest("a.b.c")), None);
    }

    #[test]
    fn a_full_map_drops_what_it_holds_rather_than_grow() {
        let held = Held::default();
        for n in 0..MAX_HELD + 1 {
            held.hold(digest(&n.to_string()), None, &principal("bob"));
        }
        let len = held.entries.lock().unwrap().len();
        assert!(len <= MAX_HELD, "{len} held");
        assert_eq!(
            held.get(&digest(&MAX_HELD.to_string())),
            Some(principal("bob"))
        );
    }
}
