//! One connection's worth of decisions: which scheme a registry is spoken to
//! over, with which credentials, and with which timeouts.

use std::net::IpAddr;
use std::time::Duration;

use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};

use crate::auth::CredentialSource;
use crate::error::RegistryError;

/// How to reach registries.
#[derive(Debug, Clone, Default)]
pub struct RegistryOptions {
    /// Speak plain HTTP to a registry that is not on loopback. Off by
    /// default: credentials and unverified bytes would cross the network in
    /// the clear. Loopback registries are always spoken to over HTTP.
    pub insecure: bool,
    /// Where credentials come from.
    pub credentials: CredentialSource,
}

impl RegistryOptions {
    /// Options from the environment (see [`CredentialSource::from_environment`]).
    pub fn from_environment(insecure: bool) -> RegistryOptions {
        RegistryOptions {
            insecure,
            credentials: CredentialSource::from_environment(),
        }
    }
}

/// Whether `registry` (`host`, `host:port`, `[v6]:port`) is this machine's
/// loopback: `localhost`, 127.0.0.0/8 or `::1`. Only those are spoken to
/// over plain HTTP without `--insecure`, as Docker does.
pub fn is_loopback_host(registry: &str) -> bool {
    let host = if let Some(rest) = registry.strip_prefix('[') {
        rest.split(']').next().unwrap_or(rest)
    } else if registry.matches(':').count() > 1 {
        registry // a bare IPv6 address
    } else {
        registry.split(':').next().unwrap_or(registry)
    };
    host.eq_ignore_ascii_case("localhost")
        || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// Parses an OCI reference (`host[:port]/repo[:tag][@sha256:<hex>]`).
///
/// # Errors
/// [`RegistryError::Reference`] when it does not parse.
pub fn parse_reference(reference: &str) -> Result<Reference, RegistryError> {
    reference
        .parse::<Reference>()
        .map_err(|e| RegistryError::Reference {
            reference: reference.chars().take(200).collect(),
            message: e.to_string(),
        })
}

/// A client bound to one reference's registry, with the scheme and
/// credentials chosen for it.
pub(crate) struct Remote {
    pub(crate) client: Client,
    pub(crate) reference: Reference,
    pub(crate) auth: RegistryAuth,
    pub(crate) scheme: &'static str,
}

impl Remote {
    /// Prepares to talk to the registry of `reference`.
    pub(crate) fn new(reference: &str, options: &RegistryOptions) -> Result<Remote, RegistryError> {
        let reference = parse_reference(reference)?;
        let registry = reference.resolve_registry().to_string();
        let auth = options.credentials.resolve(&registry)?;
        let plain = options.insecure || is_loopback_host(&registry);
        let config = ClientConfig {
            protocol: if plain {
                ClientProtocol::Http
            } else {
                ClientProtocol::Https
            },
            // An index is refused, never resolved to a platform's manifest.
            platform_resolver: None,
            connect_timeout: Some(Duration::from_secs(10)),
            read_timeout: Some(Duration::from_secs(60)),
            ..ClientConfig::default()
        };
        let client = Client::try_from(config).map_err(|e| RegistryError::Protocol {
            registry: registry.clone(),
            reference: reference.whole(),
            cause: format!("cannot set up the HTTP client: {}", berm_errors::chain(&e)),
        })?;
        Ok(Remote {
            client,
            reference,
            auth,
            scheme: if plain { "http" } else { "https" },
        })
    }

    /// The registry's `host[:port]`.
    pub(crate) fn registry(&self) -> &str {
        self.reference.resolve_registry()
    }

    /// Turns an oci-client error into a [`RegistryError`] about this remote.
    pub(crate) fn error(&self, err: oci_client::errors::OciDistributionError) -> RegistryError {
        RegistryError::from_oci(
            err,
            self.registry(),
            &self.reference.whole(),
            self.scheme,
            self.auth != RegistryAuth::Anonymous,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_hosts() {
        for yes in [
            "localhost",
            "localhost:5000",
            "127.0.0.1:5000",
            "127.3.4.5",
            "[::1]:5000",
            "::1",
        ] {
            assert!(is_loopback_host(yes), "{yes}");
        }
        for no in [
            "192.0.2.2:5000",
            "ghcr.io",
            "localhost.example.com",
            "[fd00::2]:5000",
            "128.0.0.1",
        ] {
            assert!(!is_loopback_host(no), "{no}");
        }
    }

    #[test]
    fn scheme_is_http_only_for_loopback_or_insecure() {
        let opts = RegistryOptions::default();
        assert_eq!(
            Remote::new("127.0.0.1:5000/a:b", &opts).unwrap().scheme,
            "http"
        );
        assert_eq!(
            Remote::new("192.0.2.2:5000/a:b", &opts).unwrap().scheme,
            "https"
        );
        let insecure = RegistryOptions {
            insecure: true,
            ..RegistryOptions::default()
        };
        assert_eq!(
            Remote::new("192.0.2.2:5000/a:b", &insecure).unwrap().scheme,
            "http"
        );
    }

    #[test]
    fn bad_reference_names_itself() {
        let err = parse_reference("UPPER/Case:tag").unwrap_err().to_string();
        assert!(err.contains("UPPER/Case:tag"), "{err}");
    }
}
