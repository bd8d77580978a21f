//! Crash consistency of the keyspace: bermd killed with SIGKILL at a random moment while a
//! client streams `notes_add` and `notes_delete` calls, then started again on the same home,
//! again and again; after every start, every acknowledged write is there whole, every
//! acknowledged delete stays deleted, and what was in flight is whole or absent
//! (`berm_fixtures::crash` says exactly what is checked). On the log under `$BERM_HOME/state`
//! and on PostgreSQL (`--kv-url-file`, a server the test starts).
//!
//! 20 kills per backend by default, so that the suite keeps a short version;
//! `BERM_CRASH_KILLS=200` is the long run whose figures `docs/threat-model.md` reports, and
//! `BERM_CRASH_SEED` replays a run (each prints its seed).

mod common;

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::time::Duration;

use berm_control::LimitsSpec;
use berm_fixtures::crash::{KillRun, kills, sigkill};
use berm_fixtures::postgres::Postgres;
use common::Bermd;

/// A kill lands within this long of the first acknowledged call after a start: a few dozen
/// calls at most, so that a kill cycle stays short.
const MAX_DELAY: Duration = Duration::from_millis(250);

/// Kills bermd `kills` times at random moments of a stream of writes, checking everything
/// after each start. `args` choose the backend.
fn kill_during_writes(backend: &str, home: &Path, args: &[&str], kills: u64) {
    let mut run = KillRun::new(backend);
    let first = Bermd::start_in(home, args);
    first.deploy("notes", "notes", &["kv"], LimitsSpec::default());
    drop(first);
    for _ in 0..kills {
        let mut bermd = Bermd::start_in(home, args);
        let client = run.check(&home.join("mcp.sock"));
        let pid = bermd.child.id();
        run.write_until_cut(client, MAX_DELAY, move || sigkill(pid));
        // SIGKILL ended it, not anything of its own before (a panic, an exit).
        let status = bermd.child.wait().unwrap();
        assert_eq!(
            status.signal(),
            Some(9),
            "{backend}: bermd ended with {status} before the kill: {}",
            bermd.log_text()
        );
    }
    let last = Bermd::start_in(home, args);
    drop(run.check(&home.join("mcp.sock")));
    drop(last);
    println!("{}", run.summary());
}

#[test]
fn acknowledged_kv_writes_survive_sigkill_on_the_log() {
    let dir = tempfile::tempdir().unwrap();
    kill_during_writes("log", &dir.path().join("home"), &[], kills(20));
}

#[test]
fn acknowledged_kv_writes_survive_sigkill_on_postgres() {
    let pg = match Postgres::start() {
        Ok(pg) => pg,
        Err(why) => {
            println!("SKIPPED: the PostgreSQL backend: {why}");
            return;
        }
    };
    let dir = tempfile::tempdir().unwrap();
    let url_file = dir.path().join("kv-url");
    std::fs::write(&url_file, format!("{}\n", pg.url())).unwrap();
    kill_during_writes(
        "postgres",
        &dir.path().join("home"),
        &["--kv-url-file", url_file.to_str().unwrap()],
        kills(20),
    );
}
