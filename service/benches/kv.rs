//! kv get and put latency: the log backend beside PostgreSQL (`bermd --kv-url-file`).
//!
//! Run: `cargo bench -p berm-service --bench kv`. One keyspace in each backend, the log in
//! a temporary directory and PostgreSQL a private server from the machine's install
//! (`berm_fixtures::postgres`, over its Unix socket, fsync on). The operations alternate
//! between the backends in rounds, so the machine's noise falls on both alike; each
//! median is over every operation of its kind. The figures go in docs/performance.md;
//! nothing here asserts a speed.

use std::sync::Arc;
use std::time::{Duration, Instant};

use berm_service::kv::{Keyspace, KvCaps, KvStore, PER_KEY_BYTES};

const ROUNDS: usize = 20;
const PER_ROUND: usize = 100;
const VALUE: usize = 256;

fn main() {
    let pg = match berm_fixtures::postgres::Postgres::start() {
        Ok(pg) => pg,
        Err(why) => {
            println!("SKIPPED: {why}");
            return;
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let caps = KvCaps::default();
    let log = Keyspace::Log(Arc::new(
        KvStore::open(&dir.path().join("kv.log"), caps).expect("log"),
    ));
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("tls")
    .with_root_certificates(rustls::RootCertStore::empty())
    .with_no_client_auth();
    let database = Arc::new(
        berm_kv_postgres::PgKv::connect(
            &pg.url(),
            tls,
            berm_kv_postgres::Caps {
                per_key_bytes: PER_KEY_BYTES,
                max_total_bytes: caps.max_total_bytes,
            },
            4,
        )
        .expect("PostgreSQL"),
    );
    let postgres = Keyspace::Postgres(database.keyspace("bench"), caps);

    let mut times: [[Vec<Duration>; 2]; 2] = Default::default(); // [backend][put, get]
    let value = vec![7u8; VALUE];
    runtime.block_on(async {
        for round in 0..ROUNDS {
            for (b, keyspace) in [&log, &postgres].into_iter().enumerate() {
                for i in 0..PER_ROUND {
                    let key = format!("note/{round:03}/{i:04}").into_bytes();
                    let started = Instant::now();
                    keyspace.put(key.clone(), value.clone()).await.expect("put");
                    times[b][0].push(started.elapsed());
                    let started = Instant::now();
                    let got = keyspace.get(&key).await.expect("get");
                    times[b][1].push(started.elapsed());
                    assert_eq!(got.as_deref(), Some(&value[..]));
                }
            }
        }
    });
    println!(
        "kv latency, {} operations of each kind per backend, {VALUE}-byte values",
        ROUNDS * PER_ROUND
    );
    println!("{:<12} {:>12} {:>12} {:>12}", "", "p50", "p90", "p99");
    for (b, name) in ["log", "postgres"].into_iter().enumerate() {
        for (k, kind) in ["put", "get"].into_iter().enumerate() {
            let samples = &mut times[b][k];
            samples.sort();
            let at = |q: f64| samples[((samples.len() - 1) as f64 * q) as usize];
            println!(
                "{:<12} {:>10.1}µs {:>10.1}µs {:>10.1}µs",
                format!("{name} {kind}"),
                micros(at(0.5)),
                micros(at(0.9)),
                micros(at(0.99)),
            );
        }
    }
    let median = |b: usize, k: usize| micros(times[b][k][times[b][k].len() / 2]);
    println!(
        "postgres / log: put {:.1}x, get {:.0}x (medians)",
        median(1, 0) / median(0, 0),
        median(1, 1) / median(0, 1)
    );
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}
