//! Asking the client for input (`berm.ask`, `berm.input`): MCP's input-required results
//! (2026-07-28) and, on older sessions, server-to-client requests.
//!
//! A program ends a call with `berm.ask`: frames `[requests, state]`. `requests` is a JSON
//! object whose keys name the requests and whose values are MCP requests the client answers:
//! `{"method": "elicitation/create" | "sampling/createMessage" | "roots/list", "params": {…}}`.
//! `state` is bytes the program wants back. The host asks, then runs the tool again in a fresh
//! instance, where `berm.input` gives frames `[responses, state, client_capabilities]`: the
//! answers as a JSON object by the same keys, the state as it was, and the client's declared
//! capabilities as JSON (each may be empty). The host seals the state while the client holds
//! it, so a client can neither read nor change it.

/// The methods a program may ask the client to answer, with the client capability each needs.
pub const METHODS: [(&str, &str); 3] = [
    ("elicitation/create", "elicitation"),
    ("sampling/createMessage", "sampling"),
    ("roots/list", "roots"),
];

/// Most requests one `berm.ask` may make.
pub const MAX_REQUESTS: usize = 16;

/// Largest `requests` JSON, in bytes.
pub const MAX_REQUESTS_BYTES: usize = 64 << 10;

/// Largest state a program may ask to get back, in bytes (before sealing).
pub const MAX_STATE_BYTES: usize = 16 << 10;

/// Longest request key.
pub const MAX_KEY: usize = 64;

/// The client capability a method needs, or `None` for a method a program may not ask.
pub fn capability_for(method: &str) -> Option<&'static str> {
    METHODS
        .iter()
        .find(|(m, _)| *m == method)
        .map(|(_, capability)| *capability)
}

/// Whether `key` may name a request: 1 to [`MAX_KEY`] of `A-Z a-z 0-9 _ - .`.
pub fn is_valid_key(key: &str) -> bool {
    !key.is_empty()
        && key.len() <= MAX_KEY
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b))
}
