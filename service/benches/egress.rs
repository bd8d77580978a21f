//! `http.fetch` of a 1 KiB loopback response against a direct reqwest call
//! from the host, in the same run.
//!
//! Run: `scripts/build-apps.sh && cargo bench -p berm-service --bench egress`.
//! - baseline: a reqwest client (kept, so its connection is pooled) GETs the
//!   page from a loopback HTTP server;
//! - `fetch_get`: `Service::call` of apps/fetch's `get` with
//!   `net=127.0.0.1:PORT` — schema check, instantiate, the guest's
//!   `http.fetch` (grant check, a new connection, the exchange), JSON out.
//!
//! The figures go in docs/perf-service.md; nothing here asserts a speed.

use std::path::Path;

mod common;

use berm_control::LimitsSpec;
use berm_egress::testing::{Reply, TestServer};
use berm_service::{Service, ServiceConfig};

const SAMPLES: usize = 5_000;
const WARMUP: usize = 500;

fn main() {
    let wasm = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../target/wasm32-unknown-unknown/release/fetch.wasm"),
    )
    .expect("fetch.wasm: run scripts/build-apps.sh first");
    let page = TestServer::http(|_| Reply::ok(vec![b'x'; 1024]));
    let url = format!("{}/page", page.origin(false));
    let dir = tempfile::tempdir().expect("tempdir");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let (service, _) =
        Service::open(&ServiceConfig::new(dir.path().join("home"))).expect("service");
    let grant = format!("net=127.0.0.1:{}", page.port())
        .parse()
        .expect("grant");
    service
        .deploy("fetch", &wasm, vec![grant], LimitsSpec::default())
        .expect("deploy");
    let args = serde_json::json!({ "url": url });

    let client = reqwest::Client::new();
    let baseline = runtime.block_on(common::sample(WARMUP, SAMPLES, || async {
        let body = client
            .get(&url)
            .send()
            .await
            .expect("reqwest")
            .bytes()
            .await
            .expect("body");
        assert_eq!(body.len(), 1024);
    }));
    let fetch = runtime.block_on(common::sample(WARMUP, SAMPLES, || async {
        let done = service
            .call("fetch_get", &args, None)
            .await
            .expect("host")
            .expect("program");
        assert!(done.text.starts_with(r#"{"status":200"#), "{}", done.text);
    }));
    println!("egress: 1 KiB over loopback HTTP, {SAMPLES} samples each, µs");
    println!(
        "  reqwest, direct (pooled connection)  p50 {:>8.1}  p99 {:>8.1}",
        baseline.p50, baseline.p99
    );
    println!(
        "  fetch_get through http.fetch          p50 {:>8.1}  p99 {:>8.1}",
        fetch.p50, fetch.p99
    );
    println!(
        "  cost over the direct call (p50)       {:>8.1}",
        fetch.p50 - baseline.p50
    );
}
