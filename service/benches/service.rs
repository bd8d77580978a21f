//! bermd's MCP round trip against the same call made in process.
//!
//! Run: `scripts/build-apps.sh && cargo bench -p berm-service`. Measures, in
//! one run on one machine:
//! - baseline: `Berm::call` of echo's `echo` in process (instantiate, run, drop);
//! - `Service::call`: the same through bermd's service layer (schema
//!   validation; echo imports nothing that waits, so its call starts on
//!   the calling task);
//! - what `/metrics` adds to every call: recording one (in flight, outcome, duration),
//!   the median over batches of 1,000;
//! - the floor: a plain thread echoing the same request line over a Unix
//!   socket (two wake-ups, no MCP);
//! - MCP `tools/call` over `$BERM_HOME/mcp.sock` from one client: p50/p99, timed as the
//!   floor is (the same request line written, the answer line read and checked after the
//!   clock stops), and again with the client's JSON work (building the request, parsing the
//!   answer) inside the timed loop;
//! - calls per second with 8 clients, each on its own connection.
//!
//! bermd is the real release binary, spawned on a temporary home. The
//! figures go in docs/perf-service.md; nothing here asserts a speed.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

mod common;

use berm_control::{DeployRequest, LimitsSpec};
use berm_service::{Service, ServiceConfig};
use common::{McpClient, Stats};
use serde_json::{Value, json};

const SAMPLES: usize = 20_000;
const WARMUP: usize = 2_000;
const THROUGHPUT_SECONDS: u64 = 5;
const CLIENTS: usize = 8;

fn main() {
    let wasm = berm_fixtures::example("echo");
    let dir = tempfile::tempdir().expect("tempdir");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let args = br#"{"message":"hello"}"#;

    // In process.
    let (service, _) =
        Service::open(&ServiceConfig::new(dir.path().join("inproc"))).expect("service");
    service
        .deploy("echo", &wasm, vec![], LimitsSpec::default())
        .expect("deploy");
    let berm = service.berm().clone();
    let baseline = runtime.block_on(async {
        sample(|| async {
            let out = berm.call(None, "echo", "echo", args.to_vec()).await;
            assert_eq!(out.expect("host").expect("program").text, "hello");
        })
        .await
    });
    let args_value: Value = serde_json::from_slice(args).expect("json");
    let layer = runtime.block_on(async {
        sample(|| async {
            let out = service.call("echo_echo", &args_value, None).await;
            assert_eq!(out.expect("host").expect("program").text, "hello");
        })
        .await
    });

    // What metrics add to each call: one record, timed over batches (a single record is
    // shorter than the clock's resolution is worth).
    let metrics_ns = {
        use berm_service::metrics::Outcome;
        let metrics = service.metrics();
        for _ in 0..WARMUP {
            metrics.start("echo", "echo").finish(Outcome::Ok);
        }
        let mut batches: Vec<f64> = (0..200)
            .map(|_| {
                let start = Instant::now();
                for _ in 0..1_000 {
                    metrics.start("echo", "echo").finish(Outcome::Ok);
                }
                start.elapsed().as_nanos() as f64 / 1_000.0
            })
            .collect();
        batches.sort_by(f64::total_cmp);
        batches[batches.len() / 2]
    };

    // The floor any server on this machine pays: a thread that reads a
    // line from a Unix socket and writes it back, with the request a
    // tools/call sends. What bermd adds is the difference.
    let floor = {
        let path = dir.path().join("floor.sock");
        let listener = std::os::unix::net::UnixListener::bind(&path).expect("bind");
        std::thread::spawn(move || {
            let (stream, _) = listener.accept().expect("accept");
            let mut writer = stream.try_clone().expect("clone");
            let mut reader = BufReader::new(stream);
            let mut line = Vec::new();
            while reader.read_until(b'\n', &mut line).is_ok_and(|n| n > 0) {
                if writer.write_all(&line).is_err() {
                    break;
                }
                line.clear();
            }
        });
        let stream = UnixStream::connect(&path).expect("connect");
        let mut writer = stream.try_clone().expect("clone");
        let mut reader = BufReader::new(stream);
        let request = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo_echo","arguments":{"message":"hello"}}}"#;
        let mut line = Vec::new();
        let mut round_trip = || {
            writer.write_all(request).expect("write");
            writer.write_all(b"\n").expect("write");
            line.clear();
            reader.read_until(b'\n', &mut line).expect("read");
        };
        for _ in 0..WARMUP {
            round_trip();
        }
        let mut times = Vec::with_capacity(SAMPLES);
        for _ in 0..SAMPLES {
            let start = Instant::now();
            round_trip();
            times.push(start.elapsed());
        }
        Stats::of(times)
    };

    // bermd, over its Unix socket.
    let home = dir.path().join("bermd");
    let mut bermd = Command::new(env!("CARGO_BIN_EXE_bermd"))
        .env("BERM_HOME", &home)
        .env("BERM_LOG", "warn")
        .stdout(Stdio::null())
        .spawn()
        .expect("bermd");
    let socket = home.join("mcp.sock");
    let deadline = Instant::now() + Duration::from_secs(60);
    while UnixStream::connect(home.join("control.sock")).is_err() {
        assert!(Instant::now() < deadline, "bermd did not come up");
        std::thread::sleep(Duration::from_millis(20));
    }
    runtime
        .block_on(berm_control::Client::from_home(&home).deploy(
            "echo",
            &DeployRequest::new(&wasm, vec![], LimitsSpec::default()),
        ))
        .expect("deploy");

    let mut client = McpClient::connect(&socket);
    let tool = client.tool_name("echo", "echo");
    for _ in 0..WARMUP {
        echo(&mut client, &tool);
    }
    // Timed as the floor is: the client writes the same request line each time (an id is
    // free again once answered) and reads the answer line, which is checked after the clock
    // stops. What bermd adds to the floor is then bermd's alone.
    let request = format!(
        "{}\n",
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
               "params": {"name": tool, "arguments": {"message": "hello"}}})
    );
    let mut rtt = Vec::with_capacity(SAMPLES);
    for _ in 0..SAMPLES {
        let start = Instant::now();
        client.round_trip(request.as_bytes());
        rtt.push(start.elapsed());
        let answer: Value = serde_json::from_str(client.last_line()).expect("answer");
        assert_eq!(answer["result"]["content"][0]["text"], "hello", "{answer}");
    }
    let mcp = Stats::of(rtt);
    // The same calls with the client's JSON work (building the request, parsing the answer)
    // inside the timed loop, as a JSON client makes them.
    let mut rtt = Vec::with_capacity(SAMPLES);
    for _ in 0..SAMPLES {
        let start = Instant::now();
        echo(&mut client, &tool);
        rtt.push(start.elapsed());
    }
    let mcp_json = Stats::of(rtt);

    let stop = Arc::new(AtomicBool::new(false));
    let total = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let (socket, stop, total) = (socket.clone(), stop.clone(), total.clone());
            let tool = tool.clone();
            std::thread::spawn(move || {
                let mut client = McpClient::connect(&socket);
                for _ in 0..200 {
                    echo(&mut client, &tool);
                }
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    echo(&mut client, &tool);
                    n += 1;
                }
                total.fetch_add(n, Ordering::Relaxed);
            })
        })
        .collect();
    let start = Instant::now();
    std::thread::sleep(Duration::from_secs(THROUGHPUT_SECONDS));
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().expect("client thread");
    }
    let per_second = total.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64();
    let _ = bermd.kill();
    let _ = bermd.wait();

    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!(
        "machine: {cores} cores; {SAMPLES} samples after {WARMUP} warm-up calls; tool echo_echo"
    );
    println!(
        "baseline  Berm::call in process          p50 {:>8.1} µs  p99 {:>8.1} µs",
        baseline.p50, baseline.p99
    );
    println!(
        "          Service::call in process       p50 {:>8.1} µs  p99 {:>8.1} µs",
        layer.p50, layer.p99
    );
    println!(
        "          metrics: one call recorded         {:>8.0} ns  ({:.1}% of Service::call p50)",
        metrics_ns,
        metrics_ns / (layer.p50 * 1_000.0) * 100.0
    );
    println!(
        "floor     a line echoed by a thread over a Unix socket  p50 {:>8.1} µs  p99 {:>8.1} µs",
        floor.p50, floor.p99
    );
    println!(
        "MCP       tools/call over mcp.sock (1)   p50 {:>8.1} µs  p99 {:>8.1} µs  ({:.2}x the floor p50)",
        mcp.p50,
        mcp.p99,
        mcp.p50 / floor.p50
    );
    println!(
        "          the same, client's JSON timed  p50 {:>8.1} µs  p99 {:>8.1} µs  ({:.2}x the floor p50)",
        mcp_json.p50,
        mcp_json.p99,
        mcp_json.p50 / floor.p50
    );
    println!(
        "MCP       tools/call over mcp.sock ({CLIENTS})   {per_second:>8.0} calls/s  (1 client, sequential: {:.0} calls/s)",
        1e6 / mcp.p50
    );
}

async fn sample<F, Fut>(call: F) -> Stats
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    common::sample(WARMUP, SAMPLES, call).await
}

fn echo(client: &mut McpClient, tool: &str) {
    let answer = client.call(tool, json!({"message": "hello"}));
    assert_eq!(answer["result"]["content"][0]["text"], "hello", "{answer}");
}
