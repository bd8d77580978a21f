//! A trivial call of a program in each language berm runs, through bermd over MCP on its Unix
//! socket: a Rust core module (echo's `echo`), a Rust component (shapes' `bounds` of no
//! points), a JavaScript component (notes-ts's `calls`, built with sdk/ts and componentize-js)
//! and a Python component (fetch-py's `calls`, sdk/python and componentize-py), each call on a
//! fresh instance. Also bermd's resident memory after deploying each (which holds what the
//! compiler left on the heap), again after a restart that loads the program from the code
//! cache (what serving it costs; the calls are timed on this bermd), and the size of its
//! compiled-code cache entry.
//!
//! Run: `cargo bench -p berm-service --bench components` after scripts/build-apps.sh. One
//! release bermd per program on a fresh home, all running at once; the calls alternate
//! between them in rounds, so a slow stretch of the machine falls on all four alike. The
//! goals (docs/design: a JS call ≤ 2 ms and a Python call ≤ 5 ms p50) are read off the
//! table; the core-module row is the MCP round trip's floor in the same run.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use berm_control::{DeployRequest, Grant, LimitsSpec};
use common::{Bermd, McpClient, Stats};
use serde_json::{Value, json};

const ROUNDS: usize = 20;
const CALLS_PER_ROUND: usize = 25;
const WARMUP: usize = 5;
const MIB: f64 = (1 << 20) as f64;

struct Subject {
    label: &'static str,
    program: &'static str,
    image: PathBuf,
    grants: Vec<Grant>,
    tool: &'static str,
    arguments: Value,
}

fn subjects() -> Vec<Subject> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let app = |name: &str| {
        root.join("target/apps")
            .join(name)
            .join(format!("{name}.wasm"))
    };
    vec![
        Subject {
            label: "Rust core module (echo)",
            program: "echo",
            image: root.join("target/wasm32-unknown-unknown/release/echo.wasm"),
            grants: vec![],
            tool: "echo",
            arguments: json!({"message": "hi"}),
        },
        Subject {
            label: "Rust component (shapes)",
            program: "shapes",
            image: app("shapes"),
            grants: vec![],
            tool: "bounds",
            arguments: json!({"points": []}),
        },
        Subject {
            label: "JS component (notes-ts)",
            program: "notes-ts",
            image: app("notes-ts"),
            grants: vec![],
            tool: "calls",
            arguments: json!({}),
        },
        Subject {
            label: "Python component (fetch-py)",
            program: "fetch-py",
            image: app("fetch-py"),
            // CPython reseeds itself from wasi:random at every call.
            grants: vec![Grant::Random],
            tool: "calls",
            arguments: json!({}),
        },
    ]
}

/// The resident set of process `pid` now (`VmRSS`), in bytes.
fn rss(pid: u32) -> usize {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    let kib: usize = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|kib| kib.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS");
    kib << 10
}

/// The size of the compiled-code cache's files under `home`.
fn code_cache_bytes(home: &Path) -> u64 {
    std::fs::read_dir(home.join("cache"))
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter(|e| e.path().extension().is_some_and(|x| x == "cwasm"))
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(future)
}

struct Running {
    subject: Subject,
    _bermd: Bermd,
    client: McpClient,
    tool: String,
    times: Vec<Duration>,
    rss_idle: usize,
    rss_deployed: usize,
    rss_restarted: usize,
    code_bytes: u64,
    compile: Duration,
}

fn main() {
    let work = tempfile::tempdir().expect("tempdir");
    let mut running: Vec<Running> = subjects()
        .into_iter()
        .map(|subject| {
            let image = std::fs::read(&subject.image).unwrap_or_else(|e| {
                panic!(
                    "{}: {e}: run scripts/build-apps.sh first",
                    subject.image.display()
                )
            });
            let home = work.path().join(subject.program);
            let bermd = Bermd::start(&home, &[]);
            std::thread::sleep(Duration::from_millis(200));
            let rss_idle = rss(bermd.pid());
            let control = berm_control::Client::from_home(&home);
            let started = Instant::now();
            block_on(control.deploy(
                subject.program,
                &DeployRequest::new(&image, subject.grants.clone(), LimitsSpec::default()),
            ))
            .unwrap_or_else(|e| panic!("deploy {}: {e}", subject.program));
            let compile = started.elapsed();
            let warm_up = |client: &mut McpClient, tool: &str| {
                for _ in 0..WARMUP {
                    let answer = client.call(tool, subject.arguments.clone());
                    assert!(
                        answer["result"]["isError"] != json!(true) && answer.get("error").is_none(),
                        "{}: {answer}",
                        subject.label
                    );
                }
            };
            let mut client = McpClient::connect(&bermd.socket());
            let tool = client.tool_name(subject.program, subject.tool);
            warm_up(&mut client, &tool);
            let rss_deployed = rss(bermd.pid());
            // The compiler's heap stays with the process that compiled; a bermd that starts
            // from the code cache (every restart, and the microVM's guest) holds only what
            // serving needs. The calls below go to this one.
            drop(client);
            drop(bermd);
            let bermd = Bermd::start(&home, &[]);
            let mut client = McpClient::connect(&bermd.socket());
            warm_up(&mut client, &tool);
            let rss_restarted = rss(bermd.pid());
            Running {
                code_bytes: code_cache_bytes(&home),
                subject,
                _bermd: bermd,
                client,
                tool,
                times: Vec::new(),
                rss_idle,
                rss_deployed,
                rss_restarted,
                compile,
            }
        })
        .collect();
    for _ in 0..ROUNDS {
        for r in &mut running {
            for _ in 0..CALLS_PER_ROUND {
                let start = Instant::now();
                r.client.call(&r.tool, r.subject.arguments.clone());
                r.times.push(start.elapsed());
            }
        }
    }
    println!(
        "| program | trivial call p50 | p99 | vs core module p50 | bermd RSS idle → after deploy + {WARMUP} calls | RSS after a restart from the code cache + {WARMUP} calls | code-cache entry | deploy (compile) |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    let floor = Stats::of(running[0].times.clone()).p50;
    for r in &running {
        let stats = Stats::of(r.times.clone());
        println!(
            "| {} | {:.0} µs | {:.0} µs | {:.1}x | {:.1} → {:.1} MiB | {:.1} MiB | {:.1} MiB | {:.1} s |",
            r.subject.label,
            stats.p50,
            stats.p99,
            stats.p50 / floor,
            r.rss_idle as f64 / MIB,
            r.rss_deployed as f64 / MIB,
            r.rss_restarted as f64 / MIB,
            r.code_bytes as f64 / MIB,
            r.compile.as_secs_f64(),
        );
    }
}
