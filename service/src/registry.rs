//! The registry: what bermd serves and everything a deployment owns — the runtime, the
//! deployments with their grants, the catalog of served names, the store under
//! `$BERM_HOME`, the keyspaces and the secrets. Deploy, install, remove and the catalog
//! rebuild happen here, one at a time; the call path ([`crate::calls`]) only reads it,
//! through [`Registry::resolve`], which turns a served name into the one [`Target`] a call
//! carries down to its instance.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use berm::{Berm, CompileSource, DeployOptions, Grants};
use berm_control::{
    DeployResponse, DeployedFrom, Grant, KeyspaceSize, LimitsSpec, NameState, ProgramView,
    RemoveResponse,
};
use tokio::sync::{Semaphore, broadcast};

use crate::catalog::{self, Catalog, ToolEntry};
use crate::egress::EgressSetup;
use crate::fs::FsRoot;
use crate::home::{Home, HomeError};
use crate::kv::{KvCaps, KvError, KvStore};
use crate::store::{LoadError, Record, Store};
use crate::syscalls::{Keyspace, ProgramHost};
use berm_errors::chain as error_chain;

mod secrets;

/// Why installing a program under a name (a deploy, or a restore) was refused; nothing
/// changed.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
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

/// Why [`Registry::name_state`] could not say what a name holds.
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

/// Whether a deploy is written to the store, and as coming from where.
enum Persist {
    /// A plain deploy, recorded.
    Plain,
    /// From the app folder, recorded with it.
    From(PathBuf),
    /// Not recorded (`bermd --app`).
    No,
}

/// One program as the registry holds it.
struct Deployment {
    record: Record,
    source: CompileSource,
    /// What its calls share, handed to each call's [`Target`].
    calls: Arc<DeploymentCalls>,
}

/// What every call of one deployment shares: its call slots and what its receipts say of it.
/// Resolved with the rest of a call's [`Target`], so the call path looks nothing up by name.
pub(crate) struct DeploymentCalls {
    /// Its calls running now, at most `max_calls_per_program`.
    pub slots: Arc<Semaphore>,
    /// What its receipts say of it, when receipts are written.
    pub facts: Option<Arc<crate::receipts::ProgramFacts>>,
}

/// A served name resolved once, at the edge (MCP, the control API): the catalog's entry,
/// what the deployment's calls share, and the runtime's target (program, tool, limits).
/// A call carries it down to its instance; nothing on the way looks the name up again.
#[derive(Clone)]
pub struct Target {
    /// The name the client called, `{program}_{tool}` or the name the tool is served as.
    pub served: Arc<str>,
    /// The tool as the catalog serves it: schemas, how its calls start, what it serves.
    pub entry: Arc<ToolEntry>,
    /// The deployment's call slots and receipt facts.
    pub(crate) deployment: Arc<DeploymentCalls>,
    /// The program and tool the runtime runs.
    pub(crate) runtime: berm::Target,
}

/// Why a served name resolved to no [`Target`].
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// No deployed program serves the name.
    #[error("no tool `{0}` is deployed (list them with tools/list or `berm ls`)")]
    NotServed(String),
    /// The catalog names it, but its program went away meanwhile.
    #[error(transparent)]
    Runtime(#[from] berm::Error),
}

/// How the registry is set up: the parts of [`crate::ServiceConfig`] it owns.
pub(crate) struct RegistryConfig {
    pub kv_caps: KvCaps,
    pub tools_page_size: usize,
    pub max_host_ops: usize,
    pub max_host_memory: usize,
    pub max_calls_per_program: usize,
    pub kv_postgres: Option<Arc<berm_kv_postgres::PgKv>>,
    /// Whether receipts are written: each deployment then carries what they say of it.
    pub receipts: bool,
}

/// Programs by name, persisted under `$BERM_HOME`, with what each owns.
pub struct Registry {
    berm: Berm,
    home: Home,
    store: Store,
    kv_caps: KvCaps,
    tools_page_size: usize,
    max_host_ops: usize,
    max_host_memory: usize,
    max_calls_per_program: usize,
    egress: EgressSetup,
    catalog: RwLock<Arc<Catalog>>,
    deployments: RwLock<HashMap<String, Deployment>>,
    keyspaces: Mutex<HashMap<String, Arc<KvStore>>>,
    kv_postgres: Option<Arc<berm_kv_postgres::PgKv>>,
    receipts: bool,
    /// Value files named by a program's `[program.secrets]`, by program: they take
    /// precedence over the values in `$BERM_HOME/secrets/<program>/`.
    secret_files: Mutex<HashMap<String, BTreeMap<String, PathBuf>>>,
    /// Deploys and removes happen one at a time, so memory and disk agree.
    changing: Mutex<()>,
    changes: broadcast::Sender<()>,
}

/// What a restart brought back.
#[derive(Debug, Default)]
pub struct RestoreReport {
    /// Programs restored, with where their code came from.
    pub restored: Vec<(String, CompileSource)>,
    /// Records that could not be restored, each with its reason.
    pub skipped: Vec<String>,
}

impl Registry {
    /// An empty registry of `berm`'s programs under `home`; [`Registry::restore`] brings
    /// back what the store holds.
    pub(crate) fn new(
        berm: Berm,
        home: Home,
        egress: EgressSetup,
        config: RegistryConfig,
    ) -> Registry {
        let (changes, _) = broadcast::channel(16);
        Registry {
            berm,
            store: Store::new(home.clone()),
            home,
            kv_caps: config.kv_caps,
            tools_page_size: config.tools_page_size.max(1),
            max_host_ops: config.max_host_ops,
            max_host_memory: config.max_host_memory,
            max_calls_per_program: config.max_calls_per_program.max(1),
            egress,
            catalog: RwLock::new(Arc::new(Catalog::default())),
            deployments: RwLock::new(HashMap::new()),
            keyspaces: Mutex::new(HashMap::new()),
            kv_postgres: config.kv_postgres,
            receipts: config.receipts,
            secret_files: Mutex::new(HashMap::new()),
            changing: Mutex::new(()),
            changes,
        }
    }

    /// Restores every deployment recorded in the store. A record that cannot be restored
    /// is reported and skipped.
    pub(crate) fn restore(&self) -> RestoreReport {
        let mut report = RestoreReport::default();
        let (records, problems) = self.store.load_all();
        for problem in problems {
            report.skipped.push(error_chain(&problem));
            log_skip(&problem);
        }
        for (record, image) in records {
            let name = record.name.clone();
            match self.install(record, &image) {
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
        self.rebuild_catalog();
        report
    }

    /// The data directory.
    pub fn home(&self) -> &Home {
        &self.home
    }

    /// The runtime.
    pub fn berm(&self) -> &Berm {
        &self.berm
    }

    /// Most tools in one `tools/list` page.
    pub fn tools_page_size(&self) -> usize {
        self.tools_page_size
    }

    /// How many calls from outside one program may have running at once.
    pub fn max_calls_per_program(&self) -> usize {
        self.max_calls_per_program
    }

    /// The served name `name` as the one target its call carries down.
    ///
    /// # Errors
    /// [`ResolveError::NotServed`]; [`ResolveError::Runtime`] when its program went away
    /// meanwhile.
    pub fn resolve(&self, name: &str) -> Result<Target, ResolveError> {
        let catalog = self.catalog();
        let entry = catalog
            .get(name)
            .ok_or_else(|| ResolveError::NotServed(name.to_string()))?;
        self.target_of(name, entry.clone())
    }

    /// The target of a catalog entry the caller found already (a resource a URI names, a
    /// prompt), served as `served`.
    ///
    /// # Errors
    /// [`ResolveError::Runtime`] when its program went away meanwhile.
    pub fn target_of(&self, served: &str, entry: Arc<ToolEntry>) -> Result<Target, ResolveError> {
        let runtime = self.berm.resolve(&entry.program, &entry.tool)?;
        self.target_with(served, entry, runtime)
    }

    /// The target of `entry` as the runtime resolved it already: a call between programs,
    /// which keeps the runtime's view of what it calls.
    ///
    /// # Errors
    /// [`ResolveError::Runtime`] when its program went away meanwhile.
    pub(crate) fn target_with(
        &self,
        served: &str,
        entry: Arc<ToolEntry>,
        runtime: berm::Target,
    ) -> Result<Target, ResolveError> {
        let deployment = self
            .deployments
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&entry.program)
            .map(|d| d.calls.clone())
            .ok_or_else(|| berm::Error::NoSuchProgram(entry.program.clone()))?;
        Ok(Target {
            served: served.into(),
            entry,
            deployment,
            runtime,
        })
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
    ) -> Result<DeployResponse, InstallError> {
        self.deploy_as(name, image, grants, limits, BTreeMap::new(), Persist::Plain)
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
        let persist = match app_dir {
            Some(dir) => Persist::From(dir),
            None => Persist::Plain,
        };
        self.deploy_as(name, image, grants, limits, serve_as, persist)
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
    ) -> Result<DeployResponse, InstallError> {
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
            .map_err(InstallError::ServedName)?;
        let mut validators = current.validators().clone();
        catalog::check_schemas(&manifest, &mut validators).map_err(InstallError::Schema)?;
        catalog::check_resource_uris(name, &manifest, &current)
            .map_err(InstallError::ServedName)?;
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
            return Err(InstallError::Persist {
                name: name.to_string(),
                source,
            });
        }
        self.rebuild_catalog_with(&validators);
        let program = self
            .view(name)
            .ok_or_else(|| InstallError::Schema(format!("`{name}` vanished while deploying")))?;
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
    fn install(&self, record: Record, image: &[u8]) -> Result<CompileSource, InstallError> {
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
                        FsRoot::open(dir, *read_only, *quota).map_err(|e| InstallError::Grant {
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
            .map_err(|e| InstallError::Grant {
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
        let facts = self.receipts.then(|| {
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
                calls: Arc::new(DeploymentCalls {
                    slots: Arc::new(Semaphore::new(self.max_calls_per_program)),
                    facts,
                }),
            },
        );
        Ok(deployed.source)
    }

    /// The keyspace of `name`, opened once. A log corrupt in the middle
    /// does not stop the deploy: the program runs, its kv syscalls fail with
    /// the reason and how to recover, and the file stays as it is. It is
    /// opened again on the next deploy or restart.
    fn keyspace(&self, name: &str) -> Result<Keyspace, InstallError> {
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
            Err(source) => Err(InstallError::State {
                name: name.to_string(),
                source,
            }),
        }
    }
}

fn source_name(source: CompileSource) -> &'static str {
    match source {
        CompileSource::Compiled => "compiled",
        CompileSource::DiskCache => "disk_cache",
        CompileSource::Precompiled => "precompiled",
        CompileSource::Memory => "memory",
    }
}

/// Sorts and dedups grants; an `fs` directory must be absolute and exist,
/// and is canonicalized so the record names the real directory.
fn normalize_grants(grants: Vec<Grant>) -> Result<Vec<Grant>, InstallError> {
    let mut out = Vec::new();
    for grant in grants {
        let grant = match grant {
            Grant::Fs {
                dir,
                read_only,
                quota,
            } => {
                let refuse = |message: String| InstallError::Grant {
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
        return Err(InstallError::Grant {
            grant: "fs".into(),
            message: "at most one fs directory may be granted".into(),
        });
    }
    Ok(out)
}

fn log_skip(problem: &LoadError) {
    tracing::error!("skipped deployment: {}", error_chain(problem));
}
