//! `berm call PROGRAM.TOOL [JSON | -]`.

use std::io::Read;
use std::path::Path;

use anyhow::{Context, bail};
use berm_control::CallOutcome;

use crate::Exit;

/// Arguments of `berm call`.
#[derive(clap::Args)]
pub struct Args {
    /// The tool, as PROGRAM.TOOL.
    tool: String,
    /// The arguments: a JSON object, or - to read it from stdin (default {}).
    args: Option<String>,
}

/// Calls a tool: the result on stdout (exit 0), or the program's failure on
/// stderr (exit 1).
pub async fn run(home: &Path, args: Args) -> anyhow::Result<Exit> {
    let Some((program, tool)) = args.tool.split_once('.') else {
        bail!("`{}` is not PROGRAM.TOOL", args.tool);
    };
    let body = match args.args.as_deref() {
        None => b"{}".to_vec(),
        Some("-") => {
            let mut buf = Vec::new();
            std::io::stdin()
                .read_to_end(&mut buf)
                .context("reading arguments from stdin")?;
            buf
        }
        Some(text) => text.as_bytes().to_vec(),
    };
    serde_json::from_slice::<serde_json::Value>(&body)
        .context("the arguments are not valid JSON")?;
    let answer = super::client(home).call(program, tool, body).await?;
    match answer.outcome {
        CallOutcome::Done => {
            println!("{}", answer.text);
            Ok(Exit::Ok)
        }
        CallOutcome::Failed => {
            eprintln!("{}.{} failed: {}", program, tool, answer.text);
            Ok(Exit::ProgramFailed)
        }
    }
}
