//! The trust policy: which registries and repositories must be signed, and by whom.
//!
//! ```toml
//! # ~/.config/berm/trust.toml
//! [[require]]
//! references = ["ghcr.io/acme/*", "registry.example.com/tools/**"]
//! keys = ["acme.pub"]        # relative to this file; any one of them suffices
//! ```
//!
//! A reference is matched by its `registry/repository` (Docker Hub names written out:
//! `docker.io/library/x`). In a pattern `*` stands for any characters but `/`, and `**` for
//! any characters at all. Every rule that matches must be met; a reference no rule matches
//! needs no signature (unless `--verify-key` asks for one). A policy that does not parse, or
//! names a key that cannot be read, refuses everything rather than nothing.

use std::path::{Path, PathBuf};

use crate::{PublicKey, Signer, TrustError};

/// The policy file as written.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicyFile {
    #[serde(default)]
    require: Vec<RuleFile>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleFile {
    references: Vec<String>,
    keys: Vec<PathBuf>,
}

/// One `[[require]]` rule, its keys read.
#[derive(Debug, Clone)]
pub struct Requirement {
    /// The `registry/repository` patterns it covers.
    pub references: Vec<String>,
    /// Who must have signed what it covers.
    pub signer: Signer,
}

/// A trust policy, read and checked.
#[derive(Debug, Clone)]
pub struct Policy {
    /// The file it came from.
    pub path: PathBuf,
    /// Its rules, in file order.
    pub rules: Vec<Requirement>,
}

/// `$XDG_CONFIG_HOME/berm/trust.toml`, else `~/.config/berm/trust.toml`; `None` without a home.
pub fn default_policy_path() -> Option<PathBuf> {
    let config = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))?;
    Some(config.join("berm").join("trust.toml"))
}

impl Policy {
    /// Reads the policy at `path`; `Ok(None)` when there is no such file.
    ///
    /// # Errors
    /// [`TrustError::Policy`] when it cannot be read, does not parse, has a rule without
    /// references or keys or with a malformed pattern, or names a key that cannot be read.
    pub fn load(path: &Path) -> Result<Option<Policy>, TrustError> {
        let bad = |message: String| TrustError::Policy {
            path: path.to_path_buf(),
            message,
        };
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(bad(format!("cannot read it: {e}"))),
        };
        let file: PolicyFile = toml::from_str(&text).map_err(|e| bad(e.to_string()))?;
        let base = path.parent().unwrap_or(Path::new("."));
        let mut rules = Vec::new();
        for (n, rule) in file.require.into_iter().enumerate() {
            let which = format!("[[require]] {} of {}", n + 1, path.display());
            if rule.references.is_empty() || rule.keys.is_empty() {
                return Err(bad(format!(
                    "{which} needs at least one of `references` and of `keys`"
                )));
            }
            for pattern in &rule.references {
                if pattern.is_empty() || !pattern.contains('/') || pattern.contains('@') {
                    return Err(bad(format!(
                        "{which}: `{pattern}` is not a `registry/repository` pattern (e.g. `ghcr.io/acme/*`; no tag or digest)"
                    )));
                }
            }
            let keys = rule
                .keys
                .iter()
                .map(|k| PublicKey::load(&base.join(k)))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| bad(format!("{which}: {e}")))?;
            rules.push(Requirement {
                references: rule.references,
                signer: Signer {
                    keys,
                    because: which,
                },
            });
        }
        Ok(Some(Policy {
            path: path.to_path_buf(),
            rules,
        }))
    }

    /// Reads the policy at [`default_policy_path`], if there is one.
    ///
    /// # Errors
    /// As [`Policy::load`].
    pub fn load_default() -> Result<Option<Policy>, TrustError> {
        match default_policy_path() {
            Some(path) => Policy::load(&path),
            None => Ok(None),
        }
    }

    /// The signers every one of which must have signed `repository` (`registry/repository`).
    pub fn requirements_for(&self, repository: &str) -> Vec<&Signer> {
        self.rules
            .iter()
            .filter(|rule| rule.references.iter().any(|p| matches(p, repository)))
            .map(|rule| &rule.signer)
            .collect()
    }
}

/// Glob matching on a `registry/repository` string: `**` any characters, `*` any but `/`.
/// Hand-written: path-glob crates match file-system paths and their rules (leading dots,
/// separators per platform), not reference strings.
fn matches(pattern: &str, text: &str) -> bool {
    let (p, t) = (pattern.as_bytes(), text.as_bytes());
    fn go(p: &[u8], t: &[u8]) -> bool {
        match p {
            [] => t.is_empty(),
            [b'*', b'*', rest @ ..] => (0..=t.len()).any(|i| go(rest, &t[i..])),
            [b'*', rest @ ..] => {
                let limit = t.iter().position(|&c| c == b'/').unwrap_or(t.len());
                (0..=limit).any(|i| go(rest, &t[i..]))
            }
            [c, rest @ ..] => t.first() == Some(c) && go(rest, &t[1..]),
        }
    }
    go(p, t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns() {
        assert!(matches("ghcr.io/acme/*", "ghcr.io/acme/echo"));
        assert!(!matches("ghcr.io/acme/*", "ghcr.io/acme/team/echo"));
        assert!(matches("ghcr.io/acme/**", "ghcr.io/acme/team/echo"));
        assert!(!matches("ghcr.io/acme/*", "ghcr.io/acmex/echo"));
        assert!(matches("127.0.0.1:*/berm/*", "127.0.0.1:5000/berm/echo"));
        assert!(!matches("ghcr.io/acme/echo", "ghcr.io/acme/echo2"));
    }

    #[test]
    fn a_bad_policy_refuses_instead_of_allowing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("trust.toml");
        assert!(Policy::load(&path).unwrap().is_none());
        for (text, says) in [
            (
                "[[require]]\nreferences = [\"a/b\"]\nkeys = []\n",
                "at least one",
            ),
            (
                "[[require]]\nreferences = [\"a/b\"]\nkeys = [\"missing.pub\"]\n",
                "missing.pub",
            ),
            (
                "[[require]]\nreferences = [\"a/b:v1@sha256:00\"]\nkeys = [\"k.pub\"]\n",
                "no tag or digest",
            ),
            ("[[requires]]\n", "unknown field"),
        ] {
            std::fs::write(&path, text).unwrap();
            let e = Policy::load(&path).unwrap_err().to_string();
            assert!(e.contains(says) && e.contains("trust.toml"), "{text}: {e}");
        }
    }
}
