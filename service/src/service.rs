//! The service: programs by name, persisted, with their grants and state,
//! behind every transport (MCP and the control API).

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, Mutex, RwLock};
use std::task::Poll;
use std::time::Duration;

use berm::{Berm, CodeDirs, CompileSource, DeployOptions, Engine, EngineConfig, Failure, Grants};
use berm_control::{
    DeployResponse, DeployedFrom, Grant, KeyspaceSize, LimitsSpec, NameState, ProgramView,
    RemoveResponse,
};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, broadcast};

use crate::catalog::{self, Catalog};
use crate::egress::EgressSetup;
use crate::fs::FsRoot;
use crate::home::{Home, HomeError};
use crate::kv::{KvCaps, KvError, KvStore};
use crate::logs::{self, SessionLog};
use crate::store::{LoadError, Record, Store};
use crate::syscalls::{self, Keyspace, ProgramHost};

/// How many calls from outside one program may have running at once,
/// unless `bermd --max-calls-per-program` says otherwise: a quarter of the
/// engine's default 256 instance slots.
pub const DEFAULT_MAX_CALLS_PER_PROGRAM: usize = 64;

/// How a [`Service`] is set up.
#[derive(Debug, Clone)]
pub struct ServiceConfig {
    /// `$BERM_HOME`.
    pub home: PathBuf,
    /// The engine, with the default bounds for every call.
    pub engine: EngineConfig,
    /// Bounds on each program's keyspace.
    pub kv_caps: KvCaps,
    /// Host operations (disk reads and writes) one program may have in
    /// flight ([`syscalls::DEFAULT_MAX_HOST_OPS`]).
    pub max_host_ops: usize,
    /// Bytes one program's calls, all together, may have bermd hold for them: replies not
    /// yet pulled and syscall requests in flight ([`berm::DEFAULT_HOST_MEMORY_BYTES`],
    /// `bermd --max-host-memory`). Past it a syscall gets `too_large`.
    pub max_host_memory: usize,
    /// Calls from outside (MCP, the control API) one program may have
    /// running at once ([`DEFAULT_MAX_CALLS_PER_PROGRAM`]): a quarter of
    /// the engine's instance slots, so one program cannot take them all.
    pub max_calls_per_program: usize,
    /// A read-only directory of precompiled code (`bermd --code-dir`),
    /// looked in before the compiled-code cache. Its code must come from
    /// `Engine::precompile` with this same engine configuration (for the
    /// microVM: `EngineConfig::vm()`), or it is skipped.
    pub code_dir: Option<PathBuf>,
    /// Most tools in one `tools/list` page; more come behind a cursor.
    pub tools_page_size: usize,
    /// PEM files of CAs HTTPS requests trust besides the system's
    /// (`bermd --extra-ca`).
    pub extra_ca: Vec<PathBuf>,
    /// Bounds on every program's `http.fetch`.
    pub egress_caps: berm_egress::Caps,
    /// In the microVM: the channel to berm-init's egress broker, which connects every
    /// `http.fetch` to this app's host dialer (`bermd --egress-broker-fd`); `None` dials here.
    pub egress_broker: Option<Arc<crate::egress::EgressBroker>>,
    /// Where each call's receipt goes (`bermd --receipts DIR`); `None` writes none.
    pub receipts: Option<Arc<berm_receipts::ReceiptLog>>,
    /// Every program's keyspace in PostgreSQL (`bermd --kv-url-file`), shared with other
    /// replicas; `None` keeps each in its log under `$BERM_HOME/state`.
    pub kv_postgres: Option<Arc<berm_kv_postgres::PgKv>>,
    /// The key that seals asking programs' state, and (through a key derived from it) the
    /// tasks replicas share in PostgreSQL (`bermd --ask-key FILE`, for replicas that share
    /// one); `None` uses `$BERM_HOME/ask.key`, made on first start.
    pub ask_key: Option<PathBuf>,
    /// The longest a task may run (`bermd --max-task-deadline-ms`).
    pub max_task_deadline: std::time::Duration,
    /// Tasks one MCP session may have open at once, within bermd's own cap
    /// ([`crate::tasks::DEFAULT_MAX_TASKS_PER_SESSION`], `bermd --max-tasks-per-session`);
    /// requests outside a session share one such cap.
    pub max_tasks_per_session: usize,
    /// Where each call's span goes (`OTEL_EXPORTER_OTLP_ENDPOINT`); `None` makes none.
    pub tracing: Option<crate::otel::Tracing>,
}

/// The default `tools/list` page: large, because some clients read only the
/// first page.
pub const DEFAULT_TOOLS_PAGE_SIZE: usize = 1000;

impl ServiceConfig {
    /// Defaults for a data directory.
    pub fn new(home: PathBuf) -> ServiceConfig {
        ServiceConfig {
            home,
            engine: EngineConfig::default(),
            kv_caps: KvCaps::default(),
            max_host_ops: syscalls::DEFAULT_MAX_HOST_OPS,
            max_host_memory: berm::DEFAULT_HOST_MEMORY_BYTES,
            max_calls_per_program: DEFAULT_MAX_CALLS_PER_PROGRAM,
            code_dir: None,
            tools_page_size: DEFAULT_TOOLS_PAGE_SIZE,
            extra_ca: Vec::new(),
            egress_caps: berm_egress::Caps::default(),
            egress_broker: None,
            receipts: None,
            kv_postgres: None,
            ask_key: None,
            max_task_deadline: crate::tasks::DEFAULT_MAX_TASK_DEADLINE,
            max_tasks_per_session: crate::tasks::DEFAULT_MAX_TASKS_PER_SESSION,
            tracing: None,
        }
    }
}

/// Why the service could not start.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The data directory could not be prepared.
    #[error(transparent)]
    Home(#[from] HomeError),
    /// The engine could not be built.
    #[error(transparent)]
    Engine(#[from] berm::EngineError),
    /// The threads that run calls could not be started.
    #[error("could not start the call threads")]
    CallThreads(#[source] std::io::Error),
    /// An extra CA file is unusable.
    #[error(transparent)]
    Trust(#[from] berm_egress::TrustError),
    /// The key that seals asking programs' state could not be read or made.
    #[error("the ask key: {0}")]
    AskKey(#[from] crate::ask::KeyError),
}

/// Why a deploy was refused; nothing changed.
#[derive(Debug, thiserror::Error)]
pub enum DeployError {
    /// A grant cannot be honoured.
    #[error("grant `{grant}`: {message}")]
    Grant {
        /// The grant.
        grant: String,
        /// Why.
        message: String,
    },
    /// The program's state could not be opened.
    #[error("could not open the state of `{name}`")]
    State {
        /// The program.
        name: String,
        /// Why.
        #[source]
        source: KvError,
    },
    /// The state directory could not be created.
    #[error(transparent)]
    Home(#[from] HomeError),
    /// The runtime refused the image.
    #[error(transparent)]
    Runtime(#[from] berm::DeployError),
    /// A tool's input schema is not a JSON Schema MCP can validate against.
    #[error("{0}")]
    Schema(String),
    /// A tool's served name would be longer than MCP clients accept, or a resource it
    /// serves is another program's.
    #[error("{0}")]
    ServedName(String),
    /// The image or record could not be saved; the program is not deployed.
    #[error("`{name}` was not deployed: could not save it")]
    Persist {
        /// The program.
        name: String,
        /// Why.
        #[source]
        source: HomeError,
    },
}

/// Why [`Service::name_state`] could not say what a name holds.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// The name is not a program name, or its secrets could not be listed.
    #[error(transparent)]
    Secrets(#[from] berm_egress::secret::SecretError),
    /// Its keyspace's log could not be read.
    #[error("could not read the keyspace log {}", path.display())]
    Keyspace {
        /// The log.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Its keyspace in PostgreSQL could not be read.
    #[error("could not read the keyspace in PostgreSQL")]
    Database(#[source] berm_kv_postgres::PgKvError),
}

/// Why a remove was refused.
#[derive(Debug, thiserror::Error)]
pub enum RemoveError {
    /// Nothing is deployed under the name.
    #[error("no program named `{0}` is deployed")]
    NotDeployed(String),
    /// The record could not be deleted; the program was removed from memory
    /// but would come back on restart.
    #[error("`{name}` was removed but its record could not be deleted")]
    Persist {
        /// The program.
        name: String,
        /// Why.
        #[source]
        source: HomeError,
    },
}

/// Why a call produced no result: the host's side of the two levels.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// No deployed program has that tool.
    #[error("no tool `{0}` is deployed (list them with tools/list or `berm ls`)")]
    NoSuchTool(String),
    /// The tool declares an output schema and its result does not match it.
    #[error("the result of `{tool}` does not match its output schema: {message}")]
    InvalidOutput {
        /// The served name, `{program}_{tool}`.
        tool: String,
        /// Which field, and what is wrong with it.
        message: String,
    },
    /// The runtime stopped or refused the call (trap, deadline, memory cap…), or
    /// [`Service::admit`] refused it (arguments, call slots): the same errors a call between
    /// programs gets.
    #[error(transparent)]
    Host(#[from] berm::Error),
    /// The task running the call ended without an answer (bermd is
    /// shutting down, or the runtime panicked).
    #[error("the call was lost: {0}")]
    Lost(String),
    /// The call ran but its receipt could not be written (`bermd --receipts`): no result
    /// is given without one.
    #[error("the call ran, but its receipt could not be written, so its result is withheld: {0}")]
    Receipt(String),
}

/// A tool's successful result.
#[derive(Debug, Clone, PartialEq)]
pub struct Done {
    /// The result as the program wrote it.
    pub text: String,
    /// The same result parsed, when the tool declares an output schema (it
    /// has been checked against it): MCP's `structuredContent`.
    pub structured: Option<serde_json::Value>,
    /// The content blocks the program added beside its text (`berm.content`).
    pub content: Vec<berm::Content>,
    /// Set when the program asked its client for input (`berm.ask`) instead of a result.
    pub ask: Option<berm::Ask>,
}

/// What a restart brought back.
#[derive(Debug, Default)]
pub struct RestoreReport {
    /// Programs restored, with where their code came from.
    pub restored: Vec<(String, CompileSource)>,
    /// Records that could not be restored, each with its reason.
    pub skipped: Vec<String>,
}

/// The threads programs run on, apart from the ones serving sockets: a
/// program that spins until its deadline keeps a call thread busy (yielding
/// every epoch tick), never the threads that read requests and write answers.
/// A program that cannot wait on anything ([`catalog::never_waits`]) starts
/// on the serving thread and only comes here if it is still running at its
/// first epoch tick (≤ 1 ms); the hop costs tens of µs on an idle machine,
/// more than a short call itself.
///
/// Two tiers, like an operating system's scheduler favouring interactive
/// work: calls run on the call threads (nice 10) until they have computed
/// for [`LONG_CALL`], then on the background threads (`SCHED_IDLE`), which
/// get only the CPU nothing else wants. A program spinning to its deadline
/// then costs the others next to nothing, and a short call that wakes up
/// preempts it at once instead of waiting out its time slice; a long call
/// still runs at full speed on an idle core.
struct CallThreads {
    calls: Option<tokio::runtime::Runtime>,
    background: Option<tokio::runtime::Runtime>,
}

/// The nice value of the call threads, relative to the serving threads (0):
/// at 10 the kernel gives a serving thread about nine times their share of
/// a contended core.
const CALL_THREAD_NICE: i32 = 10;

/// The nice value of the background threads where `SCHED_IDLE` is refused
/// (a seccomp allow list without `sched_setscheduler`).
const BACKGROUND_NICE: i32 = 19;

/// How much CPU a call uses on the call threads before it moves to the
/// background threads: far more than a call that answers a person or a
/// model in time needs, far less than a program spinning to its deadline.
pub const LONG_CALL: Duration = Duration::from_millis(2);

impl CallThreads {
    fn start() -> std::io::Result<CallThreads> {
        let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
        let calls = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .thread_name("berm-call")
            // Programs run below the threads that read requests and write
            // answers: a program spinning to its deadline then takes only
            // the CPU the serving threads leave, so short calls (which start
            // on a serving thread) keep their latency on a busy machine.
            // Linux applies a nice value per thread. Where it is refused
            // (a seccomp allow list without setpriority) nothing changes.
            .on_thread_start(|| {
                let _ = rustix::process::setpriority_process(None, CALL_THREAD_NICE);
            })
            // I/O too: `http.fetch` connects from the call's own task.
            .enable_all()
            .build()?;
        let background = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .thread_name("berm-long-call")
            .on_thread_start(|| {
                if crate::sys::schedule_idle().is_err() {
                    let _ = rustix::process::setpriority_process(None, BACKGROUND_NICE);
                }
            })
            // A long call may fetch over HTTP too.
            .enable_all()
            .build()?;
        Ok(CallThreads {
            calls: Some(calls),
            background: Some(background),
        })
    }

    /// Runs `call` on the call threads, and on the background threads once
    /// it has computed for [`LONG_CALL`]. The call stops when the returned
    /// future is dropped.
    async fn run<T: Send + 'static>(
        &self,
        call: Pin<Box<dyn Future<Output = T> + Send>>,
    ) -> Result<T, tokio::task::JoinError> {
        let (Some(calls), Some(background)) = (&self.calls, &self.background) else {
            return Ok(call.await);
        };
        let background = background.handle().clone();
        // Aborted when dropped: the task is dropped at its next epoch
        // yield, and the instance with it.
        AbortOnDrop(calls.spawn(tiered(call, background)))
            .await
            .and_then(|moved| moved)
    }
}

/// Polls `call` here until it has used [`LONG_CALL`] of CPU, then hands it
/// to `background`. A call yields at every epoch tick, so it moves within
/// a tick of its budget.
async fn tiered<T: Send + 'static>(
    mut call: Pin<Box<dyn Future<Output = T> + Send>>,
    background: tokio::runtime::Handle,
) -> Result<T, tokio::task::JoinError> {
    let mut used = Duration::ZERO;
    let here = std::future::poll_fn(|cx| {
        let start = thread_cpu();
        let poll = call.as_mut().poll(cx);
        used += thread_cpu().saturating_sub(start);
        match poll {
            Poll::Ready(outcome) => Poll::Ready(Some(outcome)),
            Poll::Pending if used >= LONG_CALL => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    })
    .await;
    match here {
        Some(outcome) => Ok(outcome),
        None => AbortOnDrop(background.spawn(call)).await,
    }
}

/// CPU time the calling thread has used.
fn thread_cpu() -> Duration {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(
        u64::try_from(now.tv_sec).unwrap_or(0),
        u32::try_from(now.tv_nsec).unwrap_or(0),
    )
}

impl Drop for CallThreads {
    fn drop(&mut self) {
        // A runtime may not be dropped from async code, which is where the
        // last reference to the service can go away.
        for runtime in [self.calls.take(), self.background.take()]
            .into_iter()
            .flatten()
        {
            runtime.shutdown_background();
        }
    }
}

/// Whether a deploy is written to the store, and as coming from where.
enum Persist {
    /// A plain deploy, recorded.
    Plain,
    /// From the app folder, recorded with it.
    From(PathBuf),
    /// Not recorded (`bermd --app`).
    No,
}

struct Deployment {
    record: Record,
    source: CompileSource,
    /// Its calls running now, at most `max_calls_per_program`.
    slots: Arc<Semaphore>,
    /// The largest arguments it takes: checked before they are validated.
    max_args_bytes: usize,
    /// What its receipts say of it, when receipts are written.
    facts: Option<Arc<crate::receipts::ProgramFacts>>,
}

/// Programs by name, persisted under `$BERM_HOME`.
pub struct Service {
    berm: Berm,
    calls: CallThreads,
    home: Home,
    store: Store,
    kv_caps: KvCaps,
    tools_page_size: usize,
    max_host_ops: usize,
    max_host_memory: usize,
    max_calls_per_program: usize,
    pub(crate) egress: EgressSetup,
    catalog: RwLock<Arc<Catalog>>,
    deployments: RwLock<HashMap<String, Deployment>>,
    keyspaces: Mutex<HashMap<String, Arc<KvStore>>>,
    kv_postgres: Option<Arc<berm_kv_postgres::PgKv>>,
    /// Deploys and removes happen one at a time, so memory and disk agree.
    changing: Mutex<()>,
    changes: broadcast::Sender<()>,
    metrics: crate::metrics::Metrics,
    receipts: Option<crate::receipts::Receipts>,
    tracing: Option<crate::otel::Tracing>,
    ask_key: crate::ask::AskKey,
    tasks: crate::tasks::Tasks,
}

fn source_name(source: CompileSource) -> &'static str {
    match source {
        CompileSource::Compiled => "compiled",
        CompileSource::DiskCache => "disk_cache",
        CompileSource::Precompiled => "precompiled",
        CompileSource::Memory => "memory",
    }
}

impl Service {
    /// Opens `$BERM_HOME` and restores every deployment recorded there. A
    /// record that cannot be restored is reported and skipped.
    pub fn open(config: &ServiceConfig) -> Result<(Arc<Service>, RestoreReport), OpenError> {
        let home = Home::create(&config.home)?;
        let ask_key = match &config.ask_key {
            Some(path) => crate::ask::AskKey::load(path)?,
            None => crate::ask::AskKey::load_or_create(&config.home.join(crate::ask::KEY_FILE))?,
        };
        let engine = Engine::new(&config.engine)?;
        let berm = Berm::with_code_dirs(
            &engine,
            berm::call::DEFAULT_CALL_DEPTH,
            syscalls::table(config.kv_postgres.is_some()),
            CodeDirs {
                cache: Some(home.code_cache()),
                precompiled: config.code_dir.clone(),
            },
        );
        let (changes, _) = broadcast::channel(16);
        let service = Arc::new(Service {
            berm,
            calls: CallThreads::start().map_err(OpenError::CallThreads)?,
            store: Store::new(home.clone()),
            home,
            kv_caps: config.kv_caps,
            tools_page_size: config.tools_page_size.max(1),
            max_host_ops: config.max_host_ops,
            max_host_memory: config.max_host_memory,
            max_calls_per_program: config.max_calls_per_program.max(1),
            egress: EgressSetup::new(
                config.extra_ca.clone(),
                config.egress_caps,
                config.egress_broker.clone(),
            )?,
            catalog: RwLock::new(Arc::new(Catalog::default())),
            deployments: RwLock::new(HashMap::new()),
            keyspaces: Mutex::new(HashMap::new()),
            kv_postgres: config.kv_postgres.clone(),
            changing: Mutex::new(()),
            changes,
            metrics: crate::metrics::Metrics::new(),
            receipts: config.receipts.clone().map(crate::receipts::Receipts::new),
            tracing: config.tracing.clone(),
            tasks: crate::tasks::Tasks::new(
                config.max_task_deadline,
                config.max_tasks_per_session,
                config.kv_postgres.clone(),
                ask_key.task_seal(),
            ),
            ask_key,
        });
        service
            .berm
            .set_call_gate(Arc::new(NestedCalls(Arc::downgrade(&service))));
        let mut report = RestoreReport::default();
        let (records, problems) = service.store.load_all();
        for problem in problems {
            report.skipped.push(error_chain(&problem));
            log_skip(&problem);
        }
        for (record, image) in records {
            let name = record.name.clone();
            match service.install(record, &image) {
                Ok(source) => {
                    tracing::info!(program = %name, source = source_name(source), "restored");
                    report.restored.push((name, source));
                }
                Err(e) => {
                    let message = format!("`{name}`: {}", error_chain(&e));
                    tracing::error!("skipped deployment {message}");
                    report.skipped.push(message);
                }
            }
        }
        service.rebuild_catalog();
        Ok((service, report))
    }

    /// The data directory.
    pub fn home(&self) -> &Home {
        &self.home
    }

    /// The runtime, for embedding and benchmarks.
    pub fn berm(&self) -> &Berm {
        &self.berm
    }

    /// The key that seals the state of programs that ask their client for input.
    pub fn ask_key(&self) -> &crate::ask::AskKey {
        &self.ask_key
    }

    /// The tasks (MCP tasks extension) this bermd runs.
    pub fn tasks(&self) -> &crate::tasks::Tasks {
        &self.tasks
    }

    /// Most tools in one `tools/list` page.
    pub fn tools_page_size(&self) -> usize {
        self.tools_page_size
    }

    /// A receiver that hears about every deploy and remove.
    pub fn subscribe(&self) -> broadcast::Receiver<()> {
        self.changes.subscribe()
    }

    /// The current tool catalog.
    pub fn catalog(&self) -> Arc<Catalog> {
        self.catalog
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Deploys `image` under `name` with `grants`, replacing what the name
    /// held, and persists it. Blocking: it may compile.
    pub fn deploy(
        &self,
        name: &str,
        image: &[u8],
        grants: Vec<Grant>,
        limits: LimitsSpec,
    ) -> Result<DeployResponse, DeployError> {
        self.deploy_as(name, image, grants, limits, BTreeMap::new(), Persist::Plain)
    }

    /// Like [`Service::deploy`], recording that the program comes from the app folder
    /// `app_dir` (canonical), or that it is a plain deploy when `None`: what
    /// [`Service::name_state`] tells the next folder deployed under the name.
    pub fn deploy_from(
        &self,
        name: &str,
        image: &[u8],
        grants: Vec<Grant>,
        limits: LimitsSpec,
        app_dir: Option<PathBuf>,
        serve_as: BTreeMap<String, String>,
    ) -> Result<DeployResponse, DeployError> {
        let persist = match app_dir {
            Some(dir) => Persist::From(dir),
            None => Persist::Plain,
        };
        self.deploy_as(name, image, grants, limits, serve_as, persist)
    }

    /// Like [`Service::deploy`] but nothing is written to the store: the
    /// program lives as long as this process. For programs of an app folder
    /// (`bermd --app`), which the folder brings back on every start.
    pub fn deploy_transient(
        &self,
        name: &str,
        image: &[u8],
        grants: Vec<Grant>,
        limits: LimitsSpec,
        serve_as: BTreeMap<String, String>,
    ) -> Result<DeployResponse, DeployError> {
        self.deploy_as(name, image, grants, limits, serve_as, Persist::No)
    }

    fn deploy_as(
        &self,
        name: &str,
        image: &[u8],
        grants: Vec<Grant>,
        limits: LimitsSpec,
        serve_as: BTreeMap<String, String>,
        persist: Persist,
    ) -> Result<DeployResponse, DeployError> {
        // The name becomes file names under $BERM_HOME: check it before
        // anything touches the disk.
        if !berm_abi::is_valid_program_name(name) {
            return Err(berm::DeployError::InvalidName(name.chars().take(80).collect()).into());
        }
        let _changing = self.changing.lock().unwrap_or_else(|p| p.into_inner());
        let grants = normalize_grants(grants)?;
        let manifest = berm::Manifest::from_image(image).map_err(berm::DeployError::from)?;
        let current = self.catalog();
        catalog::check_served_names(name, &manifest, &serve_as, &current)
            .map_err(DeployError::ServedName)?;
        let mut validators = current.validators().clone();
        catalog::check_schemas(&manifest, &mut validators).map_err(DeployError::Schema)?;
        catalog::check_resource_uris(name, &manifest, &current).map_err(DeployError::ServedName)?;
        let previous = self.berm.get(name).map(|p| p.digest.to_string());
        let app_dir = match &persist {
            Persist::From(dir) => Some(dir.clone()),
            Persist::Plain | Persist::No => None,
        };
        let digest = berm::Digest::of(image);
        let record = Record {
            name: name.to_string(),
            digest: digest.to_string(),
            grants,
            limits,
            app_dir,
            serve_as,
        };
        self.install(record.clone(), image)?;
        let saved = match persist {
            Persist::Plain | Persist::From(_) => self.store.save(&record, &digest, image),
            Persist::No => Ok(()),
        };
        if let Err(source) = saved {
            // Not on disk means not deployed: a restart would not bring it
            // back, so do not serve it now.
            self.berm.remove(name);
            self.write_deployments().remove(name);
            self.rebuild_catalog();
            return Err(DeployError::Persist {
                name: name.to_string(),
                source,
            });
        }
        self.rebuild_catalog_with(&validators);
        let program = self
            .view(name)
            .ok_or_else(|| DeployError::Schema(format!("`{name}` vanished while deploying")))?;
        tracing::info!(program = %name, digest = %program.digest, source = %program.code_source, "deployed");
        Ok(DeployResponse {
            program,
            replaced: previous,
        })
    }

    /// Removes `name`. Its state stays under `$BERM_HOME/state/<name>`, so a
    /// redeploy under the same name finds its keyspace again.
    pub fn remove(&self, name: &str) -> Result<RemoveResponse, RemoveError> {
        let _changing = self.changing.lock().unwrap_or_else(|p| p.into_inner());
        let digest = self
            .berm
            .remove(name)
            .ok_or_else(|| RemoveError::NotDeployed(name.to_string()))?;
        self.write_deployments().remove(name);
        self.rebuild_catalog();
        self.store
            .delete(name)
            .map_err(|source| RemoveError::Persist {
                name: name.to_string(),
                source,
            })?;
        tracing::info!(program = %name, "removed");
        Ok(RemoveResponse {
            name: name.to_string(),
            digest: digest.to_string(),
        })
    }

    /// Every deployed program, sorted by name.
    pub fn list(&self) -> Vec<ProgramView> {
        self.berm
            .list()
            .into_iter()
            .filter_map(|info| self.view_of(info))
            .collect()
    }

    /// One deployed program.
    pub fn view(&self, name: &str) -> Option<ProgramView> {
        self.berm.get(name).and_then(|info| self.view_of(info))
    }

    fn view_of(&self, info: berm::ProgramInfo) -> Option<ProgramView> {
        let deployments = self.deployments.read().unwrap_or_else(|p| p.into_inner());
        let deployment = deployments.get(&info.name)?;
        Some(ProgramView {
            name: info.name,
            digest: info.digest.to_string(),
            grants: deployment.record.grants.clone(),
            limits: LimitsSpec {
                deadline_ms: Some(info.limits.deadline.as_millis() as u64),
                memory_bytes: Some(info.limits.memory_bytes as u64),
            },
            code_source: source_name(deployment.source).to_string(),
            manifest: (*info.manifest).clone(),
            app_dir: deployment.record.app_dir.clone(),
            serve_as: deployment.record.serve_as.clone(),
        })
    }

    /// What a program deployed under `name` would find there: the deployment it replaces
    /// (with the app folder it came from), the keyspace and the stored secrets it takes
    /// over. Nothing is created or changed.
    pub fn name_state(&self, name: &str) -> Result<NameState, StateError> {
        let secrets = self.list_secrets(name)?;
        let deployment = self
            .deployments
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .map(|d| DeployedFrom {
                digest: d.record.digest.clone(),
                app_dir: d.record.app_dir.clone(),
            });
        if let Some(pg) = &self.kv_postgres {
            let (keys, bytes) = pg
                .keyspace(name)
                .size_blocking()
                .map_err(StateError::Database)?;
            return Ok(NameState {
                program: name.to_string(),
                deployment,
                keyspace: (keys > 0).then_some(KeyspaceSize { keys, bytes }),
                secrets,
            });
        }
        let path = self.home.state_root().join(name).join("kv.log");
        let fail = |source| StateError::Keyspace {
            path: path.clone(),
            source,
        };
        let keyspace = match std::fs::metadata(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(fail(e)),
            Ok(meta) => {
                let open = self
                    .keyspaces
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .get(name)
                    .map(|kv| kv.keys());
                let keys = match open {
                    Some(keys) => keys,
                    None => crate::kv::count_keys(&path, &self.kv_caps).map_err(fail)?,
                };
                Some(KeyspaceSize {
                    keys: keys as u64,
                    bytes: meta.len(),
                })
            }
        };
        Ok(NameState {
            program: name.to_string(),
            deployment,
            keyspace,
            secrets,
        })
    }

    /// Calls the tool MCP clients see as `name` (`{program}_{tool}`) with
    /// `args` after checking them against the tool's input schema; a result
    /// of a tool with an output schema is checked against that.
    ///
    /// Dropping the returned future stops the call within one epoch tick:
    /// that is how a cancelled request or a client that went away frees its
    /// instance.
    ///
    /// With `log`, the program's `log.write` lines also go to that MCP
    /// session as `notifications/message`.
    pub async fn call(
        &self,
        name: &str,
        args: &serde_json::Value,
        log: Option<LogTo<'_>>,
    ) -> Result<Result<Done, Failure>, CallError> {
        self.call_with(name, args, log, CallExtras::default()).await
    }

    /// [`Service::call`], with what `berm.input` hands the program and a deadline of its own
    /// (a task's).
    pub async fn call_with(
        &self,
        name: &str,
        args: &serde_json::Value,
        log: Option<LogTo<'_>>,
        extras: CallExtras,
    ) -> Result<Result<Done, Failure>, CallError> {
        let catalog = self.catalog();
        let Some(entry) = catalog.get(name) else {
            self.metrics.unknown_tool();
            return Err(CallError::NoSuchTool(name.to_string()));
        };
        // Both dropped with the call's future when it is cancelled: they then count as such.
        let timer = self.metrics.start(&entry.program, &entry.tool);
        let span = self.tracing.as_ref().map(|tracing| {
            let call = crate::otel::CallAttributes {
                method: extras.method.unwrap_or("tools/call"),
                served: name,
                program: &entry.program,
                tool: &entry.tool,
                digest: &entry.digest,
            };
            tracing.call(extras.trace_parent.as_ref(), call)
        });
        let handle = span.as_ref().map(crate::otel::Span::handle);
        let result = self
            .call_counted(name, entry, args, log, extras, handle)
            .await;
        timer.finish(match &result {
            Ok(Ok(_)) => crate::metrics::Outcome::Ok,
            Ok(Err(_)) => crate::metrics::Outcome::Failed,
            Err(_) => crate::metrics::Outcome::Error,
        });
        if let Some(span) = span {
            match &result {
                Ok(Ok(done)) if done.ask.is_some() => span.end("input_required", None),
                Ok(Ok(_)) => span.end("ok", None),
                // MCP's conventions name a result with `isError` so.
                Ok(Err(_)) => span.end("failed", Some("tool_error")),
                Err(e) => span.end("error", Some(call_error_type(e))),
            }
        }
        result
    }

    /// Calls, metrics aside, with its receipt when receipts are written: see
    /// [`Service::call`]. The receipt is written before this returns, so before the reply.
    async fn call_counted(
        &self,
        name: &str,
        entry: &catalog::ToolEntry,
        args: &serde_json::Value,
        log: Option<LogTo<'_>>,
        extras: CallExtras,
        span: Option<crate::otel::SpanHandle>,
    ) -> Result<Result<Done, Failure>, CallError> {
        let Some(receipts) = &self.receipts else {
            let trace = crate::trace::CallTrace::of(None, span);
            return self
                .call_traced(name, entry, args, log, extras, trace)
                .await;
        };
        let Some(facts) = self.facts(&entry.program) else {
            // Removed meanwhile: the call is refused as for any program that is not there.
            return Err(berm::Error::NoSuchProgram(entry.program.clone()).into());
        };
        let pending = receipts.begin(
            &entry.program,
            &entry.tool,
            facts,
            berm_receipts::arguments_sha256(args),
            None,
        );
        let trace = crate::trace::CallTrace::of(Some(pending.record()), span);
        let outcome = self
            .call_traced(name, entry, args, log, extras, trace)
            .await;
        let (kind, text) = receipt_of(&outcome);
        let content = match &outcome {
            Ok(Ok(done)) => done.content.as_slice(),
            _ => &[],
        };
        match pending.finish(kind, &text, content) {
            Ok(_) => outcome,
            Err(e) => Err(CallError::Receipt(error_chain(&e))),
        }
    }

    /// Runs the call, with `trace` handed to its syscalls.
    async fn call_traced(
        &self,
        name: &str,
        entry: &catalog::ToolEntry,
        args: &serde_json::Value,
        log: Option<LogTo<'_>>,
        extras: CallExtras,
        trace: Option<berm::CallTrace>,
    ) -> Result<Result<Done, Failure>, CallError> {
        // Serializing a Value cannot fail.
        let bytes = serde_json::to_vec(args).unwrap_or_default();
        let slot = self.admit(entry, &bytes, Some(args))?;
        let (berm, program, tool) = (self.berm.clone(), entry.program.clone(), entry.tool.clone());
        let progress = log.and_then(|to| {
            let token = to.progress?.clone();
            let sink = to.session.progress_for_call(to.peer, token);
            Some(Arc::new(sink) as Arc<dyn berm::ProgressSink>)
        });
        let run = async move {
            // Held until the call ends, even when its client has gone.
            let _slot = slot;
            let options = berm::CallOptions {
                deadline: extras.deadline,
                trace,
                progress,
                input: extras.input,
            };
            berm.call_with(None, &program, &tool, bytes, &options).await
        };
        let mut run: Pin<Box<dyn Future<Output = _> + Send>> = match log {
            Some(to) if entry.logs => {
                Box::pin(logs::scope(to.session.for_call(to.peer, to.level), run))
            }
            _ => Box::pin(run),
        };
        if entry.starts_inline {
            // One poll here, on the serving task: a short call (most are a
            // few µs) is done before it would have reached a call thread,
            // and costs no cross-thread wake-up either way. A call still
            // running at its first epoch tick yields, and moves on.
            let first = std::future::poll_fn(|cx| Poll::Ready(run.as_mut().poll(cx))).await;
            if let Poll::Ready(outcome) = first {
                return checked(name, entry, outcome?);
            }
        }
        let outcome = self
            .calls
            .run(run)
            .await
            .map_err(|e| CallError::Lost(e.to_string()))?;
        checked(name, entry, outcome?)
    }

    /// What receipts say of `program`, when receipts are written and it is deployed.
    fn facts(&self, program: &str) -> Option<Arc<crate::receipts::ProgramFacts>> {
        self.deployments
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(program)
            .and_then(|d| d.facts.clone())
    }

    /// Whether calls make spans (traces are exported).
    pub fn traced(&self) -> bool {
        self.tracing.is_some()
    }

    /// The receipt log, when receipts are written.
    pub fn receipt_log(&self) -> Option<&Arc<berm_receipts::ReceiptLog>> {
        self.receipts.as_ref().map(|r| r.log())
    }

    /// Calls and their outcomes, for `/metrics`.
    pub fn metrics(&self) -> &crate::metrics::Metrics {
        &self.metrics
    }

    /// The one gate every call passes before its program runs, from outside
    /// ([`Service::call`]) and from another program (`berm.call`, through [`NestedCalls`]):
    /// a running-call slot of the program, the argument cap, then the tool's input schema
    /// (`args` when the caller has the arguments parsed; else they are parsed from
    /// `bytes`). The slot is held until the call ends.
    ///
    /// # Errors
    /// [`berm::Error::Busy`], [`berm::Error::ArgsTooLarge`], [`berm::Error::InvalidArguments`];
    /// [`berm::Error::NoSuchProgram`] when the program went away meanwhile.
    pub(crate) fn admit(
        &self,
        entry: &catalog::ToolEntry,
        bytes: &[u8],
        args: Option<&serde_json::Value>,
    ) -> Result<OwnedSemaphorePermit, berm::Error> {
        let (program, tool) = (&entry.program, &entry.tool);
        let (slot, max_args_bytes) =
            {
                let deployments = self.deployments.read().unwrap_or_else(|p| p.into_inner());
                let deployment = deployments
                    .get(program)
                    .ok_or_else(|| berm::Error::NoSuchProgram(program.clone()))?;
                let slot = deployment.slots.clone().try_acquire_owned().map_err(|_| {
                    berm::Error::Busy {
                        program: program.clone(),
                        cap: self.max_calls_per_program,
                    }
                })?;
                (slot, deployment.max_args_bytes)
            };
        if bytes.len() > max_args_bytes {
            // Refused before validation, so validating is bounded work.
            return Err(berm::Error::ArgsTooLarge {
                program: program.clone(),
                tool: tool.clone(),
                size: bytes.len(),
                cap: max_args_bytes,
            });
        }
        let invalid = |message: String| berm::Error::InvalidArguments {
            program: program.clone(),
            tool: tool.clone(),
            message,
        };
        let parsed;
        let args = match args {
            Some(args) => args,
            None => {
                parsed = serde_json::from_slice(bytes)
                    .map_err(|e| invalid(format!("the arguments are not JSON ({e})")))?;
                &parsed
            }
        };
        let problems = schema_problems(&entry.validator, args);
        if !problems.is_empty() {
            return Err(invalid(problems));
        }
        Ok(slot)
    }

    fn write_deployments(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<String, Deployment>> {
        self.deployments.write().unwrap_or_else(|p| p.into_inner())
    }

    fn rebuild_catalog(&self) {
        let current = self.catalog();
        self.rebuild_catalog_with(current.validators());
    }

    /// Rebuilds the catalog, compiling only the schemas `known` has no validator for.
    fn rebuild_catalog_with(&self, known: &catalog::Validators) {
        let serve_as: HashMap<String, BTreeMap<String, String>> = self
            .deployments
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|(_, d)| !d.record.serve_as.is_empty())
            .map(|(name, d)| (name.clone(), d.record.serve_as.clone()))
            .collect();
        let catalog = Arc::new(Catalog::build(&self.berm.list(), &serve_as, known));
        *self.catalog.write().unwrap_or_else(|p| p.into_inner()) = catalog;
        let _ = self.changes.send(());
    }

    /// Opens what the grants reach and hands the image to the runtime.
    fn install(&self, record: Record, image: &[u8]) -> Result<CompileSource, DeployError> {
        let mut host = ProgramHost::new(self.max_host_ops);
        for grant in &record.grants {
            match grant {
                Grant::Kv => host.kv = Some(self.keyspace(&record.name)?),
                Grant::Fs {
                    dir,
                    read_only,
                    quota,
                } => {
                    let root =
                        FsRoot::open(dir, *read_only, *quota).map_err(|e| DeployError::Grant {
                            grant: grant.to_string(),
                            message: format!("cannot open the directory: {e}"),
                        })?;
                    host.fs = Some(Arc::new(root));
                }
                Grant::Log
                | Grant::Clock
                | Grant::Random
                | Grant::Net(_)
                | Grant::Secret { .. }
                | Grant::Call { .. }
                | Grant::Ask => {}
            }
        }
        host.net = self
            .egress
            .for_grants(
                &record.name,
                &record.grants,
                self.secret_store(&record.name),
            )
            .map_err(|e| DeployError::Grant {
                grant: "net".into(),
                message: e.to_string(),
            })?;
        let mut limits = self.berm.engine().config().limits.clone();
        if let Some(ms) = record.limits.deadline_ms {
            limits.deadline = Duration::from_millis(ms);
        }
        if let Some(bytes) = record.limits.memory_bytes {
            limits.memory_bytes = usize::try_from(bytes).unwrap_or(usize::MAX);
        }
        let max_args_bytes = limits.max_args_bytes;
        let deployed = self.berm.deploy_with(
            &record.name,
            image,
            DeployOptions {
                grants: Grants::Only(record.grants.iter().cloned().collect()),
                limits: Some(limits),
                data: Some(Arc::new(host)),
                host_memory_bytes: Some(self.max_host_memory),
            },
        )?;
        let facts = self.receipts.as_ref().map(|_| {
            Arc::new(crate::receipts::ProgramFacts {
                program_sha256: deployed.digest.hex(),
                code_sha256: self.berm.code_sha256(&record.name),
                grants: record.grants.iter().map(ToString::to_string).collect(),
            })
        });
        self.write_deployments().insert(
            record.name.clone(),
            Deployment {
                record,
                source: deployed.source,
                slots: Arc::new(Semaphore::new(self.max_calls_per_program)),
                max_args_bytes,
                facts,
            },
        );
        Ok(deployed.source)
    }

    /// The keyspace of `name`, opened once. A log corrupt in the middle
    /// does not stop the deploy: the program runs, its kv syscalls fail with
    /// the reason and how to recover, and the file stays as it is. It is
    /// opened again on the next deploy or restart.
    fn keyspace(&self, name: &str) -> Result<Keyspace, DeployError> {
        if let Some(pg) = &self.kv_postgres {
            return Ok(Keyspace::Postgres(pg.keyspace(name), self.kv_caps));
        }
        let mut keyspaces = self.keyspaces.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(kv) = keyspaces.get(name) {
            return Ok(Keyspace::Log(kv.clone()));
        }
        let path = self.home.state(name)?.join("kv.log");
        match KvStore::open(&path, self.kv_caps) {
            Ok(kv) => {
                let kv = Arc::new(kv);
                keyspaces.insert(name.to_string(), kv.clone());
                Ok(Keyspace::Log(kv))
            }
            Err(source @ KvError::Corrupt { .. }) => {
                let message = format!("`{name}`: {source}");
                tracing::error!("kv not served: {message}");
                Ok(Keyspace::Unavailable(message.into()))
            }
            Err(source) => Err(DeployError::State {
                name: name.to_string(),
                source,
            }),
        }
    }
}

/// Where a call's program logs and progress go besides bermd's log: an MCP session.
#[derive(Clone, Copy)]
pub struct LogTo<'a> {
    /// The session's logging state.
    pub session: &'a SessionLog,
    /// The session's peer.
    pub peer: &'a rmcp::service::Peer<rmcp::RoleServer>,
    /// The request's progress token, when it asked for progress: the program's
    /// `berm.progress` reports then go to the peer as `notifications/progress`.
    pub progress: Option<&'a rmcp::model::ProgressToken>,
    /// Which level the call's log messages are held to.
    pub level: logs::CallLevel,
}

/// What a call carries besides its arguments.
#[derive(Default, Clone)]
pub struct CallExtras {
    /// What `berm.input` hands the program: frames `[responses, state,
    /// client_capabilities]` ([`berm_abi::ask`]).
    pub input: Option<Arc<[u8]>>,
    /// A deadline instead of the program's own: a task's.
    pub deadline: Option<std::time::Duration>,
    /// The trace the request continues (its `_meta.traceparent`), when traces are exported.
    pub trace_parent: Option<crate::otel::TraceParent>,
    /// The MCP method that asked for the call, for its span's name; `None` is `tools/call`.
    pub method: Option<&'static str>,
}

/// A task on the call threads that is aborted when its handle is dropped, so
/// that dropping a call's future stops the call.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Future for AbortOnDrop<T> {
    type Output = Result<T, tokio::task::JoinError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.0).poll(cx)
    }
}

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        // A no-op for a task that has finished.
        self.0.abort();
    }
}

/// A successful result, checked against the tool's output schema when it
/// declares one. Tools without one (most) pay nothing here.
fn checked(
    name: &str,
    entry: &catalog::ToolEntry,
    outcome: Result<berm::Output, Failure>,
) -> Result<Result<Done, Failure>, CallError> {
    let berm::Output { text, content, ask } = match outcome {
        Ok(output) => output,
        Err(failure) => return Ok(Err(failure)),
    };
    let output = match &entry.output {
        Some(output) if ask.is_none() => output,
        // A question is not a result: there is nothing to check yet.
        _ => {
            return Ok(Ok(Done {
                text,
                structured: None,
                content,
                ask,
            }));
        }
    };
    let invalid = |message: String| CallError::InvalidOutput {
        tool: name.to_string(),
        message,
    };
    let value: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| invalid(format!("the result is not JSON ({e})")))?;
    let problems = schema_problems(output, &value);
    if !problems.is_empty() {
        return Err(invalid(problems));
    }
    Ok(Ok(Done {
        text,
        structured: Some(value),
        content,
        ask: None,
    }))
}

/// The service's checks of a call between programs ([`Service::admit`]), installed in its
/// runtime: a weak reference, since the runtime is the service's own.
struct NestedCalls(std::sync::Weak<Service>);

impl berm::CallGate for NestedCalls {
    fn admit(
        &self,
        program: &str,
        tool: &str,
        args: &[u8],
        caller: Option<&berm::CallTrace>,
    ) -> Result<berm::Admitted, berm::Error> {
        let Some(service) = self.0.upgrade() else {
            return Ok(berm::Admitted::default());
        };
        let catalog = service.catalog();
        // A tool that is not served is not deployed: the runtime names it as for any call.
        let Some(entry) = catalog.get(&berm_abi::served_name(program, tool)) else {
            return Ok(berm::Admitted::default());
        };
        // With receipts the arguments are parsed once, here, for the schema and the hash (the
        // runtime has checked their size); arguments that are not JSON are left to `admit`,
        // which refuses them as for any call.
        let parsed = service
            .receipts
            .as_ref()
            .and_then(|_| serde_json::from_slice::<serde_json::Value>(args).ok());
        let slot = service.admit(entry, args, parsed.as_ref())?;
        let caller = caller.and_then(crate::trace::CallTrace::from_runtime);
        let pending = match (&service.receipts, service.facts(program), &parsed) {
            (Some(receipts), Some(facts), Some(value)) => {
                let parent = caller.as_ref().and_then(|c| c.receipt.clone());
                Some(receipts.begin(
                    program,
                    tool,
                    facts,
                    berm_receipts::arguments_sha256(value),
                    parent,
                ))
            }
            _ => None,
        };
        // The callee's span is the caller's child: the caller waits on it.
        let span = caller.as_ref().and_then(|c| c.span.as_ref()).map(|parent| {
            use opentelemetry::KeyValue;
            parent.child(
                "berm.call",
                vec![
                    KeyValue::new("gen_ai.tool.name", berm_abi::served_name(program, tool)),
                    KeyValue::new("berm.program", program.to_string()),
                    KeyValue::new("berm.tool", tool.to_string()),
                    KeyValue::new("berm.program.digest", entry.digest.to_string()),
                ],
            )
        });
        Ok(berm::Admitted {
            trace: crate::trace::CallTrace::of(
                pending.as_ref().map(crate::receipts::Pending::record),
                span.as_ref().map(crate::otel::Span::handle),
            ),
            hold: Some(Box::new(NestedHold {
                _slot: slot,
                pending,
                span,
            })),
        })
    }

    fn finished(
        &self,
        admitted: berm::Admitted,
        result: &Result<Result<berm::Output, Failure>, berm::Error>,
    ) {
        let Some(hold) = admitted
            .hold
            .and_then(|hold| hold.downcast::<NestedHold>().ok())
        else {
            return;
        };
        if let Some(span) = hold.span {
            match result {
                Ok(Ok(_)) => span.end("ok", None),
                Ok(Err(_)) => span.end("failed", Some("tool_error")),
                Err(e) => span.end("error", Some(host_error_type(e))),
            }
        }
        if let Some(pending) = hold.pending {
            // A program calling another reads its text only: that is what its receipt names.
            let (kind, text): (_, std::borrow::Cow<'_, str>) = match result {
                Ok(Ok(output)) => (berm_receipts::Outcome::Ok, output.text.as_str().into()),
                Ok(Err(failure)) => (
                    berm_receipts::Outcome::Failed,
                    failure.message.as_str().into(),
                ),
                Err(e) => (berm_receipts::Outcome::Error, e.to_string().into()),
            };
            // A failure is logged where it happens; the caller's own receipt still comes.
            let _ = pending.finish(kind, &text, &[]);
        }
    }
}

/// What a call between programs holds until it ends: its call slot, and its receipt
/// while it is not written.
struct NestedHold {
    _slot: OwnedSemaphorePermit,
    pending: Option<crate::receipts::Pending>,
    span: Option<crate::otel::Span>,
}

/// A span's `error.type` for a call bermd refused or stopped.
fn call_error_type(error: &CallError) -> &'static str {
    match error {
        CallError::NoSuchTool(_) => "no_such_tool",
        CallError::InvalidOutput { .. } => "invalid_output",
        CallError::Host(e) => host_error_type(e),
        CallError::Lost(_) => "lost",
        CallError::Receipt(_) => "receipt",
    }
}

/// A span's `error.type` for what the runtime refused or stopped.
fn host_error_type(error: &berm::Error) -> &'static str {
    use berm::Error;
    match error {
        Error::Timeout { .. } => "timeout",
        Error::MemoryCap { .. } => "memory_cap",
        Error::Busy { .. } => "busy",
        Error::InvalidArguments { .. } => "invalid_arguments",
        Error::ArgsTooLarge { .. } => "args_too_large",
        Error::ResultTooLarge { .. } => "result_too_large",
        Error::Trap { .. } | Error::StackOverflow { .. } | Error::Panicked { .. } => "trap",
        Error::NotGranted { .. } | Error::CallNotGranted { .. } | Error::CallNotDeclared { .. } => {
            "not_granted"
        }
        Error::DepthExceeded { .. } => "depth_exceeded",
        Error::NoSuchProgram(_) | Error::NoSuchTool { .. } => "no_such_tool",
        _ => "host_error",
    }
}

/// How a receipt names an outcome, and the text the client gets for it (what
/// `mcp::call_result` puts in the result's content).
fn receipt_of(
    outcome: &Result<Result<Done, Failure>, CallError>,
) -> (berm_receipts::Outcome, std::borrow::Cow<'_, str>) {
    match outcome {
        // A run that ended asking: what it asked stands for its text.
        Ok(Ok(Done { ask: Some(ask), .. })) => (
            berm_receipts::Outcome::Ok,
            serde_json::Value::Object(ask.requests.clone())
                .to_string()
                .into(),
        ),
        Ok(Ok(done)) => (berm_receipts::Outcome::Ok, done.text.as_str().into()),
        Ok(Err(failure)) => (
            berm_receipts::Outcome::Failed,
            failure.message.as_str().into(),
        ),
        Err(e) => (berm_receipts::Outcome::Error, e.to_string().into()),
    }
}

/// What is wrong with `value` by `schema`, naming each field (at most five
/// problems), or an empty string when nothing is.
fn schema_problems(schema: &jsonschema::Validator, value: &serde_json::Value) -> String {
    let problems: Vec<String> = schema
        .iter_errors(value)
        .take(5)
        .map(|e| {
            let at = e.instance_path().to_string();
            if at.is_empty() {
                e.to_string()
            } else {
                format!("`{}`: {e}", at.trim_start_matches('/').replace('/', "."))
            }
        })
        .collect();
    problems.join("; ")
}

/// Sorts and dedups grants; an `fs` directory must be absolute and exist,
/// and is canonicalized so the record names the real directory.
fn normalize_grants(grants: Vec<Grant>) -> Result<Vec<Grant>, DeployError> {
    let mut out = Vec::new();
    for grant in grants {
        let grant = match grant {
            Grant::Fs {
                dir,
                read_only,
                quota,
            } => {
                let refuse = |message: String| DeployError::Grant {
                    grant: Grant::Fs {
                        dir: dir.clone(),
                        read_only,
                        quota,
                    }
                    .to_string(),
                    message,
                };
                if !dir.is_absolute() {
                    return Err(refuse("the directory must be an absolute path".into()));
                }
                let real = std::fs::canonicalize(&dir)
                    .map_err(|e| refuse(format!("cannot resolve the directory: {e}")))?;
                if !real.is_dir() {
                    return Err(refuse("not a directory".into()));
                }
                Grant::Fs {
                    dir: real,
                    read_only,
                    quota,
                }
            }
            other => other,
        };
        out.push(grant);
    }
    out.sort();
    out.dedup();
    if out.iter().filter(|g| matches!(g, Grant::Fs { .. })).count() > 1 {
        return Err(DeployError::Grant {
            grant: "fs".into(),
            message: "at most one fs directory may be granted".into(),
        });
    }
    Ok(out)
}

fn log_skip(problem: &LoadError) {
    tracing::error!("skipped deployment: {}", error_chain(problem));
}

/// An error and its causes, joined, for logs and reports: the one formatter of every crate.
pub use berm_errors::chain as error_chain;
