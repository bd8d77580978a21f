//! Real HTTP and HTTPS servers on loopback for tests of egress, with a CA
//! made on the spot (feature `testing`). Every crate that tests
//! `http.fetch` (this one, bermd, the CLI, the benches) uses these, so
//! there is one test server, and it is a real one: hyper over TCP, rustls
//! with a certificate chain a real client verifies.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// A request as the server saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    /// The method.
    pub method: String,
    /// Path and query.
    pub path: String,
    /// Headers, lowercase names.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

impl Seen {
    /// The first value of header `name`.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// What the server answers.
#[derive(Debug, Clone, Default)]
pub struct Reply {
    /// The status (200 when 0).
    pub status: u16,
    /// Extra headers.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
    /// Wait this long before answering.
    pub delay: Option<Duration>,
}

impl Reply {
    /// 200 with `body`.
    pub fn ok(body: impl Into<Vec<u8>>) -> Reply {
        Reply {
            status: 200,
            body: body.into(),
            ..Reply::default()
        }
    }

    /// A redirect to `location`.
    pub fn redirect(status: u16, location: &str) -> Reply {
        Reply {
            status,
            headers: vec![("location".into(), location.into())],
            ..Reply::default()
        }
    }
}

type Handler = dyn Fn(&Seen) -> Reply + Send + Sync;

/// A CA made for one test run, and a server certificate it signed for
/// `127.0.0.1`, `::1` and `localhost`.
pub struct TestCa {
    /// The CA certificate, PEM: what a client trusts.
    pub ca_pem: String,
    cert: CertificateDer<'static>,
    key: Vec<u8>,
}

impl TestCa {
    /// Makes the CA and the server certificate.
    pub fn new() -> TestCa {
        use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, SanType};
        let ca_key = KeyPair::generate().expect("a CA key");
        let mut ca = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(DnType::CommonName, "berm test CA");
        let ca_cert = ca.self_signed(&ca_key).expect("a CA certificate");
        let issuer = Issuer::new(ca, ca_key);
        let key = KeyPair::generate().expect("a server key");
        let mut server = CertificateParams::new(vec!["localhost".to_string()]).expect("params");
        server
            .subject_alt_names
            .push(SanType::IpAddress([127, 0, 0, 1].into()));
        server
            .subject_alt_names
            .push(SanType::IpAddress(std::net::Ipv6Addr::LOCALHOST.into()));
        let cert = server
            .signed_by(&key, &issuer)
            .expect("a server certificate");
        TestCa {
            ca_pem: ca_cert.pem(),
            cert: cert.der().clone(),
            key: key.serialize_der(),
        }
    }

    /// Writes the CA certificate to `path`, for `--extra-ca`.
    pub fn write_ca(&self, path: &Path) {
        std::fs::write(path, &self.ca_pem).expect("write the CA");
    }

    fn server_config(&self) -> Arc<rustls::ServerConfig> {
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.key.clone()));
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("ring supports the default TLS versions")
            .with_no_client_auth()
            .with_single_cert(vec![self.cert.clone()], key)
            .expect("a server config");
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Arc::new(config)
    }
}

impl Default for TestCa {
    fn default() -> Self {
        TestCa::new()
    }
}

/// A server on 127.0.0.1 answering every request with its handler, on a
/// thread of its own, until dropped.
pub struct TestServer {
    /// Where it listens.
    pub addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
    connections: Arc<AtomicUsize>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl TestServer {
    /// Plain HTTP.
    pub fn http(handler: impl Fn(&Seen) -> Reply + Send + Sync + 'static) -> TestServer {
        TestServer::start(None, Arc::new(handler))
    }

    /// HTTPS with a certificate from `ca`.
    pub fn https(
        ca: &TestCa,
        handler: impl Fn(&Seen) -> Reply + Send + Sync + 'static,
    ) -> TestServer {
        TestServer::start(Some(ca.server_config()), Arc::new(handler))
    }

    fn start(tls: Option<Arc<rustls::ServerConfig>>, handler: Arc<Handler>) -> TestServer {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a test server");
        listener.set_nonblocking(true).expect("nonblocking");
        let addr = listener.local_addr().expect("its address");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let connections = Arc::new(AtomicUsize::new(0));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (seen2, connections2) = (seen.clone(), connections.clone());
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .expect("a runtime");
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
                let serve = async {
                    loop {
                        let Ok((stream, _)) = listener.accept().await else {
                            continue;
                        };
                        connections2.fetch_add(1, Ordering::SeqCst);
                        let (handler, seen, tls) = (handler.clone(), seen2.clone(), tls.clone());
                        tokio::spawn(async move {
                            match tls {
                                Some(config) => {
                                    let acceptor = tokio_rustls::TlsAcceptor::from(config);
                                    if let Ok(stream) = acceptor.accept(stream).await {
                                        serve(TokioIo::new(stream), handler, seen).await;
                                    }
                                }
                                None => serve(TokioIo::new(stream), handler, seen).await,
                            }
                        });
                    }
                };
                tokio::select! {
                    () = serve => {}
                    _ = stopped => {}
                }
            });
            runtime.shutdown_background();
        });
        TestServer {
            addr,
            seen,
            connections,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// `http://127.0.0.1:PORT` or `https://…`, without a trailing slash.
    pub fn origin(&self, tls: bool) -> String {
        let scheme = if tls { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Every request seen so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().expect("seen").clone()
    }

    /// TCP connections accepted so far.
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

async fn serve<IO>(io: IO, handler: Arc<Handler>, seen: Arc<Mutex<Vec<Seen>>>)
where
    IO: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let service =
        hyper::service::service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
            let (handler, seen) = (handler.clone(), seen.clone());
            async move {
                let (parts, body) = request.into_parts();
                let body = body
                    .collect()
                    .await
                    .map(|b| b.to_bytes().to_vec())
                    .unwrap_or_default();
                let request = Seen {
                    method: parts.method.to_string(),
                    path: parts
                        .uri
                        .path_and_query()
                        .map(|p| p.to_string())
                        .unwrap_or_default(),
                    headers: parts
                        .headers
                        .iter()
                        .map(|(n, v)| {
                            (
                                n.as_str().to_string(),
                                String::from_utf8_lossy(v.as_bytes()).into_owned(),
                            )
                        })
                        .collect(),
                    body,
                };
                let reply = handler(&request);
                seen.lock().expect("seen").push(request);
                if let Some(delay) = reply.delay {
                    tokio::time::sleep(delay).await;
                }
                let mut response = hyper::Response::builder().status(match reply.status {
                    0 => 200,
                    status => status,
                });
                for (name, value) in &reply.headers {
                    response = response.header(name, value);
                }
                response.body(Full::new(Bytes::from(reply.body)))
            }
        });
    let _ = hyper::server::conn::http1::Builder::new()
        .serve_connection(io, service)
        .await;
}
