//! Finding berm programs: a git repository of entries, searched locally.
//!
//! No registry will say who published a program, so the list is a git
//! repository (one TOML file per program under `entries/`), and
//! `berm search` reads a local clone of it: no service, no credential, and
//! the history of every entry is the repository's history. `berm index
//! update` clones or pulls it with the `git` on PATH; `berm index add REF`
//! writes an entry from what the registry says about a pushed program, ready
//! to commit and propose upstream.
//!
//! Ranking is BM25 (Robertson/Spärck Jones, k1 = 1.2, b = 0.75), written by
//! hand in [`search`]: ~40 lines answer a query over 5,000 entries in well
//! under a millisecond, where a search engine crate would add a hundred
//! dependencies (see design §7).

#![forbid(unsafe_code)]

mod add;
mod entry;
mod error;
mod git;
mod results;
pub mod search;

pub use add::{Added, add, entry_from};
pub use entry::{ENTRIES_DIR, Entry, Index, Skipped, ToolEntry};
pub use error::{AddError, LoadIndexError, UpdateError};
pub use git::{DEFAULT_INDEX_URL, Updated, default_index_dir, update};
pub use results::{Found, search, search_text};
pub use search::{Hit, Searcher};
