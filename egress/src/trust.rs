//! Which certificate authorities HTTPS requests trust: the system's roots,
//! plus any CA the operator names (`bermd --extra-ca FILE`), for an internal
//! service with a private CA or a test server. Verification is never off.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::RootCertStore;
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;

/// A TLS client configuration, built once and shared by every program.
#[derive(Clone)]
pub struct Trust {
    pub(crate) config: Arc<rustls::ClientConfig>,
    roots: usize,
}

impl std::fmt::Debug for Trust {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Trust({} roots)", self.roots)
    }
}

/// Why the trusted roots could not be assembled.
#[derive(Debug, thiserror::Error)]
pub enum TrustError {
    /// An extra CA file could not be read or holds a bad certificate.
    #[error("extra CA file {}: {problem}", path.display())]
    ExtraCa {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        problem: String,
    },
}

impl Trust {
    /// The system's roots (`rustls-native-certs`: the platform store, or
    /// `SSL_CERT_FILE`/`SSL_CERT_DIR` when set) and the PEM certificates in
    /// each of `extra_ca`. A system store that cannot be read is logged,
    /// not fatal: requests to hosts it would have verified then fail.
    pub fn new(extra_ca: &[PathBuf]) -> Result<Trust, TrustError> {
        let mut roots = RootCertStore::empty();
        let native = rustls_native_certs::load_native_certs();
        for error in &native.errors {
            tracing::warn!("system CA certificates: {error}");
        }
        let (added, ignored) = roots.add_parsable_certificates(native.certs);
        if ignored > 0 {
            tracing::warn!("system CA certificates: {ignored} could not be parsed");
        }
        for path in extra_ca {
            for cert in read_pem(path)? {
                roots.add(cert).map_err(|e| TrustError::ExtraCa {
                    path: path.clone(),
                    problem: e.to_string(),
                })?;
            }
        }
        if roots.is_empty() {
            tracing::warn!("no trusted CA certificates: every https request will fail");
        }
        let count = roots.len();
        tracing::debug!(system = added, total = count, "trusted CA certificates");
        Ok(Trust::from_roots(roots))
    }

    /// Trusts exactly `roots` (for tests and embedders).
    pub fn from_roots(roots: RootCertStore) -> Trust {
        let count = roots.len();
        // The provider named, not the process default: with two providers compiled in (the
        // host workspace has aws-lc-rs through reqwest) rustls has no default to pick.
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            // ring's default provider supports the default versions (TLS 1.2 and 1.3).
            .unwrap_or_else(|_| unreachable!("ring supports TLS 1.2 and 1.3"));
        let mut config = builder.with_root_certificates(roots).with_no_client_auth();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Trust {
            config: Arc::new(config),
            roots: count,
        }
    }

    /// The same roots for another protocol's TLS (PostgreSQL's, for `bermd
    /// --kv-url-file`): no ALPN, since that names HTTP/1.1.
    pub fn client_config(&self) -> rustls::ClientConfig {
        let mut config = (*self.config).clone();
        config.alpn_protocols.clear();
        config
    }

    /// Trusts no CA: every https request fails verification.
    pub fn none() -> Trust {
        Trust::from_roots(RootCertStore::empty())
    }

    /// Trusts only the PEM certificates in `path`.
    pub fn only(path: &Path) -> Result<Trust, TrustError> {
        let mut roots = RootCertStore::empty();
        for cert in read_pem(path)? {
            roots.add(cert).map_err(|e| TrustError::ExtraCa {
                path: path.to_path_buf(),
                problem: e.to_string(),
            })?;
        }
        Ok(Trust::from_roots(roots))
    }
}

fn read_pem(path: &Path) -> Result<Vec<CertificateDer<'static>>, TrustError> {
    let fail = |problem: String| TrustError::ExtraCa {
        path: path.to_path_buf(),
        problem,
    };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| fail(e.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| fail(e.to_string()))?;
    if certs.is_empty() {
        return Err(fail("holds no PEM certificate".into()));
    }
    Ok(certs)
}
