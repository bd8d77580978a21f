//! berm-index against a real git repository made by the test and a real
//! registry: clone, update, add, rank, and the pull an entry leads to.

#[path = "../../oci/tests/support/registry.rs"]
mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use berm_index::{Entry, Index, LoadIndexError, Searcher, ToolEntry, UpdateError, Updated};
use berm_oci::{Digest, RegistryOptions};
use support::{TestRegistry, program};

fn git(dir: &Path, args: &[&str]) {
    let status = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args([
            "-c",
            "user.name=berm test",
            "-c",
            "user.email=test@berm.invalid",
            "-c",
            "commit.gpgsign=false",
        ])
        .args(args)
        .status()
        .expect("git");
    assert!(status.success(), "git {args:?} in {}", dir.display());
}

fn entry(name: &str, description: &str, tools: &[(&str, &str)]) -> Entry {
    Entry {
        name: name.into(),
        reference: format!("registry.example/berm/{name}@sha256:{}", "1".repeat(64)),
        digest: format!("sha256:{}", "2".repeat(64)),
        publisher: "registry.example/berm".into(),
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

/// An empty index repository, `dir/origin`, on branch `main`.
fn new_origin(dir: &Path) -> PathBuf {
    let origin = dir.join("origin");
    std::fs::create_dir(&origin).unwrap();
    git(&origin, &["init", "-q", "-b", "main"]);
    origin
}

fn commit_entries(origin: &Path, entries: &[Entry], message: &str) {
    std::fs::create_dir_all(origin.join("entries")).unwrap();
    for e in entries {
        std::fs::write(origin.join(format!("entries/{}.toml", e.name)), e.to_toml()).unwrap();
    }
    git(origin, &["add", "-A"]);
    git(origin, &["commit", "-q", "-m", message]);
}

fn names(dir: &Path, query: &str) -> Vec<String> {
    let index = Index::load(dir).unwrap();
    assert!(index.skipped.is_empty(), "{:?}", index.skipped);
    Searcher::new(&index.entries)
        .search(query, 10)
        .iter()
        .map(|h| index.entries[h.entry].name.clone())
        .collect()
}

#[test]
fn clone_update_and_rank() {
    let tmp = tempfile::tempdir().unwrap();
    let origin = new_origin(tmp.path());
    commit_entries(
        &origin,
        &[
            entry(
                "fs",
                "Read and write files in a granted directory",
                &[("read", "Read a file"), ("write", "Write a file")],
            ),
            entry(
                "kv",
                "A key-value store kept between calls",
                &[("get", "Read the value of a key"), ("put", "Store a value")],
            ),
            entry(
                "http-fetch",
                "Fetch a URL through the host's allowlist",
                &[("get", "GET a URL and return the body")],
            ),
            entry(
                "clock",
                "Wall-clock time for programs",
                &[("now", "The current UTC time")],
            ),
        ],
        "four programs",
    );

    let clone = tmp.path().join("home/index");
    let source = origin.to_string_lossy().into_owned();
    let cloned = berm_index::update(&source, &clone).unwrap();
    assert!(matches!(cloned, Updated::Cloned { .. }), "{cloned:?}");
    assert!(cloned.to_string().contains("cloned the index"));

    // Ranking: the full order for a query, asserted.
    assert_eq!(names(&clone, "read a file"), ["fs", "kv"]);
    assert_eq!(names(&clone, "key value"), ["kv"]);
    assert_eq!(names(&clone, "fetch a url")[0], "http-fetch");
    assert_eq!(names(&clone, "time now"), ["clock"]);
    assert!(names(&clone, "kubernetes").is_empty());

    // Upstream gains an entry; update fast-forwards the clone.
    commit_entries(
        &origin,
        &[entry(
            "grep",
            "Search text in files by regular expression",
            &[("search", "Lines matching a pattern")],
        )],
        "grep",
    );
    match berm_index::update(&source, &clone).unwrap() {
        Updated::Pulled { from, to, .. } => assert_ne!(from, to),
        other => panic!("expected a pull, got {other:?}"),
    }
    assert_eq!(names(&clone, "search text in files")[0], "grep");
    match berm_index::update(&source, &clone).unwrap() {
        Updated::Pulled { from, to, .. } => assert_eq!(from, to, "nothing new"),
        other => panic!("expected a pull, got {other:?}"),
    }

    // What the CLI prints: best first, with the deploy command.
    let (out, warnings) = berm_index::search_text(&clone, "read a file", 1).unwrap();
    assert!(warnings.is_empty());
    assert!(out.starts_with("fs  Read and write files"), "{out}");
    assert!(
        out.contains("berm deploy fs registry.example/berm/fs@sha256:"),
        "{out}"
    );
    assert_eq!(out.lines().count(), 3, "{out}");

    // A broken entry upstream is reported and skipped, not fatal.
    std::fs::write(origin.join("entries/broken.toml"), "name = [").unwrap();
    git(&origin, &["add", "-A"]);
    git(&origin, &["commit", "-q", "-m", "broken"]);
    berm_index::update(&source, &clone).unwrap();
    let (out, warnings) = berm_index::search_text(&clone, "grep", 10).unwrap();
    assert!(out.starts_with("grep"), "{out}");
    assert_eq!(warnings.len(), 1);
    assert!(warnings[0].contains("broken.toml"), "{warnings:?}");
}

#[test]
fn update_failures_are_explained() {
    let tmp = berm_fixtures::tree(&[("occupied/file", "x")]);
    let occupied = tmp.path().join("occupied");
    let err = berm_index::update("/nowhere", &occupied).unwrap_err();
    assert!(matches!(err, UpdateError::NotAClone { .. }), "{err:?}");

    let err = berm_index::update(
        &tmp.path().join("no-such-repo").to_string_lossy(),
        &tmp.path().join("clone"),
    )
    .unwrap_err();
    match &err {
        UpdateError::Git { command, .. } => assert!(command.starts_with("git clone"), "{err}"),
        other => panic!("expected a git failure, got {other:?}"),
    }

    let err = berm_index::search_text(&tmp.path().join("absent"), "x", 10).unwrap_err();
    assert!(matches!(err, LoadIndexError::NoIndex { .. }));
    assert!(err.to_string().contains("berm index update"), "{err}");
}

#[tokio::test]
async fn add_from_the_registry_then_find_and_pull() {
    let registry = TestRegistry::start();
    let (_, bytes) = program("echo");
    let pushed = berm_oci::push(
        &registry.reference("berm/echo:v1"),
        &bytes,
        "echo.wasm",
        &RegistryOptions::default(),
    )
    .await
    .unwrap();

    let tmp = tempfile::tempdir().unwrap();
    let origin = new_origin(tmp.path());
    commit_entries(
        &origin,
        &[entry(
            "fs",
            "Read and write files",
            &[("read", "Read a file")],
        )],
        "fs",
    );
    let clone = tmp.path().join("clone");
    berm_index::update(&origin.to_string_lossy(), &clone).unwrap();

    let added = berm_index::add(
        &registry.reference("berm/echo:v1"),
        None,
        None,
        &clone,
        &RegistryOptions::from_environment(false),
    )
    .await
    .unwrap();
    assert_eq!(added.file, Path::new("entries/echo.toml"));
    assert!(added.to_string().contains("git -C"), "{added}");

    // The entry is what the registry says, pinned by digest.
    let text = std::fs::read_to_string(clone.join("entries/echo.toml")).unwrap();
    let written = Entry::parse(&text, "echo").unwrap();
    assert_eq!(written.reference, pushed.pinned);
    assert_eq!(written.digest, Digest::of(&bytes).to_string());
    assert_eq!(written.publisher, format!("{}/berm", registry.addr));
    assert_eq!(written.description, "Says back what it is given.");
    let tools: Vec<&str> = written.tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(tools, ["echo", "reverse", "fail"]);
    assert!(
        written.usage.contains("wired up end to end"),
        "{}",
        written.usage
    );

    // Ready to commit.
    git(&clone, &["add", "entries/echo.toml"]);
    git(&clone, &["commit", "-q", "-m", "add echo"]);

    // Found by search, ranked first for what it does…
    assert_eq!(names(&clone, "repeat a message")[0], "echo");
    assert_eq!(names(&clone, "read a file")[0], "fs");
    // …and the reference it gives pulls the same bytes (what deploy does).
    let pulled = berm_oci::pull(&written.reference, &RegistryOptions::default())
        .await
        .unwrap();
    assert_eq!(pulled.bytes, bytes);

    // An invalid name is refused before anything is written.
    let err = berm_index::add(
        &registry.reference("berm/echo:v1"),
        Some("Not Valid"),
        None,
        &clone,
        &RegistryOptions::from_environment(false),
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains("--name"), "{err}");
}
