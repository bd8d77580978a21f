//! The wiring the `berm` CLI needs for distribution, as a runnable program:
//! `push`, `pull`, `search`, `index update|add` and the pull inside
//! `deploy NAME REF`, each a few lines over berm-oci and berm-index.
//!
//! ```text
//! cargo run -p berm-index --example dist -- push 127.0.0.1:5000/berm/echo:v1 target/wasm32-unknown-unknown/release/echo.wasm
//! cargo run -p berm-index --example dist -- pull 127.0.0.1:5000/berm/echo:v1 -o /tmp/echo.wasm
//! cargo run -p berm-index --example dist -- search repeat a message
//! ```

use anyhow::Context as _;
use berm_index::cli::{IndexCommand, SearchArgs};
use berm_oci::cli::{PullArgs, PushArgs, RegistryArgs};
use clap::Parser;

#[derive(Parser)]
#[command(
    name = "dist",
    about = "berm's distribution commands, outside the berm binary"
)]
enum Command {
    /// Push a program to a registry.
    Push(PushArgs),
    /// Pull a program from a registry into a file.
    Pull(PullArgs),
    /// Search the local clone of the index.
    Search(SearchArgs),
    /// Update the index clone, or add an entry to it.
    #[command(subcommand)]
    Index(IndexCommand),
    /// What `berm deploy NAME REF` does before talking to bermd.
    Fetch {
        /// The name it would be deployed as.
        name: String,
        /// The reference.
        reference: String,
        /// Registry access.
        #[command(flatten)]
        registry: RegistryArgs,
    },
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    match Command::parse() {
        Command::Push(args) => println!("{}", berm_oci::cli::push(&args).await?),
        Command::Pull(args) => println!("{}", berm_oci::cli::pull(&args).await?),
        Command::Search(args) => {
            let (out, warnings) = berm_index::cli::search(&args)?;
            for w in warnings {
                eprintln!("{w}");
            }
            print!("{out}");
        }
        Command::Index(IndexCommand::Update(args)) => {
            println!("{}", berm_index::cli::update(&args)?)
        }
        Command::Index(IndexCommand::Add(args)) => {
            println!("{}", berm_index::cli::add(&args).await?)
        }
        Command::Fetch {
            name,
            reference,
            registry,
        } => {
            let pulled = berm_oci::cli::fetch_for_deploy(&reference, &registry)
                .await
                .with_context(|| format!("deploy {name}"))?;
            // The berm CLI sends `pulled.bytes` to bermd's deploy here.
            println!(
                "{pulled}\nwould deploy {} bytes as `{name}`",
                pulled.bytes.len()
            );
        }
    }
    Ok(())
}
