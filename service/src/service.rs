//! The service: what bermd serves, behind every transport (MCP and the control API). It only
//! wires the two parts that own its state: the [`Registry`] (the runtime, the deployments,
//! the catalog, the store and the secrets) and the call path, [`Calls`] (admission, the call
//! threads, metrics, traces and receipts), which reads the registry.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use berm::{Berm, CodeDirs, Engine, EngineConfig};
use berm_control::{DeployResponse, Grant, LimitsSpec, NameState, ProgramView, RemoveResponse};
use berm_egress::secret::SecretError;
use tokio::sync::broadcast;

use crate::calls::Calls;
use crate::catalog::Catalog;
use crate::egress::EgressSetup;
use crate::home::{Home, HomeError};
use crate::kv::KvCaps;
use crate::nested::NestedCalls;
use crate::registry::{Registry, RegistryConfig};
use crate::syscalls;

pub use crate::call_threads::LONG_CALL;
pub use crate::calls::{CallError, CallExtras, CallOutcome, Done, LogTo};
pub use crate::registry::{
    InstallError, RemoveError, ResolveError, RestoreReport, StateError, Target,
};
/// An error and its causes, joined, for logs and reports: the one formatter of every crate.
pub use berm_errors::chain as error_chain;

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

/// Programs by name, persisted under `$BERM_HOME`, and the calls made to them: the registry
/// and the call path, wired together.
pub struct Service {
    registry: Arc<Registry>,
    calls: Arc<Calls>,
    ask_key: crate::ask::AskKey,
    tasks: crate::tasks::Tasks,
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
        let egress = EgressSetup::new(
            config.extra_ca.clone(),
            config.egress_caps,
            config.egress_broker.clone(),
        )?;
        let registry = Arc::new(Registry::new(
            berm,
            home,
            egress,
            RegistryConfig {
                kv_caps: config.kv_caps,
                tools_page_size: config.tools_page_size,
                max_host_ops: config.max_host_ops,
                max_host_memory: config.max_host_memory,
                max_calls_per_program: config.max_calls_per_program,
                kv_postgres: config.kv_postgres.clone(),
                receipts: config.receipts.is_some(),
            },
        ));
        let calls = Arc::new(
            Calls::start(
                registry.clone(),
                config.receipts.clone(),
                config.tracing.clone(),
            )
            .map_err(OpenError::CallThreads)?,
        );
        registry
            .berm()
            .set_call_gate(Arc::new(NestedCalls(Arc::downgrade(&calls))));
        let report = registry.restore();
        let service = Arc::new(Service {
            registry,
            calls,
            tasks: crate::tasks::Tasks::new(
                config.max_task_deadline,
                config.max_tasks_per_session,
                config.kv_postgres.clone(),
                ask_key.task_seal(),
            ),
            ask_key,
        });
        Ok((service, report))
    }

    /// The registry: programs, catalog, store and secrets.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The call path: admission, the call threads, metrics, traces and receipts.
    pub fn calls(&self) -> &Calls {
        &self.calls
    }

    /// The data directory.
    pub fn home(&self) -> &Home {
        self.registry.home()
    }

    /// The runtime, for embedding and benchmarks.
    pub fn berm(&self) -> &Berm {
        self.registry.berm()
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
        self.registry.tools_page_size()
    }

    /// A receiver that hears about every deploy and remove.
    pub fn subscribe(&self) -> broadcast::Receiver<()> {
        self.registry.subscribe()
    }

    /// The current tool catalog.
    pub fn catalog(&self) -> Arc<Catalog> {
        self.registry.catalog()
    }

    /// Deploys `image` under `name` with `grants`, replacing what the name
    /// held, and persists it. Blocking: it may compile.
    pub fn deploy(
        &self,
        name: &str,
        image: &[u8],
        grants: Vec<Grant>,
        limits: LimitsSpec,
    ) -> Result<DeployResponse, InstallError> {
        self.registry.deploy(name, image, grants, limits)
    }

    /// Like [`Registry::deploy`], recording that the program comes from the app folder
    /// `app_dir` (canonical), or that it is a plain deploy when `None`: what
    /// [`Registry::name_state`] tells the next folder deployed under the name.
    pub fn deploy_from(
        &self,
        name: &str,
        image: &[u8],
        grants: Vec<Grant>,
        limits: LimitsSpec,
        app_dir: Option<PathBuf>,
        serve_as: BTreeMap<String, String>,
    ) -> Result<DeployResponse, InstallError> {
        self.registry
            .deploy_from(name, image, grants, limits, app_dir, serve_as)
    }

    /// Like [`Registry::deploy`] but nothing is written to the store: the
    /// program lives as long as this process. For programs of an app folder
    /// (`bermd --app`), which the folder brings back on every start.
    pub fn deploy_transient(
        &self,
        name: &str,
        image: &[u8],
        grants: Vec<Grant>,
        limits: LimitsSpec,
        serve_as: BTreeMap<String, String>,
    ) -> Result<DeployResponse, InstallError> {
        self.registry
            .deploy_transient(name, image, grants, limits, serve_as)
    }

    /// Removes `name` ([`Registry::remove`]).
    pub fn remove(&self, name: &str) -> Result<RemoveResponse, RemoveError> {
        self.registry.remove(name)
    }

    /// Every deployed program, sorted by name.
    pub fn list(&self) -> Vec<ProgramView> {
        self.registry.list()
    }

    /// One deployed program.
    pub fn view(&self, name: &str) -> Option<ProgramView> {
        self.registry.view(name)
    }

    /// What a program deployed under `name` would find there ([`Registry::name_state`]).
    pub fn name_state(&self, name: &str) -> Result<NameState, StateError> {
        self.registry.name_state(name)
    }

    /// Sets secret `name` of `program` ([`Registry::set_secret`]).
    pub fn set_secret(&self, program: &str, name: &str, value: &[u8]) -> Result<(), SecretError> {
        self.registry.set_secret(program, name, value)
    }

    /// The names of `program`'s secrets, sorted.
    pub fn list_secrets(&self, program: &str) -> Result<Vec<String>, SecretError> {
        self.registry.list_secrets(program)
    }

    /// Removes secret `name` of `program`.
    pub fn remove_secret(&self, program: &str, name: &str) -> Result<(), SecretError> {
        self.registry.remove_secret(program, name)
    }

    /// Reads `program`'s secrets from `files` (its `[program.secrets]`) from now on, before
    /// its values in `$BERM_HOME`.
    pub fn use_secret_files(&self, program: &str, files: BTreeMap<String, PathBuf>) {
        self.registry.use_secret_files(program, files)
    }

    /// The served name `name` as the one target its call carries down ([`Calls::resolve`]):
    /// what an edge does once per request.
    ///
    /// # Errors
    /// [`CallError::NoSuchTool`], or the runtime's error when its program went away.
    pub fn resolve(&self, name: &str) -> Result<Target, CallError> {
        self.calls.resolve(name)
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
    ) -> Result<Result<Done, berm::Failure>, CallError> {
        let target = self.resolve(name)?;
        self.calls
            .call(&target, args, log, CallExtras::default())
            .await
            .into_result()
    }

    /// Calls a resolved `target` ([`Calls::call`]), with what `berm.input` hands the
    /// program and a deadline of its own (a task's).
    pub async fn call_target(
        &self,
        target: &Target,
        args: &serde_json::Value,
        log: Option<LogTo<'_>>,
        extras: CallExtras,
    ) -> CallOutcome {
        self.calls.call(target, args, log, extras).await
    }

    /// Whether calls make spans (traces are exported).
    pub fn traced(&self) -> bool {
        self.calls.traced()
    }

    /// The receipt log, when receipts are written.
    pub fn receipt_log(&self) -> Option<&Arc<berm_receipts::ReceiptLog>> {
        self.calls.receipt_log()
    }

    /// Calls and their outcomes, for `/metrics`.
    pub fn metrics(&self) -> &crate::metrics::Metrics {
        self.calls.metrics()
    }
}
