//! `berm call TOOL [JSON | -]`, TOOL as MCP clients see it: `{program}_{tool}`, or the
//! name an app folder gives it (`serve_as`).

use std::io::Read;
use std::path::Path;

use anyhow::{Context, bail};
use berm_control::CallOutcome;

use crate::Exit;

/// Arguments of `berm call`.
#[derive(clap::Args)]
pub struct Args {
    /// The tool as MCP clients see it: PROGRAM_TOOL (e.g. notes_add), or the name its app
    /// folder gives it with `serve_as`.
    tool: String,
    /// The arguments: a JSON object, or - to read it from stdin (default {}).
    args: Option<String>,
}

/// Calls a tool: the result on stdout (exit 0), or the program's failure on
/// stderr (exit 1).
pub async fn run(home: &Path, args: Args) -> anyhow::Result<Exit> {
    let tool = args.tool.as_str();
    if let Some((program, name)) = tool.split_once('.') {
        bail!(
            "`{tool}` is the old dotted spelling: tools are named PROGRAM_TOOL, as MCP clients see them (`{program}_{name}`)"
        );
    }
    if !berm_abi::is_valid_name(tool) {
        bail!(
            "`{tool}` is not a tool name as MCP clients see it: PROGRAM_TOOL (e.g. notes_add), or a name an app gives with serve_as (`berm ls` lists the tools)"
        );
    }
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
    let answer = super::client(home).call(tool, body).await?;
    match answer.outcome {
        CallOutcome::Done => {
            crate::outln!("{}", answer.text);
            // The blocks are for MCP clients; stdout stays the text, so pipes read as before.
            for block in &answer.content {
                let of = [block.mime_type.as_deref(), block.uri.as_deref()];
                let of: Vec<&str> = of.into_iter().flatten().collect();
                eprintln!(
                    "[{} content block: {}{} bytes; MCP clients get it]",
                    block.kind,
                    of.iter().map(|s| format!("{s}, ")).collect::<String>(),
                    block.bytes
                );
            }
            Ok(Exit::Ok)
        }
        CallOutcome::Failed => {
            eprintln!("{tool} failed: {}", answer.text);
            Ok(Exit::ProgramFailed)
        }
    }
}
