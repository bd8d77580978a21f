//! berm-guest: write a berm program as plain Rust functions.
//!
//! ```ignore
//! /// Says back what it is given.
//! ///
//! /// # Usage
//! /// Reach for echo to check that tools are wired up.
//! #[berm_guest::program]
//! mod echo {
//!     /// Repeat a message.
//!     ///
//!     /// # Arguments
//!     /// - `message`: the text to repeat
//!     pub fn echo(message: String) -> String {
//!         message
//!     }
//! }
//! ```
//!
//! Every `pub fn` in the module is a tool. The attribute generates, at
//! compile time, the export `berm_tool_<name>` for each tool, the JSON Schema
//! of its arguments (from the parameter types and the `# Arguments` section
//! of its doc comment) and the `berm.manifest` section. A tool returns a
//! value (`String` is passed through as text, anything else `Serialize` as
//! JSON) or a `Result` whose `Err` (anything `Display`) becomes a *failure*:
//! a result the model sees, marked as an error.
//!
//! Build with `cargo build --release --target wasm32-unknown-unknown` and a
//! `cdylib` crate type. The ABI behind this is `docs/design/abi.md`.

pub use berm_guest_macros::program;

#[cfg(all(target_arch = "wasm32", feature = "arena"))]
mod arena;
#[cfg(target_arch = "wasm32")]
mod host;

#[cfg(all(target_arch = "wasm32", feature = "arena"))]
#[global_allocator]
static ALLOCATOR: arena::CallAllocator = arena::CallAllocator;
#[cfg(target_arch = "wasm32")]
mod sys;
#[cfg(target_arch = "wasm32")]
pub use host::{CallError, Error, ask, call, clock, content, fs, http, kv, log, progress, random};

pub use berm_abi::word::ErrorCode;

/// What the generated code uses. Not part of the API.
#[doc(hidden)]
pub mod __private {
    pub use serde;
    pub use serde_json;

    /// Parses the arguments object; an empty payload means `{}`.
    pub fn parse_args<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
        let bytes = if bytes.iter().all(u8::is_ascii_whitespace) {
            &b"{}"[..]
        } else {
            bytes
        };
        serde_json::from_slice(bytes).map_err(|e| format!("invalid arguments: {e}"))
    }

    /// A text result, passed through as is.
    pub fn text<E: core::fmt::Display>(result: Result<String, E>) -> Result<String, String> {
        result.map_err(|e| e.to_string())
    }

    /// A structured result, serialized as JSON.
    pub fn json<T: serde::Serialize, E: core::fmt::Display>(
        result: Result<T, E>,
    ) -> Result<String, String> {
        let value = result.map_err(|e| e.to_string())?;
        serde_json::to_string(&value).map_err(|e| format!("could not serialize the result: {e}"))
    }

    #[cfg(target_arch = "wasm32")]
    pub use crate::host::run;

    /// Concatenates string parts into one byte array at compile time, for
    /// the manifest section.
    pub const fn concat<const N: usize>(parts: &[&str]) -> [u8; N] {
        let mut out = [0u8; N];
        let mut at = 0;
        let mut i = 0;
        while i < parts.len() {
            let bytes = parts[i].as_bytes();
            let mut j = 0;
            while j < bytes.len() {
                out[at] = bytes[j];
                at += 1;
                j += 1;
            }
            i += 1;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::__private::*;

    #[test]
    fn arguments_parse_with_clear_errors() {
        #[derive(serde::Deserialize, Debug, PartialEq)]
        #[serde(deny_unknown_fields)]
        struct Args {
            message: String,
        }
        let ok: Args = parse_args(br#"{"message":"hi"}"#).unwrap();
        assert_eq!(ok.message, "hi");
        let err = parse_args::<Args>(br#"{"mesage":"hi"}"#).unwrap_err();
        assert!(
            err.starts_with("invalid arguments: unknown field `mesage`"),
            "{err}"
        );
        let err = parse_args::<Args>(b"").unwrap_err();
        assert!(err.contains("missing field `message`"), "{err}");
    }

    #[test]
    fn results_map_to_text_or_json() {
        assert_eq!(text(Ok::<_, String>("x".into())), Ok("x".into()));
        assert_eq!(text(Err::<String, _>("bad")), Err("bad".into()));
        assert_eq!(json(Ok::<_, String>(vec![1, 2])), Ok("[1,2]".into()));
        assert_eq!(concat::<5>(&["ab", "", "cde"]), *b"abcde");
    }
}
