//! What `bermd --receipts` adds to a `tools/call` over `mcp.sock`.
//!
//! Run: `scripts/build-apps.sh && cargo bench -p berm-service --bench receipts`. Two real
//! release bermds on temporary homes, one with `--receipts DIR` and one without, each with
//! echo deployed; one client on each. The calls alternate between them in rounds of 100,
//! so the machine's noise falls on both alike; each side's median is over every call it
//! made. Also in process: `Service::call` with and without a receipt log, the same way.
//! The figures go in docs/receipts.md; nothing here asserts a speed.

use std::time::{Duration, Instant};

mod common;

use berm_control::{DeployRequest, LimitsSpec};
use berm_service::{Service, ServiceConfig};
use common::{Bermd, McpClient, Stats};
use serde_json::{Value, json};

const ROUNDS: usize = 200;
const PER_ROUND: usize = 100;
const WARMUP: usize = 2_000;

fn main() {
    let wasm = berm_fixtures::example("echo");
    let dir = tempfile::tempdir().expect("tempdir");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let key = dir.path().join("host-key.pem");
    let key_arg = key.to_str().expect("utf-8 path");

    // In process: Service::call with and without a receipt log.
    let plain = open(&dir.path().join("plain"), None, &wasm);
    let log = berm_receipts::ReceiptLog::open(
        &dir.path().join("inproc-receipts"),
        berm_dsse::HostKey::load_or_create(Some(&key)).expect("key"),
        berm_receipts::LogOptions::default(),
    )
    .expect("receipt log");
    let receipted = open(
        &dir.path().join("receipted"),
        Some(std::sync::Arc::new(log)),
        &wasm,
    );
    let args: Value = json!({"message": "hello"});
    let (inproc_off, inproc_on) = alternate(
        |n| {
            runtime.block_on(async {
                for _ in 0..n {
                    let out = plain.call("echo_echo", &args, None).await;
                    assert_eq!(out.expect("host").expect("program").text, "hello");
                }
            })
        },
        |n| {
            runtime.block_on(async {
                for _ in 0..n {
                    let out = receipted.call("echo_echo", &args, None).await;
                    assert_eq!(out.expect("host").expect("program").text, "hello");
                }
            })
        },
    );

    // Over mcp.sock: two real bermds.
    let receipts = dir.path().join("receipts");
    // BERM_BENCH_SWAP=1 starts the receipts-on bermd first, to show the order is not
    // what is measured.
    let swap = std::env::var_os("BERM_BENCH_SWAP").is_some();
    let on_args = [
        "--receipts",
        receipts.to_str().expect("utf-8 path"),
        "--receipts-key",
        key_arg,
    ];
    let early = swap.then(|| Bermd::start(&dir.path().join("on"), &on_args));
    let off = Bermd::start(&dir.path().join("off"), &[]);
    let on = match early {
        Some(on) => on,
        None => Bermd::start(&dir.path().join("on"), &on_args),
    };
    for bermd in [&off, &on] {
        runtime
            .block_on(berm_control::Client::from_home(&bermd.home).deploy(
                "echo",
                &DeployRequest::new(&wasm, vec![], LimitsSpec::default()),
            ))
            .expect("deploy");
    }
    let before = [usage(off.pid()), usage(on.pid())];
    let threads_before = [
        common::cpu_by_thread(&off.pid().to_string()),
        common::cpu_by_thread(&on.pid().to_string()),
    ];
    let mut off_client = McpClient::connect(&off.socket());
    let mut on_client = McpClient::connect(&on.socket());
    let tool = off_client.tool_name("echo", "echo");
    let (mcp_off, mcp_on) = alternate(
        |n| {
            for _ in 0..n {
                echo(&mut off_client, &tool);
            }
        },
        |n| {
            for _ in 0..n {
                echo(&mut on_client, &tool);
            }
        },
    );
    let after = [usage(off.pid()), usage(on.pid())];
    let threads_after = [
        common::cpu_by_thread(&off.pid().to_string()),
        common::cpu_by_thread(&on.pid().to_string()),
    ];
    drop((off, on));
    let written = berm_receipts::log_files(&receipts)
        .expect("receipt files")
        .iter()
        .map(|f| std::fs::metadata(f).map_or(0, |m| m.len()))
        .sum::<u64>();
    let calls = WARMUP + ROUNDS * PER_ROUND;

    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!(
        "machine: {cores} cores; {ROUNDS} alternating rounds of {PER_ROUND} calls per side after {WARMUP} warm-up calls; tool echo_echo"
    );
    println!(
        "Service::call in process   receipts off p50 {:>7.2} µs  on p50 {:>7.2} µs  (+{:.2} µs, +{:.0}%)",
        inproc_off.p50,
        inproc_on.p50,
        inproc_on.p50 - inproc_off.p50,
        (inproc_on.p50 / inproc_off.p50 - 1.0) * 100.0
    );
    println!(
        "tools/call over mcp.sock   receipts off p50 {:>7.2} µs  on p50 {:>7.2} µs  (+{:.2} µs, +{:.0}%)  p99 {:.1} / {:.1} µs",
        mcp_off.p50,
        mcp_on.p50,
        mcp_on.p50 - mcp_off.p50,
        (mcp_on.p50 / mcp_off.p50 - 1.0) * 100.0,
        mcp_off.p99,
        mcp_on.p99
    );
    let per_call = |side: usize| {
        let calls = (WARMUP + ROUNDS * PER_ROUND) as f64;
        (
            (after[side].0 - before[side].0) / calls * 1e6,
            (after[side].1 - before[side].1) as f64 / calls,
        )
    };
    let ((cpu_off, switches_off), (cpu_on, switches_on)) = (per_call(0), per_call(1));
    println!(
        "bermd per call over mcp.sock: CPU {cpu_off:.1} µs off, {cpu_on:.1} µs on; context switches {switches_off:.2} off, {switches_on:.2} on"
    );
    for (side, name) in [(0, "off"), (1, "on")] {
        let by_thread: Vec<String> = threads_after[side]
            .iter()
            .map(|(thread, cpu)| {
                let was = threads_before[side].get(thread).copied().unwrap_or(0.0);
                let calls = (WARMUP + ROUNDS * PER_ROUND) as f64;
                format!("{thread} {:.1}", (cpu - was) / calls * 1e6)
            })
            .collect();
        println!(
            "  receipts {name}, CPU µs per call by thread: {}",
            by_thread.join(", ")
        );
    }
    println!(
        "receipt log: {written} bytes for {calls} calls ({:.0} bytes per receipt, checkpoints included)",
        written as f64 / calls as f64
    );
}

fn open(
    home: &std::path::Path,
    receipts: Option<std::sync::Arc<berm_receipts::ReceiptLog>>,
    wasm: &[u8],
) -> std::sync::Arc<Service> {
    let mut config = ServiceConfig::new(home.to_path_buf());
    config.receipts = receipts;
    let (service, _) = Service::open(&config).expect("service");
    service
        .deploy("echo", wasm, vec![], LimitsSpec::default())
        .expect("deploy");
    service
}

/// One side of the comparison: what makes n calls, and where their times go.
type Side<'a> = (&'a mut dyn FnMut(usize), &'a mut Vec<Duration>);

/// Warms both sides up, then runs them in alternating rounds, timing every call.
fn alternate(mut a: impl FnMut(usize), mut b: impl FnMut(usize)) -> (Stats, Stats) {
    a(WARMUP);
    b(WARMUP);
    let (mut times_a, mut times_b) = (Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        // Which side goes first alternates too.
        let order: [Side<'_>; 2] = if round % 2 == 0 {
            [(&mut a, &mut times_a), (&mut b, &mut times_b)]
        } else {
            [(&mut b, &mut times_b), (&mut a, &mut times_a)]
        };
        for (side, times) in order {
            for _ in 0..PER_ROUND {
                let start = Instant::now();
                side(1);
                times.push(start.elapsed());
            }
        }
    }
    (Stats::of(times_a), Stats::of(times_b))
}

/// CPU seconds and context switches (voluntary and not) of every thread of `pid` so far.
fn usage(pid: u32) -> (f64, u64) {
    let cpu = common::cpu_by_thread(&pid.to_string()).values().sum();
    let mut switches = 0;
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let status = std::fs::read_to_string(task.path().join("status")).unwrap_or_default();
        switches += status
            .lines()
            .filter(|l| l.contains("ctxt_switches"))
            .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
            .sum::<u64>();
    }
    (cpu, switches)
}

fn echo(client: &mut McpClient, tool: &str) {
    let answer = client.call(tool, json!({"message": "hello"}));
    assert_eq!(answer["result"]["content"][0]["text"], "hello", "{answer}");
}
