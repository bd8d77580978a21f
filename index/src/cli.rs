//! The command-line surface of the index, as clap argument structs and the
//! functions that run them, so the `berm` binary wires `berm search` and
//! `berm index update|add` in a few lines.
//!
//! ```text
//! berm search TEXT… [--limit N] [--index-dir DIR]
//! berm index update [--index URL|PATH] [--index-dir DIR]
//! berm index add REF [--name NAME] [--publisher WHO] [--index-dir DIR] [--insecure]
//! ```

use std::fmt::Write as _;
use std::path::PathBuf;

use berm_oci::cli::RegistryArgs;

use crate::add::Added;
use crate::entry::Index;
use crate::error::{AddError, LoadError, UpdateError};
use crate::git::{DEFAULT_INDEX_URL, Updated, default_index_dir};
use crate::search::Searcher;

/// Where the local clone of the index is.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct IndexDirArgs {
    /// The local clone [default: $BERM_HOME/index, else ~/.berm/index].
    #[arg(long = "index-dir", value_name = "DIR", env = "BERM_INDEX_DIR")]
    pub index_dir: Option<PathBuf>,
}

impl IndexDirArgs {
    /// The directory chosen, or the default.
    pub fn dir(&self) -> PathBuf {
        self.index_dir.clone().unwrap_or_else(default_index_dir)
    }
}

/// `berm search TEXT…`: ranked search of the local clone.
#[derive(Debug, Clone, clap::Args)]
pub struct SearchArgs {
    /// What to look for, in words: "read a file", "key value store".
    #[arg(value_name = "TEXT", required = true, num_args = 1..)]
    pub text: Vec<String>,
    /// At most this many results.
    #[arg(long, default_value_t = 10)]
    pub limit: usize,
    /// The clone to search.
    #[command(flatten)]
    pub index: IndexDirArgs,
}

/// `berm index …`.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum IndexCommand {
    /// Clone the index, or fast-forward the local clone.
    Update(UpdateArgs),
    /// Write the entry for a pushed program into the local clone.
    Add(AddArgs),
}

/// `berm index update`.
#[derive(Debug, Clone, clap::Args)]
pub struct UpdateArgs {
    /// The index repository: a git URL or a local path.
    #[arg(long = "index", value_name = "URL|PATH", env = "BERM_INDEX_URL", default_value = DEFAULT_INDEX_URL)]
    pub source: String,
    /// Where the clone goes.
    #[command(flatten)]
    pub index: IndexDirArgs,
}

/// `berm index add REF`.
#[derive(Debug, Clone, clap::Args)]
pub struct AddArgs {
    /// The pushed program, e.g. `ghcr.io/org/echo:v1` (the entry pins its digest).
    #[arg(value_name = "REF")]
    pub reference: String,
    /// The program's name in the index [default: the repository's last segment].
    #[arg(long)]
    pub name: Option<String>,
    /// Who publishes it [default: the registry host and namespace].
    #[arg(long)]
    pub publisher: Option<String>,
    /// The clone to write into.
    #[command(flatten)]
    pub index: IndexDirArgs,
    /// Registry access.
    #[command(flatten)]
    pub registry: RegistryArgs,
}

/// Runs `berm search`: returns the text to print (one block per hit, best
/// first), plus one warning line per entry file that was skipped, which the
/// CLI should print on stderr.
///
/// # Errors
/// [`LoadError`] when there is no clone.
pub fn search(args: &SearchArgs) -> Result<(String, Vec<String>), LoadError> {
    let index = Index::load(&args.index.dir())?;
    let warnings = index
        .skipped
        .iter()
        .map(|s| format!("warning: skipped {}: {}", s.path.display(), s.reason))
        .collect();
    let query = args.text.join(" ");
    let searcher = Searcher::new(&index.entries);
    let mut out = String::new();
    for hit in searcher.search(&query, args.limit) {
        let e = &index.entries[hit.entry];
        let tools: Vec<&str> = e.tools.iter().map(|t| t.name.as_str()).collect();
        let summary = printable(e.description.lines().next().unwrap_or_default());
        let (tools, publisher) = (printable(&tools.join(", ")), printable(&e.publisher));
        // Writing to a String cannot fail.
        let _ = writeln!(out, "{}  {summary}  ({:.2})", e.name, hit.score);
        let _ = writeln!(out, "    tools: {tools}  by {publisher}");
        let _ = writeln!(
            out,
            "    berm deploy {} {}",
            e.name,
            printable(&e.reference)
        );
    }
    if out.is_empty() {
        out = format!("no program matches \"{query}\"\n");
    }
    Ok((out, warnings))
}

/// `text` with control characters replaced by `?`: entries come from
/// other people's commits, and must not drive the terminal (escape
/// sequences) when printed. Names are already restricted to `[a-z0-9_-]`.
fn printable(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

/// Runs `berm index update`.
///
/// # Errors
/// See [`UpdateError`].
pub fn update(args: &UpdateArgs) -> Result<Updated, UpdateError> {
    crate::update(&args.source, &args.index.dir())
}

/// Runs `berm index add`.
///
/// # Errors
/// See [`AddError`].
pub async fn add(args: &AddArgs) -> Result<Added, AddError> {
    crate::add(
        &args.reference,
        args.name.as_deref(),
        args.publisher.as_deref(),
        &args.index.dir(),
        &args.registry.options(),
    )
    .await
}

#[cfg(test)]
mod tests {
    #[test]
    fn printed_entries_cannot_drive_the_terminal() {
        assert_eq!(
            super::printable("ok \u{1b}[2Jcleared\u{7}"),
            "ok ?[2Jcleared?"
        );
    }
}
