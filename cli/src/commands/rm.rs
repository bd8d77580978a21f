//! `berm rm NAME`.

use std::path::Path;

use crate::Exit;

/// Arguments of `berm rm`.
#[derive(clap::Args)]
pub struct Args {
    /// The program to remove.
    name: String,
}

/// Removes a program.
pub async fn run(home: &Path, args: Args) -> anyhow::Result<Exit> {
    let removed = super::client(home).remove(&args.name).await?;
    crate::outln!("removed {} {}", removed.name, removed.digest);
    Ok(Exit::Ok)
}
