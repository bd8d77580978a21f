//! Ranked text search over index entries: BM25, hand-written.
//!
//! Each entry is one document made of all its fields; the name counts three
//! times and tool names twice, so that a query naming a program or a tool
//! puts it first. Terms are lowercase runs of letters and digits. Scores are
//! BM25 with k1 = 1.2, b = 0.75 (common English stop words dropped) and the usual `ln(1 + (N - n + 0.5) / (n +
//! 0.5))` idf; ties are broken by name so results are stable.

use std::collections::HashMap;

use crate::entry::Entry;

const K1: f64 = 1.2;
const B: f64 = 0.75;

/// One result: the entry's position in the searched slice, and its score.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Hit {
    /// Index into the entries given to [`Searcher::new`].
    pub entry: usize,
    /// BM25 score; higher is better.
    pub score: f64,
}

/// An inverted index over a slice of entries, built once per search command
/// (5,000 entries index in milliseconds; see docs/perf-dist.md).
#[derive(Debug)]
pub struct Searcher<'a> {
    entries: &'a [Entry],
    /// term → (document, term frequency in it).
    postings: HashMap<String, Vec<(usize, u32)>>,
    lengths: Vec<u32>,
    average_length: f64,
}

/// English words too common to tell programs apart: "read a file" must not
/// match every description that contains "a".
const STOP_WORDS: &[&str] = &[
    "a", "an", "and", "are", "as", "at", "be", "by", "for", "from", "in", "is", "it", "its", "of",
    "on", "or", "that", "the", "this", "to", "with",
];

/// Splits text into lowercase terms of letters and digits, without stop
/// words.
pub fn terms(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|t| !t.is_empty())
        .map(str::to_lowercase)
        .filter(|t| !STOP_WORDS.contains(&t.as_str()))
}

/// All of an entry's searchable text, with the name and tool names boosted
/// by repetition.
fn document(entry: &Entry) -> String {
    let mut text = format!(
        "{0} {0} {0} {1} {2} {3}",
        entry.name, entry.description, entry.usage, entry.publisher
    );
    for tool in &entry.tools {
        text.push_str(&format!(" {0} {0} {1}", tool.name, tool.description));
    }
    text
}

impl<'a> Searcher<'a> {
    /// Indexes `entries`.
    pub fn new(entries: &'a [Entry]) -> Searcher<'a> {
        let mut postings: HashMap<String, Vec<(usize, u32)>> = HashMap::new();
        let mut lengths = Vec::with_capacity(entries.len());
        for (doc, entry) in entries.iter().enumerate() {
            let mut counts: HashMap<String, u32> = HashMap::new();
            let mut length = 0;
            for term in terms(&document(entry)) {
                *counts.entry(term).or_default() += 1;
                length += 1;
            }
            lengths.push(length);
            for (term, tf) in counts {
                postings.entry(term).or_default().push((doc, tf));
            }
        }
        let total: u64 = lengths.iter().map(|&l| u64::from(l)).sum();
        let average_length = if entries.is_empty() {
            1.0
        } else {
            total as f64 / entries.len() as f64
        };
        Searcher {
            entries,
            postings,
            lengths,
            average_length,
        }
    }

    /// The best `limit` entries for `query`, best first; entries that share
    /// no term with the query are not returned.
    pub fn search(&self, query: &str, limit: usize) -> Vec<Hit> {
        let n = self.entries.len() as f64;
        let mut scores: HashMap<usize, f64> = HashMap::new();
        let mut seen = std::collections::HashSet::new();
        for term in terms(query) {
            if !seen.insert(term.clone()) {
                continue;
            }
            let Some(list) = self.postings.get(&term) else {
                continue;
            };
            let df = list.len() as f64;
            let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
            for &(doc, tf) in list {
                let tf = f64::from(tf);
                let norm = 1.0 - B + B * f64::from(self.lengths[doc]) / self.average_length;
                *scores.entry(doc).or_default() += idf * tf * (K1 + 1.0) / (tf + K1 * norm);
            }
        }
        let mut hits: Vec<Hit> = scores
            .into_iter()
            .map(|(entry, score)| Hit { entry, score })
            .collect();
        hits.sort_by(|a, b| {
            b.score
                .total_cmp(&a.score)
                .then_with(|| self.entries[a.entry].name.cmp(&self.entries[b.entry].name))
        });
        hits.truncate(limit);
        hits
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entry::ToolEntry;

    fn entry(name: &str, description: &str, tools: &[(&str, &str)]) -> Entry {
        Entry {
            name: name.into(),
            reference: String::new(),
            digest: String::new(),
            publisher: "berm".into(),
            description: description.into(),
            usage: String::new(),
            tools: tools
                .iter()
                .map(|(n, d)| ToolEntry {
                    name: (*n).into(),
                    description: (*d).into(),
                })
                .collect(),
        }
    }

    #[test]
    fn ranks_by_relevance_and_boosts_names() {
        let entries = vec![
            entry(
                "fs",
                "Read and write files in a granted directory",
                &[("read", "Read a file"), ("write", "Write a file")],
            ),
            entry(
                "echo",
                "Says back what it is given",
                &[("say", "Echo the text")],
            ),
            entry(
                "kv",
                "A key-value store that persists between calls",
                &[("get", "Read a value by key")],
            ),
            entry(
                "http-fetch",
                "Fetch a URL through the allowlist",
                &[("get", "GET a URL and return the body")],
            ),
        ];
        let s = Searcher::new(&entries);
        let names = |q: &str| -> Vec<&str> {
            s.search(q, 10)
                .iter()
                .map(|h| entries[h.entry].name.as_str())
                .collect()
        };
        assert_eq!(names("read a file")[0], "fs");
        assert_eq!(names("echo"), ["echo"]);
        assert_eq!(names("key value"), ["kv"]);
        let mut get = names("get");
        get.sort_unstable();
        assert_eq!(get, ["http-fetch", "kv"]);
        assert!(names("nothing matches this").is_empty());
        assert_eq!(s.search("read", 1).len(), 1);
    }

    #[test]
    fn empty_index_and_empty_query() {
        let s = Searcher::new(&[]);
        assert!(s.search("anything", 10).is_empty());
        let entries = vec![entry("echo", "", &[])];
        assert!(Searcher::new(&entries).search("  ", 10).is_empty());
    }
}
