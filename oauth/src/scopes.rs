//! What a token's scopes let its client do on bermd:
//!
//! - `berm:call`: call every tool;
//! - `berm:call:<program>`: call every tool of one program (`berm:call:notes`);
//! - `berm:call:<program>_<tool>`: call one tool, by the name bermd serves it under
//!   (`berm:call:notes_add`);
//! - `berm:read`: list and read resources and prompts (reading one runs the tool that serves
//!   it), and completions.
//!
//! `tools/list` shows the tools a token may call, whatever else it holds; `initialize`,
//! `ping`, notifications and a client's own tasks need only a valid token. Scopes that do
//! not start with `berm:` are ignored.

use std::collections::BTreeSet;

/// Every tool.
pub const CALL: &str = "berm:call";
/// Resources, prompts and completions.
pub const READ: &str = "berm:read";

/// The scope that names one program (`berm:call:<program>`).
pub fn program_scope(program: &str) -> String {
    format!("{CALL}:{program}")
}

/// The narrowest scope that lets a client call `served` (`berm:call:<program>_<tool>`).
pub fn tool_scope(served: &str) -> String {
    format!("{CALL}:{served}")
}

/// The `berm:` scopes a token carries.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Scopes(BTreeSet<String>);

impl Scopes {
    /// The `berm:` scopes of a space-separated `scope` claim (RFC 6749 §3.3).
    pub fn parse(scope: &str) -> Scopes {
        Scopes::from_iter(scope.split_ascii_whitespace())
    }

    /// Whether the token may call the tool served as `served` (`<program>_<tool>`; a
    /// program's name has no `_`, so the first `_` ends it).
    pub fn may_call(&self, served: &str) -> bool {
        if self.0.contains(CALL) || self.0.contains(&tool_scope(served)) {
            return true;
        }
        served
            .split_once('_')
            .is_some_and(|(program, _)| self.0.contains(&program_scope(program)))
    }

    /// Whether the token may list and read resources and prompts.
    pub fn may_read(&self) -> bool {
        self.0.contains(READ)
    }

    /// The scopes, space-separated, as a `scope` parameter spells them.
    pub fn joined(&self) -> String {
        self.0
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// These scopes and `more`, space-separated: what a client asks for on a step-up, so that
    /// its new token keeps what the old one allowed.
    pub fn with(&self, more: &str) -> String {
        let mut all = self.0.clone();
        all.insert(more.to_string());
        Scopes(all).joined()
    }
}

impl<'a> FromIterator<&'a str> for Scopes {
    fn from_iter<I: IntoIterator<Item = &'a str>>(scopes: I) -> Scopes {
        Scopes(
            scopes
                .into_iter()
                .filter(|s| s.starts_with("berm:"))
                .map(String::from)
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scope_names_everything_a_program_or_one_tool() {
        let all = Scopes::parse("openid berm:call");
        assert!(all.may_call("notes_add") && all.may_call("clock_now"));
        assert!(!all.may_read());
        let program = Scopes::parse("berm:call:notes berm:read");
        assert!(program.may_call("notes_add") && program.may_call("notes_list"));
        assert!(!program.may_call("clock_now") && !program.may_call("notesx_add"));
        assert!(program.may_read());
        let tool = Scopes::parse("berm:call:notes_add");
        assert!(tool.may_call("notes_add"));
        assert!(!tool.may_call("notes_list") && !tool.may_call("notes_add2"));
        assert!(!Scopes::parse("").may_call("notes_add"));
        assert_eq!(tool.with(READ), "berm:call:notes_add berm:read");
        assert_eq!(Scopes::parse("email berm:read").joined(), "berm:read");
    }
}
