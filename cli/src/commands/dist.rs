//! `berm push`, `pull`, `search` and `index`: thin over berm-oci and
//! berm-index. The CLI pulls and verifies; bermd never talks to a registry.

use berm_index::cli::{IndexCommand, SearchArgs};
use berm_oci::cli::{PullArgs, PushArgs};

use crate::Exit;

/// `berm push REF FILE`.
pub async fn push(args: PushArgs) -> anyhow::Result<Exit> {
    println!("{}", berm_oci::cli::push(&args).await?);
    Ok(Exit::Ok)
}

/// `berm pull REF -o FILE`.
pub async fn pull(args: PullArgs) -> anyhow::Result<Exit> {
    println!("{}", berm_oci::cli::pull(&args).await?);
    Ok(Exit::Ok)
}

/// `berm search TEXT…`: ranked results on stdout, skipped entries on stderr.
pub fn search(args: SearchArgs) -> anyhow::Result<Exit> {
    let (out, warnings) = berm_index::cli::search(&args)?;
    for warning in warnings {
        eprintln!("berm: {warning}");
    }
    print!("{out}");
    Ok(Exit::Ok)
}

/// `berm index update|add`.
pub async fn index(command: IndexCommand) -> anyhow::Result<Exit> {
    match command {
        IndexCommand::Update(args) => println!("{}", berm_index::cli::update(&args)?),
        IndexCommand::Add(args) => println!("{}", berm_index::cli::add(&args).await?),
    }
    Ok(Exit::Ok)
}
