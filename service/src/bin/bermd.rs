//! bermd: the berm service. Argument parsing and wiring only; the logic is
//! in the `berm-service` library. Exit codes: [`berm_service::Exit`].

use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context;
use berm::EngineConfig;
use berm_service::http::{HttpConfig, MetricsConfig, Token};
use berm_service::listen::InheritedListener;
use berm_service::service::{DEFAULT_MAX_CALLS_PER_PROGRAM, DEFAULT_TOOLS_PAGE_SIZE};
use berm_service::syscalls::DEFAULT_MAX_HOST_OPS;
use berm_service::transport::{
    DEFAULT_MAX_CONNECTIONS, DEFAULT_MAX_FRAME_BYTES, DEFAULT_MAX_SESSION_RATE,
};
use berm_service::{DaemonConfig, Exit, ServiceConfig};
use clap::{Parser, ValueEnum};

/// Deploys berm programs and serves every one of their tools over MCP.
///
/// Traces: with OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) set,
/// every call is a span sent over OTLP/HTTP (http/protobuf), continuing the trace a request
/// names in `_meta.traceparent`; the other standard OTEL_EXPORTER_OTLP_* variables apply.
///
/// Exit codes: 0 stopped by a signal, 1 failed, 2 usage, 3 already running.
#[derive(Parser)]
#[command(name = "bermd", version)]
struct Args {
    /// The data directory (default ~/.berm).
    #[arg(long, env = "BERM_HOME")]
    home: Option<PathBuf>,
    /// Also serve MCP over Streamable HTTP at http://ADDR/mcp (loopback only
    /// unless --http-allow-remote and --http-token-file are given).
    #[arg(long, value_name = "ADDR")]
    http: Option<SocketAddr>,
    /// Allow --http on an address that is not loopback.
    #[arg(long, requires = "http")]
    http_allow_remote: bool,
    /// Serve Prometheus metrics at http://ADDR/metrics, without a token (loopback only
    /// unless --metrics-allow-remote), to requests whose Host is a loopback name, an
    /// --allowed-host or (off loopback) an IP address. With --http they are also at
    /// /metrics there, behind the token.
    #[arg(long, value_name = "ADDR")]
    metrics: Option<SocketAddr>,
    /// Allow --metrics on an address that is not loopback (a scraper in a cluster): anyone
    /// who reaches it sees program and tool names and call counts, never arguments.
    #[arg(long, requires = "metrics")]
    metrics_allow_remote: bool,
    /// A file holding the bearer token HTTP clients must send (at least 32
    /// bytes; surrounding whitespace is ignored).
    /// Without it, bermd makes one into $BERM_HOME/http-token (mode 0600) and
    /// reuses it across restarts; `berm http` prints the URL and header.
    #[arg(long, requires = "http", value_name = "FILE")]
    http_token_file: Option<PathBuf>,
    /// Serve --http with no bearer token at all: any process on this machine
    /// can then call every tool. Loopback addresses only.
    #[arg(long, requires = "http", conflicts_with = "http_token_file")]
    no_auth: bool,
    /// Take OAuth 2.1 access tokens from this issuer instead of a static token on --http:
    /// bermd is then a resource server (docs/service.md, "OAuth"). HTTPS, or HTTP to a
    /// loopback host.
    #[arg(long, requires = "http", conflicts_with_all = ["http_token_file", "no_auth"], value_name = "URL")]
    oauth_issuer: Option<String>,
    /// The resource identifier tokens must name as their audience: the URL clients reach
    /// /mcp by (default: the --http listener's, http://ADDR/mcp or http://ALLOWED-HOST:PORT/mcp).
    #[arg(long, requires = "oauth_issuer", value_name = "URL")]
    oauth_resource: Option<String>,
    /// The signature algorithms accepted, comma-separated (default: RS256, RS384, RS512,
    /// PS256, PS384, PS512, ES256, ES384, EdDSA); never `none` or HS*.
    #[arg(long, requires = "oauth_issuer", value_name = "LIST")]
    oauth_algorithms: Option<String>,
    /// A file holding `CLIENT_ID:CLIENT_SECRET`, with which bermd introspects opaque (non-JWT)
    /// access tokens at the issuer (RFC 7662); without it only JWT access tokens pass.
    #[arg(long, requires = "oauth_issuer", value_name = "FILE")]
    oauth_introspection_client_file: Option<PathBuf>,
    /// How long one fetch from the issuer (metadata, keys, introspection) may take, in ms.
    #[arg(
        long,
        requires = "oauth_issuer",
        default_value_t = 5000,
        value_name = "MS"
    )]
    oauth_fetch_timeout_ms: u64,
    /// The least time between two fetches of the issuer's keys, in ms: a token naming an
    /// unknown key refetches them at most this often.
    #[arg(
        long,
        requires = "oauth_issuer",
        default_value_t = 30_000,
        value_name = "MS"
    )]
    oauth_min_refresh_ms: u64,
    /// The clock skew allowed on a token's `exp` and `nbf`, in seconds.
    #[arg(
        long,
        requires = "oauth_issuer",
        default_value_t = 60,
        value_name = "S"
    )]
    oauth_leeway_s: u64,
    /// List the catalog's tools (names, descriptions, input schemas) in the public MCP server
    /// card at /.well-known/mcp/server-card.json; without it the card names no tool.
    #[arg(long, requires = "http")]
    server_card_tools: bool,
    /// A host name HTTP clients reach bermd by, on --http and --metrics alike
    /// (checked against `Host` and a browser's `Origin`, against DNS rebinding);
    /// required for a non-loopback --http. Repeat for several names.
    #[arg(long = "allowed-host", value_name = "NAME")]
    allowed_hosts: Vec<String>,
    /// Largest JSON-RPC message read on the MCP socket, in bytes.
    #[arg(long, default_value_t = DEFAULT_MAX_FRAME_BYTES)]
    max_frame_bytes: usize,
    /// Most MCP sessions served at once on each listener (mcp.sock, the
    /// inherited listener, HTTP); a client past it is told so and closed.
    #[arg(long, default_value_t = DEFAULT_MAX_CONNECTIONS)]
    max_connections: usize,
    /// Most new MCP sessions each listener starts a second (up to a second's
    /// worth at once); past it a socket connection waits to be accepted and
    /// an HTTP client gets 429.
    #[arg(long, default_value_t = DEFAULT_MAX_SESSION_RATE)]
    max_session_rate: u32,
    /// Most calls from outside one program may have running at once; past
    /// it a call is refused, and nothing runs.
    #[arg(long, default_value_t = DEFAULT_MAX_CALLS_PER_PROGRAM)]
    max_calls_per_program: usize,
    /// Most disk operations (kv writes, fs calls) one program may have in
    /// flight at once.
    #[arg(long, default_value_t = DEFAULT_MAX_HOST_OPS)]
    max_host_ops: usize,
    /// Most bytes one program's calls, all together, may have bermd hold for them: replies
    /// not yet pulled (`fs.read`, `kv.list`, `http.fetch`, …) and syscall requests in flight
    /// (`fs.write`, `kv.put`, …). Past it a syscall gets `too_large`.
    #[arg(long, value_name = "BYTES", default_value_t = berm::DEFAULT_HOST_MEMORY_BYTES)]
    max_host_memory: usize,
    /// Deploy every program of this app folder (berm.toml) at start, read in
    /// place. Repeat for several folders.
    #[arg(long = "app", value_name = "DIR")]
    apps: Vec<PathBuf>,
    /// Where the programs an app folder names by `image = "REGISTRY/REPO@sha256:…"` are
    /// read from, verified against their pins: a program store filled by `berm pull --app
    /// DIR --store DIR` (or `berm deploy --app`). bermd itself never talks to a registry.
    /// [default: $BERM_HOME/programs]
    #[arg(long, value_name = "DIR")]
    programs: Option<PathBuf>,
    /// In a Kubernetes pod that runs bermd as a non-root user with fsGroup: also admit the
    /// secret value files ([program.secrets]) kubelet writes for a Secret volume, owned by
    /// root, their group bermd's own, mode 0440 at most. Without it a value file must be
    /// bermd's user's own and private (0600 or 0400), which kubelet cannot write for a
    /// non-root pod.
    #[arg(long)]
    pod_secret_volumes: bool,
    /// With --app: deploy the folders even over program names that a stored deployment
    /// holds (a plain `berm deploy`, or `berm deploy --app` of another folder), taking over
    /// its keyspace and stored secrets; and accept what the folders changed since they last
    /// ran from this home (a tool's description or schema, a tool or program added or
    /// removed, a syscall or grant not held before: the record is `HOME/apps/<app>.json`).
    /// Without it bermd refuses to start and lists what it found; with it, it prints that
    /// list.
    #[arg(long, requires = "apps")]
    accept: bool,
    /// Serve MCP on this inherited, listening stream socket (AF_UNIX or
    /// AF_VSOCK) and create no socket at all: no mcp.sock, no control.sock.
    #[arg(long, value_name = "N", conflicts_with = "http")]
    listen_fd: Option<RawFd>,
    /// Once serving, write one JSON line ({"ready":true,…}) to this
    /// inherited descriptor and close it.
    #[arg(long, value_name = "N")]
    ready_fd: Option<RawFd>,
    /// A read-only directory of precompiled code, looked in before the
    /// compiled-code cache. It must come from Engine::precompile with the
    /// same configuration (for the microVM: EngineConfig::vm(), i.e.
    /// --cpu-profile portable).
    #[arg(long, value_name = "DIR")]
    code_dir: Option<PathBuf>,
    /// Which CPU code is compiled for: native (this machine) or portable (the
    /// microVM's musl target and an x86-64-v2 baseline).
    #[arg(long, value_enum, default_value_t = Cpu::Native)]
    cpu_profile: Cpu,
    /// How many program instances may be alive at once (concurrent calls,
    /// nested calls included); past it a call fails saying so.
    #[arg(long, value_name = "N", default_value_t = EngineConfig::default().max_instances,
          value_parser = clap::value_parser!(u32).range(1..))]
    max_instances: u32,
    /// Most tools in one tools/list page; more follow behind a cursor. The
    /// default keeps every tool on one page, since some clients read only
    /// the first.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_TOOLS_PAGE_SIZE,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    tools_page_size: usize,
    /// A PEM file of CA certificates that programs' HTTPS requests
    /// (`http.fetch`) trust besides the system's roots: an internal CA, or a
    /// test server's. Repeat for several. Verification is never turned off.
    #[arg(long = "extra-ca", value_name = "FILE")]
    extra_ca: Vec<PathBuf>,
    /// Keep every program's keyspace in PostgreSQL instead of a log per program under
    /// $BERM_HOME/state, so that replicas behind one load balancer share one state: a file
    /// holding one postgres:// URL (postgres://USER[:PASSWORD]@HOST[:PORT]/DB, sslmode
    /// disable, prefer or require; TLS verified against the system's roots and --extra-ca).
    /// Or set BERM_KV_URL. Never put a password on the command line. bermd migrates the
    /// schema itself; give it an ordinary role (docs/kubernetes.md).
    #[arg(long, value_name = "FILE")]
    kv_url_file: Option<PathBuf>,
    /// The key that seals the state of programs that ask their client for input, and (through
    /// a key derived from it) the tasks replicas share in PostgreSQL (64 hex digits, as bermd
    /// writes into $BERM_HOME/ask.key on first start). Give replicas behind one load balancer
    /// the same file, so that any of them opens what another sealed.
    #[arg(long, value_name = "FILE")]
    ask_key: Option<PathBuf>,
    /// The longest a task (a call of a tool marked `task`, from a client that speaks the MCP
    /// tasks extension) may run, in milliseconds; a tool asks for its own task deadline up
    /// to this.
    #[arg(long, value_name = "MS", default_value_t = berm_service::tasks::DEFAULT_MAX_TASK_DEADLINE.as_millis() as u64,
          value_parser = clap::builder::RangedU64ValueParser::<u64>::new().range(1..=86_400_000))]
    max_task_deadline_ms: u64,
    /// Most tasks one MCP session may have open (running, or waiting for answers) at once,
    /// within bermd's own 256; requests outside a session (2026-07-28 clients over HTTP) share
    /// one such cap. Past it a call gets an error result naming this cap.
    #[arg(long, value_name = "N", default_value_t = berm_service::tasks::DEFAULT_MAX_TASKS_PER_SESSION,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=berm_service::tasks::MAX_OPEN_TASKS as u64))]
    max_tasks_per_session: usize,
    /// Connections to PostgreSQL at most, shared by every program (with --kv-url-file or
    /// BERM_KV_URL).
    #[arg(long, value_name = "N", default_value_t = berm_kv_postgres::DEFAULT_MAX_CONNECTIONS,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1000))]
    kv_connections: usize,
    /// In the microVM: send every `http.fetch` (once this bermd's grants allow it) to the
    /// host dialer, which checks the app's grants again, holds its secrets and dials, on a
    /// connection asked for on this inherited SOCK_SEQPACKET socket: berm-init's egress
    /// broker connects to the app's own port and hands the connection over (bermd opens no
    /// vsock socket itself).
    #[arg(long, value_name = "N")]
    egress_broker_fd: Option<RawFd>,
    /// Write a receipt for every call to this directory: what ran (program and native code
    /// by sha256), the grants in force, the sha256 of the arguments and the result, each
    /// http.fetch host and status, the secrets named, the calls it made. Hash-chained, and
    /// signed in checkpoints; check them with `berm receipts verify DIR --key PUB`
    /// (docs/receipts.md). One bermd per directory.
    #[arg(long, value_name = "DIR", conflicts_with = "receipts_fd")]
    receipts: Option<PathBuf>,
    /// In the microVM: write the receipts to this inherited descriptor (a pipe berm-init
    /// relays to the host's run dir), signed with a key made now and never stored (unless
    /// --receipts-key names one); its public half goes in the ready line.
    #[arg(long, value_name = "N")]
    receipts_fd: Option<RawFd>,
    /// The ed25519 key (PKCS#8 PEM, mode 0600) that signs the receipts' checkpoints.
    /// Default: berm's host key, $XDG_CONFIG_HOME/berm/host-key.pem (what `berm attest key`
    /// prints the public half of), created on first use.
    #[arg(long, value_name = "FILE")]
    receipts_key: Option<PathBuf>,
    /// How often written receipts are synced to disk and sealed with a signed checkpoint,
    /// in milliseconds: the most a machine crash can lose. A killed bermd loses none; the
    /// next start seals what it left.
    #[arg(long, value_name = "MS", default_value_t = 200,
          value_parser = clap::value_parser!(u64).range(1..=60_000))]
    receipts_interval_ms: u64,
}

/// `--cpu-profile`.
#[derive(Clone, Copy, ValueEnum)]
enum Cpu {
    /// This machine's target and CPU features.
    Native,
    /// EngineConfig::vm(): the microVM's target and a fixed baseline.
    Portable,
}

/// What to log: `BERM_LOG`, else `RUST_LOG` (the variable every tracing-based tool reads),
/// else `info`. Either takes the `EnvFilter` syntax, e.g. `berm_service=debug,info`.
fn log_filter() -> tracing_subscriber::EnvFilter {
    ["BERM_LOG", "RUST_LOG"]
        .into_iter()
        .find_map(|name| tracing_subscriber::EnvFilter::try_from_env(name).ok())
        .unwrap_or_else(|| tracing_subscriber::EnvFilter::new("info"))
}

fn main() -> ExitCode {
    let started = Instant::now();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(log_filter())
        .init();
    // On bad arguments clap prints why and exits with 2, [`Exit::Usage`]; after --help or
    // --version it exits with 0, [`Exit::Clean`].
    const _: () = assert!(Exit::Usage.code() == 2 && Exit::Clean.code() == 0);
    let args = Args::parse();
    match start(args, started) {
        Ok(()) => Exit::Clean.into(),
        Err((exit, error)) => {
            eprintln!("bermd: {error:#}");
            exit.into()
        }
    }
}

/// Registers everything this bermd owns or reads for itself as berm's own
/// ([`berm_app::own_paths`]), so that no app folder can name one as a secret's value file:
/// its home however given (`--home` as well as `$BERM_HOME`), and each file or directory a
/// flag names.
fn register_own_paths(args: &Args, home: &std::path::Path) {
    use berm_app::own_paths::{STATE, register};
    register(home, STATE);
    let files = [
        (&args.programs, "bermd's program store (--programs)"),
        (
            &args.http_token_file,
            "bermd's HTTP bearer token (--http-token-file)",
        ),
        (&args.code_dir, "bermd's precompiled code (--code-dir)"),
        (&args.kv_url_file, "the kv database's URL (--kv-url-file)"),
        (
            &args.ask_key,
            "the key that seals asking programs' state (--ask-key)",
        ),
        (&args.receipts, "bermd's receipts (--receipts)"),
        (
            &args.oauth_introspection_client_file,
            "bermd's OAuth introspection credentials (--oauth-introspection-client-file)",
        ),
        (
            &args.receipts_key,
            "the key that signs receipts (--receipts-key)",
        ),
    ];
    for (path, what) in files {
        if let Some(path) = path {
            register(path, what);
        }
    }
    for ca in &args.extra_ca {
        register(ca, "a CA bundle bermd trusts (--extra-ca)");
    }
    for app in &args.apps {
        register(app, "an app folder bermd serves (--app)");
    }
}

fn start(args: Args, started: Instant) -> Result<(), (Exit, anyhow::Error)> {
    let usage = |e: anyhow::Error| (Exit::Usage, e);
    // Inherited descriptors first, before anything opens a file that could
    // take a number that was not inherited.
    let inherited = [
        ("--listen-fd", args.listen_fd),
        ("--ready-fd", args.ready_fd),
        ("--egress-broker-fd", args.egress_broker_fd),
        ("--receipts-fd", args.receipts_fd),
    ];
    for (i, (flag, fd)) in inherited.iter().enumerate() {
        if let Some((other, _)) = inherited[i + 1..]
            .iter()
            .find(|(_, o)| fd.is_some() && o == fd)
        {
            return Err(usage(anyhow::anyhow!(
                "{flag} and {other} name the same descriptor"
            )));
        }
    }
    let listener = match args.listen_fd {
        Some(fd) => {
            let owned =
                berm_service::sys::inherit_fd("--listen-fd", fd).map_err(|e| usage(e.into()))?;
            Some(InheritedListener::check(owned, fd).map_err(|e| usage(e.into()))?)
        }
        None => None,
    };
    let ready = match args.ready_fd {
        Some(fd) => {
            Some(berm_service::sys::inherit_fd("--ready-fd", fd).map_err(|e| usage(e.into()))?)
        }
        None => None,
    };
    let egress_broker = match args.egress_broker_fd {
        Some(fd) => {
            let owned = berm_service::sys::inherit_fd("--egress-broker-fd", fd)
                .map_err(|e| usage(e.into()))?;
            Some(berm_service::egress::EgressBroker::new(owned, fd).map_err(|e| usage(e.into()))?)
        }
        None => None,
    };
    let receipts_stream = match args.receipts_fd {
        Some(fd) => {
            Some(berm_service::sys::inherit_fd("--receipts-fd", fd).map_err(|e| usage(e.into()))?)
        }
        None => None,
    };
    // berm's own paths before any folder is read: no secret's value file may be one.
    let home = args
        .home
        .clone()
        .unwrap_or_else(berm_control::home::berm_home);
    register_own_paths(&args, &home);
    // Every folder is read and checked whole before anything is deployed.
    berm_app::secret_file::admit_pod_secret_volumes(args.pod_secret_volumes);
    // Behind an egress broker (the microVM's guest) the host's dialer reads secret values;
    // the guest's $HOME is its workspace, so `~/` names nothing here.
    let secret_values = if egress_broker.is_some() {
        berm_app::SecretValues::OnHost
    } else {
        berm_app::SecretValues::Here
    };
    let mut apps = args
        .apps
        .iter()
        .map(|dir| berm_app::load_with(dir, secret_values))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| usage(e.into()))?;
    berm_service::app::check_distinct(&apps).map_err(|e| usage(e.into()))?;
    let store = berm_app::ProgramStore::new(
        args.programs
            .clone()
            .unwrap_or_else(|| home.join(berm_app::store::DEFAULT_DIR)),
    );
    for app in &mut apps {
        app.resolve_images(&store)
            .with_context(|| format!("app folder {}", app.dir.display()))
            .map_err(usage)?;
    }
    // On any other address --no-auth is refused once the lock is taken.
    if args.no_auth && args.http.is_some_and(|addr| addr.ip().is_loopback()) {
        eprintln!(
            "bermd: WARNING: --no-auth: MCP over HTTP takes requests with no token; any process \
             on this machine, of any user, can call every tool and reach what their grants and \
             secrets reach. Drop --no-auth to require the token in $BERM_HOME/http-token."
        );
    }
    let token_file = args
        .http_token_file
        .as_deref()
        .map(std::path::absolute)
        .transpose()
        .context("resolving --http-token-file")
        .map_err(usage)?;
    let token = match &token_file {
        Some(path) => {
            let contents = std::fs::read_to_string(path)
                .with_context(|| format!("reading the token file {}", path.display()))
                .map_err(usage)?;
            Some(
                Token::parse(&contents)
                    .with_context(|| format!("the token file {}", path.display()))
                    .map_err(usage)?,
            )
        }
        None => None,
    };
    let oauth = oauth_config(&args).map_err(usage)?;
    if let Some(addr) = args.metrics
        && !addr.ip().is_loopback()
        && !args.metrics_allow_remote
    {
        return Err(usage(anyhow::anyhow!(
            "--metrics {addr} is not a loopback address: add --metrics-allow-remote to serve metrics, without a token, to whoever reaches it"
        )));
    }
    if !args.allowed_hosts.is_empty() && args.http.is_none() && args.metrics.is_none() {
        return Err(usage(anyhow::anyhow!(
            "--allowed-host names a host HTTP clients reach bermd by: give --http ADDR or --metrics ADDR too"
        )));
    }
    if receipts_stream.is_none() && args.receipts.is_none() && args.receipts_key.is_some() {
        return Err(usage(anyhow::anyhow!(
            "--receipts-key signs receipts: give --receipts DIR too"
        )));
    }
    let options = berm_receipts::LogOptions {
        interval: std::time::Duration::from_millis(args.receipts_interval_ms),
        ..berm_receipts::LogOptions::default()
    };
    let failed = |e: anyhow::Error| (Exit::Failed, e);
    let receipts = match (&args.receipts, receipts_stream) {
        (Some(dir), _) => {
            let key = berm_dsse::HostKey::load_or_create(args.receipts_key.as_deref())
                .context("the key that signs receipts")
                .map_err(failed)?;
            let log = berm_receipts::ReceiptLog::open(dir, key, options)
                .context("opening --receipts")
                .map_err(failed)?;
            tracing::info!(dir = %dir.display(), log = %log.log_id(), "writing a receipt for every call");
            Some(std::sync::Arc::new(log))
        }
        (None, Some(stream)) => {
            let key = match &args.receipts_key {
                Some(path) => berm_dsse::HostKey::load_or_create(Some(path)),
                None => berm_dsse::HostKey::ephemeral(),
            }
            .context("the key that signs receipts")
            .map_err(failed)?;
            // Checkpoints stay well under the line protocol's 64 KiB once relayed.
            let options = berm_receipts::LogOptions {
                max_batch: 64,
                ..options
            };
            let log = berm_receipts::ReceiptLog::stream(
                std::fs::File::from(stream),
                "--receipts-fd",
                key,
                options,
            )
            .context("writing receipts to --receipts-fd")
            .map_err(failed)?;
            Some(std::sync::Arc::new(log))
        }
        (None, None) => None,
    };
    let kv_url = match (&args.kv_url_file, std::env::var("BERM_KV_URL")) {
        (Some(_), Ok(_)) => {
            return Err(usage(anyhow::anyhow!(
                "both --kv-url-file and BERM_KV_URL name a kv database: keep one"
            )));
        }
        (Some(path), Err(_)) => Some(
            std::fs::read_to_string(path)
                .with_context(|| format!("reading --kv-url-file {}", path.display()))
                .map_err(usage)?
                .trim()
                .to_string(),
        ),
        (None, Ok(url)) => Some(url.trim().to_string()),
        (None, Err(_)) => None,
    };
    let kv_postgres = match kv_url {
        Some(url) => {
            let trust = berm_egress::Trust::new(&args.extra_ca)
                .context("the CAs PostgreSQL's TLS is verified against")
                .map_err(usage)?;
            let caps = berm_service::kv::KvCaps::default();
            let pg = berm_kv_postgres::PgKv::connect(
                &url,
                trust.client_config(),
                berm_kv_postgres::Caps {
                    per_key_bytes: berm_service::kv::PER_KEY_BYTES,
                    max_total_bytes: caps.max_total_bytes,
                },
                args.kv_connections,
            )
            .context("the kv database (--kv-url-file or BERM_KV_URL)")
            .map_err(failed)?;
            tracing::info!(database = %pg.target(), "every program's keyspace is in PostgreSQL");
            Some(std::sync::Arc::new(pg))
        }
        None => None,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
        .map_err(|e| (Exit::Failed, e))?;
    // Off unless OTEL_EXPORTER_OTLP_ENDPOINT (or …_TRACES_ENDPOINT) is set.
    let traces = berm_service::otel::Tracing::from_env(runtime.handle(), &args.extra_ca)
        .context("traces (the OTEL_* variables)")
        .map_err(usage)?;
    if traces.is_some() {
        tracing::info!("exporting a span for every call over OTLP");
    }
    let mut service = ServiceConfig::new(home);
    service.tracing = traces.clone();
    service.kv_postgres = kv_postgres;
    service.ask_key = args.ask_key.clone();
    service.max_task_deadline = std::time::Duration::from_millis(args.max_task_deadline_ms);
    service.max_tasks_per_session = args.max_tasks_per_session;
    service.receipts = receipts.clone();
    service.engine = match args.cpu_profile {
        Cpu::Native => EngineConfig::default(),
        Cpu::Portable => EngineConfig::vm(),
    };
    service.engine.max_instances = args.max_instances;
    service.tools_page_size = args.tools_page_size;
    service.code_dir = args.code_dir;
    service.max_calls_per_program = args.max_calls_per_program;
    service.max_host_ops = args.max_host_ops;
    service.max_host_memory = args.max_host_memory;
    service.extra_ca = args.extra_ca;
    service.egress_broker = egress_broker;
    let config = DaemonConfig {
        http: args.http.map(|addr| HttpConfig {
            addr,
            allow_remote: args.http_allow_remote,
            token,
            token_file,
            no_auth: args.no_auth,
            allowed_hosts: args.allowed_hosts.clone(),
            oauth,
            server_card_tools: args.server_card_tools,
        }),
        metrics: args.metrics.map(|addr| MetricsConfig {
            addr,
            allowed_hosts: args.allowed_hosts,
        }),
        max_frame_bytes: args.max_frame_bytes,
        max_connections: args.max_connections,
        max_session_rate: args.max_session_rate,
        apps,
        accept: args.accept,
        listener,
        ready,
        started,
        ..DaemonConfig::new(service)
    };
    let served = runtime
        .block_on(berm_service::run(config))
        .map_err(|e| (e.exit(), anyhow::Error::new(e)));
    // Sealed now rather than at the next start: a clean stop leaves a log that verifies.
    if let Some(log) = receipts {
        log.close();
    }
    // The last calls' spans go out before the runtime that sends them stops.
    if let Some(traces) = traces {
        traces.shutdown();
    }
    served
}

/// The OAuth resource server's configuration from `--oauth-*`, when `--oauth-issuer` is
/// given; its resource left empty for the listener's URL when `--oauth-resource` is not.
fn oauth_config(args: &Args) -> anyhow::Result<Option<berm_oauth::OAuthConfig>> {
    let Some(issuer) = &args.oauth_issuer else {
        return Ok(None);
    };
    let trust = berm_egress::Trust::new(&args.extra_ca)
        .context("the CAs the OAuth issuer's TLS is verified against")?;
    let mut config = berm_oauth::OAuthConfig::new(
        issuer,
        args.oauth_resource.as_deref().unwrap_or_default(),
        std::sync::Arc::new(trust.client_config()),
    );
    if let Some(list) = &args.oauth_algorithms {
        config.algorithms = berm_oauth::parse_algorithms(list).context("--oauth-algorithms")?;
    }
    if let Some(path) = &args.oauth_introspection_client_file {
        let text = std::fs::read_to_string(path).with_context(|| {
            format!(
                "reading --oauth-introspection-client-file {}",
                path.display()
            )
        })?;
        let (id, secret) = text.trim().split_once(':').with_context(|| {
            format!(
                "--oauth-introspection-client-file {}: write CLIENT_ID:CLIENT_SECRET",
                path.display()
            )
        })?;
        config.introspection = Some(berm_oauth::Introspection {
            client_id: id.to_string(),
            client_secret: secret.to_string(),
        });
    }
    config.fetch_timeout = std::time::Duration::from_millis(args.oauth_fetch_timeout_ms);
    config.min_refresh = std::time::Duration::from_millis(args.oauth_min_refresh_ms);
    config.leeway = std::time::Duration::from_secs(args.oauth_leeway_s);
    Ok(Some(config))
}
