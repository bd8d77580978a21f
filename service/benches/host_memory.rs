//! bermd's memory when one program holds the largest staged reply on many calls at once.
//!
//! Run: `cargo bench -p berm-service --bench host_memory`. Each run starts a real (release)
//! bermd on a fresh home, deploys `holder` (a 4 MiB memory cap, `fs` granted over a directory
//! holding one file of the `fs.read` cap, 16 MiB), and makes `CALLS` calls of `holder_hold` at
//! once: each reads the file (the reply is staged in bermd, outside the program's memory) and
//! then spins until its deadline without pulling it. It prints how far bermd's peak RSS
//! (VmHWM) grew over the run and the bound of docs/perf-service.md: 1.5 × (the calls' memory
//! caps + the program's host memory budget). `RUNS` runs; the median is what counts.
//!
//! `BERM_BENCH_BERMD_ARGS` adds bermd flags, space-separated (e.g. `--max-host-memory N`).

mod common;

use std::path::Path;
use std::time::Duration;

use berm_control::{CallOutcome, DeployRequest, Grant, LimitsSpec};
use common::Bermd;

const CALLS: usize = 16;
const RUNS: usize = 5;
/// The program's memory cap.
const MEMORY_BYTES: usize = 4 << 20;
/// bermd's default host memory budget per program (`berm::DEFAULT_HOST_MEMORY_BYTES`; spelt
/// out so the bench also builds against a bermd from before the budget).
const BUDGET: usize = 64 << 20;
const MIB: f64 = (1 << 20) as f64;

/// `hold`: `fs.read` of `big`, then spin to the deadline holding the reply; on an error, fail
/// with its message. `idle`: answer at once.
fn holder() -> Vec<u8> {
    let body = format!(
        r#"(memory (export "memory") {pages})
           (data (i32.const 0) "\03\00\00\00big")
           (func (export "berm_tool_hold")
             (if (i64.lt_s (call $read (i32.const 0) (i32.const 7)) (i64.const 0))
               (then (drop (call $fail (i32.const 1024)
                 (i32.wrap_i64 (call $reply (i32.const 1024) (i32.const 8192))))))
               (else (loop $spin (br $spin)))))
           (func (export "berm_tool_idle") (drop (call $done (i32.const 0) (i32.const 0))))"#,
        pages = MEMORY_BYTES >> 16,
    );
    berm_fixtures::wat_program(
        &["hold", "idle"],
        &["berm.done", "berm.fail", "berm.reply", "fs.read"],
        &body,
    )
}

fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(future)
}

/// One run: bermd's peak RSS growth in bytes, and how many calls held their reply to the
/// deadline and how many were refused it.
fn run(work: &Path, extra: &[&str]) -> (usize, usize, usize) {
    let home = work.join("home");
    let files = work.join("files");
    std::fs::create_dir_all(&files).expect("files dir");
    std::fs::write(
        files.join("big"),
        vec![7u8; berm_service::fs::MAX_READ_BYTES as usize],
    )
    .expect("big file");
    let bermd = Bermd::start(&home, extra);
    let control = berm_control::Client::from_home(&home);
    let grants = vec![Grant::Fs {
        dir: files,
        read_only: true,
        quota: berm_control::FsQuota::default(),
    }];
    let limits = LimitsSpec {
        deadline_ms: Some(2000),
        memory_bytes: Some(MEMORY_BYTES as u64),
    };
    block_on(control.deploy("holder", &DeployRequest::new(&holder(), grants, limits)))
        .expect("deploy holder");
    // Whatever a first call allocates once is in the baseline.
    block_on(control.call("holder_idle", b"{}".to_vec())).expect("idle");
    std::thread::sleep(Duration::from_millis(200));
    let before = berm_fixtures::peak_rss(bermd.pid());
    let calls: Vec<_> = (0..CALLS)
        .map(|_| {
            let home = home.clone();
            std::thread::spawn(move || {
                let control = berm_control::Client::from_home(&home);
                block_on(control.call("holder_hold", b"{}".to_vec()))
            })
        })
        .collect();
    let (mut held, mut refused) = (0, 0);
    for call in calls {
        match call.join().expect("caller") {
            Err(e) if e.to_string().contains("ran past its deadline") => held += 1,
            Ok(answer) if answer.outcome == CallOutcome::Failed => refused += 1,
            other => panic!("unexpected answer: {other:?}"),
        }
    }
    let after = berm_fixtures::peak_rss(bermd.pid());
    (after.saturating_sub(before), held, refused)
}

fn main() {
    let extra = std::env::var("BERM_BENCH_BERMD_ARGS").unwrap_or_default();
    let extra: Vec<&str> = extra.split_whitespace().collect();
    let bound = 1.5 * (CALLS * MEMORY_BYTES + BUDGET) as f64;
    let mut growths = Vec::new();
    for i in 0..RUNS {
        let work = tempfile::tempdir().expect("tempdir");
        let (grew, held, refused) = run(work.path(), &extra);
        println!(
            "run {}: peak RSS grew {:.1} MiB; {held} calls held a 16 MiB reply to their \
             deadline, {refused} were refused it",
            i + 1,
            grew as f64 / MIB
        );
        growths.push(grew);
    }
    growths.sort_unstable();
    let median = growths[RUNS / 2] as f64;
    println!(
        "host_memory: {CALLS} calls holding the largest fs.read reply, median peak RSS growth \
         {:.1} MiB (min {:.1}, max {:.1}); bound 1.5 x ({CALLS} x {} MiB + {} MiB) = {:.1} MiB: {}",
        median / MIB,
        growths[0] as f64 / MIB,
        growths[RUNS - 1] as f64 / MIB,
        MEMORY_BYTES >> 20,
        BUDGET >> 20,
        bound / MIB,
        if median <= bound { "within" } else { "OVER" }
    );
}
