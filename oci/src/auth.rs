//! Where registry credentials come from: `BERM_REGISTRY_USER` /
//! `BERM_REGISTRY_PASSWORD`, else the `auths` of a Docker `config.json`,
//! else none (anonymous). No credential helper is run: berm never executes
//! a program to learn a secret.

use std::path::{Path, PathBuf};

use base64::Engine as _;
use oci_client::secrets::RegistryAuth;
use serde::Deserialize;

use crate::error::RegistryError;

/// Where to look for credentials, captured once so that tests (and several
/// registries in one process) do not race on process-wide environment.
#[derive(Debug, Clone, Default)]
pub struct CredentialSource {
    /// `BERM_REGISTRY_USER`.
    pub user: Option<String>,
    /// `BERM_REGISTRY_PASSWORD`.
    pub password: Option<String>,
    /// The Docker config file: `$DOCKER_CONFIG/config.json`, else
    /// `~/.docker/config.json`.
    pub docker_config: Option<PathBuf>,
}

impl CredentialSource {
    /// Reads the environment: `BERM_REGISTRY_USER`, `BERM_REGISTRY_PASSWORD`,
    /// `DOCKER_CONFIG` and `HOME`.
    pub fn from_environment() -> CredentialSource {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let docker_config = var("DOCKER_CONFIG")
            .map(|d| PathBuf::from(d).join("config.json"))
            .or_else(|| var("HOME").map(|h| Path::new(&h).join(".docker/config.json")));
        CredentialSource {
            user: var("BERM_REGISTRY_USER"),
            password: var("BERM_REGISTRY_PASSWORD"),
            docker_config,
        }
    }

    /// No credentials at all: anonymous access.
    pub fn anonymous() -> CredentialSource {
        CredentialSource::default()
    }

    /// The credentials for `registry` (`host[:port]` as in the reference).
    ///
    /// # Errors
    /// Only one of the two variables set, or a Docker config that exists but
    /// cannot be read or has a malformed entry for this registry.
    pub(crate) fn resolve(&self, registry: &str) -> Result<RegistryAuth, RegistryError> {
        match (&self.user, &self.password) {
            (Some(u), Some(p)) => return Ok(RegistryAuth::Basic(u.clone(), p.clone())),
            (Some(_), None) | (None, Some(_)) => {
                return Err(RegistryError::Credentials {
                    registry: registry.to_string(),
                    message: "set both BERM_REGISTRY_USER and BERM_REGISTRY_PASSWORD, or neither"
                        .to_string(),
                });
            }
            (None, None) => {}
        }
        match &self.docker_config {
            Some(path) => from_docker_config(path, registry),
            None => Ok(RegistryAuth::Anonymous),
        }
    }
}

#[derive(Deserialize)]
struct DockerConfig {
    #[serde(default)]
    auths: std::collections::BTreeMap<String, DockerAuth>,
}

#[derive(Deserialize)]
struct DockerAuth {
    /// base64 of `user:password`.
    #[serde(default)]
    auth: Option<String>,
    /// A bearer token for the registry itself.
    #[serde(default)]
    registrytoken: Option<String>,
}

/// The keys a Docker config may file `registry` under: the bare host, or a
/// URL of it; Docker Hub's historic key for `docker.io`.
fn keys_for(registry: &str) -> Vec<String> {
    let mut keys = vec![
        registry.to_string(),
        format!("https://{registry}"),
        format!("http://{registry}"),
        format!("https://{registry}/v1/"),
        format!("https://{registry}/v2/"),
    ];
    if matches!(
        registry,
        "docker.io" | "index.docker.io" | "registry-1.docker.io"
    ) {
        keys.push("https://index.docker.io/v1/".to_string());
    }
    keys
}

fn from_docker_config(path: &Path, registry: &str) -> Result<RegistryAuth, RegistryError> {
    let bad = |message: String| RegistryError::Credentials {
        registry: registry.to_string(),
        message: format!("{}: {message}", path.display()),
    };
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(RegistryAuth::Anonymous),
        Err(e) => return Err(bad(format!("cannot read it: {e}"))),
    };
    let config: DockerConfig =
        serde_json::from_str(&text).map_err(|e| bad(format!("not a Docker config: {e}")))?;
    let Some(entry) = keys_for(registry).iter().find_map(|k| config.auths.get(k)) else {
        return Ok(RegistryAuth::Anonymous);
    };
    if let Some(token) = entry.registrytoken.as_deref().filter(|t| !t.is_empty()) {
        return Ok(RegistryAuth::Bearer(token.to_string()));
    }
    let Some(auth) = entry.auth.as_deref().filter(|a| !a.is_empty()) else {
        return Ok(RegistryAuth::Anonymous);
    };
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(auth.trim())
        .map_err(|_| bad(format!("`auths.{registry}.auth` is not base64")))?;
    let decoded = String::from_utf8(decoded)
        .map_err(|_| bad(format!("`auths.{registry}.auth` is not UTF-8")))?;
    let (user, password) = decoded.split_once(':').ok_or_else(|| {
        bad(format!(
            "`auths.{registry}.auth` is not base64 of `user:password`"
        ))
    })?;
    Ok(RegistryAuth::Basic(user.to_string(), password.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config_with(dir: &Path, body: &str) -> CredentialSource {
        let path = dir.join("config.json");
        std::fs::write(&path, body).unwrap();
        CredentialSource {
            docker_config: Some(path),
            ..CredentialSource::default()
        }
    }

    #[test]
    fn docker_config_auth_is_basic() {
        let dir = tempfile::tempdir().unwrap();
        let auth = base64::engine::general_purpose::STANDARD.encode("alice:s3:cret");
        let src = config_with(
            dir.path(),
            &format!(r#"{{"auths":{{"127.0.0.1:5000":{{"auth":"{auth}"}}}}}}"#),
        );
        assert_eq!(
            src.resolve("127.0.0.1:5000").unwrap(),
            RegistryAuth::Basic("alice".into(), "s3:cret".into())
        );
        assert_eq!(src.resolve("other:5000").unwrap(), RegistryAuth::Anonymous);
    }

    #[test]
    fn docker_config_registrytoken_is_bearer() {
        let dir = tempfile::tempdir().unwrap();
        let src = config_with(
            dir.path(),
            r#"{"auths":{"https://ghcr.io":{"registrytoken":"tok"}}}"#,
        );
        assert_eq!(
            src.resolve("ghcr.io").unwrap(),
            RegistryAuth::Bearer("tok".into())
        );
    }

    #[test]
    fn env_wins_and_must_be_complete() {
        let src = CredentialSource {
            user: Some("u".into()),
            password: Some("p".into()),
            docker_config: None,
        };
        assert_eq!(
            src.resolve("r").unwrap(),
            RegistryAuth::Basic("u".into(), "p".into())
        );
        let half = CredentialSource {
            user: Some("u".into()),
            ..CredentialSource::default()
        };
        let err = half.resolve("r").unwrap_err().to_string();
        assert!(err.contains("BERM_REGISTRY_PASSWORD"), "{err}");
    }

    #[test]
    fn malformed_entries_are_reported_not_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let src = config_with(dir.path(), r#"{"auths":{"r":{"auth":"%%%"}}}"#);
        let err = src.resolve("r").unwrap_err().to_string();
        assert!(err.contains("not base64"), "{err}");
        assert_eq!(
            CredentialSource {
                docker_config: Some(dir.path().join("absent.json")),
                ..CredentialSource::default()
            }
            .resolve("r")
            .unwrap(),
            RegistryAuth::Anonymous
        );
    }
}
