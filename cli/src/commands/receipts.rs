//! `berm receipts verify DIR --key PUB` and `berm receipts show DIR`: the CLI face of
//! berm-receipts, the log `bermd --receipts DIR` writes.
//!
//! `verify` checks every checkpoint's signature with the public key (`berm attest key`
//! prints the host's), the chain, and that no receipt is missing, reordered, edited or left
//! unsigned, and exits 1 listing each problem with its code. With `--arguments FILE
//! --result FILE` it also checks one call against what its client kept.

use std::path::{Path, PathBuf};

use anyhow::Context;
use berm_receipts::{Problem, verify_dir};
use serde_json::{Value, json};

use crate::Exit;

/// `berm receipts`.
#[derive(clap::Subcommand)]
pub enum Command {
    /// Verify a receipt log offline; exit 1 and list every problem (with its code) if it
    /// does not verify.
    Verify(VerifyArgs),
    /// Print the public key (PEM) a microVM app's bermd signed its receipts with, as the
    /// boot's signed record names it, for `verify --key`; the app's receipt directory goes
    /// to stderr.
    Key {
        /// The VM's run dir (it holds record.dsse.json and receipts/).
        run_dir: PathBuf,
        /// The app.
        #[arg(long)]
        app: String,
        /// The host's public key (`berm attest key`), required: the record's signature is
        /// checked before the app's key is read from it, since a key taken from a record
        /// nobody checked proves nothing about the receipts it verifies.
        #[arg(long, value_name = "PUB")]
        host_key: Option<PathBuf>,
    },
    /// Print the receipts of a log, one JSON line each (not verified: use `verify`).
    Show {
        /// The receipt directory (`bermd --receipts DIR`).
        dir: PathBuf,
        /// Only this receipt.
        #[arg(long, value_name = "SEQ")]
        seq: Option<u64>,
    },
}

/// Arguments of `berm receipts verify`.
#[derive(clap::Args)]
pub struct VerifyArgs {
    /// The receipt directory (`bermd --receipts DIR`).
    dir: PathBuf,
    /// The public key its checkpoints are signed with (PEM; `berm attest key` prints the
    /// host's).
    #[arg(long, value_name = "PUB")]
    key: PathBuf,
    /// Check one call: the JSON arguments its client sent (a file, `-` for stdin).
    #[arg(long, value_name = "FILE", requires = "result")]
    arguments: Option<PathBuf>,
    /// Check one call: the text its client got back (the result's text content, or the
    /// error message of an isError result), a file.
    #[arg(long, value_name = "FILE", requires = "arguments")]
    result: Option<PathBuf>,
    /// With --arguments/--result: that receipt (else the one whose arguments and result
    /// both match).
    #[arg(long, value_name = "SEQ", requires = "arguments")]
    seq: Option<u64>,
    /// Print the verdict as JSON.
    #[arg(long)]
    json: bool,
}

/// Runs `berm receipts`.
pub fn run(command: Command) -> anyhow::Result<Exit> {
    match command {
        Command::Verify(args) => verify(args),
        Command::Show { dir, seq } => show(&dir, seq),
        Command::Key {
            run_dir,
            app,
            host_key,
        } => app_key(&run_dir, &app, host_key.as_deref()),
    }
}

fn app_key(run_dir: &Path, app: &str, host_key: Option<&Path>) -> anyhow::Result<Exit> {
    let path = run_dir.join(berm_attest::dsse::ENVELOPE_FILE);
    // Taken as an option so that leaving it out gets this message rather than clap's.
    let Some(host_key) = host_key else {
        anyhow::bail!(
            "berm receipts key needs --host-key PUB, the host's public key (`berm attest key` prints it): the app's receipt key is read from {} only once its signature is checked, or anyone who can write that file chooses the key your receipts verify against",
            path.display()
        );
    };
    let text =
        read(&path).context("the run's signed record (berm-vmm writes it when the VM stops)")?;
    let envelope: Value =
        serde_json::from_str(&text).with_context(|| format!("{} is not JSON", path.display()))?;
    let host_key = berm_dsse::read_public_key(host_key)?;
    let record = berm_attest::dsse::open(&envelope, Some(&host_key)).map_err(|problems| {
        let details: Vec<String> = problems.iter().map(|p| p.detail.clone()).collect();
        anyhow::anyhow!("{}: {}", path.display(), details.join("; "))
    })?;
    let ready = record["guest"]["events"]
        .as_array()
        .into_iter()
        .flatten()
        .rfind(|e| e["event"] == "app_ready" && e["app"] == app)
        .with_context(|| format!("the record names no app {app:?} that got ready"))?;
    let key = ready["receipt_key"].as_str().with_context(|| {
        format!("app {app:?} reported no receipt key (a guest from before receipts)")
    })?;
    let key = berm_dsse::from_spki_base64(key)
        .map_err(|e| anyhow::anyhow!("app {app:?}'s receipt key in the record: {e}"))?;
    let boot = ready["boot_id"].as_str().unwrap_or_default();
    eprintln!(
        "berm receipts: app {app}'s receipts of this boot are in {}",
        run_dir.join("receipts").join(boot).join(app).display()
    );
    crate::out!("{}", berm_dsse::public_pem(&key));
    Ok(Exit::Ok)
}

fn read(path: &Path) -> anyhow::Result<String> {
    if path == Path::new("-") {
        std::io::read_to_string(std::io::stdin()).context("reading stdin")
    } else {
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
    }
}

fn verify(args: VerifyArgs) -> anyhow::Result<Exit> {
    let key = berm_dsse::read_public_key(&args.key)?;
    let report = verify_dir(&args.dir, &key)?;
    let call = match (&args.arguments, &args.result) {
        (Some(arguments), Some(result)) => {
            let text = read(arguments)?;
            let arguments: Value = serde_json::from_str(&text)
                .with_context(|| format!("{} is not JSON", arguments.display()))?;
            let result = read(result)?;
            Some(report.check_call(args.seq, &arguments, &result))
        }
        _ => None,
    };
    let call_problems: &[Problem] = match &call {
        Some(Err(problems)) => problems,
        _ => &[],
    };
    let ok = report.ok() && call_problems.is_empty();
    if args.json {
        let mut verdict = json!({
            "ok": ok,
            "log": report.log,
            "receipts": report.receipts,
            "checkpoints": report.checkpoints,
            "problems": report.problems.iter().chain(call_problems).collect::<Vec<_>>(),
        });
        if let Some(Ok(seq)) = &call {
            verdict["call"] = json!(seq);
        }
        crate::outln!("{verdict}");
    } else {
        for problem in report.problems.iter().chain(call_problems) {
            crate::outln!("{}: {}", problem.code.as_str(), problem.detail);
        }
        if report.ok() {
            crate::outln!(
                "ok: {} receipts in log {}, sealed by {} checkpoints signed with the given key; \
                 none missing, reordered or edited",
                report.receipts,
                report.log.as_deref().unwrap_or("-"),
                report.checkpoints
            );
        }
        if let Some(Ok(seq)) = &call {
            crate::outln!("ok: receipt {seq} records exactly these arguments and this result");
        }
    }
    Ok(if ok { Exit::Ok } else { Exit::ProgramFailed })
}

fn show(dir: &Path, seq: Option<u64>) -> anyhow::Result<Exit> {
    let files = berm_receipts::log_files(dir)
        .with_context(|| format!("reading the receipt directory {}", dir.display()))?;
    let mut found = false;
    for file in files {
        let text = std::fs::read_to_string(&file)
            .with_context(|| format!("reading {}", file.display()))?;
        for line in text.lines() {
            let Ok(value) = serde_json::from_str::<Value>(line) else {
                continue;
            };
            let Some(receipt) = value
                .get("predicate")
                .filter(|_| value.get("_type").is_some())
            else {
                continue;
            };
            if seq.is_some_and(|seq| receipt["seq"].as_u64() != Some(seq)) {
                continue;
            }
            found = true;
            crate::outln!("{receipt}");
        }
    }
    if let (Some(seq), false) = (seq, found) {
        anyhow::bail!("{} holds no receipt {seq}", dir.display());
    }
    Ok(Exit::Ok)
}
