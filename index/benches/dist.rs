//! Distribution figures for docs/perf-dist.md (a benchmark, never a test):
//! push and pull of `echo` against a real local docker-registry, and search
//! over a generated index of 5,000 entries. Run by scripts/bench-dist.

#[path = "../../oci/tests/support/registry.rs"]
mod support;

use std::time::{Duration, Instant};

use berm_index::{Entry, Index, Searcher, ToolEntry};
use berm_oci::RegistryOptions;
use support::{TestRegistry, program};

const RUNS: usize = 30;
const ENTRIES: usize = 5_000;

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn show(d: Duration) -> String {
    if d >= Duration::from_millis(1) {
        format!("{:.2} ms", d.as_secs_f64() * 1e3)
    } else {
        format!("{:.1} µs", d.as_secs_f64() * 1e6)
    }
}

/// A deterministic vocabulary-based entry generator (an LCG, no rand crate).
fn generate(n: usize) -> Vec<Entry> {
    const WORDS: &[&str] = &[
        "read",
        "write",
        "file",
        "directory",
        "key",
        "value",
        "store",
        "fetch",
        "url",
        "http",
        "json",
        "parse",
        "format",
        "time",
        "clock",
        "random",
        "hash",
        "sign",
        "verify",
        "search",
        "text",
        "regex",
        "match",
        "list",
        "sort",
        "filter",
        "image",
        "resize",
        "encode",
        "decode",
        "base64",
        "csv",
        "table",
        "query",
        "sql",
        "cache",
        "log",
        "metric",
        "count",
        "sum",
        "translate",
        "language",
        "email",
        "send",
        "calendar",
        "event",
        "note",
        "todo",
        "git",
        "diff",
    ];
    let mut state: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = move |m: usize| {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((state >> 33) as usize) % m
    };
    // Half the words from a small common vocabulary, half from 2,500 rarer
    // compounds of it: a vocabulary shaped more like real descriptions than
    // 50 words repeated.
    let sentence = |len: usize, next: &mut dyn FnMut(usize) -> usize| {
        (0..len)
            .map(|_| {
                if next(2) == 0 {
                    WORDS[next(WORDS.len())].to_string()
                } else {
                    format!("{}{}", WORDS[next(WORDS.len())], WORDS[next(WORDS.len())])
                }
            })
            .collect::<Vec<_>>()
            .join(" ")
    };
    (0..n)
        .map(|i| {
            let tools = (0..1 + next(4))
                .map(|t| ToolEntry {
                    name: format!("{}-{t}", WORDS[next(WORDS.len())]),
                    description: sentence(8, &mut next),
                })
                .collect();
            Entry {
                name: format!("{}-{i}", WORDS[next(WORDS.len())]),
                reference: format!("registry.example/p/{i}@sha256:{:064x}", i),
                digest: format!("sha256:{:064x}", i + 1),
                publisher: format!("publisher-{}", next(200)),
                description: sentence(12, &mut next),
                usage: sentence(20, &mut next),
                tools,
            }
        })
        .collect()
}

fn registry_figures(rt: &tokio::runtime::Runtime) {
    let registry = TestRegistry::start();
    let (_, bytes) = program("echo");
    let options = RegistryOptions::default();
    let mut fresh = Vec::new();
    let mut again = Vec::new();
    let mut pulls = Vec::new();
    let mut pulls_by_digest = Vec::new();
    let mut pinned = String::new();
    rt.block_on(async {
        for i in 0..RUNS {
            // A new repository each time: both blobs are uploaded.
            let reference = registry.reference(&format!("bench/echo-{i}:v1"));
            let t = Instant::now();
            let pushed = berm_oci::push(&reference, &bytes, "echo.wasm", &options)
                .await
                .unwrap();
            fresh.push(t.elapsed());
            pinned = pushed.pinned;
        }
        for _ in 0..RUNS {
            // The same repository again: blobs are present, only the manifest goes.
            let t = Instant::now();
            berm_oci::push(
                &registry.reference("bench/echo-0:v1"),
                &bytes,
                "echo.wasm",
                &options,
            )
            .await
            .unwrap();
            again.push(t.elapsed());
        }
        for _ in 0..RUNS {
            let t = Instant::now();
            let pulled = berm_oci::pull(&registry.reference("bench/echo-0:v1"), &options)
                .await
                .unwrap();
            pulls.push(t.elapsed());
            assert_eq!(pulled.bytes.len(), bytes.len());
        }
        for _ in 0..RUNS {
            let t = Instant::now();
            berm_oci::pull(&pinned, &options).await.unwrap();
            pulls_by_digest.push(t.elapsed());
        }
    });
    println!(
        "| push `echo` ({} bytes) to a new repository | {} |",
        bytes.len(),
        show(median(fresh))
    );
    println!(
        "| push `echo` again (blobs already there) | {} |",
        show(median(again))
    );
    println!("| pull `echo` by tag, verified | {} |", show(median(pulls)));
    println!(
        "| pull `echo` by digest, verified | {} |",
        show(median(pulls_by_digest))
    );
}

fn search_figures() {
    let entries = generate(ENTRIES);
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("entries")).unwrap();
    for e in &entries {
        std::fs::write(
            dir.path().join(format!("entries/{}.toml", e.name)),
            e.to_toml(),
        )
        .unwrap();
    }
    let loads: Vec<Duration> = (0..RUNS)
        .map(|_| {
            let t = Instant::now();
            let index = Index::load(dir.path()).unwrap();
            assert_eq!(index.entries.len(), ENTRIES);
            t.elapsed()
        })
        .collect();
    let builds: Vec<Duration> = (0..RUNS)
        .map(|_| {
            let t = Instant::now();
            let s = Searcher::new(&entries);
            std::hint::black_box(&s);
            t.elapsed()
        })
        .collect();
    let searcher = Searcher::new(&entries);
    let queries = [
        "read a file",
        "key value store",
        "parse json",
        "send email calendar event",
        "regex",
        "jsonparse csvtable",
    ];
    let mut answers = Vec::new();
    for _ in 0..200 {
        for q in queries {
            let t = Instant::now();
            let hits = searcher.search(q, 10);
            answers.push(t.elapsed());
            std::hint::black_box(hits);
        }
    }
    println!(
        "| load {ENTRIES} entry files from a clone (TOML parse) | {} |",
        show(median(loads))
    );
    println!(
        "| build the BM25 index over {ENTRIES} entries | {} |",
        show(median(builds))
    );
    println!(
        "| answer a query (top 10) over {ENTRIES} entries | {} |",
        show(median(answers))
    );
}

fn main() {
    // `cargo bench` passes `--bench`; a plain `cargo test --benches` run
    // should not spend a minute here.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    println!("| what | median of {RUNS} |");
    println!("|---|---|");
    registry_figures(&rt);
    search_figures();
}
