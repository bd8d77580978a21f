//! Well-behaved clients beside hostile ones: does bermd keep serving?
//!
//! Run: `scripts/build-apps.sh && cargo bench -p berm-service --bench hostile`.
//! Two runs against one real (release) bermd, each `SECONDS` long:
//! - quiet: 8 clients, each on its own session, calling `echo` in a loop;
//! - hostile: the same 8 clients while one client opens connections in a
//!   loop (connect, initialize, drop) and another calls `hostile.spin`
//!   (until its 1 s deadline) and `hostile.memory_bomb` (to its 32 MiB
//!   cap), one after the other, without pause.
//!
//! It prints the well-behaved clients' calls/s and p50/p99 for both runs and
//! their ratios; the budget (docs/perf-service.md) is ≥ 80% of the calls/s
//! and a p99 ≤ 2× the quiet one. Nothing here asserts a speed. It also
//! prints where the CPU went in each run: bermd's threads by name, and the
//! bench's own client threads.
//!
//! For finding where the time goes, two environment variables:
//! - `BERM_HOSTILE`: which hostile clients run, a comma-separated subset of
//!   `connect,spin,bomb` (default all three);
//! - `BERM_BENCH_BERMD_ARGS`: extra bermd flags, space-separated (e.g.
//!   `--max-session-rate 1000000` to measure without the session rate).

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use berm_control::{DeployRequest, LimitsSpec};
use berm_fixtures::example as wasm;
use common::{Bermd, McpClient, Stats, cpu_by_thread, thread_cpu};
use serde_json::json;

const CLIENTS: usize = 8;
const SECONDS: u64 = 10;

/// What the well-behaved clients saw in one run, and where the CPU went.
struct Run {
    per_second: f64,
    latency: Stats,
    hostile_calls: u64,
    hostile_connections: u64,
    /// CPU seconds of bermd's threads, by thread name.
    bermd_cpu: BTreeMap<String, f64>,
    /// CPU seconds of the bench's threads: echo clients, connector, caller.
    bench_cpu: [f64; 3],
}

/// The hostile clients of a run.
struct Hostile {
    /// Whether one client opens connections in a loop.
    connect: bool,
    /// The tools the other client calls in turn (none: no such client).
    tools: Vec<String>,
}

fn spawn_named<T: Send + 'static>(
    name: &str,
    body: impl FnOnce() -> T + Send + 'static,
) -> std::thread::JoinHandle<T> {
    std::thread::Builder::new()
        .name(name.to_string())
        .spawn(body)
        .expect("thread")
}

fn run(bermd: &Bermd, echo: &str, hostile: Option<&Hostile>) -> Run {
    let socket = bermd.socket();
    let socket = socket.as_path();
    let pid = bermd.pid().to_string();
    let bermd_before = cpu_by_thread(&pid);
    let stop = Arc::new(AtomicBool::new(false));
    let hostile_calls = Arc::new(AtomicU64::new(0));
    let hostile_connections = Arc::new(AtomicU64::new(0));
    let mut noise = Vec::new();
    let connects = hostile.is_some_and(|h| h.connect);
    if connects {
        let connector = (
            socket.to_path_buf(),
            stop.clone(),
            hostile_connections.clone(),
        );
        noise.push(spawn_named("connector", move || {
            let (socket, stop, count) = connector;
            while !stop.load(Ordering::Relaxed) {
                // Each connection is opened, initialized and dropped.
                drop(McpClient::connect(&socket));
                count.fetch_add(1, Ordering::Relaxed);
            }
            thread_cpu()
        }));
    }
    if let Some(tools) = hostile.map(|h| h.tools.clone()).filter(|t| !t.is_empty()) {
        let caller = (socket.to_path_buf(), stop.clone(), hostile_calls.clone());
        noise.push(spawn_named("caller", move || {
            let (socket, stop, count) = caller;
            let mut client = McpClient::connect(&socket);
            while !stop.load(Ordering::Relaxed) {
                for tool in &tools {
                    let answer = client.call(tool, json!({}));
                    // A host error, as a JSON-RPC error or an isError result.
                    assert!(
                        answer["error"].is_object() || answer["result"]["isError"] == true,
                        "{answer}"
                    );
                    count.fetch_add(1, Ordering::Relaxed);
                }
            }
            thread_cpu()
        }));
    }
    if hostile.is_some() {
        // Let the hostile load start before measuring.
        std::thread::sleep(Duration::from_millis(500));
    }
    let measuring = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let (socket, stop, measuring) = (socket.to_path_buf(), stop.clone(), measuring.clone());
            let echo = echo.to_string();
            spawn_named("echo-client", move || {
                let mut client = McpClient::connect(&socket);
                let mut times = Vec::new();
                let call = |client: &mut McpClient| {
                    let answer = client.call(&echo, json!({"message": "hello"}));
                    assert_eq!(answer["result"]["content"][0]["text"], "hello", "{answer}");
                };
                while !measuring.load(Ordering::Relaxed) {
                    call(&mut client);
                }
                while !stop.load(Ordering::Relaxed) {
                    let start = Instant::now();
                    call(&mut client);
                    times.push(start.elapsed());
                }
                (times, thread_cpu())
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    measuring.store(true, Ordering::Relaxed);
    let start = Instant::now();
    std::thread::sleep(Duration::from_secs(SECONDS));
    stop.store(true, Ordering::Relaxed);
    let elapsed = start.elapsed();
    let mut times = Vec::new();
    let mut bench_cpu = [0.0; 3];
    for client in clients {
        let (client_times, cpu) = client.join().expect("client");
        times.extend(client_times);
        bench_cpu[0] += cpu;
    }
    let mut noise = noise.into_iter();
    if connects {
        bench_cpu[1] = noise.next().expect("connector").join().expect("connector");
    }
    if let Some(caller) = noise.next() {
        bench_cpu[2] = caller.join().expect("hostile caller");
    }
    let mut bermd_cpu = cpu_by_thread(&pid);
    for (name, seconds) in &mut bermd_cpu {
        *seconds -= bermd_before.get(name).copied().unwrap_or(0.0);
    }
    Run {
        per_second: times.len() as f64 / elapsed.as_secs_f64(),
        latency: Stats::of(times),
        hostile_calls: hostile_calls.load(Ordering::Relaxed),
        hostile_connections: hostile_connections.load(Ordering::Relaxed),
        bermd_cpu,
        bench_cpu,
    }
}

fn main() {
    let dir = tempfile::tempdir().expect("tempdir");
    let extra = std::env::var("BERM_BENCH_BERMD_ARGS").unwrap_or_default();
    let extra: Vec<&str> = extra.split_whitespace().collect();
    let bermd = Bermd::start(&dir.path().join("home"), &extra);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let control = berm_control::Client::from_home(&bermd.home);
    runtime
        .block_on(control.deploy(
            "echo",
            &DeployRequest::new(&wasm("echo"), vec![], LimitsSpec::default()),
        ))
        .expect("deploy echo");
    let limits = LimitsSpec {
        deadline_ms: Some(1000),
        memory_bytes: Some(32 << 20),
    };
    runtime
        .block_on(control.deploy(
            "hostile",
            &DeployRequest::new(&wasm("hostile"), vec![], limits),
        ))
        .expect("deploy hostile");
    let socket = bermd.socket();
    let mut names = McpClient::connect(&socket);
    let echo = names.tool_name("echo", "echo");
    let spin = names.tool_name("hostile", "spin");
    let bomb = names.tool_name("hostile", "memory_bomb");
    drop(names);

    let which = std::env::var("BERM_HOSTILE").unwrap_or_else(|_| "connect,spin,bomb".into());
    let which: Vec<&str> = which.split(',').map(str::trim).collect();
    for name in &which {
        assert!(
            ["connect", "spin", "bomb"].contains(name),
            "BERM_HOSTILE: `{name}` is not one of connect, spin, bomb"
        );
    }
    let hostile = Hostile {
        connect: which.contains(&"connect"),
        tools: [("spin", spin), ("bomb", bomb)]
            .into_iter()
            .filter(|(name, _)| which.contains(name))
            .map(|(_, tool)| tool)
            .collect(),
    };

    let quiet = run(&bermd, &echo, None);
    let loaded = run(&bermd, &echo, Some(&hostile));
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!(
        "machine: {cores} cores; {CLIENTS} echo clients, {SECONDS} s per run; hostile: {}; bermd {}",
        which.join(","),
        extra.join(" ")
    );
    for (what, run) in [("quiet  ", &quiet), ("hostile", &loaded)] {
        println!(
            "{what}  {:>8.0} calls/s  p50 {:>8.1} µs  p99 {:>8.1} µs  (hostile calls {}, connections opened {})",
            run.per_second,
            run.latency.p50,
            run.latency.p99,
            run.hostile_calls,
            run.hostile_connections
        );
    }
    for (what, run) in [("quiet  ", &quiet), ("hostile", &loaded)] {
        let bermd: Vec<String> = run
            .bermd_cpu
            .iter()
            .filter(|(_, seconds)| **seconds >= 0.005)
            .map(|(name, seconds)| format!("{name} {seconds:.2}"))
            .collect();
        println!(
            "{what}  CPU s: bermd [{}]; bench echo clients {:.2}, connector {:.2}, caller {:.2}",
            bermd.join(", "),
            run.bench_cpu[0],
            run.bench_cpu[1],
            run.bench_cpu[2]
        );
    }
    println!(
        "ratio    calls/s {:.0}% of quiet (budget ≥ 80%), p99 {:.2}x quiet (budget ≤ 2x)",
        100.0 * loaded.per_second / quiet.per_second,
        loaded.latency.p99 / quiet.latency.p99
    );
}
