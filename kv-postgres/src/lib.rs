//! Every program's keyspace in PostgreSQL (`bermd --kv-url-file`), so bermd replicas
//! behind one load balancer share one state: a value one replica acknowledged is what the
//! next read on any replica returns, because every read and write goes to the database and
//! nothing is cached.
//!
//! The semantics and caps are the log backend's: the same per-key and per-value caps
//! (checked by bermd before a byte is sent), and the same keyspace total (keys, values and
//! a fixed cost per key), enforced in the database under a lock on the program's usage row
//! so that concurrent writers on different replicas are counted one after another. An
//! acknowledged write is a committed transaction.
//!
//! Isolation between programs is enforced in SQL, not only here: each operation is one
//! call of a PL/pgSQL function (one round trip, one transaction) that sets `berm.program`
//! for its transaction, and row-level security (forced, so it binds the tables' owner too)
//! confines every statement to that program's rows (`migrations/0001_keyspaces.sql`).
//!
//! The schema is versioned: [`MIGRATIONS`] are applied in order at connect, under an
//! advisory lock so that replicas starting together apply each once, and a database whose
//! schema is newer than this bermd knows is refused rather than guessed at.
//!
//! The same database holds bermd's tasks ([`PgKv::publish_task`] and the rest), so that
//! any replica answers `tasks/get`, `tasks/update` and `tasks/cancel` for a task another one
//! runs (`migrations/0002_tasks.sql`), sealed by bermd before they reach this crate
//! (`migrations/0003_sealed_tasks.sql`).
//!
//! The connections live on this crate's own runtime (one thread): bermd's call threads
//! run at a low priority and may move a call to idle-priority threads mid-call, and a
//! connection driven there would stall every call that shares it.

use std::sync::Arc;
use std::time::Duration;

mod tasks;

pub use tasks::{SharedTask, TaskOrder, TaskOrderOutcome};

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime, Timeouts};
use tokio_postgres::config::SslMode;
use tokio_postgres::error::SqlState;

/// The schema's versions, in order: each is applied once, in one transaction with the
/// record that it was.
pub const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "keyspaces with row-level security",
        sql: include_str!("migrations/0001_keyspaces.sql"),
    },
    Migration {
        version: 2,
        name: "tasks any replica answers for",
        sql: include_str!("migrations/0002_tasks.sql"),
    },
    Migration {
        version: 3,
        name: "tasks sealed at rest",
        sql: include_str!("migrations/0003_sealed_tasks.sql"),
    },
];

/// One step of the schema.
#[derive(Debug, Clone, Copy)]
pub struct Migration {
    /// Its version, one more than the step before.
    pub version: i32,
    /// What it does, recorded beside the version.
    pub name: &'static str,
    /// The statements.
    pub sql: &'static str,
}

/// The advisory lock replicas take to migrate one at a time (any fixed number: "berm kv").
const MIGRATION_LOCK: i64 = 0x0062_6572_6d5f_6b76;

/// The SQLSTATE `berm_kv_put` raises when a keyspace would pass its cap.
const OVER_CAP: &str = "BK001";

/// Connections to the database at most, shared by every program.
pub const DEFAULT_MAX_CONNECTIONS: usize = 16;

/// How long an operation waits for a free connection, or for a new one to connect.
const CONNECTION_WAIT: Duration = Duration::from_secs(10);

/// How long a connection may be idle before TCP keepalives probe it, so that a database
/// gone without a word is noticed in about a minute rather than the system's two hours.
const KEEPALIVE_IDLE: Duration = Duration::from_secs(30);

/// What one program's keyspace may hold, as the log backend counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caps {
    /// What each key costs beyond its key and value bytes.
    pub per_key_bytes: usize,
    /// The keyspace's total: keys, values and `per_key_bytes` per key.
    pub max_total_bytes: usize,
}

/// Why the database could not be used.
#[derive(Debug, thiserror::Error)]
pub enum PgKvError {
    /// The URL is not one tokio-postgres reads. The URL itself is never repeated: it may
    /// hold a password.
    #[error(
        "the kv URL is not a PostgreSQL connection URL ({0}); expected postgres://USER[:PASSWORD]@HOST[:PORT]/DBNAME[?sslmode=disable|prefer|require]"
    )]
    Url(String),
    /// The first connection failed.
    #[error("could not connect to PostgreSQL at {target}: {message}")]
    Connect {
        /// Host and database, never the password.
        target: String,
        /// Why.
        message: String,
    },
    /// The schema could not be brought to the current version.
    #[error("could not migrate the kv schema in PostgreSQL: {0}")]
    Migrate(String),
    /// The database's schema is newer than this bermd.
    #[error(
        "the kv schema in PostgreSQL is at version {found}, newer than this bermd knows ({known}): \
         upgrade bermd, or point it at another database"
    )]
    NewerSchema {
        /// The database's version.
        found: i32,
        /// The newest this crate knows.
        known: i32,
    },
    /// The keyspace would pass its cap; nothing was written.
    #[error(
        "the keyspace (keys, values and {per_key} bytes per key) is {size} bytes, over the cap of {cap} bytes"
    )]
    TooLarge {
        /// What it would have been.
        size: u64,
        /// The cap.
        cap: usize,
        /// The per-key cost.
        per_key: usize,
    },
    /// The operation failed in or on the way to the database; a write that fails so was
    /// not acknowledged (it may or may not have committed).
    #[error("PostgreSQL: {0}")]
    Database(String),
}

/// The database every program's keyspace lives in: a pool of connections on its own
/// runtime, with the schema migrated.
pub struct PgKv {
    pool: Pool,
    caps: Caps,
    target: String,
    runtime: Option<tokio::runtime::Runtime>,
}

impl std::fmt::Debug for PgKv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PgKv({})", self.target)
    }
}

impl Drop for PgKv {
    fn drop(&mut self) {
        // Not `drop`: that blocks, which tokio refuses inside an async context.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl PgKv {
    /// Connects to `url` (TLS as its `sslmode` says, verified against `tls`'s roots),
    /// migrates the schema and checks the role. Blocks until done; callable from any
    /// thread, in an async context or not.
    ///
    /// # Errors
    /// A bad URL, a database that cannot be reached, a schema that cannot be migrated or is
    /// newer than this crate knows.
    pub fn connect(
        url: &str,
        tls: rustls::ClientConfig,
        caps: Caps,
        max_connections: usize,
    ) -> Result<PgKv, PgKvError> {
        let mut config: tokio_postgres::Config = url
            .parse()
            .map_err(|e: tokio_postgres::Error| PgKvError::Url(e.to_string()))?;
        // A database that does not answer costs a bounded wait, not a hung start or a
        // connection held forever; the URL may say otherwise.
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECTION_WAIT);
        }
        if !url.contains("keepalives_idle") {
            config.keepalives_idle(KEEPALIVE_IDLE);
        }
        let target = describe(&config);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("berm-kv-pg")
            .enable_all()
            .build()
            .map_err(|e| PgKvError::Connect {
                target: target.clone(),
                message: format!("could not start its runtime: {e}"),
            })?;
        let plaintext = config.get_ssl_mode() == SslMode::Disable;
        let tls = tokio_postgres_rustls::MakeRustlsConnect::new(tls);
        let manager_config = ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        };
        let manager = if plaintext {
            Manager::from_config(config.clone(), tokio_postgres::NoTls, manager_config)
        } else {
            Manager::from_config(config.clone(), tls.clone(), manager_config)
        };
        let pool = Pool::builder(manager)
            .max_size(max_connections.max(1))
            .runtime(Runtime::Tokio1)
            .timeouts(Timeouts {
                wait: Some(CONNECTION_WAIT),
                create: Some(CONNECTION_WAIT),
                recycle: Some(CONNECTION_WAIT),
            })
            .build()
            .map_err(|e| PgKvError::Connect {
                target: target.clone(),
                message: e.to_string(),
            })?;
        let kv = PgKv {
            pool,
            caps,
            target,
            runtime: Some(runtime),
        };
        let pool = kv.pool.clone();
        let target = kv.target.clone();
        kv.block_on(async move {
            let mut client = pool.get().await.map_err(|e| PgKvError::Connect {
                target,
                message: pool_error(&e),
            })?;
            let version = migrate(&mut client).await?;
            let row = client
                .query_one(
                    "SELECT rolsuper OR rolbypassrls FROM pg_roles WHERE rolname = current_user",
                    &[],
                )
                .await
                .map_err(|e| PgKvError::Migrate(db_error(&e)))?;
            if row.get::<_, bool>(0) {
                tracing::warn!(
                    "bermd's PostgreSQL role bypasses row-level security (a superuser or \
                     BYPASSRLS): programs stay apart by the kv functions' own filters only. \
                     Give bermd a role of its own (docs/kubernetes.md)"
                );
            }
            tracing::info!(version, "kv schema ready in PostgreSQL");
            Ok(())
        })?;
        Ok(kv)
    }

    /// Where the keyspaces live: host and database, never the password.
    pub fn target(&self) -> &str {
        &self.target
    }

    /// The keyspace of `program`.
    pub fn keyspace(self: &Arc<Self>, program: &str) -> Keyspace {
        Keyspace {
            kv: self.clone(),
            program: program.into(),
        }
    }

    /// Runs `work` on this crate's runtime and waits for it here, from any thread.
    fn block_on<T: Send + 'static>(
        &self,
        work: impl Future<Output = Result<T, PgKvError>> + Send + 'static,
    ) -> Result<T, PgKvError> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.runtime().spawn(async move {
            let _ = tx.send(work.await);
        });
        rx.recv()
            .unwrap_or_else(|_| Err(PgKvError::Database("its runtime stopped".into())))
    }

    /// Runs `work` on this crate's runtime and awaits it from any runtime.
    async fn run<T: Send + 'static>(
        &self,
        work: impl Future<Output = Result<T, PgKvError>> + Send + 'static,
    ) -> Result<T, PgKvError> {
        match self.runtime().spawn(work).await {
            Ok(result) => result,
            Err(e) => Err(PgKvError::Database(format!("the operation failed: {e}"))),
        }
    }

    fn runtime(&self) -> &tokio::runtime::Runtime {
        // Taken only by Drop.
        self.runtime
            .as_ref()
            .expect("the runtime lives as long as PgKv")
    }
}

/// One program's keyspace in the database.
#[derive(Clone)]
pub struct Keyspace {
    kv: Arc<PgKv>,
    program: Arc<str>,
}

impl Keyspace {
    /// The value under `key`, read from the database.
    pub async fn get(&self, key: Vec<u8>) -> Result<Option<Vec<u8>>, PgKvError> {
        let (pool, program) = (self.kv.pool.clone(), self.program.clone());
        self.kv
            .run(async move {
                let (client, statement) = prepared(&pool, "SELECT berm_kv_get($1, $2)").await?;
                let row = client
                    .query_one(&statement, &[&&*program, &key])
                    .await
                    .map_err(database)?;
                Ok(row.get::<_, Option<Vec<u8>>>(0))
            })
            .await
    }

    /// Stores `value` under `key`; committed when this returns `Ok`. The caller has
    /// checked the key and value against their own caps.
    pub async fn put(&self, key: Vec<u8>, value: Vec<u8>) -> Result<(), PgKvError> {
        let (pool, program, caps) = (self.kv.pool.clone(), self.program.clone(), self.kv.caps);
        self.kv
            .run(async move {
                let (client, statement) =
                    prepared(&pool, "SELECT berm_kv_put($1, $2, $3, $4, $5)").await?;
                let per_key = caps.per_key_bytes as i64;
                let cap = i64::try_from(caps.max_total_bytes).unwrap_or(i64::MAX);
                match client
                    .execute(&statement, &[&&*program, &key, &value, &per_key, &cap])
                    .await
                {
                    Ok(_) => Ok(()),
                    Err(e) if e.code() == Some(&SqlState::from_code(OVER_CAP)) => {
                        let size = e
                            .as_db_error()
                            .and_then(|db| db.message().parse().ok())
                            .unwrap_or(0);
                        Err(PgKvError::TooLarge {
                            size,
                            cap: caps.max_total_bytes,
                            per_key: caps.per_key_bytes,
                        })
                    }
                    Err(e) => Err(database(e)),
                }
            })
            .await
    }

    /// Deletes `key`; returns whether it existed. Committed when it returns.
    pub async fn delete(&self, key: Vec<u8>) -> Result<bool, PgKvError> {
        let (pool, program, caps) = (self.kv.pool.clone(), self.program.clone(), self.kv.caps);
        self.kv
            .run(async move {
                let (client, statement) =
                    prepared(&pool, "SELECT berm_kv_delete($1, $2, $3)").await?;
                let per_key = caps.per_key_bytes as i64;
                let row = client
                    .query_one(&statement, &[&&*program, &key, &per_key])
                    .await
                    .map_err(database)?;
                Ok(row.get::<_, bool>(0))
            })
            .await
    }

    /// Every key starting with `prefix`, in byte order.
    pub async fn list(&self, prefix: Vec<u8>) -> Result<Vec<Vec<u8>>, PgKvError> {
        let (pool, program) = (self.kv.pool.clone(), self.program.clone());
        self.kv
            .run(async move {
                let (client, statement) =
                    prepared(&pool, "SELECT berm_kv_list($1, $2, $3)").await?;
                let upper = prefix_end(&prefix);
                let rows = client
                    .query(&statement, &[&&*program, &prefix, &upper])
                    .await
                    .map_err(database)?;
                Ok(rows.iter().map(|row| row.get::<_, Vec<u8>>(0)).collect())
            })
            .await
    }

    /// How many keys it holds and their bytes as counted against the cap. Blocks: for
    /// the rare questions asked outside a call (what a deploy would take over).
    pub fn size_blocking(&self) -> Result<(u64, u64), PgKvError> {
        let (pool, program) = (self.kv.pool.clone(), self.program.clone());
        self.kv.block_on(async move {
            let client = connection(&pool).await?;
            let row = client
                .query_one("SELECT keys, bytes FROM berm_kv_size($1)", &[&&*program])
                .await
                .map_err(database)?;
            let (keys, bytes): (i64, i64) = (row.get(0), row.get(1));
            Ok((keys.max(0) as u64, bytes.max(0) as u64))
        })
    }
}

/// The first key after every key that starts with `prefix`, or `None` when there is none
/// (an empty prefix, or one of all 0xff bytes).
pub fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

async fn connection(pool: &Pool) -> Result<deadpool_postgres::Object, PgKvError> {
    pool.get()
        .await
        .map_err(|e| PgKvError::Database(pool_error(&e)))
}

/// A pooled connection and `query` prepared on it (cached per connection).
async fn prepared(
    pool: &Pool,
    query: &str,
) -> Result<(deadpool_postgres::Object, tokio_postgres::Statement), PgKvError> {
    let client = connection(pool).await?;
    let statement = client.prepare_cached(query).await.map_err(database)?;
    Ok((client, statement))
}

/// An operation's error from the database, as [`PgKvError::Database`].
fn database(e: tokio_postgres::Error) -> PgKvError {
    PgKvError::Database(db_error(&e))
}

/// Brings the schema to the newest [`MIGRATIONS`] version; returns it.
async fn migrate(client: &mut deadpool_postgres::Object) -> Result<i32, PgKvError> {
    let fail = |e: tokio_postgres::Error| PgKvError::Migrate(db_error(&e));
    let tx = client.transaction().await.map_err(fail)?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await
        .map_err(fail)?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS berm_kv_migrations (
             version integer PRIMARY KEY,
             name text NOT NULL,
             applied timestamptz NOT NULL DEFAULT now()
         )",
    )
    .await
    .map_err(fail)?;
    let found: Option<i32> = tx
        .query_one("SELECT max(version) FROM berm_kv_migrations", &[])
        .await
        .map_err(fail)?
        .get(0);
    let found = found.unwrap_or(0);
    let known = MIGRATIONS.last().map_or(0, |m| m.version);
    if found > known {
        return Err(PgKvError::NewerSchema { found, known });
    }
    for migration in MIGRATIONS.iter().filter(|m| m.version > found) {
        tx.batch_execute(migration.sql).await.map_err(|e| {
            PgKvError::Migrate(format!(
                "version {} ({}): {}",
                migration.version,
                migration.name,
                db_error(&e)
            ))
        })?;
        tx.execute(
            "INSERT INTO berm_kv_migrations (version, name) VALUES ($1, $2)",
            &[&migration.version, &migration.name],
        )
        .await
        .map_err(fail)?;
        tracing::info!(
            version = migration.version,
            name = migration.name,
            "kv schema migrated"
        );
    }
    tx.commit().await.map_err(fail)?;
    Ok(known)
}

/// A database error with its SQLSTATE and detail, or the client's own error.
fn db_error(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{} (SQLSTATE {})", db.message(), db.code().code()),
        None => berm_errors::chain(e),
    }
}

fn pool_error(e: &deadpool_postgres::PoolError) -> String {
    match e {
        deadpool_postgres::PoolError::Backend(e) => db_error(e),
        deadpool_postgres::PoolError::Timeout(_) => format!(
            "no connection to PostgreSQL within {} s (all busy, or the database does not answer)",
            CONNECTION_WAIT.as_secs()
        ),
        other => other.to_string(),
    }
}

/// `HOST[:PORT]/DBNAME` (or the socket directory) for messages: never user or password.
fn describe(config: &tokio_postgres::Config) -> String {
    use tokio_postgres::config::Host;
    let host = match config.get_hosts().first() {
        Some(Host::Tcp(host)) => host.clone(),
        Some(Host::Unix(dir)) => dir.display().to_string(),
        None => "localhost".to_string(),
    };
    let port = config
        .get_ports()
        .first()
        .map_or(String::new(), |p| format!(":{p}"));
    let db = config.get_dbname().unwrap_or("(the user's database)");
    format!("{host}{port}/{db}")
}

#[cfg(test)]
mod tests {
    use super::prefix_end;

    #[test]
    fn the_end_of_a_prefix_is_the_first_key_past_all_its_keys() {
        assert_eq!(prefix_end(b"note/"), Some(b"note0".to_vec()));
        assert_eq!(prefix_end(b"a\xff\xff"), Some(b"b".to_vec()));
        assert_eq!(prefix_end(b"\xff\xff"), None);
        assert_eq!(prefix_end(b""), None);
    }
}
