//! `berm attest RUN_DIR|NAME` and `berm attest verify RECORD`: the CLI face of berm-attest.
//!
//! `berm attest RUN_DIR` prints the record of a berm-vmm run (canonical JSON, one line, with
//! `record_sha256`) on stdout and its verdict against the compiled-in pins on stderr; a value
//! that is not an existing directory names a VM `berm vm up` started, whose run dir is read.
//! `berm attest verify RECORD` re-derives the verdict offline from the record alone, against
//! the compiled-in pins or those of `--pins DIR`, and exits 1 when it refuses the record.
//! RECORD may be the signed envelope berm-vmm writes (`record.dsse.json`); `--key PUB`
//! checks its signature before anything else. `berm attest key` prints the host's public key.
//!
//! `--programs DIR` re-derives each code digest by compiling the program, so berm links a
//! WebAssembly compiler (through berm-attest, which uses the `berm` crate's engine): the same
//! Wasmtime and settings as berm-vmm is the only way to reproduce its code byte for byte. The
//! other commands never build an engine, so they are unaffected but for binary size.

use std::path::{Path, PathBuf};

use anyhow::Context;
use berm_attest::dsse::{self, HostKey};
use berm_attest::{
    Code, Options, Pins, Problem, Programs, Record, Verdict, canonical_json, verify,
};
use serde_json::Value;

use crate::Exit;

/// Arguments of `berm attest`.
#[derive(clap::Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct Args {
    #[command(subcommand)]
    command: Option<Command>,
    /// A berm-vmm run dir (it holds vmm.jsonl), or the name of a VM `berm vm up` started
    /// (its run dir): a value that is an existing directory is a run dir.
    #[arg(value_name = "RUN_DIR|NAME", required = true)]
    run_dir: Option<PathBuf>,
}

#[derive(clap::Subcommand)]
enum Command {
    /// Verify a record offline; exit 1 and list every problem (with its code) if refused.
    Verify {
        /// The record file (`-` for stdin).
        record: PathBuf,
        #[command(flatten)]
        args: VerifyArgs,
    },
    /// Print the host's public key (PEM), creating the host key on first use, for
    /// `verify --key`.
    Key {
        /// The private key file (default $XDG_CONFIG_HOME/berm/host-key.pem, else
        /// ~/.config/berm/host-key.pem; the one berm-vmm signs with).
        #[arg(long, value_name = "FILE")]
        key: Option<PathBuf>,
    },
}

/// What `verify` was asked to do beyond reading the record.
#[derive(clap::Args)]
struct VerifyArgs {
    /// Verify against the pins in DIR/kernel/manifest.toml and DIR/rootfs/manifest.toml
    /// (a checkout of the release) instead of the pins compiled into berm.
    #[arg(long, value_name = "DIR")]
    pins: Option<PathBuf>,
    /// Print the verdict as JSON.
    #[arg(long)]
    json: bool,
    /// The host's public key (PEM, from `berm attest key`): RECORD must be a signed
    /// envelope with a signature by this key, checked before anything else.
    #[arg(long, value_name = "PUB")]
    key: Option<PathBuf>,
    /// The programs' wasm files (searched recursively): re-derive every code digest by
    /// compiling them (cached under $XDG_CACHE_HOME/berm/attest-code).
    #[arg(long, value_name = "DIR")]
    programs: Option<PathBuf>,
    /// Refuse on warnings too (code_unverified).
    #[arg(long)]
    strict: bool,
    /// A digest only the verifier knows, `state=SHA256` (the state disk's chunked sha256)
    /// or `app/NAME/image=SHA256` (repeatable): the record must carry exactly it.
    #[arg(long, value_name = "WHAT=SHA256", value_parser = parse_expectation)]
    expect: Vec<(String, String)>,
}

fn parse_expectation(text: &str) -> Result<(String, String), String> {
    let (what, sha256) = text
        .split_once('=')
        .ok_or_else(|| format!("{text:?} is not WHAT=SHA256"))?;
    if !berm_attest::is_expectation(what) {
        return Err(format!(
            "{what:?} is neither `state` nor `app/NAME/image` (the pins already cover the kernel and rootfs)"
        ));
    }
    if sha256.len() != 64
        || !sha256
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    {
        return Err(format!(
            "{sha256:?} is not a sha256 (64 lowercase hex digits)"
        ));
    }
    Ok((what.to_owned(), sha256.to_owned()))
}

/// Runs `berm attest`.
pub fn run(args: Args) -> anyhow::Result<Exit> {
    match (args.command, args.run_dir) {
        (Some(Command::Verify { record, args }), _) => verify_file(&record, args),
        (Some(Command::Key { key }), _) => {
            let key = HostKey::load_or_create(key.as_deref())?;
            crate::out!("{}", key.public_pem());
            eprintln!(
                "berm attest: the public half of {} (key id {})",
                key.path().display(),
                dsse::key_id(&key.public())
            );
            Ok(Exit::Ok)
        }
        (None, Some(run_dir)) if run_dir.is_dir() => record(&run_dir),
        (None, Some(name)) => {
            let name = name.to_str().with_context(|| {
                format!("{} is neither a directory nor a VM name", name.display())
            })?;
            let run_dir = super::vm_run::run_dir_of(name).with_context(|| {
                format!("{name} is not an existing directory, so it names a VM")
            })?;
            record(&run_dir)
        }
        (None, None) => anyhow::bail!("give a run dir, or `verify RECORD`"),
    }
}

fn record(run_dir: &Path) -> anyhow::Result<Exit> {
    let record = Record::from_run_dir(run_dir)?;
    let value = record.to_value();
    crate::outln!("{}", canonical_json(&value));
    let pins = Pins::compiled_in().context("the pins compiled into berm are broken")?;
    report(&verify(&value, &pins), &record.record_sha256);
    Ok(Exit::Ok)
}

fn refused(code: Code, detail: String) -> Verdict {
    Verdict::of(vec![Problem { code, detail }])
}

fn verify_file(path: &Path, args: VerifyArgs) -> anyhow::Result<Exit> {
    let text = if path == Path::new("-") {
        std::io::read_to_string(std::io::stdin()).context("reading the record from stdin")?
    } else {
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?
    };
    let pins = match args.pins {
        Some(dir) => Pins::from_dir(&dir)?,
        None => Pins::compiled_in().context("the pins compiled into berm are broken")?,
    };
    let key = args.key.as_deref().map(dsse::read_public_key).transpose()?;
    let programs = args
        .programs
        .as_deref()
        .map(Programs::from_dir)
        .transpose()?;
    let options = Options {
        programs: programs.as_ref(),
        expect: args.expect.into_iter().collect(),
    };
    let (verdict, signature_unchecked) = match serde_json::from_str::<Value>(&text) {
        Err(e) => (
            refused(
                Code::RecordMalformed,
                format!("{} is not JSON: {e}", path.display()),
            ),
            false,
        ),
        Ok(value) => {
            let checked = dsse::verify_document(&value, key.as_ref(), &pins, &options);
            (checked.verdict, checked.signature_unchecked)
        }
    };
    let verdict = if args.strict {
        verdict.strict()
    } else {
        verdict
    };
    if args.json {
        crate::outln!("{}", serde_json::to_string(&verdict)?);
    } else {
        for problem in &verdict.problems {
            crate::outln!("{}: {}", problem.code, problem.detail);
        }
        for warning in &verdict.warnings {
            crate::outln!("warning {}: {}", warning.code, warning.detail);
        }
        if verdict.ok {
            let signed = if key.is_some() {
                ", signed by the given key"
            } else {
                ""
            };
            crate::outln!("ok: the record verifies against the pins{signed}");
        }
        if signature_unchecked {
            crate::outln!("note: the envelope's signature was not checked (give --key PUB)");
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
        eprintln!("berm attest: record_sha256 {sha256}; verifies against the compiled-in pins");
    } else {
        eprintln!(
            "berm attest: record_sha256 {sha256}; refused by the compiled-in pins ({} problems):",
            verdict.problems.len()
        );
        for problem in &verdict.problems {
            eprintln!("  {}: {}", problem.code, problem.detail);
        }
    }
}
