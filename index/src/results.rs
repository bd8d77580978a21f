//! What `berm search` prints: ranked entries of a local clone as text a terminal can show
//! safely, and the entry files that were skipped.

use std::fmt::Write as _;
use std::path::Path;

use crate::entry::Index;
use crate::error::LoadError;
use crate::search::Searcher;

/// Searches the clone in `dir` for `query` and returns the text to print (one block per hit,
/// best first, at most `limit`), plus one warning line per entry file that was skipped, which
/// the caller should print on stderr.
///
/// # Errors
/// [`LoadError`] when there is no clone.
pub fn search_text(
    dir: &Path,
    query: &str,
    limit: usize,
) -> Result<(String, Vec<String>), LoadError> {
    let index = Index::load(dir)?;
    let warnings = index
        .skipped
        .iter()
        .map(|s| format!("warning: skipped {}: {}", s.path.display(), s.reason))
        .collect();
    let searcher = Searcher::new(&index.entries);
    let mut out = String::new();
    for hit in searcher.search(query, limit) {
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
