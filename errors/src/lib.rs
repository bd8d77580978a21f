//! An error and its causes on one line, written once.
//!
//! bermd's logs and control answers, berm-oci's registry errors and the PostgreSQL kv store
//! each turn an error into one line for a person: the error, then each cause in turn, joined
//! by `": "`. Each crate used to walk [`std::error::Error::source`] itself; [`chain`] is that
//! walk, so every line reads the same.
#![forbid(unsafe_code)]

use std::error::Error;

/// `error` and its causes on one line, each once: `error: cause: cause of cause`.
///
/// A cause whose text the line already holds is left out, so an error that prints its
/// source in its own message (as many outside crates do) does not repeat it.
pub fn chain(error: &dyn Error) -> String {
    let mut line = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        source = cause.source();
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("reading `{path}`")]
    struct ReadError {
        path: String,
        #[source]
        cause: std::io::Error,
    }

    #[derive(Debug, thiserror::Error)]
    #[error("loading the app: {0}")]
    struct Repeats(#[source] std::io::Error);

    #[test]
    fn each_cause_follows_its_error() {
        let error = ReadError {
            path: "berm.toml".into(),
            cause: std::io::Error::other("permission denied"),
        };
        assert_eq!(chain(&error), "reading `berm.toml`: permission denied");
    }

    #[test]
    fn a_cause_already_in_the_message_is_not_repeated() {
        let error = Repeats(std::io::Error::other("disk full"));
        assert_eq!(chain(&error), "loading the app: disk full");
    }

    #[test]
    fn an_error_without_causes_is_its_message() {
        assert_eq!(chain(&std::io::Error::other("gone")), "gone");
    }
}
