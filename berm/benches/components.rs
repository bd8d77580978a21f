//! What a trivial call costs on a fresh instance, a core module against components, in one
//! run with alternating rounds (so drift on a shared machine hits every row alike): p50 and
//! p99 per row, with the process's resident memory added by deploying each program and the
//! size of its compiled code (its code-cache entry).
//!
//! Rows: the Rust core module `echo` (apps/echo), the Rust component `plain` (plain exports,
//! apps/components/plain) and `probe` (berm's manifest, apps/components/probe). More rows come
//! from `BERM_BENCH_COMPONENTS`: `label|path|tool|json-arguments`, separated by `;` (the
//! component's manifest must declare `tool`). Run with `cargo bench -p berm --bench components`
//! after scripts/build-apps.sh.

// A bench binary; its functions are not an API.
#![allow(missing_docs)]

use std::time::Instant;

use berm::{Berm, Engine, EngineConfig, call};

const ROUNDS: usize = 20;
const CALLS_PER_ROUND: usize = 100;

struct Row {
    label: String,
    program: String,
    tool: String,
    args: Vec<u8>,
    rss_added: i64,
    code_bytes: usize,
    samples: Vec<f64>,
}

/// The process's resident set, in bytes.
fn rss() -> i64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: i64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index]
}

fn main() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let engine = Engine::new(&EngineConfig::default()).unwrap();
    let berm = Berm::new(&engine, call::DEFAULT_CALL_DEPTH, vec![]);

    let probe_manifest = serde_json::json!({"abi": 1, "tools": [
        {"name": "counter", "input_schema": {"type": "object"}}
    ]});
    let probe = berm_fixtures::with_section(
        &berm_fixtures::component("probe"),
        berm::abi::MANIFEST_SECTION,
        probe_manifest.to_string().as_bytes(),
    );
    let mut programs: Vec<(String, Vec<u8>, String, Vec<u8>)> = vec![
        (
            "rust core module (echo)".into(),
            berm_fixtures::example("echo"),
            "echo".into(),
            br#"{"message":"hello"}"#.to_vec(),
        ),
        (
            "rust component, plain export (plain greet)".into(),
            berm_fixtures::component("plain"),
            "greet".into(),
            br#"{"name":"hello"}"#.to_vec(),
        ),
        (
            "rust component, manifest (probe counter)".into(),
            probe,
            "counter".into(),
            b"{}".to_vec(),
        ),
    ];
    for spec in std::env::var("BERM_BENCH_COMPONENTS")
        .unwrap_or_default()
        .split(';')
        .filter(|s| !s.trim().is_empty())
    {
        let parts: Vec<&str> = spec.splitn(4, '|').collect();
        let [label, path, tool, args] = parts.as_slice() else {
            panic!("BERM_BENCH_COMPONENTS: `{spec}` is not label|path|tool|json-arguments");
        };
        let wasm = std::fs::read(path).unwrap_or_else(|e| panic!("{path}: {e}"));
        programs.push((
            label.to_string(),
            wasm,
            tool.to_string(),
            args.as_bytes().to_vec(),
        ));
    }

    let mut rows = Vec::new();
    for (i, (label, wasm, tool, args)) in programs.into_iter().enumerate() {
        let program = format!("p{i}");
        let before = rss();
        berm.deploy(&program, &wasm).unwrap();
        // One call, so the first instantiation's pages count with the deploy.
        runtime
            .block_on(berm.call(None, &program, &tool, args.clone()))
            .unwrap()
            .unwrap();
        let rss_added = rss() - before;
        let code_bytes = engine.precompile(&wasm).unwrap().bytes.len();
        rows.push(Row {
            label,
            program,
            tool,
            args,
            rss_added,
            code_bytes,
            samples: Vec::new(),
        });
    }
    for _ in 0..ROUNDS {
        for row in &mut rows {
            for _ in 0..CALLS_PER_ROUND {
                let started = Instant::now();
                runtime
                    .block_on(berm.call(None, &row.program, &row.tool, row.args.clone()))
                    .unwrap()
                    .unwrap();
                row.samples.push(started.elapsed().as_secs_f64() * 1e6);
            }
        }
    }
    println!(
        "{:<48} {:>10} {:>10} {:>14} {:>14}",
        "program", "p50 µs", "p99 µs", "RSS added KiB", "code KiB"
    );
    let base = {
        let mut s = rows[0].samples.clone();
        s.sort_by(f64::total_cmp);
        percentile(&s, 0.5)
    };
    for row in &mut rows {
        row.samples.sort_by(f64::total_cmp);
        let p50 = percentile(&row.samples, 0.5);
        println!(
            "{:<48} {:>10.1} {:>10.1} {:>14} {:>14}   ({:.2}x the core module's p50)",
            row.label,
            p50,
            percentile(&row.samples, 0.99),
            row.rss_added / 1024,
            row.code_bytes / 1024,
            p50 / base,
        );
    }
}
