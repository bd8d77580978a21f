//! The one name a reference meets the trust policy by: its `registry/repository`, normalised
//! once, so that no spelling of a registry escapes a rule that names it.
//!
//! oci-client's `Reference` parsing (oci-spec's) does the first part of the OCI reference
//! rules: a name without a registry is on `docker.io`, `index.docker.io` spelled exactly so is
//! `docker.io`, and a Docker Hub name without a namespace is in `library/`. Otherwise it keeps
//! the registry as written, so this module does the rest by hand:
//!
//! - the host goes through the URL parser a registry client connects with (the `url` crate):
//!   case folded, IDNA, IPv4 literals in their one form (`127.1` is `127.0.0.1`), IPv6 in
//!   brackets, a trailing dot dropped;
//! - the default port is dropped: `:443`, and `:80` as well, since berm speaks plain HTTP to
//!   loopback registries and with `--insecure` (a rule only ever adds requirements, so
//!   treating the two as one registry can only make the policy stricter);
//! - Docker Hub's aliases `index.docker.io` and `registry-1.docker.io` are `docker.io`, and
//!   oci-client's `library/` rule applies to them too;
//! - every name of this machine — `localhost` (and `*.localhost`), `127.0.0.0/8`, `::1`, and
//!   the unspecified `0.0.0.0` and `::`, which reach it as well — is one registry per port,
//!   `localhost`: a rule naming one of them covers every other.
//!
//! A rule is matched against every spelling of the registry ([`PolicyName::spellings`]), so
//! a pattern that globs a part (`127.0.0.1:*`, `*.example.com`) is not escaped by a name
//! that spells that part another way. Names that reach one server through DNS (a CNAME, a
//! name resolving to 127.0.0.1) are not known here: a policy matches names, not servers.

use std::fmt;
use std::net::IpAddr;

use crate::SigningError;

/// Docker Hub, as references and cosign name it.
const DOCKER_HUB: &str = "docker.io";

/// Docker Hub's other names: its API host and its legacy index.
const DOCKER_HUB_ALIASES: [&str; 2] = ["index.docker.io", "registry-1.docker.io"];

/// This machine, as the normalised name says it.
const THIS_MACHINE: &str = "localhost";

/// The other spellings of this machine a rule may name, besides the one a reference used.
const THIS_MACHINE_SPELLINGS: [&str; 4] = ["127.0.0.1", "[::1]", "0.0.0.0", "[::]"];

/// A reference's `registry/repository`, normalised: what the trust policy's rules are
/// matched against, and what a program store records signatures under.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PolicyName {
    /// `host[:port]`, normalised.
    registry: String,
    /// Every `host[:port]` that names the same registry, `registry` first.
    registry_spellings: Vec<String>,
    /// The repository, lowercase, Docker Hub's `library/` added.
    repository: String,
}

impl PolicyName {
    /// Normalises `reference` (`host[:port]/repo[:tag][@digest]`, or a Docker Hub name).
    ///
    /// # Errors
    /// [`SigningError::Reference`] when it does not parse as an OCI reference, or its registry
    /// is not a host name or address.
    pub fn of(reference: &str) -> Result<PolicyName, SigningError> {
        let bad = |message: String| SigningError::Reference {
            reference: reference.chars().take(200).collect(),
            message,
        };
        let parsed = berm_oci::parse_reference(reference).map_err(|e| bad(e.to_string()))?;
        let registry = Registry::parse(parsed.registry()).map_err(bad)?;
        let repository = registry.repository(&parsed.repository().to_ascii_lowercase());
        Ok(PolicyName {
            registry: registry.canonical(),
            registry_spellings: registry.spellings(),
            repository,
        })
    }

    /// The registry, normalised: `host[:port]`.
    pub fn registry(&self) -> &str {
        &self.registry
    }

    /// The repository within it.
    pub fn repository(&self) -> &str {
        &self.repository
    }

    /// Every `registry/repository` a rule may name this by: the normalised one first, then
    /// the registry's other spellings (Docker Hub's aliases, this machine's addresses, the
    /// default ports written out).
    pub fn spellings(&self) -> impl Iterator<Item = String> + '_ {
        self.registry_spellings
            .iter()
            .map(|registry| format!("{registry}/{}", self.repository))
    }
}

impl fmt::Display for PolicyName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.registry, self.repository)
    }
}

/// Normalises a `[[require]]` pattern (`registry/repository`, `*` and `**` allowed): case
/// folded, and a registry written without a glob normalised as a reference's is, so that a
/// rule naming `GHCR.IO:443/acme/*` or `index.docker.io/library/x` matches what it names.
/// A registry part with a glob is left to match [`PolicyName::spellings`].
pub(crate) fn normalise_pattern(pattern: &str) -> Result<String, String> {
    let lower = pattern.to_ascii_lowercase();
    let Some((registry, repository)) = lower.split_once('/') else {
        return Err("it has no `/` between registry and repository".into());
    };
    if registry.is_empty() || repository.is_empty() {
        return Err("its registry or its repository is empty".into());
    }
    if repository.contains([':', '@']) {
        return Err("a pattern names repositories, not a tag or digest".into());
    }
    if let Some(c) = lower
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || "._-:/[]*".contains(*c)))
    {
        return Err(format!("`{c}` is in no registry or repository name"));
    }
    if registry.contains('*') {
        return Ok(lower);
    }
    let registry = Registry::parse(registry)?;
    let repository = if repository.contains('*') {
        repository.to_string()
    } else {
        registry.repository(repository)
    };
    Ok(format!("{}/{repository}", registry.canonical()))
}

/// A registry's host and port, normalised.
struct Registry {
    host: Host,
    /// `None` for the default port (443, or 80).
    port: Option<u16>,
}

enum Host {
    DockerHub,
    /// This machine, and the spelling a reference used (`127.0.0.2`, `localhost`).
    ThisMachine(String),
    Other(String),
}

impl Registry {
    /// Reads `host[:port]` as a registry client would connect to it.
    fn parse(text: &str) -> Result<Registry, String> {
        let not = |why: String| format!("`{text}` is not a registry (host or host:port): {why}");
        // The URL parser would take these as user info, path, query or fragment.
        if let Some(c) = text
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || ".-:[]".contains(*c)))
        {
            return Err(not(format!("`{c}` is in no host name")));
        }
        let url = url::Url::parse(&format!("https://{text}/")).map_err(|e| not(e.to_string()))?;
        // `port()` is already `None` for https' 443.
        let port = url.port().filter(|&p| p != 80);
        let host = match url.host() {
            Some(url::Host::Domain(domain)) => {
                let domain = domain.strip_suffix('.').unwrap_or(domain);
                if domain.is_empty() {
                    return Err(not("the host is empty".into()));
                }
                if domain == THIS_MACHINE || domain.ends_with(".localhost") {
                    Host::ThisMachine(domain.to_string())
                } else if port.is_none()
                    && (domain == DOCKER_HUB || DOCKER_HUB_ALIASES.contains(&domain))
                {
                    Host::DockerHub
                } else {
                    Host::Other(domain.to_string())
                }
            }
            Some(url::Host::Ipv4(ip)) => address(IpAddr::V4(ip), ip.to_string()),
            Some(url::Host::Ipv6(ip)) => address(IpAddr::V6(ip), format!("[{ip}]")),
            None => return Err(not("there is no host".into())),
        };
        Ok(Registry { host, port })
    }

    /// `host[:port]`.
    fn canonical(&self) -> String {
        let host = match &self.host {
            Host::DockerHub => DOCKER_HUB,
            Host::ThisMachine(_) => THIS_MACHINE,
            Host::Other(host) => host,
        };
        with_port(host, self.port)
    }

    /// Every `host[:port]` naming this registry, the canonical one first.
    fn spellings(&self) -> Vec<String> {
        let mut hosts: Vec<&str> = match &self.host {
            Host::DockerHub => [DOCKER_HUB].into_iter().chain(DOCKER_HUB_ALIASES).collect(),
            Host::ThisMachine(written) => [THIS_MACHINE, written.as_str()]
                .into_iter()
                .chain(THIS_MACHINE_SPELLINGS)
                .collect(),
            Host::Other(host) => vec![host],
        };
        let mut seen = std::collections::HashSet::new();
        hosts.retain(|h| seen.insert(*h));
        let ports: Vec<Option<u16>> = match self.port {
            None => vec![None, Some(443), Some(80)],
            port => vec![port],
        };
        hosts
            .iter()
            .flat_map(|host| ports.iter().map(move |&port| with_port(host, port)))
            .collect()
    }

    /// `repository` as Docker Hub names it (`library/x` for `x`), or as written elsewhere.
    fn repository(&self, repository: &str) -> String {
        match self.host {
            Host::DockerHub if !repository.contains('/') => format!("library/{repository}"),
            _ => repository.to_string(),
        }
    }
}

fn with_port(host: &str, port: Option<u16>) -> String {
    match port {
        Some(port) => format!("{host}:{port}"),
        None => host.to_string(),
    }
}

/// An IP literal: this machine when it is loopback or unspecified (IPv4-mapped included).
fn address(ip: IpAddr, written: String) -> Host {
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    };
    if ip.is_loopback() || ip.is_unspecified() {
        Host::ThisMachine(written)
    } else {
        Host::Other(written)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(reference: &str) -> String {
        PolicyName::of(reference)
            .unwrap_or_else(|e| panic!("{reference}: {e}"))
            .to_string()
    }

    #[test]
    fn every_spelling_of_a_registry_is_one_name() {
        let digest = format!("@sha256:{}", "0".repeat(64));
        for (reference, normalised) in [
            ("alpine", "docker.io/library/alpine"),
            ("alpine:3", "docker.io/library/alpine"),
            ("acme/echo:v1", "docker.io/acme/echo"),
            ("docker.io/alpine", "docker.io/library/alpine"),
            ("docker.io/acme/echo:v1", "docker.io/acme/echo"),
            ("index.docker.io/acme/echo", "docker.io/acme/echo"),
            ("index.docker.io/alpine", "docker.io/library/alpine"),
            ("registry-1.docker.io/acme/echo", "docker.io/acme/echo"),
            (
                "registry-1.docker.io:443/alpine",
                "docker.io/library/alpine",
            ),
            ("INDEX.DOCKER.IO/acme/echo", "docker.io/acme/echo"),
            ("docker.io:5000/acme/echo", "docker.io:5000/acme/echo"),
            ("ghcr.io/acme/echo", "ghcr.io/acme/echo"),
            ("GHCR.IO/acme/echo", "ghcr.io/acme/echo"),
            ("Ghcr.Io:443/acme/echo:v1", "ghcr.io/acme/echo"),
            ("ghcr.io:80/acme/echo", "ghcr.io/acme/echo"),
            ("ghcr.io:8443/acme/echo", "ghcr.io:8443/acme/echo"),
            ("localhost:5000/berm/echo", "localhost:5000/berm/echo"),
            ("LOCALHOST:5000/berm/echo", "localhost:5000/berm/echo"),
            ("127.0.0.1:5000/berm/echo", "localhost:5000/berm/echo"),
            ("127.1:5000/berm/echo", "localhost:5000/berm/echo"),
            ("127.0.0.2:5000/berm/echo", "localhost:5000/berm/echo"),
            ("0.0.0.0:5000/berm/echo", "localhost:5000/berm/echo"),
            (
                "registry.localhost:5000/berm/echo",
                "localhost:5000/berm/echo",
            ),
            ("127.0.0.1/berm/echo", "localhost/berm/echo"),
            ("127.0.0.1:443/berm/echo", "localhost/berm/echo"),
            ("10.0.0.1:5000/berm/echo", "10.0.0.1:5000/berm/echo"),
            (&format!("ghcr.io/acme/echo{digest}"), "ghcr.io/acme/echo"),
            (
                &format!("ghcr.io:443/acme/echo:v1{digest}"),
                "ghcr.io/acme/echo",
            ),
        ] {
            assert_eq!(name(reference), normalised, "{reference}");
        }
    }

    #[test]
    fn spellings_name_every_alias_and_port() {
        let spellings: Vec<String> = PolicyName::of("127.0.0.2:5000/berm/echo")
            .unwrap()
            .spellings()
            .collect();
        for want in [
            "localhost:5000/berm/echo",
            "127.0.0.2:5000/berm/echo",
            "127.0.0.1:5000/berm/echo",
            "[::1]:5000/berm/echo",
        ] {
            assert!(spellings.iter().any(|s| s == want), "{want}: {spellings:?}");
        }
        let spellings: Vec<String> = PolicyName::of("alpine").unwrap().spellings().collect();
        for want in [
            "docker.io/library/alpine",
            "index.docker.io:443/library/alpine",
            "registry-1.docker.io/library/alpine",
        ] {
            assert!(spellings.iter().any(|s| s == want), "{want}: {spellings:?}");
        }
    }

    #[test]
    fn patterns_are_normalised_as_references_are() {
        for (pattern, normalised) in [
            ("GHCR.IO/acme/*", "ghcr.io/acme/*"),
            ("ghcr.io:443/acme/*", "ghcr.io/acme/*"),
            ("ghcr.io./acme/*", "ghcr.io/acme/*"),
            ("index.docker.io/library/*", "docker.io/library/*"),
            ("docker.io/alpine", "docker.io/library/alpine"),
            ("registry-1.docker.io/acme/**", "docker.io/acme/**"),
            ("127.0.0.1:5000/berm/*", "localhost:5000/berm/*"),
            ("[::1]:5000/berm/*", "localhost:5000/berm/*"),
            ("127.0.0.1:*/berm/*", "127.0.0.1:*/berm/*"),
            ("*.Example.com/**", "*.example.com/**"),
        ] {
            assert_eq!(normalise_pattern(pattern).unwrap(), normalised, "{pattern}");
        }
        for bad in [
            "ghcr.io",
            "/acme",
            "ghcr.io/",
            "user@ghcr.io/acme/*",
            "ghcr.io/acme?/*",
            "ghcr.io:99999/acme/*",
            "ghcr.io/acme/echo:v1",
        ] {
            assert!(normalise_pattern(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_registry_that_is_no_host_is_refused() {
        for bad in [
            "ghcr.io:99999/acme/echo",
            "UPPER.io/Acme/echo",
            "[::1]:5000/berm/echo",
            "ghcr.io./acme/echo",
        ] {
            // No port; no repository (OCI repositories are lowercase); an IPv6 literal and a
            // trailing dot, which oci-client's references do not take (a pattern may).
            assert!(PolicyName::of(bad).is_err(), "{bad}");
        }
    }
}
