//! Fetches from the issuer (metadata, keys, introspection), each bounded: in time by one
//! timeout over the whole exchange, in size by [`crate::MAX_DOCUMENT_BYTES`], and to HTTPS
//! (or HTTP on loopback). An issuer that hangs, floods or answers garbage costs a failed
//! fetch, never a stuck or swollen bermd.

use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

/// A client for the issuer's endpoints.
#[derive(Clone)]
pub(crate) struct Fetcher {
    client: Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>,
    timeout: Duration,
}

/// Why a fetch from the issuer failed.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// The URL is not HTTPS, nor HTTP to a loopback host.
    #[error("`{url}` is not HTTPS (plain HTTP only to a loopback host)")]
    Insecure {
        /// The URL.
        url: String,
    },
    /// No answer within the timeout.
    #[error("`{url}` did not answer within {timeout:?}")]
    Timeout {
        /// The URL.
        url: String,
        /// The timeout.
        timeout: Duration,
    },
    /// The request failed (connection, TLS, HTTP).
    #[error("`{url}`: {reason}")]
    Request {
        /// The URL.
        url: String,
        /// Why.
        reason: String,
    },
    /// An answer other than 200.
    #[error("`{url}` answered {status}")]
    Status {
        /// The URL.
        url: String,
        /// The status.
        status: u16,
    },
    /// The answer was longer than [`crate::MAX_DOCUMENT_BYTES`] or not JSON.
    #[error("`{url}` answered something other than a JSON document of at most {max} bytes")]
    Unreadable {
        /// The URL.
        url: String,
        /// The cap.
        max: usize,
    },
}

impl Fetcher {
    /// A client verifying TLS against `tls`, each exchange bounded by `timeout`.
    pub fn new(tls: &Arc<rustls::ClientConfig>, timeout: Duration) -> Fetcher {
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(rustls::ClientConfig::clone(tls))
            // Plain HTTP is refused per URL, below, unless the host is loopback.
            .https_or_http()
            .enable_http1()
            .build();
        Fetcher {
            client: Client::builder(TokioExecutor::new()).build(connector),
            timeout,
        }
    }

    /// GETs `url` as JSON.
    pub async fn get_json(&self, url: &url::Url) -> Result<serde_json::Value, FetchError> {
        let request = hyper::Request::get(url.as_str())
            .header(hyper::header::ACCEPT, "application/json")
            .body(Full::new(Bytes::new()));
        self.send(url, request).await
    }

    /// POSTs the form `body` to `url` with HTTP Basic `credentials` (already encoded), as
    /// RFC 7662 introspection is asked.
    pub async fn post_form(
        &self,
        url: &url::Url,
        credentials: &str,
        body: String,
    ) -> Result<serde_json::Value, FetchError> {
        let request = hyper::Request::post(url.as_str())
            .header(hyper::header::ACCEPT, "application/json")
            .header(
                hyper::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            )
            .header(hyper::header::AUTHORIZATION, format!("Basic {credentials}"))
            .body(Full::new(Bytes::from(body)));
        self.send(url, request).await
    }

    async fn send(
        &self,
        url: &url::Url,
        request: Result<hyper::Request<Full<Bytes>>, hyper::http::Error>,
    ) -> Result<serde_json::Value, FetchError> {
        let failed = |reason: String| FetchError::Request {
            url: url.to_string(),
            reason,
        };
        if !crate::secure_or_loopback(url) {
            return Err(FetchError::Insecure {
                url: url.to_string(),
            });
        }
        let request = request.map_err(|e| failed(e.to_string()))?;
        let exchange = async {
            let response = self
                .client
                .request(request)
                .await
                .map_err(|e| failed(e.to_string()))?;
            let status = response.status().as_u16();
            if status != 200 {
                return Err(FetchError::Status {
                    url: url.to_string(),
                    status,
                });
            }
            let unreadable = || FetchError::Unreadable {
                url: url.to_string(),
                max: crate::MAX_DOCUMENT_BYTES,
            };
            let body = Limited::new(response.into_body(), crate::MAX_DOCUMENT_BYTES)
                .collect()
                .await
                .map_err(|_| unreadable())?
                .to_bytes();
            serde_json::from_slice(&body).map_err(|_| unreadable())
        };
        tokio::time::timeout(self.timeout, exchange)
            .await
            .map_err(|_| FetchError::Timeout {
                url: url.to_string(),
                timeout: self.timeout,
            })?
    }
}
