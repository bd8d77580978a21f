//! The egress dialer: `http.fetch` for apps in the microVM, dialed on the host.
//!
//! The guest has no network device. App i's bermd checks a request against its own grants
//! (early refusal) and sends it over vsock to port 6000+i (`EGRESS_PORT_BASE`); the hypervisor
//! turns that guest-initiated connection into a connection to a Unix socket in the run dir
//! (libkrun: `krun_add_vsock_port2(…, listen = false)`; vhost-device-vsock: `<uds-path>_<port>`,
//! i.e. `vsock.sock_6000`). The dialer listens there, one socket per app with net or secret
//! grants, and serves each request with the [`Egress`] of **that app's** program the request
//! names, built from the app's `berm.toml` as berm-vmm read it on the host: the port decides
//! which app's grants apply, never what the guest writes; within the app, secrets are keyed
//! by (program, name), so two programs that each bind `TOKEN` send their own values; and the
//! secret values stay on the host.
//!
//! It is its own process (`berm-vmm dial`, started before berm-vmm confines itself), so that
//! berm-vmm keeps its allow list without `socket`/`connect`. It binds its sockets, loads the
//! CA roots, then confines itself (Landlock: read only what name resolution reads and each
//! secret value file, no writes, TCP connect allowed; seccomp: [`Role::VmmDialer`],
//! `socket` for AF_INET/AF_INET6 only) before it accepts anything. No app with net or secret
//! grants, no dialer.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use berm_app::own_paths::OwnPath;
use berm_app::secret_file::SecretFileError;
use berm_control::Grant;
use berm_egress::remote::Programs;
use berm_egress::secret::{Binding, SecretStore};
use berm_egress::{Caps, Egress, EgressConfig, Trust};
use serde::{Deserialize, Serialize};

use crate::apps::App;
use crate::measure::{OwnStatus, SelfReport, landlock_named};
use crate::run_dir::RunDir;
use crate::sandbox::{ChildPolicy, ChildReport, Role, SandboxGrants};

/// Most connections one app may have open to the dialer at once; past it a connection is
/// answered `io` at once and closed.
pub const MAX_CONNECTIONS_PER_APP: usize = 16;
/// How long berm-vmm waits for the dialer to be listening and confined.
const START: Duration = Duration::from_secs(10);
/// Largest plan read from stdin.
pub const MAX_PLAN_BYTES: u64 = 1 << 20;

/// What name resolution reads (glibc's files and dns sources, built into libc since 2.34).
const RESOLVER_FILES: &[&str] = &[
    "/etc/hosts",
    "/etc/resolv.conf",
    "/etc/nsswitch.conf",
    "/etc/host.conf",
    "/etc/gai.conf",
    "/etc/services",
];

/// One app's egress, as the dialer serves it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct AppEgress {
    /// The app's index (port 6000+i).
    pub index: u32,
    /// The app's name, for log lines.
    pub name: String,
    /// The socket the hypervisor connects to for port 6000+i.
    pub socket: PathBuf,
    /// Its programs with net or secret grants, each served with its own.
    pub programs: Vec<ProgramEgress>,
}

/// One program's egress, as the dialer serves it: nothing of another program's.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct ProgramEgress {
    /// The program's name, as the guest's bermd writes it on the wire.
    pub name: String,
    /// Its `net=` rules.
    pub rules: Vec<String>,
    /// Its `secret:NAME=HOST` bindings, as (name, host rule).
    pub secrets: Vec<(String, String)>,
    /// The value files its `[program.secrets]` names, by secret: the user's own files,
    /// checked ([`berm_app::secret_file`]).
    pub secret_files: BTreeMap<String, PathBuf>,
    /// Its store, `$BERM_HOME/secrets/<program>` (what `berm secret set PROGRAM NAME`
    /// writes): where a bound secret without a named file has its value.
    pub store: PathBuf,
}

impl ProgramEgress {
    /// Each bound secret's value file on the host: the named one, else the store's.
    pub fn value_files(&self) -> impl Iterator<Item = PathBuf> + '_ {
        self.secrets.iter().map(|(name, _)| {
            self.secret_files
                .get(name)
                .cloned()
                .unwrap_or_else(|| self.store.join(name))
        })
    }
}

/// Everything the dialer is told (as JSON on its stdin).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct DialerPlan {
    /// One entry per app with net or secret grants.
    pub apps: Vec<AppEgress>,
    /// Confine itself (false: `--no-host-sandbox`).
    pub sandbox: bool,
    /// What berm-vmm registered as berm's own ([`berm_app::own_paths::registered`]): the
    /// dialer registers the same before it reads any secret, so that no value file can be
    /// one of them or lie in one.
    pub own: Vec<OwnPath>,
}

/// The socket app `index`'s egress port is mapped to: `vsock.sock_<port>`, the name
/// vhost-device-vsock connects to for a guest-initiated connection, used for libkrun too.
pub fn socket_path(run: &RunDir, index: u32) -> PathBuf {
    let port = berm_vm_protocol::EGRESS_PORT_BASE + index;
    let mut name = run.vsock.clone().into_os_string();
    name.push(format!("_{port}"));
    PathBuf::from(name)
}

/// The egress of `app` (as measured: each program's net and secret grants), or `None` without
/// any. A secret's value is read on the host from the file the program's `[program.secrets]`
/// names, else from `$BERM_HOME/secrets/<program>/<NAME>`, the store `berm secret set PROGRAM
/// NAME` writes. Every named value file that exists is checked now (the user's own, private,
/// none of berm's own files or directories), so a run with a wrong one stops before it boots,
/// and again by the dialer at every read; one not
/// there yet is not readable in this run (the dialer's Landlock grants only files that
/// exist), which the program is told when it asks.
pub fn app_egress(
    run: &RunDir,
    app: &App,
    berm_home: &Path,
) -> Result<Option<AppEgress>, DialerError> {
    let mut programs = Vec::new();
    for program in &app.measured.programs {
        let named = app.secret_files.get(&program.name);
        let mut egress = ProgramEgress {
            name: program.name.clone(),
            rules: Vec::new(),
            secrets: Vec::new(),
            secret_files: BTreeMap::new(),
            store: berm_home.join("secrets").join(&program.name),
        };
        // Typed since the folder was loaded: nothing here can fail to parse, or be dropped.
        for grant in program.grants.iter().cloned() {
            match grant {
                Grant::Net(rule) => egress.rules.push(rule.to_string()),
                Grant::Secret { name, rule } => {
                    if let Some(file) = named.and_then(|files| files.get(&name)) {
                        if file.exists() {
                            berm_app::secret_file::open(file).map_err(|source| {
                                DialerError::SecretFile {
                                    app: app.measured.name.clone(),
                                    program: program.name.clone(),
                                    name: name.clone(),
                                    source: Box::new(source),
                                }
                            })?;
                        }
                        egress.secret_files.insert(name.clone(), file.clone());
                    }
                    egress.secrets.push((name, rule.to_string()));
                }
                _ => {}
            }
        }
        if !egress.rules.is_empty() || !egress.secrets.is_empty() {
            programs.push(egress);
        }
    }
    Ok((!programs.is_empty()).then(|| AppEgress {
        index: app.measured.index,
        name: app.measured.name.clone(),
        socket: socket_path(run, app.measured.index),
        programs,
    }))
}

/// The dialer's plan for `apps`, or `None` when no app has net or secret grants (then no
/// dialer runs).
///
/// # Errors
/// [`DialerError::SecretFile`] for a secret value file that may not be read.
pub fn plan(run: &RunDir, apps: &[App], sandbox: bool) -> Result<Option<DialerPlan>, DialerError> {
    let home = berm_control::home::berm_home();
    let mut planned = Vec::new();
    for app in apps {
        planned.extend(app_egress(run, app, &home)?);
    }
    Ok((!planned.is_empty()).then_some(DialerPlan {
        apps: planned,
        sandbox,
        own: berm_app::own_paths::registered(),
    }))
}

/// The dialer's Landlock policy: read what resolving a name reads and each secret value
/// file that exists, and nothing else (not the directory around it, which may hold other
/// files of the user's); TCP connect allowed; nothing written. A value file is read in place
/// on every request: a value rewritten in the same file takes effect at once, a file
/// replaced by rename (or a Kubernetes Secret updated by kubelet) only in the next run.
pub fn policy(plan: &DialerPlan) -> SandboxGrants {
    SandboxGrants {
        read: RESOLVER_FILES
            .iter()
            .map(PathBuf::from)
            .filter(|p| p.exists())
            .chain(
                plan.apps
                    .iter()
                    .flat_map(|a| &a.programs)
                    .flat_map(ProgramEgress::value_files)
                    .filter(|f| f.is_file())
                    .collect::<BTreeSet<_>>(),
            )
            .collect(),
        connect_tcp: true,
        ..SandboxGrants::default()
    }
}

/// Why the dialer could not be started (the run stops: fail-closed).
#[derive(Debug, thiserror::Error)]
pub enum DialerError {
    /// Spawning `berm-vmm dial` failed.
    #[error("starting the egress dialer failed")]
    Spawn(#[source] std::io::Error),
    /// It did not say it was ready.
    #[error("the egress dialer did not start: {0}")]
    NotReady(String),
    /// A secret's value file may not be read (someone else's, open to others, or in berm's
    /// own directories).
    #[error("app `{app}`: program `{program}`: secret `{name}`: {source}")]
    SecretFile {
        /// The app.
        app: String,
        /// The program that binds the secret.
        program: String,
        /// The secret.
        name: String,
        /// Why, naming the file and what to run.
        source: Box<SecretFileError>,
    },
}

/// Starts `berm-vmm dial` with `plan`, waits until it listens (confined when the plan says
/// so) and returns it with how it is confined.
/// Its log lines go to `output` (`hypervisor.log`).
pub fn start(
    plan: &DialerPlan,
    output: &crate::log_cap::HypervisorOutput,
) -> Result<(Child, Option<ChildReport>), DialerError> {
    let exe = std::env::current_exe().map_err(DialerError::Spawn)?;
    let (_, err) = output.stdio().map_err(DialerError::Spawn)?;
    let mut command = Command::new(&exe);
    command
        .arg("dial")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(err);
    crate::sys::kill_with_parent(&mut command);
    let mut child = command.spawn().map_err(DialerError::Spawn)?;
    let plan_json = serde_json::to_vec(plan).map_err(|e| DialerError::Spawn(e.into()))?;
    let sent = child
        .stdin
        .take()
        .map(|mut stdin| stdin.write_all(&plan_json))
        .unwrap_or(Ok(()));
    let ready = sent
        .map_err(|e| e.to_string())
        .and_then(|()| wait_ready(&mut child));
    // Confined, it says how, in its own words after `ready` (see measure.rs).
    let report = ready.and_then(|said| match (plan.sandbox, said.as_str()) {
        (false, "") => Ok(None),
        (true, line) if !line.is_empty() => {
            let measured = SelfReport::decode(line.as_bytes())
                .map_err(|e| format!("its confinement report was refused: {e}"))?;
            let dialer = ChildPolicy::new("berm-vmm dial", &policy(plan), Role::VmmDialer, "");
            Ok(Some(dialer.self_reported(child.id(), &measured)))
        }
        (true, _) => Err("it did not report its confinement".into()),
        (false, other) => Err(format!("it said {other:?} after ready")),
    });
    match report {
        Ok(report) => Ok((child, report)),
        Err(why) => {
            let _ = child.kill();
            let _ = child.wait();
            Err(DialerError::NotReady(why))
        }
    }
}

/// Reads the dialer's one `ready` line from its stdout, within [`START`], without starting a
/// thread (berm-vmm confines itself next, which needs it single-threaded), and returns what
/// follows `ready ` on it (its confinement report; empty when it runs unconfined).
fn wait_ready(child: &mut Child) -> Result<String, String> {
    use std::io::Read;
    let mut stdout = child.stdout.take().ok_or("no stdout")?;
    let deadline = Instant::now() + START;
    let mut line = Vec::new();
    while !line.ends_with(b"\n") {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || !crate::sys::wait_readable(&stdout, left).map_err(|e| e.to_string())? {
            return Err(format!("not ready within {} s", START.as_secs()));
        }
        let mut byte = [0u8; 64];
        let n = stdout.read(&mut byte).map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("it exited (see hypervisor.log in the run dir)".into());
        }
        line.extend_from_slice(&byte[..n]);
        if line.len() > 4096 {
            return Err("it said too much".into());
        }
    }
    let line = String::from_utf8_lossy(&line);
    let line = line.strip_suffix('\n').unwrap_or(&line);
    match line.strip_prefix("ready") {
        Some("") => Ok(String::new()),
        Some(rest) if rest.starts_with(' ') => Ok(rest[1..].to_owned()),
        _ => Err(format!("it said {line:?}")),
    }
}

/// `berm-vmm dial`: reads the plan on stdin, listens, confines itself, says `ready` on stdout
/// and serves until killed (it dies with berm-vmm).
pub fn run(plan_json: &[u8]) -> anyhow::Result<std::convert::Infallible> {
    use anyhow::Context;
    let plan: DialerPlan =
        serde_json::from_slice(plan_json).context("reading the dialer's plan")?;
    // berm-vmm's own paths are this process's too: no value file may be one.
    for own in &plan.own {
        berm_app::own_paths::register(&own.path, &own.what);
    }
    // Before confinement: the sockets are bound and the CA roots read.
    let mut served = Vec::new();
    let trust = Trust::new(&[]).context("loading the CA roots")?;
    for app in &plan.apps {
        let _ = std::fs::remove_file(&app.socket);
        let listener = UnixListener::bind(&app.socket)
            .with_context(|| format!("listening on {}", app.socket.display()))?;
        listener.set_nonblocking(true)?;
        let mut programs = Programs::new(Caps::default());
        for program in &app.programs {
            programs.insert(&program.name, program_egress(&app.name, program, &trust)?);
        }
        served.push((app.clone(), listener, Arc::new(programs)));
    }
    // Its own confinement, measured once in force: `/proc/self/status` is opened first
    // (Landlock grants no /proc) and read after.
    let mut ready = String::from("ready");
    if plan.sandbox {
        let status = OwnStatus::open().context("opening /proc/self/status")?;
        let confined = crate::sandbox::confine(&policy(&plan), Role::VmmDialer, &[])
            .context("confining the egress dialer")?;
        let landlock =
            landlock_named(confined.landlock.as_bytes()).context("the dialer's Landlock status")?;
        let measured = status
            .measure(landlock)
            .context("measuring the egress dialer's confinement")?;
        let mut line = [0u8; crate::measure::MAX_REPORT];
        ready.push(' ');
        ready.push_str(&String::from_utf8_lossy(measured.encode(&mut line)));
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_io()
        .enable_time()
        .build()
        .context("starting the dialer's runtime")?;
    runtime.block_on(async move {
        let mut tasks = Vec::new();
        for (app, listener, egress) in served {
            let listener = tokio::net::UnixListener::from_std(listener)?;
            tasks.push(tokio::spawn(serve_app(app, listener, egress)));
        }
        println!("{ready}");
        let _ = std::io::stdout().flush();
        for task in tasks {
            let _ = task.await;
        }
        anyhow::Ok(())
    })?;
    anyhow::bail!("the dialer's listeners all ended")
}

/// The egress of one program of app `app`, from its plan entry: its own rules, bindings
/// and value files only.
fn program_egress(app: &str, program: &ProgramEgress, trust: &Trust) -> anyhow::Result<Egress> {
    let fail = |what: &str, e: berm_abi::net::NetRuleError| {
        anyhow::anyhow!("app {app}: program {}: {what}: {e}", program.name)
    };
    let rules = program.rules.iter().map(|r| r.parse());
    let secrets = program.secrets.iter().map(|(name, host)| {
        host.parse().map(|rule| Binding {
            name: name.clone(),
            rule,
        })
    });
    Ok(Egress::new(EgressConfig {
        rules: rules
            .collect::<Result<_, _>>()
            .map_err(|e| fail("a net rule", e))?,
        secrets: secrets
            .collect::<Result<_, _>>()
            .map_err(|e| fail("a secret's host", e))?,
        store: Some(SecretStore::with_files(
            &program.store,
            program.secret_files.clone(),
        )),
        caps: Caps::default(),
        trust: trust.clone(),
        forward: None,
    }))
}

/// Accepts app `app`'s connections, at most [`MAX_CONNECTIONS_PER_APP`] at once.
async fn serve_app(app: AppEgress, listener: tokio::net::UnixListener, egress: Arc<Programs>) {
    let open = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS_PER_APP));
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                crate::report::say(format_args!("berm-vmm dial: app {}: accept: {e}", app.name));
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(permit) = Arc::clone(&open).try_acquire_owned() else {
            tokio::spawn(async move {
                let mut stream = stream;
                let busy = berm_egress::FetchError {
                    code: berm_egress::ErrorCode::Io,
                    message: format!(
                        "the app already has {MAX_CONNECTIONS_PER_APP} requests open at the host dialer"
                    ),
                };
                let _ = berm_egress::remote::reply(&mut stream, &Err(busy)).await;
            });
            continue;
        };
        let egress = Arc::clone(&egress);
        let name = app.name.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let started = Instant::now();
            let outcome =
                berm_egress::remote::serve(stream, &egress, berm_egress::remote::READ_TIMEOUT)
                    .await;
            let ms = started.elapsed().as_millis();
            match outcome {
                Ok(None) => {}
                Ok(Some(code)) => crate::report::say(format_args!(
                    "berm-vmm dial: app {name}: refused ({}) in {ms} ms",
                    code.name()
                )),
                Err(e) => crate::report::say(format_args!("berm-vmm dial: app {name}: {e}")),
            }
        });
    }
}
