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
//! and a p99 ≤ 2× the quiet one. Nothing here asserts a speed.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use berm_control::{DeployRequest, LimitsSpec};
use common::{Bermd, McpClient, Stats};
use serde_json::json;

const CLIENTS: usize = 8;
const SECONDS: u64 = 10;

use berm_fixtures::example as wasm;

/// What the well-behaved clients saw in one run.
struct Run {
    per_second: f64,
    latency: Stats,
    hostile_calls: u64,
    hostile_connections: u64,
}

fn run(socket: &Path, echo: &str, hostile: Option<(&str, &str)>) -> Run {
    let stop = Arc::new(AtomicBool::new(false));
    let hostile_calls = Arc::new(AtomicU64::new(0));
    let hostile_connections = Arc::new(AtomicU64::new(0));
    let mut noise = Vec::new();
    if let Some((spin, bomb)) = hostile {
        let connector = (
            socket.to_path_buf(),
            stop.clone(),
            hostile_connections.clone(),
        );
        noise.push(std::thread::spawn(move || {
            let (socket, stop, count) = connector;
            while !stop.load(Ordering::Relaxed) {
                // Each connection is opened, initialized and dropped.
                drop(McpClient::connect(&socket));
                count.fetch_add(1, Ordering::Relaxed);
            }
        }));
        let caller = (socket.to_path_buf(), stop.clone(), hostile_calls.clone());
        let (spin, bomb) = (spin.to_string(), bomb.to_string());
        noise.push(std::thread::spawn(move || {
            let (socket, stop, count) = caller;
            let mut client = McpClient::connect(&socket);
            while !stop.load(Ordering::Relaxed) {
                for tool in [&spin, &bomb] {
                    let answer = client.call(tool, json!({}));
                    // A host error, as a JSON-RPC error or an isError result.
                    assert!(
                        answer["error"].is_object() || answer["result"]["isError"] == true,
                        "{answer}"
                    );
                    count.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
        // Let the hostile load start before measuring.
        std::thread::sleep(Duration::from_millis(500));
    }
    let measuring = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let (socket, stop, measuring) = (socket.to_path_buf(), stop.clone(), measuring.clone());
            let echo = echo.to_string();
            std::thread::spawn(move || {
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
                times
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
    for client in clients {
        times.extend(client.join().expect("client"));
    }
    for thread in noise {
        thread.join().expect("hostile client");
    }
    Run {
        per_second: times.len() as f64 / elapsed.as_secs_f64(),
        latency: Stats::of(times),
        hostile_calls: hostile_calls.load(Ordering::Relaxed),
        hostile_connections: hostile_connections.load(Ordering::Relaxed),
    }
}

fn main() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bermd = Bermd::start(&dir.path().join("home"), &[]);
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

    let quiet = run(&socket, &echo, None);
    let loaded = run(&socket, &echo, Some((&spin, &bomb)));
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!("machine: {cores} cores; {CLIENTS} echo clients, {SECONDS} s per run");
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
    println!(
        "ratio    calls/s {:.0}% of quiet (budget ≥ 80%), p99 {:.2}x quiet (budget ≤ 2x)",
        100.0 * loaded.per_second / quiet.per_second,
        loaded.latency.p99 / quiet.latency.p99
    );
}
