//! Running bermd: take the data directory's lock, restore, deploy app
//! folders, listen on the sockets (or serve the inherited listener), say
//! ready, serve until SIGINT or SIGTERM.

use std::fs::OpenOptions;
use std::os::fd::OwnedFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use berm_control::inherit::NotAccepted;
use rustix::fs::FlockOperation;

use crate::app::{self, AppDeployError, Ready};
use crate::http::{self, HttpConfig, HttpError};
use crate::listen::{InheritedListener, ListenError};
use crate::service::{OpenError, Service, ServiceConfig, StateError};
use crate::transport;

berm_abi::codes! {
    /// bermd's exit codes.
    pub enum Exit: u8 {
        /// Stopped by SIGINT or SIGTERM.
        Clean = 0,
        /// Could not start or keep running (data directory, sockets, engine, a
        /// program of an app folder refused).
        Failed = 1,
        /// Bad command line or configuration (a refused HTTP address, an app
        /// folder that does not load, an inherited descriptor that is not what
        /// its flag needs).
        Usage = 2,
        /// Another bermd already serves this `$BERM_HOME`.
        AlreadyRunning = 3,
    }
}

impl From<Exit> for ExitCode {
    fn from(exit: Exit) -> ExitCode {
        ExitCode::from(exit.code())
    }
}

/// Everything bermd runs with.
#[derive(Debug)]
pub struct DaemonConfig {
    /// The service.
    pub service: ServiceConfig,
    /// Streamable HTTP, when asked for.
    pub http: Option<HttpConfig>,
    /// A listener serving only `/metrics`, without a token (`--metrics ADDR`); its address
    /// checked by the caller (loopback unless allowed otherwise), its Host by bermd.
    pub metrics: Option<http::MetricsConfig>,
    /// Largest JSON-RPC line read on the Unix socket.
    pub max_frame_bytes: usize,
    /// Most MCP sessions served at once on each listener (`mcp.sock`, the
    /// inherited listener, HTTP): [`transport::DEFAULT_MAX_CONNECTIONS`].
    pub max_connections: usize,
    /// Most new MCP sessions each listener starts a second:
    /// [`transport::DEFAULT_MAX_SESSION_RATE`].
    pub max_session_rate: u32,
    /// App folders whose programs are deployed at start (`--app`).
    pub apps: Vec<berm_app::App>,
    /// Deploy the folders even over names a stored deployment holds (`--accept`), taking
    /// over its keyspace and stored secrets, and even when they changed what the model reads
    /// or what a program may reach since they last ran from this home
    /// ([`crate::app_record`]); otherwise bermd refuses to start, listing what it found.
    pub accept: bool,
    /// An inherited listening socket to serve MCP on instead of creating
    /// any socket (`--listen-fd`): no mcp.sock, no control.sock, no HTTP.
    pub listener: Option<InheritedListener>,
    /// Where to write the ready line once serving (`--ready-fd`).
    pub ready: Option<OwnedFd>,
    /// When the process started, for the ready line's `ms`.
    pub started: Instant,
}

impl DaemonConfig {
    /// A config with no apps, no inherited descriptors and no HTTP.
    pub fn new(service: ServiceConfig) -> DaemonConfig {
        DaemonConfig {
            service,
            http: None,
            metrics: None,
            max_frame_bytes: crate::transport::DEFAULT_MAX_FRAME_BYTES,
            max_connections: crate::transport::DEFAULT_MAX_CONNECTIONS,
            max_session_rate: crate::transport::DEFAULT_MAX_SESSION_RATE,
            apps: Vec::new(),
            accept: false,
            listener: None,
            ready: None,
            started: Instant::now(),
        }
    }
}

/// Why bermd stopped.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The `--metrics` address could not be bound.
    #[error("cannot listen for /metrics on {addr}: {source}")]
    MetricsBind {
        /// The address.
        addr: std::net::SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The service could not open.
    #[error(transparent)]
    Open(#[from] OpenError),
    /// Another bermd holds the data directory.
    #[error("another bermd already serves {}", path.display())]
    AlreadyRunning {
        /// The data directory.
        path: PathBuf,
    },
    /// The lock file could not be taken.
    #[error("could not lock {}", path.display())]
    Lock {
        /// The lock file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A socket could not be bound.
    #[error("could not listen on {}", path.display())]
    Bind {
        /// The socket.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// HTTP could not be served.
    #[error(transparent)]
    Http(#[from] HttpError),
    /// The threads that serve MCP sessions could not be started.
    #[error("could not start the threads that serve MCP sessions")]
    SessionThreads(#[source] std::io::Error),
    /// A program of an app folder was refused.
    #[error(transparent)]
    App(#[from] AppDeployError),
    /// An app folder would take over what a stored deployment left, without `--accept`.
    #[error(transparent)]
    NotAccepted(#[from] NotAccepted),
    /// An app folder changed since it last ran from this home, without `--accept`; or its
    /// record could not be read or kept.
    #[error(transparent)]
    Record(#[from] crate::app_record::RecordError),
    /// What an app folder's program names hold could not be read.
    #[error("could not tell what the app folders' program names hold")]
    State(#[from] StateError),
    /// The inherited listener could not be served.
    #[error(transparent)]
    Listen(#[from] ListenError),
    /// The ready line could not be written.
    #[error("could not write the ready line to --ready-fd")]
    Ready(#[source] std::io::Error),
    /// Waiting for a signal failed.
    #[error("could not install signal handlers")]
    Signals(#[source] std::io::Error),
}

impl RunError {
    /// The exit code this error ends bermd with.
    pub fn exit(&self) -> Exit {
        match self {
            RunError::AlreadyRunning { .. } => Exit::AlreadyRunning,
            RunError::Http(
                HttpError::NotLoopback { .. }
                | HttpError::NoAllowedHost { .. }
                | HttpError::NoAuthRemote { .. }
                | HttpError::InsecureTokenFile { .. }
                | HttpError::WeakToken { .. }
                | HttpError::OAuth(_),
            )
            | RunError::Listen(_)
            | RunError::NotAccepted(_)
            | RunError::Record(
                crate::app_record::RecordError::NotAccepted { .. }
                | crate::app_record::RecordError::Unreadable { .. },
            ) => Exit::Usage,
            _ => Exit::Failed,
        }
    }
}

/// Runs bermd until SIGINT or SIGTERM.
pub async fn run(config: DaemonConfig) -> Result<(), RunError> {
    // Order matters: the lock before anything touches the directory, the
    // restore before the sockets exist, so a client that connects sees every
    // program that was deployed.
    let home = crate::home::Home::create(&config.service.home)
        .map_err(|e| RunError::Open(OpenError::Home(e)))?;
    let _lock = lock(&home.root().join("bermd.lock"))?;
    // What an earlier bermd that did not stop cleanly recorded is stale.
    let http_info = home.root().join(berm_control::home::HTTP_INFO);
    // Best effort: an inherited-listener bermd may not write its home.
    let _ = std::fs::remove_file(&http_info);
    let http_auth = match &config.http {
        // Refuse a bad HTTP address or token file before restoring anything.
        Some(http) => {
            http.check()?;
            Some(HttpAuth::resolve(http, &home)?)
        }
        None => None,
    };
    let (service, report) = Service::open(&config.service)?;
    tracing::info!(
        restored = report.restored.len(),
        skipped = report.skipped.len(),
        home = %home.root().display(),
        "bermd restored its programs"
    );
    let signals = Signals::install()?;
    // Apps after the restore: a folder's program replaces a stored one of the same name
    // only with --accept (every folder is judged before the first is deployed), and is
    // served before any connection is accepted.
    for takeover in app::takeovers(&service, &config.apps)? {
        let takeover = takeover.check(config.accept)?;
        eprintln!("bermd: {}", takeover.notice());
    }
    // Then each folder against what it offered when it last ran from this home: every folder
    // is judged before the first is deployed, and its record is kept once all are.
    let mut checked = Vec::with_capacity(config.apps.len());
    for folder in &config.apps {
        let judged = crate::app_record::check(&home, folder, config.accept)?;
        for change in &judged.changes {
            eprintln!("bermd: app `{}`: {}", folder.name, change.trim_start());
        }
        checked.push(judged);
    }
    let mut programs = Vec::new();
    for folder in &config.apps {
        // Deploying may compile; nothing else runs yet, so blocking here
        // holds up no one.
        programs.extend(tokio::task::block_in_place(|| {
            app::deploy(&service, folder)
        })?);
    }
    for judged in &checked {
        judged.keep()?;
    }
    let ready = Ready {
        ready: true,
        app: match config.apps.as_slice() {
            [one] => Some(one.name.clone()),
            _ => None,
        },
        tools: 0,
        ms: 0.0,
        programs,
        receipt_key: service
            .receipt_log()
            .map(|log| berm_dsse::spki_base64(&log.public_key())),
    };

    // The ready line goes out once bermd serves, with the tools it serves.
    let started = config.started;
    let announce = |fd: Option<OwnedFd>, mut ready: Ready| match fd {
        Some(fd) => {
            ready.tools = u32::try_from(service.catalog().list().len()).unwrap_or(u32::MAX);
            app::announce(fd, &ready, started).map_err(RunError::Ready)
        }
        None => Ok(()),
    };

    let session_threads =
        std::sync::Arc::new(transport::SessionThreads::start().map_err(RunError::SessionThreads)?);
    if let Some(listener) = config.listener {
        // Inside the microVM: the one inherited socket is all bermd serves
        // on; it creates no socket of its own (seccomp would refuse it).
        let cap = transport::SessionCap::new(
            "the inherited listener",
            config.max_connections,
            config.max_session_rate,
            session_threads,
        );
        let serving = listener.serve(service.clone(), config.max_frame_bytes, cap)?;
        let accept = tokio::spawn(serving);
        tracing::info!("bermd is ready: serving MCP on the inherited listener");
        announce(config.ready, ready)?;
        signals.wait().await;
        accept.abort();
        return Ok(());
    }

    let mut tasks = tokio::task::JoinSet::new();
    // HTTP before the Unix sockets: once a client can reach control.sock, bermd is up,
    // and `berm http` must then find http.json.
    if let (Some(http_config), Some(auth)) = (&config.http, http_auth) {
        let listener = http::bind(&auth.config).await?;
        let local = listener.local_addr().unwrap_or(http_config.addr);
        // The resource server once the listener's URL is known (the default resource).
        let oauth = match &auth.config.oauth {
            Some(oauth) => {
                let oauth = auth.config.resolved_oauth(local, oauth.clone());
                let server = std::sync::Arc::new(
                    berm_oauth::ResourceServer::new(oauth).map_err(HttpError::OAuth)?,
                );
                // The keys are fetched in the background: an issuer that is slow or down
                // delays no start, and the first token waits for this fetch, not another.
                let warming = server.clone();
                tokio::spawn(async move { warming.warm().await });
                tracing::info!(
                    issuer = %server.config().issuer,
                    resource = %server.config().resource,
                    "HTTP clients authenticate with access tokens from the OAuth issuer"
                );
                Some(crate::resource_server::OAuthGate::new(
                    server,
                    service.clone(),
                ))
            }
            None => None,
        };
        let router = http::router(
            service.clone(),
            &auth.config,
            config.max_connections,
            config.max_session_rate,
            http::Declared::new(
                ready
                    .programs
                    .iter()
                    .map(|p| (p.name.clone(), p.sha256.clone()))
                    .collect(),
            ),
            oauth,
        );
        let info = berm_control::home::HttpInfo {
            url: auth.config.url(local),
            token_file: auth.token_file,
        };
        let json = serde_json::to_vec_pretty(&info).expect("HttpInfo serializes");
        crate::home::write_atomic(&http_info, &json)
            .map_err(|e| RunError::Open(OpenError::Home(e)))?;
        match &info.token_file {
            Some(file) => tracing::info!(
                url = %info.url,
                token_file = %file.display(),
                "serving MCP over Streamable HTTP: every request needs `Authorization: Bearer <the token in token_file>` (`berm http` prints it)"
            ),
            None if auth.config.oauth.is_some() => {}
            None => {
                tracing::warn!(url = %info.url, "serving MCP over Streamable HTTP with no token (--no-auth)")
            }
        }
        tasks.spawn(async move { axum::serve(no_delay(listener), router).await });
    }
    if let Some(metrics) = &config.metrics {
        let addr = metrics.addr;
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| RunError::MetricsBind { addr, source })?;
        let local = listener.local_addr().unwrap_or(addr);
        tracing::info!(url = %format!("http://{local}/metrics"), "serving /metrics (no token)");
        let router = http::metrics_only_router(service.clone(), metrics);
        tasks.spawn(async move { axum::serve(no_delay(listener), router).await });
    }
    let bind = |path: PathBuf| {
        transport::bind_private(&path).map_err(|source| RunError::Bind { path, source })
    };
    let control = bind(home.control_socket())?;
    let mcp = bind(home.mcp_socket())?;
    tasks.spawn(crate::control::serve(control, service.clone()));
    {
        let service = service.clone();
        let max = config.max_frame_bytes;
        let cap = transport::SessionCap::new(
            "mcp.sock",
            config.max_connections,
            config.max_session_rate,
            session_threads,
        );
        tasks.spawn(async move {
            transport::serve_unix(mcp, service, max, cap).await;
            Ok(())
        });
    }
    tracing::info!(
        control = %home.control_socket().display(),
        mcp = %home.mcp_socket().display(),
        "bermd is ready"
    );
    announce(config.ready, ready)?;

    signals.wait().await;
    tasks.abort_all();
    for path in [home.control_socket(), home.mcp_socket(), http_info] {
        let _ = std::fs::remove_file(path);
    }
    Ok(())
}

/// The HTTP config with its token settled, and the file that holds it.
struct HttpAuth {
    config: HttpConfig,
    token_file: Option<PathBuf>,
}

impl HttpAuth {
    /// `--http-token-file`'s token, else `$BERM_HOME/http-token`'s (made
    /// when missing), else none with `--no-auth`.
    fn resolve(http: &HttpConfig, home: &crate::home::Home) -> Result<HttpAuth, RunError> {
        let mut config = http.clone();
        let token_file = if config.no_auth || config.oauth.is_some() {
            None
        } else if config.token.is_some() {
            config.token_file.clone()
        } else {
            let path = home.root().join(berm_control::home::HTTP_TOKEN);
            config.token = Some(http::home_token(&path)?);
            Some(path)
        };
        Ok(HttpAuth { config, token_file })
    }
}

fn lock(path: &std::path::Path) -> Result<std::fs::File, RunError> {
    let file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path)
        .map_err(|source| RunError::Lock {
            path: path.to_path_buf(),
            source,
        })?;
    match rustix::fs::flock(&file, FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(file),
        Err(rustix::io::Errno::WOULDBLOCK) => Err(RunError::AlreadyRunning {
            path: path.parent().unwrap_or(path).to_path_buf(),
        }),
        Err(e) => Err(RunError::Lock {
            path: path.to_path_buf(),
            source: e.into(),
        }),
    }
}

/// SIGTERM and SIGINT, caught from the moment this is built: install it
/// before saying ready, so a supervisor that stops bermd right after the
/// ready line gets a clean stop, not the default action.
struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl Signals {
    fn install() -> Result<Signals, RunError> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Signals {
            term: signal(SignalKind::terminate()).map_err(RunError::Signals)?,
            int: signal(SignalKind::interrupt()).map_err(RunError::Signals)?,
        })
    }

    async fn wait(mut self) {
        tokio::select! {
            _ = self.term.recv() => tracing::info!("SIGTERM: stopping"),
            _ = self.int.recv() => tracing::info!("SIGINT: stopping"),
        }
    }
}

/// `listener` with Nagle's algorithm off on every connection it accepts. An answer goes out in
/// several small writes (the head, an SSE event, the last chunk); with Nagle on, a write waits
/// for the ACK of the one before, which a client delays by up to 40 ms: measured, a
/// `tools/call` on a 2025-11-25 session took 44 ms at the median instead of well under one.
fn no_delay(
    listener: tokio::net::TcpListener,
) -> impl axum::serve::Listener<Io = tokio::net::TcpStream, Addr = std::net::SocketAddr> {
    use axum::serve::ListenerExt as _;
    listener.tap_io(|stream| {
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!("TCP_NODELAY: {e}");
        }
    })
}
