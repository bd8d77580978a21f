//! `tools/call` under MCP 2026-07-28 against 2025-11-25, over HTTP and `mcp.sock`, in one run.
//!
//! Run: `scripts/build-apps.sh && cargo bench -p berm-service --bench protocols`. One bermd
//! (the release binary, on a temporary home, `--http` on loopback) serves echo's `echo`; each
//! line is one client making calls one after another:
//! - `mcp.sock`, 2025-11-25: `initialize`, then `tools/call` on the session;
//! - `mcp.sock`, 2026-07-28: no `initialize`; every `tools/call` carries its protocol version
//!   and capabilities in `_meta`;
//! - HTTP, 2025-11-25: `initialize` opens a session (`Mcp-Session-Id`), then each call is a
//!   POST on one kept-alive connection;
//! - HTTP, 2026-07-28: each call is a POST with `MCP-Protocol-Version` and `Mcp-Method`
//!   headers and no session.
//!
//! Then calls per second with 8 such clients on each of the four. The figures go in
//! docs/perf-service.md; nothing here asserts a speed.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

mod common;

use berm_control::{DeployRequest, LimitsSpec};
use common::{Bermd, McpClient, Stats};
use serde_json::{Value, json};

const SAMPLES: usize = 5_000;
const WARMUP: usize = 500;
const THROUGHPUT_SECONDS: u64 = 3;
const CLIENTS: usize = 8;

/// The `_meta` a 2026-07-28 request carries instead of a session.
fn meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "0"},
    })
}

/// One of the four ways to call.
#[derive(Clone, Copy)]
enum Way {
    Socket2025,
    Socket2026,
    Http2025,
    Http2026,
}

impl Way {
    const ALL: [Way; 4] = [
        Way::Socket2025,
        Way::Socket2026,
        Way::Http2025,
        Way::Http2026,
    ];

    fn label(self) -> &'static str {
        match self {
            Way::Socket2025 => "mcp.sock 2025-11-25",
            Way::Socket2026 => "mcp.sock 2026-07-28",
            Way::Http2025 => "HTTP     2025-11-25",
            Way::Http2026 => "HTTP     2026-07-28",
        }
    }
}

/// A client of one [`Way`], making one call at a time.
enum Caller {
    Socket {
        client: McpClient,
        stateless: bool,
    },
    Http {
        http: reqwest::Client,
        url: String,
        bearer: String,
        session: Option<String>,
        id: u64,
    },
}

impl Caller {
    async fn new(way: Way, socket: &std::path::Path, url: &str, bearer: &str) -> Caller {
        match way {
            Way::Socket2025 | Way::Socket2026 => {
                let stateless = matches!(way, Way::Socket2026);
                let mut client = McpClient::connect_stateless(socket);
                if !stateless {
                    client.request("initialize", json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}}));
                    client.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
                }
                Caller::Socket { client, stateless }
            }
            Way::Http2025 | Way::Http2026 => {
                let mut caller = Caller::Http {
                    http: reqwest::Client::new(),
                    url: url.to_string(),
                    bearer: bearer.to_string(),
                    session: None,
                    id: 0,
                };
                if matches!(way, Way::Http2025) {
                    caller.initialize().await;
                }
                caller
            }
        }
    }

    /// Opens an HTTP session: `initialize`, then `notifications/initialized` on it.
    async fn initialize(&mut self) {
        let Caller::Http {
            http,
            url,
            bearer,
            session,
            ..
        } = self
        else {
            return;
        };
        let body = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}}});
        let answer = http
            .post(url.as_str())
            .header("Authorization", bearer.as_str())
            .header("Accept", "application/json, text/event-stream")
            .header("Content-Type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .expect("initialize");
        let id = answer.headers()["mcp-session-id"]
            .to_str()
            .expect("session id")
            .to_string();
        answer.bytes().await.expect("initialize body");
        let initialized = http
            .post(url.as_str())
            .header("Authorization", bearer.as_str())
            .header("Accept", "application/json, text/event-stream")
            .header("Mcp-Session-Id", &id)
            .header("MCP-Protocol-Version", "2025-11-25")
            .header("Content-Type", "application/json")
            .body(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string())
            .send()
            .await
            .expect("initialized");
        assert_eq!(initialized.status(), 202);
        *session = Some(id);
    }

    /// One `tools/call` of echo's `echo`; checks the answer.
    async fn echo(&mut self) {
        let text = match self {
            Caller::Socket { client, stateless } => {
                let mut params = json!({"name": "echo_echo", "arguments": {"message": "hello"}});
                if *stateless {
                    params["_meta"] = meta();
                }
                let answer = client.request("tools/call", params);
                answer["result"]["content"][0]["text"].clone()
            }
            Caller::Http {
                http,
                url,
                bearer,
                session,
                id,
            } => {
                *id += 1;
                let mut params = json!({"name": "echo_echo", "arguments": {"message": "hello"}});
                let mut request = http
                    .post(url.as_str())
                    .header("Authorization", bearer.as_str())
                    .header("Accept", "application/json, text/event-stream");
                request = match session {
                    Some(session) => request
                        .header("Mcp-Session-Id", session.as_str())
                        .header("MCP-Protocol-Version", "2025-11-25"),
                    None => {
                        params["_meta"] = meta();
                        request
                            .header("MCP-Protocol-Version", "2026-07-28")
                            .header("Mcp-Method", "tools/call")
                            .header("Mcp-Name", "echo_echo")
                    }
                };
                let body =
                    json!({"jsonrpc": "2.0", "id": *id, "method": "tools/call", "params": params});
                let answer = request
                    .header("Content-Type", "application/json")
                    .body(body.to_string())
                    .send()
                    .await
                    .expect("tools/call");
                let status = answer.status();
                let bytes = answer.text().await.expect("body");
                assert_eq!(status, 200, "{bytes}");
                let answer: Value =
                    serde_json::from_str(common::http_message(&bytes)).expect("answer");
                answer["result"]["content"][0]["text"].clone()
            }
        };
        assert_eq!(text, "hello");
    }
}

fn main() {
    let wasm = berm_fixtures::example("echo");
    let dir = tempfile::tempdir().expect("tempdir");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("port");
        listener.local_addr().expect("addr").port()
    };
    let addr = format!("127.0.0.1:{port}");
    let bermd = Bermd::start(dir.path(), &["--http", &addr]);
    runtime
        .block_on(berm_control::Client::from_home(dir.path()).deploy(
            "echo",
            &DeployRequest::new(&wasm, vec![], LimitsSpec::default()),
        ))
        .expect("deploy");
    let token = std::fs::read_to_string(dir.path().join("http-token")).expect("token");
    let bearer = format!("Bearer {}", token.trim());
    let url = format!("http://{addr}/mcp");
    // bermd serves HTTP once it listens.
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(&addr).is_err() {
        assert!(
            Instant::now() < deadline,
            "bermd's HTTP listener did not come up"
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!(
        "machine: {cores} cores; {SAMPLES} sequential calls after {WARMUP} warm-up per line; tool echo_echo"
    );
    let mut latency = Vec::new();
    for way in Way::ALL {
        let stats = runtime.block_on(async {
            let mut caller = Caller::new(way, &bermd.socket(), &url, &bearer).await;
            for _ in 0..WARMUP {
                caller.echo().await;
            }
            let mut times = Vec::with_capacity(SAMPLES);
            for _ in 0..SAMPLES {
                let start = Instant::now();
                caller.echo().await;
                times.push(start.elapsed());
            }
            Stats::of(times)
        });
        latency.push(stats.p50);
        println!(
            "{}  tools/call  p50 {:>8.1} µs  p99 {:>8.1} µs",
            way.label(),
            stats.p50,
            stats.p99
        );
    }
    for (i, way) in Way::ALL.iter().enumerate() {
        let per_second = throughput(*way, &bermd, &url, &bearer);
        let ratio = |a: usize, b: usize| latency[a] / latency[b];
        let versus = match i {
            1 => format!("  (p50 {:.2}x of 2025-11-25 on mcp.sock)", ratio(1, 0)),
            3 => format!("  (p50 {:.2}x of 2025-11-25 over HTTP)", ratio(3, 2)),
            _ => String::new(),
        };
        println!(
            "{}  {CLIENTS} clients  {per_second:>8.0} calls/s{versus}",
            way.label()
        );
    }
}

/// Calls per second of [`CLIENTS`] clients of `way`, each on a thread of its own (the socket
/// client blocks) calling as fast as it is answered.
fn throughput(way: Way, bermd: &Bermd, url: &str, bearer: &str) -> f64 {
    let stop = Arc::new(AtomicBool::new(false));
    let total = Arc::new(AtomicU64::new(0));
    let ready = Arc::new(std::sync::Barrier::new(CLIENTS + 1));
    let threads: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let (stop, total, ready) = (stop.clone(), total.clone(), ready.clone());
            let (socket, url, bearer) = (bermd.socket(), url.to_string(), bearer.to_string());
            std::thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("runtime");
                runtime.block_on(async {
                    let mut caller = Caller::new(way, &socket, &url, &bearer).await;
                    for _ in 0..50 {
                        caller.echo().await;
                    }
                    ready.wait();
                    let mut n = 0;
                    while !stop.load(Ordering::Relaxed) {
                        caller.echo().await;
                        n += 1;
                    }
                    total.fetch_add(n, Ordering::Relaxed);
                });
            })
        })
        .collect();
    ready.wait();
    let start = Instant::now();
    std::thread::sleep(Duration::from_secs(THROUGHPUT_SECONDS));
    stop.store(true, Ordering::Relaxed);
    for thread in threads {
        thread.join().expect("client thread");
    }
    total.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64()
}
