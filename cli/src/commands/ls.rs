//! `berm ls`.

use std::path::Path;

use berm_control::Grant;

use crate::Exit;

/// Arguments of `berm ls`.
#[derive(clap::Args)]
pub struct Args {
    /// Print the full JSON bermd answers with.
    #[arg(long)]
    json: bool,
}

/// Grants as `berm ls` prints them.
pub fn grants_text(grants: &[Grant]) -> String {
    if grants.is_empty() {
        return "none".into();
    }
    grants
        .iter()
        .map(Grant::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// Lists deployed programs.
pub async fn run(home: &Path, args: Args) -> anyhow::Result<Exit> {
    let programs = super::client(home).list().await?;
    if args.json {
        crate::outln!("{}", serde_json::to_string_pretty(&programs)?);
        return Ok(Exit::Ok);
    }
    crate::outln!("{:<20} {:<20} {:<40} GRANTS", "NAME", "DIGEST", "TOOLS");
    for program in programs {
        let tools = super::served_tools(&program);
        crate::outln!(
            "{:<20} {:<20} {:<40} {}",
            program.name,
            super::short_digest(&program.digest),
            tools.join(","),
            grants_text(&program.grants)
        );
    }
    Ok(Exit::Ok)
}
