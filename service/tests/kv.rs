//! One suite of keyspace semantics, run against both backends: the log under
//! `$BERM_HOME/state` and PostgreSQL (`bermd --kv-url-file`, a real server started for the
//! test). What a program sees must not depend on where bermd keeps its keys.

use std::path::PathBuf;
use std::sync::Arc;

mod common;

use berm_abi::word::ErrorCode;
use berm_fixtures::postgres::Postgres;
use berm_service::kv::{Keyspace, KvCaps, KvStore, PER_KEY_BYTES};

/// Where keyspaces are opened: each call of `open` is a fresh start of bermd over the same
/// state (the log reopened and replayed, or a new connection pool).
enum Backend {
    Log(tempfile::TempDir),
    Postgres(Postgres),
}

impl Backend {
    fn open(&self, program: &str, caps: KvCaps) -> Keyspace {
        match self {
            Backend::Log(dir) => {
                let path: PathBuf = dir.path().join(program).join("kv.log");
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                Keyspace::Log(Arc::new(KvStore::open(&path, caps).unwrap()))
            }
            Backend::Postgres(pg) => {
                let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
                    rustls::crypto::ring::default_provider(),
                ))
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_root_certificates(rustls::RootCertStore::empty())
                .with_no_client_auth();
                let kv = berm_kv_postgres::PgKv::connect(
                    &pg.url(),
                    tls,
                    berm_kv_postgres::Caps {
                        per_key_bytes: PER_KEY_BYTES,
                        max_total_bytes: caps.max_total_bytes,
                    },
                    2,
                )
                .unwrap();
                Keyspace::Postgres(Arc::new(kv).keyspace(program), caps)
            }
        }
    }
}

fn both() -> Vec<(&'static str, Backend)> {
    let mut backends = vec![("log", Backend::Log(tempfile::tempdir().unwrap()))];
    match Postgres::start() {
        Ok(pg) => backends.push(("postgres", Backend::Postgres(pg))),
        Err(why) => println!("SKIPPED: the PostgreSQL backend: {why}"),
    }
    backends
}

fn block_on<T>(future: impl Future<Output = T>) -> T {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap()
        .block_on(future)
}

fn keys(list: &[&[u8]]) -> Vec<Vec<u8>> {
    list.iter().map(|k| k.to_vec()).collect()
}

#[test]
fn put_get_overwrite_delete_the_same_on_both() {
    for (name, backend) in both() {
        let kv = backend.open("notes", KvCaps::default());
        block_on(async {
            assert_eq!(kv.get(b"a").await.unwrap(), None, "{name}");
            kv.put(b"a".to_vec(), b"1".to_vec()).await.unwrap();
            kv.put(b"a".to_vec(), b"2".to_vec()).await.unwrap();
            assert_eq!(kv.get(b"a").await.unwrap().as_deref(), Some(&b"2"[..]));
            // Empty keys and values are keys and values like any other.
            kv.put(Vec::new(), Vec::new()).await.unwrap();
            assert_eq!(
                kv.get(b"").await.unwrap().as_deref(),
                Some(&b""[..]),
                "{name}"
            );
            assert!(kv.delete(b"a".to_vec()).await.unwrap(), "{name}");
            assert!(!kv.delete(b"a".to_vec()).await.unwrap(), "{name}");
            assert_eq!(kv.get(b"a").await.unwrap(), None, "{name}");
        });
    }
}

#[test]
fn list_is_by_prefix_in_byte_order_on_both() {
    for (name, backend) in both() {
        let kv = backend.open("notes", KvCaps::default());
        block_on(async {
            for key in [
                &b"note/2"[..],
                b"note/10",
                b"note/",
                b"note0",
                b"not",
                b"\xff\xfe",
                b"\xff\xff",
                b"\xff\xff\x00",
                b"a\xffz",
                b"b",
            ] {
                kv.put(key.to_vec(), b"v".to_vec()).await.unwrap();
            }
            assert_eq!(
                kv.list(b"note/").await.unwrap(),
                keys(&[b"note/", b"note/10", b"note/2"]),
                "{name}"
            );
            assert_eq!(
                kv.list(b"\xff\xff").await.unwrap(),
                keys(&[b"\xff\xff", b"\xff\xff\x00"]),
                "{name}"
            );
            assert_eq!(kv.list(b"a\xff").await.unwrap(), keys(&[b"a\xffz"]));
            let all = kv.list(b"").await.unwrap();
            let mut sorted = all.clone();
            sorted.sort();
            assert_eq!(all, sorted, "{name}: byte order");
            assert_eq!(all.len(), 10, "{name}");
            assert!(kv.list(b"zzz").await.unwrap().is_empty(), "{name}");
        });
    }
}

#[test]
fn caps_are_counted_alike_on_both() {
    let caps = KvCaps {
        max_key_bytes: 16,
        max_value_bytes: 100,
        max_total_bytes: 3 * (2 + 100 + PER_KEY_BYTES),
    };
    for (name, backend) in both() {
        let kv = backend.open("capped", caps);
        block_on(async {
            let too_large = |e: berm_service::kv::KeyspaceError| {
                assert_eq!(e.code, ErrorCode::TooLarge, "{name}: {}", e.message);
                e.message
            };
            let message = too_large(kv.put(vec![b'k'; 17], vec![]).await.unwrap_err());
            assert!(message.contains("the key is 17 bytes"), "{name}: {message}");
            let message = too_large(kv.put(b"k".to_vec(), vec![0; 101]).await.unwrap_err());
            assert!(
                message.contains("the value is 101 bytes"),
                "{name}: {message}"
            );
            for key in [b"k1", b"k2", b"k3"] {
                kv.put(key.to_vec(), vec![0; 100]).await.unwrap();
            }
            // Exactly full: one more byte anywhere is refused, and nothing is written.
            let message = too_large(kv.put(b"k4".to_vec(), Vec::new()).await.unwrap_err());
            assert_eq!(
                message,
                "the keyspace (keys, values and 64 bytes per key) is 564 bytes, over the cap of 498 bytes",
                "{name}"
            );
            assert_eq!(kv.get(b"k4").await.unwrap(), None, "{name}");
            // Overwriting with as many bytes fits.
            kv.put(b"k1".to_vec(), vec![1; 100]).await.unwrap();
            // A smaller value frees room (90 bytes here): 96 more do not fit, 90 do.
            kv.put(b"k1".to_vec(), vec![0; 10]).await.unwrap();
            too_large(kv.put(b"k5".to_vec(), vec![0; 30]).await.unwrap_err());
            kv.put(b"k5".to_vec(), vec![0; 24]).await.unwrap();
            too_large(kv.put(b"k6".to_vec(), Vec::new()).await.unwrap_err());
            // A delete frees its key's whole cost.
            assert!(kv.delete(b"k2".to_vec()).await.unwrap());
            kv.put(b"k6".to_vec(), vec![0; 100]).await.unwrap();
            assert_eq!(kv.list(b"k").await.unwrap().len(), 4, "{name}");
        });
    }
}

#[test]
fn what_was_acknowledged_is_there_after_a_restart_on_both() {
    for (name, backend) in both() {
        block_on(async {
            let kv = backend.open("notes", KvCaps::default());
            for i in 0..50u32 {
                kv.put(format!("n{i:02}").into_bytes(), i.to_be_bytes().to_vec())
                    .await
                    .unwrap();
            }
            assert!(kv.delete(b"n07".to_vec()).await.unwrap());
        });
        let again = backend.open("notes", KvCaps::default());
        block_on(async {
            assert_eq!(again.list(b"n").await.unwrap().len(), 49, "{name}");
            assert_eq!(
                again.get(b"n42").await.unwrap(),
                Some(42u32.to_be_bytes().to_vec()),
                "{name}"
            );
            assert_eq!(again.get(b"n07").await.unwrap(), None, "{name}");
        });
    }
}

#[test]
fn programs_do_not_see_each_others_keys_on_both() {
    for (name, backend) in both() {
        let (notes, other) = (
            backend.open("notes", KvCaps::default()),
            backend.open("other", KvCaps::default()),
        );
        block_on(async {
            notes.put(b"secret".to_vec(), b"n".to_vec()).await.unwrap();
            other.put(b"secret".to_vec(), b"o".to_vec()).await.unwrap();
            assert_eq!(
                notes.get(b"secret").await.unwrap().as_deref(),
                Some(&b"n"[..])
            );
            assert_eq!(other.list(b"").await.unwrap(), keys(&[b"secret"]), "{name}");
            assert!(other.delete(b"secret".to_vec()).await.unwrap());
            assert_eq!(
                notes.get(b"secret").await.unwrap().as_deref(),
                Some(&b"n"[..])
            );
        });
    }
}

/// Two bermds on one database are replicas: a note added through one is listed through the
/// other at once, and `berm inspect`'s keyspace figures come from the database.
#[test]
fn two_bermds_on_one_database_share_a_programs_notes() {
    use common::{Bermd, block_on};
    use serde_json::json;
    let Ok(pg) = Postgres::start() else {
        println!("SKIPPED: no PostgreSQL here: apt-get install postgresql");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let url_file = dir.path().join("kv-url");
    std::fs::write(&url_file, format!("{}\n", pg.url())).unwrap();
    let url_arg = url_file.to_str().unwrap();
    let one = Bermd::start(&["--kv-url-file", url_arg]);
    let two = Bermd::start(&["--kv-url-file", url_arg]);
    for bermd in [&one, &two] {
        bermd.deploy("notes", "notes", &["kv"], Default::default());
    }
    let added = one
        .session()
        .call("notes_add", json!({"title": "t", "text": "from one"}));
    assert!(!berm_fixtures::tool_result(&added).1, "{added}");
    let listed = two
        .session()
        .call("notes_search", json!({"query": "from one"}));
    let (text, failed) = berm_fixtures::tool_result(&listed);
    assert!(!failed && text.contains("\"title\":\"t\""), "{listed}");
    // Nothing went to either bermd's own state directory.
    for bermd in [&one, &two] {
        assert!(!bermd.home.join("state/notes/kv.log").exists());
    }
    let state = block_on(two.control().state("notes")).unwrap();
    let keyspace = state.keyspace.expect("the database's figures");
    assert_eq!(keyspace.keys, 2, "the note and the next id");
}

/// A kv URL is taken from one place only, and a bad one stops bermd with a message that
/// does not repeat the password.
#[test]
fn a_bad_kv_url_stops_bermd_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let url_file = dir.path().join("kv-url");
    std::fs::write(
        &url_file,
        "postgres://berm:hunter2@/berm?host=/nonexistent\n",
    )
    .unwrap();
    let run = |extra_env: Option<&str>| {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_bermd"));
        command
            .args(["--kv-url-file", url_file.to_str().unwrap()])
            .env("BERM_HOME", dir.path().join("home"));
        match extra_env {
            Some(url) => command.env("BERM_KV_URL", url),
            None => command.env_remove("BERM_KV_URL"),
        };
        command.output().unwrap()
    };
    let out = run(None);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("could not connect to PostgreSQL at /nonexistent"),
        "{stderr}"
    );
    assert!(!stderr.contains("hunter2"), "{stderr}");
    let out = run(Some("postgres://x@/y"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("keep one"), "{stderr}");
}
