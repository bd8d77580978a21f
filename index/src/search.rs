//! Ranked text search over index entries: BM25, hand-written.
//!
//! Each entry is one document made of all its fields; the name counts three
//! times and tool names twice, so that a query naming a program or a tool
//! puts it first. Terms are lowercase runs of letters and digits, common
//! English stop words dropped. Scores are BM25 with k1 = 1.2, b = 0.75 and
//! the usual `ln(1 + (N - n + 0.5) / (n + 0.5))` idf; ties are broken by
//! name so results are stable.

use std::cmp::Ordering;
use std::collections::HashMap;

use crate::entry::Entry;

const K1: f64 = 1.2;
const B: f64 = 0.75;

/// How many times each field counts towards a term's frequency.
const NAME_WEIGHT: u32 = 3;
const TOOL_NAME_WEIGHT: u32 = 2;

/// One result: the entry's position in the searched slice, and its score.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Hit {
    /// Index into the entries given to [`Searcher::new`].
    pub entry: usize,
    /// BM25 score; higher is better.
    pub score: f64,
}

/// An inverted index over a slice of entries, built once per search command
/// (see docs/perf-dist.md for 5,000 entries).
#[derive(Debug)]
pub struct Searcher<'a> {
    entries: &'a [Entry],
    /// term → its id, an index into `postings`.
    ids: HashMap<String, usize>,
    /// id → (document, weighted term frequency in it).
    postings: Vec<Vec<(u32, u32)>>,
    lengths: Vec<u32>,
    average_length: f64,
}

/// English words too common to tell programs apart: "read a file" must not
/// match every description that contains "a".
const STOP_WORDS: &[&str] = &[
    "a", "an", "and", "are", "as", "at", "be", "by", "for", "from", "in", "is", "it", "its", "of",
    "on", "or", "that", "the", "this", "to", "with",
];

/// Calls `f` with each term of `text`: a lowercase run of letters and digits
/// that is not a stop word. `buf` is reused so that known terms cost no
/// allocation.
fn each_term(text: &str, buf: &mut String, mut f: impl FnMut(&str)) {
    for word in text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
    {
        buf.clear();
        buf.extend(word.chars().flat_map(char::to_lowercase));
        if !STOP_WORDS.contains(&buf.as_str()) {
            f(buf);
        }
    }
}

/// An entry's fields with their weights.
fn fields(entry: &Entry) -> impl Iterator<Item = (&str, u32)> {
    [
        (entry.name.as_str(), NAME_WEIGHT),
        (entry.description.as_str(), 1),
        (entry.usage.as_str(), 1),
        (entry.publisher.as_str(), 1),
    ]
    .into_iter()
    .chain(entry.tools.iter().flat_map(|t| {
        [
            (t.name.as_str(), TOOL_NAME_WEIGHT),
            (t.description.as_str(), 1),
        ]
    }))
}

impl<'a> Searcher<'a> {
    /// Indexes `entries`.
    pub fn new(entries: &'a [Entry]) -> Searcher<'a> {
        let mut ids: HashMap<String, usize> = HashMap::new();
        let mut postings: Vec<Vec<(u32, u32)>> = Vec::new();
        let mut lengths = Vec::with_capacity(entries.len());
        let mut counts: HashMap<usize, u32> = HashMap::new();
        let mut buf = String::new();
        for (doc, entry) in entries.iter().enumerate() {
            let mut length = 0;
            for (text, weight) in fields(entry) {
                each_term(text, &mut buf, |term| {
                    let id = match ids.get(term) {
                        Some(&id) => id,
                        None => {
                            ids.insert(term.to_string(), postings.len());
                            postings.push(Vec::new());
                            postings.len() - 1
                        }
                    };
                    *counts.entry(id).or_default() += weight;
                    length += weight;
                });
            }
            lengths.push(length);
            // Entries are counted in u32 everywhere: 4 billion is far beyond an index.
            let doc = u32::try_from(doc).unwrap_or(u32::MAX);
            for (id, tf) in counts.drain() {
                postings[id].push((doc, tf));
            }
        }
        let total: u64 = lengths.iter().map(|&l| u64::from(l)).sum();
        let average_length = if entries.is_empty() || total == 0 {
            1.0
        } else {
            total as f64 / entries.len() as f64
        };
        Searcher {
            entries,
            ids,
            postings,
            lengths,
            average_length,
        }
    }

    /// The best `limit` entries for `query`, best first; entries that share
    /// no term with the query are not returned.
    pub fn search(&self, query: &str, limit: usize) -> Vec<Hit> {
        let n = self.entries.len() as f64;
        let mut query_ids = Vec::new();
        each_term(query, &mut String::new(), |term| {
            if let Some(&id) = self.ids.get(term)
                && !query_ids.contains(&id)
            {
                query_ids.push(id);
            }
        });
        let mut scores = vec![0.0f64; self.entries.len()];
        let mut touched = Vec::new();
        for id in query_ids {
            let list = &self.postings[id];
            let df = list.len() as f64;
            let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
            for &(doc, tf) in list {
                let doc = doc as usize;
                let tf = f64::from(tf);
                let norm = 1.0 - B + B * f64::from(self.lengths[doc]) / self.average_length;
                // Every contribution is positive (idf > 0, tf > 0), so a
                // zero score means the entry was not reached yet.
                if scores[doc] == 0.0 {
                    touched.push(doc);
                }
                scores[doc] += idf * tf * (K1 + 1.0) / (tf + K1 * norm);
            }
        }
        let mut hits: Vec<Hit> = touched
            .into_iter()
            .map(|entry| Hit {
                entry,
                score: scores[entry],
            })
            .collect();
        let order = |a: &Hit, b: &Hit| -> Ordering {
            b.score
                .total_cmp(&a.score)
                .then_with(|| self.entries[a.entry].name.cmp(&self.entries[b.entry].name))
        };
        if hits.len() > limit && limit > 0 {
            hits.select_nth_unstable_by(limit - 1, order);
        }
        hits.truncate(limit);
        hits.sort_by(order);
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
