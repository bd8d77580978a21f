//! The trust policy: which registries and repositories must be signed, and by whom.
//!
//! ```toml
//! # ~/.config/berm/trust.toml
//! [[require]]
//! references = ["ghcr.io/acme/*", "registry.example.com/tools/**"]
//! keys = ["acme.pub"]        # relative to this file; any one of them suffices
//! ```
//!
//! A reference is matched by its normalised `registry/repository` ([`PolicyName`]: Docker Hub
//! names written out as `docker.io/library/x`, registries case folded, default ports dropped,
//! Docker Hub's and this machine's aliases one name), against every spelling of its registry;
//! patterns are normalised the same way when the policy is read. In a pattern `*` stands for
//! any characters but `/`, and `**` for any characters at all. Every rule that matches must
//! be met; a reference no rule matches needs no signature (unless `--verify-key` asks for
//! one). A policy that does not parse, or names a key that cannot be read, refuses everything
//! rather than nothing.

use std::path::{Path, PathBuf};

use crate::name::normalise_pattern;
use crate::{PolicyName, PublicKey, Signer, SigningError};

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
    /// The `registry/repository` patterns it covers, normalised (see [`PolicyName`]).
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
    /// [`SigningError::Policy`] when it cannot be read, does not parse, has a rule without
    /// references or keys or with a malformed pattern, or names a key that cannot be read.
    pub fn load(path: &Path) -> Result<Option<Policy>, SigningError> {
        let bad = |message: String| SigningError::Policy {
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
            let mut references = Vec::new();
            for pattern in &rule.references {
                let normalised = normalise_pattern(pattern).map_err(|why| {
                    bad(format!(
                        "{which}: `{pattern}` is not a `registry/repository` pattern (e.g. `ghcr.io/acme/*`; no tag or digest): {why}"
                    ))
                })?;
                references.push(normalised);
            }
            let keys = rule
                .keys
                .iter()
                .map(|k| PublicKey::load(&base.join(k)))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| bad(format!("{which}: {e}")))?;
            rules.push(Requirement {
                references,
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
    pub fn load_default() -> Result<Option<Policy>, SigningError> {
        match default_policy_path() {
            Some(path) => Policy::load(&path),
            None => Ok(None),
        }
    }

    /// The signers every one of which must have signed what `name` names: each rule with a
    /// pattern that matches any spelling of it.
    pub fn requirements_for(&self, name: &PolicyName) -> Vec<&Signer> {
        self.rules
            .iter()
            .filter(|rule| {
                name.spellings()
                    .any(|spelling| rule.references.iter().any(|p| matches(p, &spelling)))
            })
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

    /// A policy of one rule per pattern, without keys: enough to see which rules cover what.
    fn policy_of(patterns: &[&str]) -> Policy {
        let rules = patterns
            .iter()
            .map(|p| Requirement {
                references: vec![normalise_pattern(p).unwrap()],
                signer: Signer {
                    keys: Vec::new(),
                    because: (*p).to_string(),
                },
            })
            .collect();
        Policy {
            path: PathBuf::from("trust.toml"),
            rules,
        }
    }

    #[test]
    fn no_spelling_of_a_registry_escapes_a_rule_naming_it() {
        for (rule, references) in [
            (
                "ghcr.io/acme/*",
                &["GHCR.IO/acme/x", "ghcr.io:443/acme/x:v1"][..],
            ),
            (
                "GHCR.IO:443/acme/*",
                &["ghcr.io/acme/x", "Ghcr.io:80/acme/x"][..],
            ),
            (
                "docker.io/acme/*",
                &[
                    "acme/x",
                    "index.docker.io/acme/x",
                    "registry-1.docker.io/acme/x",
                    "INDEX.DOCKER.IO:443/acme/x",
                ][..],
            ),
            (
                "index.docker.io/library/*",
                &[
                    "alpine",
                    "docker.io/alpine",
                    "registry-1.docker.io/library/alpine",
                ][..],
            ),
            (
                "127.0.0.1:*/berm/*",
                &[
                    "localhost:5000/berm/x",
                    "LOCALHOST:5000/berm/x",
                    "127.1:5000/berm/x",
                    "0.0.0.0:5000/berm/x",
                    "127.0.0.1/berm/x",
                ][..],
            ),
            (
                "localhost:5000/berm/*",
                &["127.0.0.1:5000/berm/x", "127.0.0.3:5000/berm/x"][..],
            ),
            ("*.example.com/**", &["A.Example.com:443/x/y"][..]),
            ("[::1]:5000/berm/*", &["localhost:5000/berm/x"][..]),
            ("ghcr.io./acme/*", &["ghcr.io/acme/x"][..]),
        ] {
            let policy = policy_of(&[rule]);
            for reference in references {
                let name = PolicyName::of(reference).unwrap();
                assert_eq!(
                    policy.requirements_for(&name).len(),
                    1,
                    "`{reference}` ({name}) escapes `{rule}`"
                );
            }
        }
        // What is another registry or repository stays outside.
        let policy = policy_of(&["ghcr.io/acme/*", "localhost:5000/berm/*"]);
        for outside in [
            "ghcr.io/acmex/x",
            "ghcr.io:8443/acme/x",
            "evil.example/acme/x",
            "localhost:5001/berm/x",
            "10.0.0.1:5000/berm/x",
        ] {
            let name = PolicyName::of(outside).unwrap();
            assert!(policy.requirements_for(&name).is_empty(), "{outside}");
        }
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
