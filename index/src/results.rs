//! What `berm search` prints: ranked entries of a local clone as text a terminal can show
//! safely, and the entry files that were skipped.

use std::fmt::Write as _;
use std::path::Path;

use crate::entry::{Entry, Index};
use crate::error::LoadIndexError;
use crate::search::Searcher;

/// One search result: the entry and its BM25 score (`berm search --json` prints a list).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Found {
    /// The entry as its file holds it.
    #[serde(flatten)]
    pub entry: Entry,
    /// Higher is better.
    pub score: f64,
}

/// Searches the clone in `dir` for `query`: at most `limit` entries, best first, plus one
/// warning line per entry file that was skipped, which the caller should print on stderr.
///
/// # Errors
/// [`LoadIndexError`] when there is no clone.
pub fn search(
    dir: &Path,
    query: &str,
    limit: usize,
) -> Result<(Vec<Found>, Vec<String>), LoadIndexError> {
    let index = Index::load(dir)?;
    let warnings = index
        .skipped
        .iter()
        .map(|s| format!("warning: skipped {}: {}", s.path.display(), s.reason))
        .collect();
    let found = Searcher::new(&index.entries)
        .search(query, limit)
        .into_iter()
        .map(|hit| Found {
            entry: index.entries[hit.entry].clone(),
            score: hit.score,
        })
        .collect();
    Ok((found, warnings))
}

/// [`search`] as the text to print: one block per hit, safe for a terminal.
///
/// # Errors
/// [`LoadIndexError`] when there is no clone.
pub fn search_text(
    dir: &Path,
    query: &str,
    limit: usize,
) -> Result<(String, Vec<String>), LoadIndexError> {
    let (found, warnings) = search(dir, query, limit)?;
    let mut out = String::new();
    for Found { entry: e, score } in &found {
        let tools: Vec<&str> = e.tools.iter().map(|t| t.name.as_str()).collect();
        let summary = printable(e.description.lines().next().unwrap_or_default());
        let (tools, publisher) = (printable(&tools.join(", ")), printable(&e.publisher));
        // Writing to a String cannot fail.
        let _ = writeln!(out, "{}  {summary}  ({score:.2})", e.name);
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
