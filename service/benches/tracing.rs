//! What a span per call costs: `tools/call` of echo's `echo` on `mcp.sock` against three
//! bermd processes in one run (the release binary, each on a temporary home):
//! - no exporter (`OTEL_EXPORTER_OTLP_ENDPOINT` unset): calls make no span;
//! - an exporter, requests without `_meta.traceparent`: each call starts a trace;
//! - an exporter, each request naming a `traceparent`: each call continues it.
//!
//! The exporters send to an OTLP/HTTP receiver in this process, which decodes every export
//! (so its work is real, and on this side). The three are measured in alternating rounds so
//! the machine's noise falls on all alike; the spans received are counted at the end, to
//! show none were dropped.
//!
//! Run: `scripts/build-apps.sh && cargo bench -p berm-service --bench tracing`. The figures
//! go in docs/perf-service.md; nothing here asserts a speed.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

mod common;

use berm_control::{DeployRequest, LimitsSpec};
use common::{Bermd, McpClient, Stats};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use prost::Message as _;
use serde_json::json;

const ROUNDS: usize = 10;
const PER_ROUND: usize = 1_000;
const WARMUP: usize = 500;

/// One way of calling: its bermd, its client and whether its requests name a trace.
struct Way {
    label: &'static str,
    client: McpClient,
    traceparent: bool,
    times: Vec<Duration>,
    calls: u64,
    _bermd: Bermd,
    _home: tempfile::TempDir,
}

impl Way {
    fn call(&mut self, n: u64) {
        let mut params = json!({"name": "echo_echo", "arguments": {"message": "hello"}});
        if self.traceparent {
            // A new parent span each call, as a client's own spans would be.
            params["_meta"] = json!({
                "traceparent": format!("00-4bf92f3577b34da6a3ce929d0e0e4736-{:016x}-01", n + 1)
            });
        }
        let answer = self.client.request("tools/call", params);
        assert_eq!(answer["result"]["content"][0]["text"], "hello", "{answer}");
        self.calls += 1;
    }
}

fn main() {
    let wasm = berm_fixtures::example("echo");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let received = Arc::new(AtomicU64::new(0));
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .expect("receiver");
    let endpoint = format!("http://{}", listener.local_addr().expect("addr"));
    let count = received.clone();
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move |body: axum::body::Bytes| {
            let count = count.clone();
            async move {
                let request = ExportTraceServiceRequest::decode(body).expect("OTLP");
                let spans: usize = request
                    .resource_spans
                    .iter()
                    .flat_map(|r| &r.scope_spans)
                    .map(|s| s.spans.len())
                    .sum();
                count.fetch_add(spans as u64, Ordering::Relaxed);
                Vec::<u8>::new()
            }
        }),
    );
    runtime.spawn(async move { axum::serve(listener, app).await.expect("serve") });

    let start = |label: &'static str, exporter: bool, traceparent: bool| {
        let home = tempfile::tempdir().expect("tempdir");
        let env: Vec<(&str, &str)> = if exporter {
            vec![("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str())]
        } else {
            vec![]
        };
        let bermd = Bermd::start_with_env(home.path(), &[], &env);
        runtime
            .block_on(berm_control::Client::from_home(home.path()).deploy(
                "echo",
                &DeployRequest::new(&wasm, vec![], LimitsSpec::default()),
            ))
            .expect("deploy");
        Way {
            label,
            client: McpClient::connect(&bermd.socket()),
            traceparent,
            times: Vec::with_capacity(ROUNDS * PER_ROUND),
            calls: 0,
            _bermd: bermd,
            _home: home,
        }
    };
    let mut ways = [
        start("no exporter                       ", false, false),
        start("exporter, no traceparent          ", true, false),
        start("exporter, traceparent in _meta    ", true, true),
    ];
    for way in &mut ways {
        for n in 0..WARMUP {
            way.call(n as u64);
        }
    }
    for _ in 0..ROUNDS {
        for way in &mut ways {
            for _ in 0..PER_ROUND {
                let n = way.calls;
                let start = Instant::now();
                way.call(n);
                way.times.push(start.elapsed());
            }
        }
    }
    let exported: u64 = ways[1].calls + ways[2].calls;
    // The batch processor sends every 5 s, or at 512 spans.
    let deadline = Instant::now() + Duration::from_secs(15);
    while received.load(Ordering::Relaxed) < exported && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    println!(
        "tracing: tools/call of echo_echo on mcp.sock, {ROUNDS} alternating rounds of {PER_ROUND} calls, µs"
    );
    let baseline = Stats::of(ways[0].times.clone());
    for way in &ways {
        let stats = Stats::of(way.times.clone());
        println!(
            "  {}  p50 {:>7.1}  p99 {:>7.1}  p50 {:.2}× the first  (+{:.1} µs)",
            way.label,
            stats.p50,
            stats.p99,
            stats.p50 / baseline.p50,
            stats.p50 - baseline.p50,
        );
    }
    println!(
        "  spans received by the OTLP receiver: {} of {exported} calls made with an exporter",
        received.load(Ordering::Relaxed)
    );
}
