//! The control API's client: one HTTP/1.1 request per connection over the
//! Unix socket, which is all a CLI needs.

use std::path::{Path, PathBuf};

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use serde::de::DeserializeOwned;
use tokio::net::UnixStream;

use crate::{
    CallResponse, DeployRequest, DeployResponse, ErrorBody, NameState, ProgramView, RemoveResponse,
    SecretList, SecretValue,
};

/// Why a control request did not get an answer.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Nothing listens on the socket: bermd is not running.
    #[error("bermd is not running (no one listens on {}): start it with `bermd &`, or set BERM_HOME to where it runs", path.display())]
    NotRunning {
        /// The control socket.
        path: PathBuf,
    },
    /// The socket exists but could not be used.
    #[error("could not connect to bermd at {}", path.display())]
    Connect {
        /// The control socket.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The HTTP exchange broke off.
    #[error("control request `{method} {uri}` failed: {message}")]
    Http {
        /// The method.
        method: String,
        /// The path.
        uri: String,
        /// What broke.
        message: String,
    },
    /// bermd answered with an error.
    #[error("{message}")]
    Api {
        /// The HTTP status.
        status: u16,
        /// bermd's message.
        message: String,
    },
    /// The answer was not the JSON this client expects.
    #[error("bermd's answer to `{uri}` is not valid: {message}")]
    Decode {
        /// The path.
        uri: String,
        /// Why.
        message: String,
    },
}

/// A client for bermd's control socket.
#[derive(Debug, Clone)]
pub struct Client {
    socket: PathBuf,
}

impl Client {
    /// A client for the control socket at `socket`.
    pub fn new(socket: impl Into<PathBuf>) -> Client {
        Client {
            socket: socket.into(),
        }
    }

    /// A client for `$BERM_HOME/control.sock`.
    pub fn from_home(home: &Path) -> Client {
        Client::new(home.join(crate::home::CONTROL_SOCKET))
    }

    /// The socket this client talks to.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// `GET /programs`.
    pub async fn list(&self) -> Result<Vec<ProgramView>, ClientError> {
        self.request(Method::GET, "/programs".into(), None).await
    }

    /// `GET /programs/{name}`.
    pub async fn get(&self, name: &str) -> Result<ProgramView, ClientError> {
        self.request(Method::GET, format!("/programs/{name}"), None)
            .await
    }

    /// `PUT /programs/{name}`.
    pub async fn deploy(
        &self,
        name: &str,
        request: &DeployRequest,
    ) -> Result<DeployResponse, ClientError> {
        self.put_json(format!("/programs/{name}"), request).await
    }

    /// `DELETE /programs/{name}`.
    pub async fn remove(&self, name: &str) -> Result<RemoveResponse, ClientError> {
        self.request(Method::DELETE, format!("/programs/{name}"), None)
            .await
    }

    /// `GET /state/{program}`: what a deploy under the name would take over.
    pub async fn state(&self, program: &str) -> Result<NameState, ClientError> {
        self.request(Method::GET, format!("/state/{program}"), None)
            .await
    }

    /// `GET /secrets/{program}`: the names of its secrets.
    pub async fn secrets(&self, program: &str) -> Result<SecretList, ClientError> {
        self.request(Method::GET, format!("/secrets/{program}"), None)
            .await
    }

    /// `PUT /secrets/{program}/{name}`.
    pub async fn set_secret(
        &self,
        program: &str,
        name: &str,
        value: &SecretValue,
    ) -> Result<SecretList, ClientError> {
        self.put_json(format!("/secrets/{program}/{name}"), value)
            .await
    }

    /// `DELETE /secrets/{program}/{name}`.
    pub async fn remove_secret(
        &self,
        program: &str,
        name: &str,
    ) -> Result<SecretList, ClientError> {
        self.request(Method::DELETE, format!("/secrets/{program}/{name}"), None)
            .await
    }

    /// `POST /tools/{tool}` with `args` (a JSON object); `tool` is the name
    /// MCP clients see, `{program}_{tool}`.
    pub async fn call(&self, tool: &str, args: Vec<u8>) -> Result<CallResponse, ClientError> {
        self.request(Method::POST, format!("/tools/{tool}"), Some(args))
            .await
    }

    /// `PUT uri` with `body` as JSON.
    async fn put_json<T: DeserializeOwned>(
        &self,
        uri: String,
        body: &impl serde::Serialize,
    ) -> Result<T, ClientError> {
        let body = serde_json::to_vec(body).map_err(|e| ClientError::Decode {
            uri: uri.clone(),
            message: e.to_string(),
        })?;
        self.request(Method::PUT, uri, Some(body)).await
    }

    async fn request<T: DeserializeOwned>(
        &self,
        method: Method,
        uri: String,
        body: Option<Vec<u8>>,
    ) -> Result<T, ClientError> {
        let stream =
            UnixStream::connect(&self.socket)
                .await
                .map_err(|source| match source.kind() {
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused => {
                        ClientError::NotRunning {
                            path: self.socket.clone(),
                        }
                    }
                    _ => ClientError::Connect {
                        path: self.socket.clone(),
                        source,
                    },
                })?;
        let http = |message: String| ClientError::Http {
            method: method.to_string(),
            uri: uri.clone(),
            message,
        };
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| http(e.to_string()))?;
        let driver = tokio::spawn(connection);
        let request = Request::builder()
            .method(method.clone())
            .uri(uri.as_str())
            .header(hyper::header::HOST, "bermd")
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(body.unwrap_or_default())))
            .map_err(|e| http(e.to_string()))?;
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| http(e.to_string()))?;
        let status = response.status();
        let bytes = response
            .into_body()
            .collect()
            .await
            .map_err(|e| http(e.to_string()))?
            .to_bytes();
        driver.abort();
        if status != StatusCode::OK {
            let message = match serde_json::from_slice::<ErrorBody>(&bytes) {
                Ok(body) => body.error,
                Err(_) => format!(
                    "bermd answered {status}: {}",
                    String::from_utf8_lossy(&bytes)
                ),
            };
            return Err(ClientError::Api {
                status: status.as_u16(),
                message,
            });
        }
        serde_json::from_slice(&bytes).map_err(|e| ClientError::Decode {
            uri,
            message: e.to_string(),
        })
    }
}
