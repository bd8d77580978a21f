//! The host-side client against a hostile "guest": a Unix socket served by the test, sending
//! what a compromised guest might. Every case must end in a typed error, within its deadline.

use std::io::Write;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use berm_fixtures::assert_within;
use berm_vm_protocol::client::{ConnectError, GuestConnection, ReceiveError, SEEN_LIMIT};
use berm_vm_protocol::framing::ReadLineError;
use berm_vm_protocol::{LineError, MAX_LINE_BYTES, Service};

const GREETING: &str = "{\"boot_id\":\"ab\",\"uptime_ms\":1,\"event\":\"greeting\",\"service\":\"control\",\"protocol\":2,\"init\":\"x\"}\n";

type Behaviour = Box<dyn FnOnce(UnixStream) + Send>;
type Expect = fn(&LineError) -> bool;

/// Serves each accepted connection with the next behaviour in `script`.
fn guest(script: Vec<Behaviour>) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("control.sock");
    let listener = UnixListener::bind(&path).unwrap();
    std::thread::spawn(move || {
        for behave in script {
            let Ok((stream, _)) = listener.accept() else {
                return;
            };
            std::thread::spawn(move || behave(stream));
        }
    });
    (dir, path)
}

fn soon(ms: u64) -> Instant {
    Instant::now() + Duration::from_millis(ms)
}

fn greet_then(rest: &'static [u8]) -> Behaviour {
    Box::new(move |mut s: UnixStream| {
        let _ = s.write_all(GREETING.as_bytes());
        let _ = s.write_all(rest);
        std::thread::sleep(Duration::from_secs(5));
    })
}

fn connect_err(first: &'static [u8]) -> ConnectError {
    let (_dir, path) = guest(vec![Box::new(move |mut s: UnixStream| {
        let _ = s.write_all(first);
        std::thread::sleep(Duration::from_secs(5));
    })]);
    match GuestConnection::connect(&path, Service::Control, soon(3000)) {
        Ok(_) => panic!(
            "connected to a guest whose first line is {:?}",
            String::from_utf8_lossy(first)
        ),
        Err(e) => e,
    }
}

#[test]
fn a_missing_socket_times_out_after_retrying() {
    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let err = GuestConnection::connect(&dir.path().join("nope.sock"), Service::Control, soon(450))
        .err()
        .unwrap();
    assert_within(started, Duration::from_secs(2));
    let ConnectError::TimedOut { attempts, .. } = err else {
        panic!("{err}")
    };
    assert!(
        (3..=6).contains(&attempts),
        "about one attempt per 100 ms, got {attempts}"
    );
}

#[test]
fn connections_reset_before_the_guest_listens_are_retried_until_the_greeting() {
    let close = || Box::new(|s: UnixStream| drop(s)) as Behaviour;
    let (_dir, path) = guest(vec![close(), close(), close(), greet_then(b"")]);
    let conn = GuestConnection::connect(&path, Service::Control, soon(5000)).unwrap();
    assert_eq!(conn.greeting().boot_id, "ab");
}

#[test]
fn a_silent_guest_times_out_at_the_deadline() {
    let (_dir, path) = guest(vec![Box::new(|s: UnixStream| {
        std::thread::sleep(Duration::from_secs(5));
        drop(s);
    })]);
    let started = Instant::now();
    let err = GuestConnection::connect(&path, Service::Control, soon(300))
        .err()
        .unwrap();
    assert!(matches!(err, ConnectError::TimedOut { .. }), "{err}");
    assert_within(started, Duration::from_secs(2));
}

#[test]
fn a_bad_first_line_is_refused_without_retrying() {
    let cases: [(&[u8], Expect); 5] = [
        (b"hello\n", |e| matches!(e, LineError::NotJson(_))),
        (b"[1,2,3]\n", |e| matches!(e, LineError::NotAnObject)),
        (b"\xff\xfe\n", |e| matches!(e, LineError::NotUtf8)),
        (
            b"{\"boot_id\":\"ab\",\"uptime_ms\":1,\"event\":\"greeting\",\"service\":\"logs\",\"protocol\":2,\"init\":\"x\"}\n",
            |e| matches!(e, LineError::WrongPort { .. }),
        ),
        (
            b"{\"boot_id\":\"ab\",\"uptime_ms\":1,\"event\":\"greeting\",\"service\":\"control\",\"protocol\":2,\"init\":\"x\",\"exec\":\"sh\"}\n",
            |e| matches!(e, LineError::Shape { .. }),
        ),
    ];
    for (first, expected) in cases {
        match connect_err(first) {
            ConnectError::BadGreeting { source, .. } => assert!(expected(&source), "{source}"),
            other => panic!("{other}"),
        }
    }
    let err = connect_err(
        b"{\"boot_id\":\"ab\",\"uptime_ms\":1,\"event\":\"boot_complete\",\"apps\":0}\n",
    );
    assert!(
        matches!(
            err,
            ConnectError::NotAGreeting {
                event: "boot_complete",
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn an_oversized_line_ends_the_connection() {
    let (_dir, path) = guest(vec![Box::new(|mut s: UnixStream| {
        let _ = s.write_all(GREETING.as_bytes());
        let _ = s.write_all(&vec![b'{'; MAX_LINE_BYTES + 10]);
        let _ = s.write_all(b"\n");
        std::thread::sleep(Duration::from_secs(5));
    })]);
    let mut conn = GuestConnection::connect(&path, Service::Control, soon(3000)).unwrap();
    let err = conn.receive(soon(3000)).unwrap_err();
    assert!(
        matches!(err, ReceiveError::Read(ReadLineError::TooLong)),
        "{err}"
    );
    assert!(matches!(
        conn.receive(soon(300)).unwrap_err(),
        ReceiveError::Read(ReadLineError::TooLong)
    ));
}

#[test]
fn wrong_shapes_and_control_characters_are_rejected_line_by_line() {
    let (_dir, path) = guest(vec![greet_then(
        b"{\"boot_id\":\"ab\",\"uptime_ms\":2,\"event\":\"power_off\",\"reason\":\"x\",\"exit_code\":\"0\",\"killed\":0,\"unmount_failed\":[]}\n\
          {\"boot_id\":\"ab\",\"uptime_ms\":2,\"event\":\"shutting_down\",\"reason\":\"a\\u001b[31m\"}\n\
          {\"boot_id\":\"ab\",\"uptime_ms\":2,\"event\":\"run_on_host\",\"cmd\":\"rm -rf /\"}\n\
          {\"boot_id\":\"ab\",\"uptime_ms\":2,\"event\":\"log\",\"level\":\"info\",\"source\":\"x\",\"message\":\"m\"}\n\
          {\"boot_id\":\"ab\",\"uptime_ms\":3,\"event\":\"boot_complete\",\"apps\":0}\n",
    )]);
    let mut conn = GuestConnection::connect(&path, Service::Control, soon(3000)).unwrap();
    let mut errors = Vec::new();
    for _ in 0..4 {
        match conn.receive(soon(3000)) {
            Err(ReceiveError::Line(e)) => errors.push(e),
            other => panic!("expected a rejected line, got {other:?}"),
        }
    }
    assert!(
        matches!(errors[0], LineError::Shape { .. }),
        "{}",
        errors[0]
    );
    assert_eq!(errors[1], LineError::ControlCharacter("reason".into()));
    assert_eq!(errors[2], LineError::UnknownEvent("run_on_host".into()));
    assert!(
        matches!(errors[3], LineError::WrongPort { event: "log", .. }),
        "{}",
        errors[3]
    );
    // A rejected line is skipped, not fatal: the stream continues with the next valid line.
    assert_eq!(conn.receive(soon(3000)).unwrap().uptime_ms, 3);
}

#[test]
fn a_flood_of_valid_lines_cannot_stretch_a_wait() {
    let (_dir, path) = guest(vec![Box::new(|mut s: UnixStream| {
        let _ = s.write_all(GREETING.as_bytes());
        let line =
            b"{\"boot_id\":\"ab\",\"uptime_ms\":1,\"event\":\"shutting_down\",\"reason\":\"r\"}\n";
        while s.write_all(line).is_ok() {}
    })]);
    let mut conn = GuestConnection::connect(&path, Service::Control, soon(3000)).unwrap();
    let started = Instant::now();
    let err = conn.wait_for(soon(500), |l| l.uptime_ms == 99).unwrap_err();
    assert!(matches!(err, ReceiveError::TimedOut), "{err}");
    assert_within(started, Duration::from_secs(2));
    assert_eq!(conn.seen().len(), SEEN_LIMIT, "what is kept is bounded");
}

#[test]
fn a_guest_dripping_one_byte_at_a_time_cannot_stretch_a_wait() {
    let (_dir, path) = guest(vec![Box::new(|mut s: UnixStream| {
        let _ = s.write_all(GREETING.as_bytes());
        for _ in 0..1000 {
            if s.write_all(b" ").is_err() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    })]);
    let mut conn = GuestConnection::connect(&path, Service::Control, soon(3000)).unwrap();
    let started = Instant::now();
    let err = conn.receive(soon(400)).unwrap_err();
    assert!(matches!(err, ReceiveError::TimedOut), "{err}");
    assert_within(started, Duration::from_millis(1500));
}

#[test]
fn a_guest_closing_mid_line_is_reported() {
    let (_dir, path) = guest(vec![Box::new(|mut s: UnixStream| {
        let _ = s.write_all(GREETING.as_bytes());
        let _ = s.write_all(b"{\"boot_id\":");
    })]);
    let mut conn = GuestConnection::connect(&path, Service::Control, soon(3000)).unwrap();
    let err = conn.receive(soon(3000)).unwrap_err();
    assert!(
        matches!(err, ReceiveError::Read(ReadLineError::Truncated(11))),
        "{err}"
    );
}
