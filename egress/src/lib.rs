//! berm-egress: `http.fetch` for berm programs, through an allowlist.
//!
//! A program reaches the network only through the `http.fetch` syscall, and
//! only the hosts its deployment grants (`net=HOST[:PORT]`,
//! [`berm_abi::net::NetRule`]). This crate is the host side of that syscall,
//! kept apart from bermd so that every place that dials for a program (bermd
//! on the host, later the microVM's host dialer) enforces the same rules:
//!
//! - a host outside the grant is refused before anything is resolved or
//!   connected ([`ErrorCode::Denied`]);
//! - a name is resolved once, every address is checked against the refused
//!   ranges ([`berm_abi::net::refused_range`]), and the connection goes to a
//!   checked address: there is no second lookup to rebind;
//! - redirects are followed only to granted hosts, at most
//!   [`Caps::max_redirects`];
//! - HTTPS is rustls with the system's roots (and any extra CA the operator
//!   names, [`Trust`]), always verified;
//! - secrets: `{{secret:NAME}}` in a header value or the body is replaced by
//!   the value only on a request to one of that secret's hosts, and a
//!   request holding it toward any other host is refused ([`secret`]);
//! - caps on request and response size, requests in flight per program and
//!   time ([`Caps`]); and, for a host that bounds what a program's fetches hold
//!   together, each response's bytes counted as they arrive ([`Holding`]).
//!
//! `docs/design/abi.md` specifies the syscall; `docs/threat-model.md` says
//! what this protects against and what it does not.
#![forbid(unsafe_code)]

mod fetch;
mod holding;
pub mod remote;
pub mod secret;
#[cfg(feature = "testing")]
pub mod testing;
mod trust;
pub mod wire;

pub use berm_abi::word::ErrorCode;
pub use fetch::{Egress, EgressConfig, Forward};
pub use holding::{Holding, Unbounded};
pub use trust::{Trust, TrustError};
pub use wire::{Request, Response};

use std::time::Duration;

/// Bounds on one program's requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caps {
    /// Largest request: URL, header names and values and body together.
    pub max_request_bytes: usize,
    /// Largest response body; a larger one is `too_large`.
    pub max_response_bytes: usize,
    /// Requests one program may have in flight at once, across its calls.
    pub max_in_flight: usize,
    /// Longest one `http.fetch` may take, redirects included; it also ends
    /// before the call's deadline ([`fetch_deadline`]).
    pub max_time: Duration,
    /// Most redirects followed.
    pub max_redirects: usize,
}

impl Default for Caps {
    fn default() -> Self {
        Caps {
            max_request_bytes: 1 << 20,
            max_response_bytes: 4 << 20,
            max_in_flight: 8,
            max_time: Duration::from_secs(30),
            max_redirects: 5,
        }
    }
}

/// When a fetch made at `now` for a call ending at `deadline` gives up:
/// [`Caps::max_time`] from now, and in any case a tenth of the time left
/// (at most 250 ms) before the call's deadline, so the program gets
/// `timeout` back with time to answer instead of being stopped mid-wait.
pub fn fetch_deadline(
    now: std::time::Instant,
    deadline: std::time::Instant,
    max_time: Duration,
) -> std::time::Instant {
    let left = deadline.saturating_duration_since(now);
    let reserve = (left / 10).min(Duration::from_millis(250));
    (now + max_time).min(deadline - reserve)
}

/// Why `http.fetch` did not return a response: the ABI code the program
/// gets, and a message it (and then the model) can act on. Messages never
/// hold a secret's value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct FetchError {
    /// `invalid`, `denied`, `too_large`, `io` or `timeout`.
    pub code: ErrorCode,
    /// What went wrong.
    pub message: String,
}

impl FetchError {
    pub(crate) fn new(code: ErrorCode, message: impl Into<String>) -> FetchError {
        FetchError {
            code,
            message: message.into(),
        }
    }
}
