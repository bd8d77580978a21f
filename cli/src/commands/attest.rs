//! `berm attest RUN_DIR` and `berm attest verify RECORD`: the CLI face of berm-attest.
//!
//! `berm attest RUN_DIR` prints the record of a berm-vmm run (canonical JSON, one line, with
//! `recordSha256`) on stdout and its verdict against the compiled-in pins on stderr.
//! `berm attest verify RECORD` re-derives the verdict offline from the record alone, against
//! the compiled-in pins or those of `--pins DIR`, and exits 1 when it refuses the record.

use std::path::{Path, PathBuf};

use anyhow::Context;
use berm_attest::{Pins, Record, Verdict, canonical_json, verify};

use crate::Exit;

/// Arguments of `berm attest`.
#[derive(clap::Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct Args {
    #[command(subcommand)]
    command: Option<Command>,
    /// A berm-vmm run dir (it holds vmm.jsonl).
    #[arg(value_name = "RUN_DIR", required = true)]
    run_dir: Option<PathBuf>,
}

#[derive(clap::Subcommand)]
enum Command {
    /// Verify a record offline; exit 1 and list every problem (with its code) if refused.
    Verify {
        /// The record file (`-` for stdin).
        record: PathBuf,
        /// Verify against the pins in DIR/kernel/manifest.toml and DIR/rootfs/manifest.toml
        /// (a checkout of the release) instead of the pins compiled into berm.
        #[arg(long, value_name = "DIR")]
        pins: Option<PathBuf>,
        /// Print the verdict as JSON.
        #[arg(long)]
        json: bool,
    },
}

/// Runs `berm attest`.
pub fn run(args: Args) -> anyhow::Result<Exit> {
    match (args.command, args.run_dir) {
        (Some(Command::Verify { record, pins, json }), _) => verify_file(&record, pins, json),
        (None, Some(run_dir)) => record(&run_dir),
        (None, None) => anyhow::bail!("give a run dir, or `verify RECORD`"),
    }
}

fn record(run_dir: &Path) -> anyhow::Result<Exit> {
    let record = Record::from_run_dir(run_dir)?;
    let value = record.to_value();
    println!("{}", canonical_json(&value));
    let pins = Pins::compiled_in().context("the pins compiled into berm are broken")?;
    report(&verify(&value, &pins), &record.record_sha256);
    Ok(Exit::Ok)
}

fn verify_file(path: &Path, pins: Option<PathBuf>, json: bool) -> anyhow::Result<Exit> {
    let text = if path == Path::new("-") {
        std::io::read_to_string(std::io::stdin()).context("reading the record from stdin")?
    } else {
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?
    };
    let pins = match pins {
        Some(dir) => Pins::from_dir(&dir)?,
        None => Pins::compiled_in().context("the pins compiled into berm are broken")?,
    };
    let verdict = match serde_json::from_str(&text) {
        Ok(value) => verify(&value, &pins),
        Err(e) => Verdict {
            ok: false,
            problems: vec![berm_attest::Problem {
                code: berm_attest::Code::RecordMalformed,
                detail: format!("{} is not JSON: {e}", path.display()),
            }],
        },
    };
    if json {
        println!("{}", serde_json::to_string(&verdict)?);
    } else if verdict.ok {
        println!("ok: the record verifies against the pins");
    } else {
        for problem in &verdict.problems {
            println!("{}: {}", problem.code, problem.detail);
        }
    }
    Ok(if verdict.ok {
        Exit::Ok
    } else {
        Exit::ProgramFailed
    })
}

fn report(verdict: &Verdict, sha256: &str) {
    if verdict.ok {
        eprintln!("berm attest: recordSha256 {sha256}; verifies against the compiled-in pins");
    } else {
        eprintln!(
            "berm attest: recordSha256 {sha256}; refused by the compiled-in pins ({} problems):",
            verdict.problems.len()
        );
        for problem in &verdict.problems {
            eprintln!("  {}: {}", problem.code, problem.detail);
        }
    }
}
