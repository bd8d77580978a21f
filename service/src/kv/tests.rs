use super::*;

fn caps() -> KvCaps {
    KvCaps::default()
}

/// A new store at `kv.log` in a temporary directory, with default caps: the directory (kept
/// alive by the caller), the log's path and the store.
fn fresh() -> (tempfile::TempDir, std::path::PathBuf, KvStore) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kv.log");
    let kv = KvStore::open(&path, caps()).unwrap();
    (dir, path, kv)
}

/// [`fresh`], with `puts` written in order.
fn holding(puts: &[(&str, &str)]) -> (tempfile::TempDir, std::path::PathBuf, KvStore) {
    let (dir, path, kv) = fresh();
    for (key, value) in puts {
        kv.put(key.as_bytes(), value.as_bytes()).unwrap();
    }
    (dir, path, kv)
}

#[test]
fn writes_survive_reopen_and_a_torn_tail_is_cut() {
    let (_dir, path, kv) = holding(&[("a", "1"), ("b", "2"), ("a", "3")]);
    assert!(kv.delete(b"b").unwrap());
    assert!(!kv.delete(b"b").unwrap());
    drop(kv);
    // A crash mid-append leaves half a record.
    let mut file = OpenOptions::new().append(true).open(&path).unwrap();
    file.write_all(&encode(OP_PUT, b"c", b"torn")[..10])
        .unwrap();
    drop(file);
    let kv = KvStore::open(&path, caps()).unwrap();
    assert_eq!(kv.get(b"a"), Some(b"3".to_vec()));
    assert_eq!(kv.get(b"b"), None);
    assert_eq!(kv.list(b""), vec![b"a".to_vec()]);
    kv.put(b"c", b"ok").unwrap();
    drop(kv);
    let kv = KvStore::open(&path, caps()).unwrap();
    assert_eq!(kv.list(b""), vec![b"a".to_vec(), b"c".to_vec()]);
}

#[test]
fn a_last_record_of_full_length_with_a_bad_checksum_is_a_torn_tail() {
    let (_dir, path, kv) = holding(&[("a", "1")]);
    drop(kv);
    // The length reached the disk, the data did not (zeros).
    let mut torn = encode(OP_PUT, b"b", b"never acknowledged");
    let n = torn.len();
    torn[HEADER..n].fill(0);
    OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap()
        .write_all(&torn)
        .unwrap();
    let kv = KvStore::open(&path, caps()).unwrap();
    assert_eq!(kv.list(b""), vec![b"a".to_vec()]);
    assert_eq!(
        std::fs::metadata(&path).unwrap().len(),
        encode(OP_PUT, b"a", b"1").len() as u64
    );
}

#[test]
fn corruption_in_the_middle_keeps_the_file_and_says_how_to_recover() {
    let (_dir, path, kv) = holding(&[("first", "1"), ("second", "2"), ("third", "3")]);
    drop(kv);
    let first = encode(OP_PUT, b"first", b"1").len();
    let mut bytes = std::fs::read(&path).unwrap();
    // One flipped bit in the value of the second record.
    let second = encode(OP_PUT, b"second", b"2").len();
    bytes[first + second - 1] ^= 1;
    std::fs::write(&path, &bytes).unwrap();

    let err = KvStore::open(&path, caps())
        .err()
        .expect("corrupt log refused");
    let message = err.to_string();
    assert!(
        matches!(err, KvError::Corrupt { offset, .. } if offset == first as u64),
        "{message}"
    );
    assert!(
        message.contains(&format!("corrupt at byte {first} of {}", bytes.len()))
            && message.contains(&format!("truncate -s {first} {}", path.display())),
        "{message}"
    );
    // Nothing was cut: the acknowledged third record is still there.
    assert_eq!(std::fs::read(&path).unwrap(), bytes);
    // The recovery the message offers works and keeps what came before.
    let file = OpenOptions::new().write(true).open(&path).unwrap();
    file.set_len(first as u64).unwrap();
    drop(file);
    let kv = KvStore::open(&path, caps()).unwrap();
    assert_eq!(kv.list(b""), vec![b"first".to_vec()]);
}

#[test]
fn a_long_tail_that_cannot_be_one_record_is_corruption() {
    // A damaged length in the middle makes a record seem to run past the
    // end; more bytes follow than one record can hold, so it is not a torn
    // append, and nothing is cut.
    let small = KvCaps {
        max_key_bytes: 8,
        max_value_bytes: 8,
        max_total_bytes: 1 << 20,
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kv.log");
    let kv = KvStore::open(&path, small).unwrap();
    for i in 0..10u8 {
        kv.put(&[b'k', i], b"v").unwrap();
    }
    drop(kv);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[5] = 0xff; // first record's key length
    std::fs::write(&path, &bytes).unwrap();
    let err = KvStore::open(&path, small).err().expect("refused");
    assert!(matches!(err, KvError::Corrupt { offset: 0, .. }), "{err}");
    assert_eq!(std::fs::read(&path).unwrap(), bytes);
}

#[test]
fn caps_count_keys_values_and_the_per_key_overhead() {
    let dir = tempfile::tempdir().unwrap();
    let caps = KvCaps {
        max_key_bytes: 4,
        max_value_bytes: 8,
        max_total_bytes: 2 * PER_KEY_BYTES + 20,
    };
    let kv = KvStore::open(&dir.path().join("kv.log"), caps).unwrap();
    let err = kv.put(b"toolong", b"x").unwrap_err();
    assert_eq!(
        err.to_string(),
        "the key is 7 bytes, over the cap of 4 bytes"
    );
    let err = kv.put(b"k", &[0; 9]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "the value is 9 bytes, over the cap of 8 bytes"
    );
    kv.put(b"k1", &[0; 8]).unwrap();
    kv.put(b"k2", &[0; 8]).unwrap();
    // Empty keys and values still cost their overhead.
    let err = kv.put(b"", b"").unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "the keyspace (keys, values and 64 bytes per key) is {} bytes, over the cap of {} bytes",
            3 * PER_KEY_BYTES + 20,
            2 * PER_KEY_BYTES + 20
        )
    );
    kv.put(b"k1", &[0; 1]).unwrap();
    assert!(kv.delete(b"k1").unwrap());
    kv.put(b"", b"").unwrap();
}

#[test]
fn a_new_log_is_private() {
    let (_dir, path, kv) = fresh();
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&path).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o600);
    drop(kv);
}

#[test]
fn compaction_keeps_the_live_data() {
    let (dir, path, kv) = fresh();
    for i in 0..300u32 {
        kv.put(b"same", &vec![i as u8; 8 << 10]).unwrap();
    }
    kv.put(b"other", b"v").unwrap();
    assert!(std::fs::metadata(&path).unwrap().len() < 2 << 20);
    // Writes after compaction land in the file that is now the log.
    kv.put(b"after", b"compaction").unwrap();
    drop(kv);
    let kv = KvStore::open(&path, caps()).unwrap();
    assert_eq!(kv.get(b"same"), Some(vec![43u8; 8 << 10]));
    assert_eq!(kv.get(b"other"), Some(b"v".to_vec()));
    assert_eq!(kv.get(b"after"), Some(b"compaction".to_vec()));
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec![std::ffi::OsString::from("kv.log")]);
}

/// Set in the child process of
/// [`acknowledged_writes_survive_running_out_of_descriptors`].
const CHILD: &str = "BERM_KV_TEST_LOW_NOFILE";

/// Failure injection: compaction needs descriptors (the temporary file, the
/// directory), and a process out of them (EMFILE) must neither lose a write
/// it acknowledged nor go on appending to a file that is no longer the log.
/// Runs in a child process whose RLIMIT_NOFILE is low, with every free
/// descriptor but 0, 1, 2, … taken, so each step of compaction fails once.
#[test]
fn acknowledged_writes_survive_running_out_of_descriptors() {
    if std::env::var_os(CHILD).is_none() {
        let output = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "kv::tests::acknowledged_writes_survive_running_out_of_descriptors",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD, "1")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&output.stdout).into_owned()
            + &String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "{text}");
        assert!(text.contains("1 passed"), "the child ran nothing: {text}");
        return;
    }
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let hard = getrlimit(Resource::Nofile).maximum;
    setrlimit(
        Resource::Nofile,
        Rlimit {
            current: Some(256),
            maximum: hard,
        },
    )
    .unwrap();
    for free in 0..5 {
        let (_dir, path, kv) = fresh();
        // Just under the point where compaction starts.
        for _ in 0..127 {
            kv.put(b"same", &[7; 8 << 10]).unwrap();
        }
        let mut hog = Vec::new();
        while let Ok(file) = File::open("/dev/null") {
            hog.push(file);
        }
        hog.truncate(hog.len() - free);
        let mut acknowledged = Vec::new();
        for i in 0..8u32 {
            let key = format!("k{i}");
            if kv.put(key.as_bytes(), &[i as u8; 8 << 10]).is_ok() {
                acknowledged.push(key);
            }
            kv.put(b"same", &[i as u8; 8 << 10]).unwrap();
        }
        assert_eq!(acknowledged.len(), 8, "appends need no new descriptor");
        drop(hog);
        kv.put(b"last", b"after the descriptors came back").unwrap();
        drop(kv);
        let kv = KvStore::open(&path, caps()).unwrap();
        for key in &acknowledged {
            assert!(kv.get(key.as_bytes()).is_some(), "{free} free: {key} lost");
        }
        assert_eq!(kv.get(b"same"), Some(vec![7; 8 << 10]), "{free} free");
        assert_eq!(
            kv.get(b"last"),
            Some(b"after the descriptors came back".to_vec())
        );
    }
}

/// What a folder deployed over the name would inherit is counted from the log without
/// opening it as a store: a torn tail is not cut, and the count matches the open store's.
#[test]
fn keys_are_counted_from_the_log_without_changing_it() {
    let (_dir, path, kv) = holding(&[("a", "1"), ("b", "2"), ("a", "3")]);
    assert!(kv.delete(b"b").unwrap());
    assert_eq!(kv.keys(), 1);
    drop(kv);
    let mut file = OpenOptions::new().append(true).open(&path).unwrap();
    file.write_all(&encode(OP_PUT, b"c", b"torn")[..10])
        .unwrap();
    drop(file);
    let before = std::fs::read(&path).unwrap();
    assert_eq!(count_keys(&path, &caps()).unwrap(), 1);
    assert_eq!(std::fs::read(&path).unwrap(), before);
}
