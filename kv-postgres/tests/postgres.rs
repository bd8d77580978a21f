//! Against a real PostgreSQL started for each test (Debian's `postgresql`): the schema's
//! versions, isolation enforced by the database itself, and the cap held across two
//! replicas writing at once.

use std::sync::Arc;

use berm_fixtures::postgres::Postgres;
use berm_kv_postgres::{Caps, MIGRATIONS, PgKv, PgKvError};

const CAPS: Caps = Caps {
    per_key_bytes: 64,
    max_total_bytes: 64 << 20,
};

fn server() -> Option<Postgres> {
    match Postgres::start() {
        Ok(server) => Some(server),
        Err(why) => {
            println!("SKIPPED: {why}");
            None
        }
    }
}

fn tls() -> rustls::ClientConfig {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth()
}

fn connect(url: &str, caps: Caps) -> Arc<PgKv> {
    Arc::new(PgKv::connect(url, tls(), caps, 4).unwrap())
}

fn block_on<T>(future: impl Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(future)
}

#[test]
fn the_schema_is_migrated_once_and_a_newer_one_is_refused() {
    let Some(pg) = server() else { return };
    // Two replicas starting together: each version is applied exactly once.
    let (a, b) = std::thread::scope(|scope| {
        let a = scope.spawn(|| PgKv::connect(&pg.url(), tls(), CAPS, 2));
        let b = scope.spawn(|| PgKv::connect(&pg.url(), tls(), CAPS, 2));
        (a.join().unwrap(), b.join().unwrap())
    });
    a.unwrap();
    b.unwrap();
    let versions = pg
        .psql(
            "berm",
            "SELECT string_agg(version::text, ',') FROM berm_kv_migrations",
        )
        .unwrap();
    let expected: Vec<String> = MIGRATIONS.iter().map(|m| m.version.to_string()).collect();
    assert_eq!(versions, expected.join(","));

    pg.psql(
        "berm",
        "INSERT INTO berm_kv_migrations (version, name) VALUES (9999, 'from the future')",
    )
    .unwrap();
    let newer = PgKv::connect(&pg.url(), tls(), CAPS, 2).unwrap_err();
    assert!(
        matches!(newer, PgKvError::NewerSchema { found: 9999, .. }),
        "{newer}"
    );
    assert!(newer.to_string().contains("upgrade bermd"), "{newer}");
}

#[test]
fn a_bad_url_or_an_absent_database_says_so_without_the_password() {
    let Some(pg) = server() else { return };
    let error = PgKv::connect("mysql://root:hunter2@db/x", tls(), CAPS, 1).unwrap_err();
    assert!(matches!(error, PgKvError::Url(_)), "{error}");
    assert!(!error.to_string().contains("hunter2"), "{error}");
    let url = format!(
        "postgres://berm:hunter2@/nosuchdb?host={}",
        pg.dir().display()
    );
    let error = PgKv::connect(&url, tls(), CAPS, 1).unwrap_err();
    let message = error.to_string();
    assert!(matches!(error, PgKvError::Connect { .. }), "{message}");
    assert!(message.contains("nosuchdb"), "{message}");
    assert!(!message.contains("hunter2"), "{message}");
}

/// Row-level security confines a statement to the program its transaction names, whatever
/// the statement asks for: bermd's own role cannot read or write across programs in SQL.
#[test]
fn the_database_itself_keeps_programs_apart() {
    let Some(pg) = server() else { return };
    let kv = connect(&pg.url(), CAPS);
    block_on(async {
        kv.keyspace("alpha")
            .put(b"k".to_vec(), b"alpha's".to_vec())
            .await
            .unwrap();
        kv.keyspace("beta")
            .put(b"k".to_vec(), b"beta's".to_vec())
            .await
            .unwrap();
    });
    // As bermd's role, with no program named: nothing is visible.
    let as_berm = |sql: &str| pg.psql_as("berm", "berm", sql);
    assert_eq!(as_berm("SELECT count(*) FROM berm_kv").unwrap(), "0");
    // Naming alpha shows alpha's rows only, even to a query with no program filter.
    let seen = as_berm(
        "BEGIN; SELECT set_config('berm.program', 'alpha', true); \
         SELECT string_agg(encode(value, 'escape'), ',') FROM berm_kv; COMMIT;",
    )
    .unwrap();
    assert!(seen.ends_with("alpha's"), "{seen}");
    assert!(!seen.contains("beta's"), "{seen}");
    // Writing beta's row while naming alpha is refused by the policy.
    let error = as_berm(
        "BEGIN; SELECT set_config('berm.program', 'alpha', true); \
         INSERT INTO berm_kv VALUES ('beta', 'x', 'forged'); COMMIT;",
    )
    .unwrap_err();
    assert!(error.contains("row-level security"), "{error}");
    let error = as_berm(
        "BEGIN; SELECT set_config('berm.program', 'alpha', true); \
         UPDATE berm_kv SET value = 'forged' WHERE program = 'beta' RETURNING 1; COMMIT;",
    )
    .unwrap();
    assert!(
        !error.contains('1'),
        "an update reached beta's row: {error}"
    );
    let beta = block_on(kv.keyspace("beta").get(b"k".to_vec())).unwrap();
    assert_eq!(beta.as_deref(), Some(&b"beta's"[..]));
}

/// Two replicas filling one keyspace at once never take it past its cap together: the
/// usage row is locked per write.
#[test]
fn two_replicas_writing_at_once_stay_under_the_cap() {
    let Some(pg) = server() else { return };
    let caps = Caps {
        per_key_bytes: 64,
        max_total_bytes: 64 * 1024,
    };
    let (one, two) = (connect(&pg.url(), caps), connect(&pg.url(), caps));
    let accepted: usize = std::thread::scope(|scope| {
        let writers: Vec<_> = [(&one, "a"), (&two, "b")]
            .into_iter()
            .map(|(kv, side)| {
                scope.spawn(move || {
                    block_on(async {
                        let keyspace = kv.keyspace("shared");
                        let mut accepted = 0;
                        for i in 0..200 {
                            let key = format!("{side}{i:04}").into_bytes();
                            match keyspace.put(key, vec![7; 256]).await {
                                Ok(()) => accepted += 1,
                                Err(PgKvError::TooLarge { size, cap, .. }) => {
                                    assert!(size > cap as u64);
                                }
                                Err(other) => panic!("{other}"),
                            }
                        }
                        accepted
                    })
                })
            })
            .collect();
        writers.into_iter().map(|w| w.join().unwrap()).sum()
    });
    let per_key = 5 + 256 + 64;
    assert_eq!(accepted, 64 * 1024 / per_key, "exactly as many as fit");
    let (keys, bytes) = one.keyspace("shared").size_blocking().unwrap();
    assert_eq!(keys as usize, accepted);
    assert_eq!(bytes as usize, accepted * per_key);
    let counted = pg
        .psql(
            "berm",
            "SELECT sum(length(key) + length(value) + 64) FROM berm_kv WHERE program = 'shared'",
        )
        .unwrap();
    assert_eq!(counted, bytes.to_string());
}

/// Tasks two replicas share: what the owner publishes the other reads, byte for byte (bermd
/// seals it first); the other's cancel and answers reach the owner once each; only the owner
/// overwrites its task; a task that has ended takes no cancel and no answers; an expired task
/// is gone; answers past the cap are refused.
#[test]
fn a_task_one_replica_runs_the_other_reads_cancels_and_answers() {
    use berm_kv_postgres::TaskOrderOutcome::{Ended, Left, Unknown};
    use std::time::Duration;
    let Some(pg) = server() else { return };
    let (owner, other) = (connect(&pg.url(), CAPS), connect(&pg.url(), CAPS));
    let hour = Duration::from_secs(3600);
    // Any bytes, as a sealed value is: not UTF-8, with a NUL.
    let working = vec![0xff, 0x00, 0x01, b'w'];
    block_on(async {
        owner
            .publish_task("t1", "a", working.clone(), false, hour)
            .await
            .unwrap();
        let seen = other.task("t1").await.unwrap().unwrap();
        assert_eq!(seen.detail, working);
        assert!(!seen.terminal && seen.unseen_for < Duration::from_secs(5));
        assert!(other.task("nope").await.unwrap().is_none());

        // Another replica cannot take the task over.
        other
            .publish_task("t1", "b", b"completed".to_vec(), true, hour)
            .await
            .unwrap();
        assert!(!other.task("t1").await.unwrap().unwrap().terminal);

        assert_eq!(other.cancel_task("t1").await.unwrap(), Left);
        assert_eq!(
            other
                .answer_task("t1", r#"{"k1":"s1"}"#.into())
                .await
                .unwrap(),
            Left
        );
        assert_eq!(
            other
                .answer_task("t1", r#"{"k2":"s2"}"#.into())
                .await
                .unwrap(),
            Left
        );
        assert_eq!(other.cancel_task("nope").await.unwrap(), Unknown);
        assert_eq!(
            other.answer_task("nope", "{}".into()).await.unwrap(),
            Unknown
        );
        assert!(owner.take_task_orders("b").await.unwrap().is_empty());
        let orders = owner.take_task_orders("a").await.unwrap();
        assert_eq!(orders.len(), 1, "{orders:?}");
        assert!(orders[0].cancel);
        assert_eq!(orders[0].responses, r#"{"k1": "s1", "k2": "s2"}"#);
        assert!(owner.take_task_orders("a").await.unwrap().is_empty());

        let big = format!(r#"{{"k":"{}"}}"#, "x".repeat(1 << 20));
        let refused = other.answer_task("t1", big).await.unwrap_err();
        assert!(
            refused.to_string().contains("bytes of input responses"),
            "{refused}"
        );

        owner
            .publish_task("t1", "a", b"completed".to_vec(), true, hour)
            .await
            .unwrap();
        assert!(other.task("t1").await.unwrap().unwrap().terminal);
        // Ended: nothing more is left for it.
        assert_eq!(other.cancel_task("t1").await.unwrap(), Ended);
        assert_eq!(
            other
                .answer_task("t1", r#"{"k3":"s3"}"#.into())
                .await
                .unwrap(),
            Ended
        );
        assert!(owner.take_task_orders("a").await.unwrap().is_empty());

        // Expired: no longer there, and deleted at the next publish.
        owner
            .publish_task("t2", "a", Vec::new(), false, Duration::ZERO)
            .await
            .unwrap();
        std::thread::sleep(Duration::from_millis(20));
        assert!(other.task("t2").await.unwrap().is_none());
        owner
            .publish_task("t3", "a", Vec::new(), false, hour)
            .await
            .unwrap();
    });
    let left = pg
        .psql(
            "berm",
            "SELECT string_agg(id, ',' ORDER BY id) FROM berm_tasks",
        )
        .unwrap();
    assert_eq!(left, "t1,t3");
}
