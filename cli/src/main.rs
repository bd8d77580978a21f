//! berm: the command line for bermd. Argument parsing and dispatch; each
//! command is a module under `commands/`. It talks to bermd through
//! `berm-control` and reads images with `berm-manifest`; it links no
//! WebAssembly compiler.
//!
//! Exit codes ([`Exit`]): 0 done, 1 the program ran and failed, 2 a host or
//! usage error (including "bermd is not running").

#![deny(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod commands;
mod out;
mod sys;

berm_abi::codes! {
    /// berm's exit codes.
    pub enum Exit: u8 {
        /// Done.
        Ok = 0,
        /// `berm call`: the program ran and reported a failure.
        ProgramFailed = 1,
        /// A host error (bermd not running, a trap, a refused deploy) or a
        /// usage error.
        Error = 2,
    }
}

/// The berm command line: deploy, list, call and inspect programs on bermd.
#[derive(Parser)]
#[command(
    name = "berm",
    version,
    about,
    after_help = "Exit codes: 0 done, 1 the program failed (call), 2 host or usage error."
)]
struct Cli {
    /// bermd's data directory (default ~/.berm).
    #[arg(long, global = true, env = "BERM_HOME")]
    home: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Deploy a program image under a name, replacing what the name held.
    Deploy(commands::deploy::Args),
    /// List deployed programs: name, digest, tools, grants.
    Ls(commands::ls::Args),
    /// Remove a deployed program (its state stays).
    Rm(commands::rm::Args),
    /// A program's secrets: `berm secret set|ls|rm` (values never printed).
    #[command(subcommand)]
    Secret(commands::secret::Command),
    /// Call a tool: PROGRAM_TOOL (as MCP clients see it) with a JSON arguments object (or - for stdin).
    Call(commands::call::Args),
    /// What deploying B over A would change that a person must accept: descriptions, tools,
    /// schemas, syscalls, calls (and grants, between deployed programs).
    Diff(commands::diff::Args),
    /// Show what an image file or a deployed program claims and reaches.
    Inspect(commands::inspect::Args),
    /// Scaffold a new program crate.
    New(commands::new::Args),
    /// Bridge MCP on stdin/stdout to bermd (what an agent harness launches).
    Mcp(commands::mcp::Args),
    /// How an MCP client reaches bermd over HTTP: the URL, the Authorization header, commands to paste.
    Http(commands::http::Args),
    /// Push a program image to an OCI registry: one layer, the wasm file itself.
    Push(commands::dist::PushArgs),
    /// Pull a program from a registry into a file, verified against its digest.
    Pull(commands::dist::PullArgs),
    /// Signed programs, as cosign signs them: `berm trust keygen|sign|verify`.
    #[command(subcommand)]
    Trust(commands::trust::Command),
    /// Search the local clone of the program index.
    Search(commands::dist::SearchArgs),
    /// Update the index clone, or write the entry for a pushed program.
    #[command(subcommand)]
    Index(commands::dist::IndexCommand),
    /// The microVM: its artifacts (`install`, `push`) and named VMs (`up`, `ls`, `stop`, `logs`).
    #[command(subcommand)]
    Vm(commands::vm::Command),
    /// Check this host: KVM, the host sandbox, the VM artifacts, QEMU, the wasm32 target, bermd.
    Doctor(commands::doctor::Args),
    /// The record of a berm-vmm run (`berm attest RUN_DIR`), or its offline check
    /// (`berm attest verify RECORD`).
    Attest(commands::attest::Args),
    /// The receipts `bermd --receipts DIR` writes: `verify` them offline, or `show` them.
    #[command(subcommand)]
    Receipts(commands::receipts::Command),
    /// Print bermd's server.json for the MCP Registry: a remote endpoint at --url and the image.
    RegistryJson(commands::registry_json::Args),
    /// Print a shell completion script: `berm completions bash > ~/.local/share/bash-completion/completions/berm`.
    Completions(commands::completions::Args),
}

fn main() -> ExitCode {
    // On bad arguments clap prints why and exits with 2, [`Exit::Error`]; after --help or
    // --version it exits with 0.
    const _: () = assert!(Exit::Error.code() == 2 && Exit::Ok.code() == 0);
    let cli = Cli::parse();
    let home = cli.home.unwrap_or_else(berm_control::home::berm_home);
    // bermd's home as this command names it is berm's own: no app folder's secret may be
    // read from it (`berm deploy --app` reads the values itself).
    berm_app::own_paths::register(&home, berm_app::own_paths::STATE);
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("berm: could not start the async runtime: {e}");
            return ExitCode::from(Exit::Error.code());
        }
    };
    let outcome = runtime.block_on(async {
        match cli.command {
            Command::Deploy(args) => commands::deploy::run(&home, args).await,
            Command::Ls(args) => commands::ls::run(&home, args).await,
            Command::Rm(args) => commands::rm::run(&home, args).await,
            Command::Secret(command) => commands::secret::run(&home, command).await,
            Command::Call(args) => commands::call::run(&home, args).await,
            Command::Diff(args) => commands::diff::run(&home, args).await,
            Command::Inspect(args) => commands::inspect::run(&home, args).await,
            Command::New(args) => commands::new::run(args),
            Command::Mcp(args) => commands::mcp::run(&home, args).await,
            Command::Http(args) => commands::http::run(&home, args),
            Command::Push(args) => commands::dist::push(args).await,
            Command::Pull(args) => commands::dist::pull(args).await,
            Command::Trust(command) => commands::trust::run(command).await,
            Command::Search(args) => commands::dist::search(args),
            Command::Index(command) => commands::dist::index(command).await,
            Command::Vm(command) => commands::vm::run(command).await,
            Command::Doctor(args) => commands::doctor::run(&home, args).await,
            Command::Attest(args) => commands::attest::run(args),
            Command::Receipts(command) => commands::receipts::run(command),
            Command::RegistryJson(args) => commands::registry_json::run(args),
            Command::Completions(args) => commands::completions::run::<Cli>(args),
        }
    });
    match outcome {
        Ok(exit) => ExitCode::from(exit.code()),
        Err(e) => {
            eprintln!("berm: {e:#}");
            ExitCode::from(Exit::Error.code())
        }
    }
}
