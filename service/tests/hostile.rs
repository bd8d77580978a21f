//! Hostile programs against a real bermd: nothing a program hands a syscall
//! makes bermd allocate outside its caps, and nothing it reaches for stalls
//! the others.

mod common;

use std::io::Write;
use std::time::{Duration, Instant};

use berm_control::{CallOutcome, DeployRequest, Grant, LimitsSpec};
use common::{Bermd, block_on};

/// The program's whole memory: 64 MiB, the default memory cap.
const MEMORY_BYTES: usize = 64 << 20;
/// Where the answers live, after the region of empty frames.
const TEXT_AT: usize = MEMORY_BYTES - 64;

/// A program with one tool per framed syscall, each handing that syscall
/// (nearly) its whole memory — zeros, which read as empty frames, about
/// 16 million of them — and answering `invalid` when the host says so.
fn amplifier() -> Vec<u8> {
    let targets = [
        ("kv", "get"),
        ("kv", "put"),
        ("log", "write"),
        ("fs", "read"),
        ("fs", "write"),
        ("berm", "call"),
    ];
    let mut imports =
        String::from(r#"(import "berm" "done" (func $done (param i32 i32) (result i64)))"#);
    let mut body = format!(
        r#"(memory (export "memory") {pages})
           (data (i32.const {TEXT_AT}) "invalid")
           (data (i32.const {other}) "other")"#,
        pages = MEMORY_BYTES >> 16,
        other = TEXT_AT + 16,
    );
    let mut tools = Vec::new();
    for (module, name) in targets {
        let tool = format!("{module}_{name}");
        imports.push_str(&format!(
            r#"(import "{module}" "{name}" (func ${tool} (param i32 i32) (result i64)))"#
        ));
        body.push_str(&format!(
            r#"(func (export "berm_tool_{tool}")
                 (if (i64.eq (call ${tool} (i32.const 0) (i32.const {TEXT_AT})) (i64.const -1))
                   (then (drop (call $done (i32.const {TEXT_AT}) (i32.const 7))))
                   (else (drop (call $done (i32.const {other}) (i32.const 5))))))"#,
            other = TEXT_AT + 16,
        ));
        tools.push(format!(
            r#"{{"name":"{tool}","input_schema":{{"type":"object"}}}}"#
        ));
    }
    let manifest = format!(r#"{{"abi":1,"tools":[{}]}}"#, tools.join(","));
    let escaped = manifest.replace('"', "\\\"");
    wat::parse_str(format!(
        r#"(module (@custom "berm.manifest" "{escaped}") {imports} {body})"#
    ))
    .unwrap()
}

/// bermd's peak resident set, in bytes.
fn peak_rss(bermd: &Bermd) -> usize {
    berm_fixtures::peak_rss(bermd.child.id())
}

#[test]
fn a_region_of_empty_frames_costs_the_host_nothing() {
    let bermd = Bermd::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let control = bermd.control();
    let grants = vec![
        Grant::Kv,
        Grant::Log,
        Grant::Fs {
            dir: dir.path().to_path_buf(),
            read_only: false,
            quota: berm_control::FsQuota::default(),
        },
        // berm.call is linked only with a call grant; the frames are refused
        // before any callee is checked.
        "call=echo".parse().unwrap(),
    ];
    let limits = LimitsSpec {
        deadline_ms: Some(10_000),
        memory_bytes: Some(MEMORY_BYTES as u64),
    };
    block_on(control.deploy(
        "amplifier",
        &DeployRequest::new(&amplifier(), grants, limits),
    ))
    .unwrap();
    let tools = [
        "kv_get",
        "kv_put",
        "log_write",
        "fs_read",
        "fs_write",
        "berm_call",
    ];
    // A call first, so what any first call allocates once is in the
    // baseline.
    bermd.deploy("echo", "echo", &[], LimitsSpec::default());
    block_on(control.call("echo_echo", br#"{"message":"warm"}"#.to_vec())).unwrap();
    let before = peak_rss(&bermd);
    for _ in 0..3 {
        for tool in tools {
            let answer =
                block_on(control.call(&format!("amplifier_{tool}"), b"{}".to_vec())).unwrap();
            assert_eq!(answer.outcome, CallOutcome::Done, "{tool}: {answer:?}");
            assert_eq!(answer.text, "invalid", "{tool}");
        }
    }
    let after = peak_rss(&bermd);
    let grew = after.saturating_sub(before);
    eprintln!(
        "bermd peak RSS: {} KiB before, {} KiB after 18 calls handing {} MiB of empty frames (grew {} KiB)",
        before >> 10,
        after >> 10,
        MEMORY_BYTES >> 20,
        grew >> 10
    );
    assert!(
        grew < MEMORY_BYTES / 2,
        "bermd's peak RSS grew by {grew} bytes, half the program's memory is {}",
        MEMORY_BYTES / 2
    );
}

/// A program whose one tool reads `fifo` in its fs grant and answers with
/// the error code it got.
fn fifo_reader() -> Vec<u8> {
    let manifest = r#"{"abi":1,"tools":[{"name":"read","input_schema":{"type":"object"}}]}"#;
    let escaped = manifest.replace('"', "\\\"");
    wat::parse_str(format!(
        r#"(module (@custom "berm.manifest" "{escaped}")
             (import "berm" "done" (func $done (param i32 i32) (result i64)))
             (import "fs" "read" (func $read (param i32 i32) (result i64)))
             (memory (export "memory") 1)
             ;; frames ["fifo"]
             (data (i32.const 0) "\04\00\00\00fifo")
             (data (i32.const 64) "refused")
             (data (i32.const 80) "other")
             (func (export "berm_tool_read")
               (if (i64.eq (call $read (i32.const 0) (i32.const 8)) (i64.const -8))
                 (then (drop (call $done (i32.const 64) (i32.const 7))))
                 (else (drop (call $done (i32.const 80) (i32.const 5)))))))"#
    ))
    .unwrap()
}

#[test]
fn fifo_reads_never_hold_up_echo() {
    let bermd = Bermd::start(&[]);
    bermd.deploy("echo", "echo", &[], LimitsSpec::default());
    let dir = tempfile::tempdir().unwrap();
    // A FIFO no one ever writes to: a blocking open of it never returns.
    rustix::fs::mkfifoat(
        rustix::fs::CWD,
        dir.path().join("fifo"),
        rustix::fs::Mode::from_raw_mode(0o600),
    )
    .unwrap();
    let grants = vec![Grant::Fs {
        dir: dir.path().to_path_buf(),
        read_only: true,
        quota: berm_control::FsQuota::default(),
    }];
    block_on(bermd.control().deploy(
        "reader",
        &DeployRequest::new(&fifo_reader(), grants, LimitsSpec::default()),
    ))
    .unwrap();
    let echo = |i: usize| {
        let started = Instant::now();
        let message = format!(r#"{{"message":"m{i}"}}"#);
        let answer = block_on(bermd.control().call("echo_echo", message.into_bytes())).unwrap();
        assert_eq!(answer.text, format!("m{i}"));
        started.elapsed()
    };
    let mut alone: Vec<Duration> = (0..20).map(echo).collect();
    // Many more FIFO readers than there are call threads, all at once.
    let home = bermd.home.clone();
    let readers: Vec<_> = (0..16)
        .map(|_| {
            let home = home.clone();
            std::thread::spawn(move || {
                let control = berm_control::Client::from_home(&home);
                let mut answers = Vec::new();
                for _ in 0..5 {
                    answers.push(block_on(control.call("reader_read", b"{}".to_vec())));
                }
                answers
            })
        })
        .collect();
    let mut beside: Vec<Duration> = (20..40).map(echo).collect();
    for reader in readers {
        for answer in reader.join().unwrap() {
            let answer = answer.unwrap();
            assert_eq!(answer.text, "refused", "{answer:?}");
        }
    }
    alone.sort();
    beside.sort();
    // Not a timing assertion: a reader that hung would hang this test. The
    // medians are printed for whoever reads the log.
    eprintln!(
        "echo median alone {:?}, beside 80 FIFO reads {:?}",
        alone[10], beside[10]
    );
}

#[test]
fn past_the_session_cap_a_client_is_told_so_and_the_others_go_on() {
    let bermd = Bermd::start(&["--max-connections", "2"]);
    bermd.deploy("echo", "echo", &[], LimitsSpec::default());
    let mut first = bermd.session();
    let mut second = bermd.session();
    for _ in 0..20 {
        // A client opening connections in a loop gets the refusal each time.
        let mut refused = common::Session::connect(&bermd.home.join("mcp.sock"));
        let message = refused.read();
        assert_eq!(message["error"]["code"], -32000, "{message}");
        assert_eq!(
            message["error"]["message"],
            "bermd already serves 2 sessions on mcp.sock, its cap (bermd --max-connections); \
             try again when one closes"
        );
    }
    // The sessions already open are served as before; echo through the
    // control API, which the MCP cap does not touch, as well.
    for session in [&mut first, &mut second] {
        let tools = session.request("tools/list", serde_json::json!({}));
        assert!(tools["result"]["tools"].is_array(), "{tools}");
    }
    let answer = block_on(
        bermd
            .control()
            .call("echo_echo", br#"{"message":"hi"}"#.to_vec()),
    );
    assert_eq!(answer.unwrap().text, "hi");
    // A slot frees when a session closes.
    drop(first);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut again = common::Session::connect(&bermd.home.join("mcp.sock"));
        let mut initialize = serde_json::to_vec(&serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params":
            {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}})).unwrap();
        initialize.push(b'\n');
        // Until the slot frees, bermd refuses this connection and may close it
        // before the request is written (EPIPE): its refusal is still there to read.
        let _ = again.writer.write_all(&initialize);
        let response = again.read();
        if response["result"]["serverInfo"]["name"] == "bermd" {
            break;
        }
        assert!(Instant::now() < deadline, "no slot freed: {response}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn past_the_session_rate_new_sessions_wait_and_the_open_ones_go_on() {
    let bermd = Bermd::start(&["--max-session-rate", "5"]);
    bermd.deploy("echo", "echo", &[], LimitsSpec::default());
    let mut open = bermd.session();
    let socket = bermd.home.join("mcp.sock");
    // A client opening sessions in a loop: each is served, at the rate.
    let flood = std::thread::spawn(move || {
        let start = Instant::now();
        for _ in 0..15 {
            common::Session::connect(&socket).initialize();
        }
        start.elapsed()
    });
    let mut answered = 0;
    while !flood.is_finished() {
        let answer = open.call("echo_echo", serde_json::json!({"message": "hi"}));
        assert_eq!(
            berm_fixtures::tool_result(&answer),
            ("hi".to_string(), false)
        );
        answered += 1;
    }
    let took = flood.join().unwrap();
    assert!(answered > 0);
    // At most 5 at once, then 5 a second: the last 10 of the 15 waited for
    // 2 s of tokens.
    assert!(
        took >= Duration::from_millis(1900),
        "15 sessions in {took:?}"
    );
    let log = bermd.log_text();
    assert!(
        log.contains(
            "new sessions arrive faster than the session rate (bermd --max-session-rate); \
             holding them back"
        ),
        "{log}"
    );
}

#[test]
fn past_a_programs_call_cap_its_calls_are_refused_and_others_run() {
    let bermd = Bermd::start(&["--max-calls-per-program", "2"]);
    bermd.deploy_echo_and_hostile(LimitsSpec {
        deadline_ms: Some(3000),
        memory_bytes: None,
    });
    let spinners: Vec<_> = (0..2)
        .map(|_| {
            let home = bermd.home.clone();
            std::thread::spawn(move || {
                let control = berm_control::Client::from_home(&home);
                // The probe below may take the slot for a moment.
                loop {
                    match block_on(control.call("hostile_spin", b"{}".to_vec())) {
                        Err(e) if e.to_string().contains("already has 2 calls running") => {}
                        other => return other,
                    }
                }
            })
        })
        .collect();
    // Wait until both spins hold their slots.
    let control = bermd.control();
    let deadline = Instant::now() + Duration::from_secs(10);
    let refusal = loop {
        match block_on(control.call("hostile_counter", b"{}".to_vec())) {
            Err(e) => break e.to_string(),
            Ok(_) => {
                if Instant::now() > deadline {
                    let spins: Vec<_> = spinners.into_iter().map(|s| s.join().unwrap()).collect();
                    panic!("the spins never held both slots: {spins:?}");
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    };
    assert!(
        refusal.contains(
            "`hostile` already has 2 calls running, its cap (bermd --max-calls-per-program); \
             try again when one ends"
        ),
        "{refusal}"
    );
    let answer = block_on(control.call("echo_echo", br#"{"message":"free"}"#.to_vec()));
    assert_eq!(answer.unwrap().text, "free");
    for spinner in spinners {
        let error = spinner.join().unwrap().unwrap_err().to_string();
        assert!(error.contains("ran past its deadline"), "{error}");
    }
    // Slots come back when the calls end.
    let answer = block_on(control.call("hostile_counter", b"{}".to_vec())).unwrap();
    assert_eq!(answer.text, "1");
}

/// One kv log record, as bermd writes it.
fn kv_record(key: &[u8], value: &[u8]) -> Vec<u8> {
    let mut body = vec![1u8];
    body.extend_from_slice(&(key.len() as u32).to_le_bytes());
    body.extend_from_slice(&(value.len() as u32).to_le_bytes());
    body.extend_from_slice(key);
    body.extend_from_slice(value);
    let mut record = crc32fast::hash(&body).to_le_bytes().to_vec();
    record.extend_from_slice(&body);
    record
}

#[test]
fn a_keyspace_corrupt_in_the_middle_is_not_served_and_not_cut() {
    let bermd = Bermd::start(&[]);
    let log = bermd.home.join("state/store/kv.log");
    std::fs::create_dir_all(log.parent().unwrap()).unwrap();
    let first = kv_record(b"a", b"1");
    let mut bytes = first.clone();
    let mut second = kv_record(b"b", b"2");
    *second.last_mut().unwrap() ^= 1;
    bytes.extend_from_slice(&second);
    bytes.extend_from_slice(&kv_record(b"k", b"acknowledged"));
    std::fs::write(&log, &bytes).unwrap();

    // kv.get of "k"; on an error the message is pulled and failed with.
    let manifest = r#"{"abi":1,"tools":[{"name":"get","input_schema":{"type":"object"}}]}"#;
    let escaped = manifest.replace('"', "\\\"");
    let image = wat::parse_str(format!(
        r#"(module (@custom "berm.manifest" "{escaped}")
             (import "berm" "done" (func $done (param i32 i32) (result i64)))
             (import "berm" "fail" (func $fail (param i32 i32) (result i64)))
             (import "berm" "reply" (func $reply (param i32 i32) (result i64)))
             (import "kv" "get" (func $get (param i32 i32) (result i64)))
             (memory (export "memory") 1)
             (data (i32.const 0) "\01\00\00\00k")
             (func (export "berm_tool_get") (local $w i64)
               (local.set $w (call $get (i32.const 0) (i32.const 5)))
               (if (i64.lt_s (local.get $w) (i64.const 0))
                 (then
                   (local.set $w (call $reply (i32.const 1024) (i32.const 8192)))
                   (drop (call $fail (i32.const 1024) (i32.wrap_i64 (local.get $w)))))
                 (else (drop (call $done (i32.const 0) (i32.const 0)))))))"#
    ))
    .unwrap();
    // The program deploys: only its keyspace is held back.
    block_on(bermd.control().deploy(
        "store",
        &DeployRequest::new(&image, vec![Grant::Kv], LimitsSpec::default()),
    ))
    .unwrap();
    let answer = block_on(bermd.control().call("store_get", b"{}".to_vec())).unwrap();
    assert_eq!(answer.outcome, CallOutcome::Failed, "{answer:?}");
    assert!(
        answer.text.contains(&format!(
            "is corrupt at byte {} of {}",
            first.len(),
            bytes.len()
        )) && answer
            .text
            .contains(&format!("truncate -s {}", first.len())),
        "{}",
        answer.text
    );
    assert_eq!(std::fs::read(&log).unwrap(), bytes, "the log was changed");
    assert!(bermd.log_text().contains("kv not served"));
}

/// Each staged reply of the budget test: `fs.read` of a file this large.
const HELD_REPLY: usize = 1 << 20;

/// A program (4 MiB of memory) whose tools read `big` in its fs grant and then hold the reply
/// until their deadline (`hold`), trap (`trap`) or answer `read` (`read`); on an error each
/// fails with the message. `write` hands `fs.write` 3.5 MiB.
fn holder() -> Vec<u8> {
    let body = r#"
        (memory (export "memory") 64)
        ;; frames ["big"]
        (data (i32.const 0) "\03\00\00\00big")
        (data (i32.const 16) "read")
        ;; frames ["out", 3.5 MiB of zeros]
        (data (i32.const 65536) "\03\00\00\00out\00\00\38\00")
        ;; Fails the call with the message of the word `w` if it is an error.
        (func $ok (param $w i64) (result i32)
          (if (i64.lt_s (local.get $w) (i64.const 0))
            (then
              (drop (call $fail (i32.const 1024)
                (i32.wrap_i64 (call $reply (i32.const 1024) (i32.const 8192)))))
              (return (i32.const 0))))
          (i32.const 1))
        (func (export "berm_tool_hold")
          (if (call $ok (call $read (i32.const 0) (i32.const 7)))
            (then (loop $spin (br $spin)))))
        (func (export "berm_tool_trap")
          (if (call $ok (call $read (i32.const 0) (i32.const 7)))
            (then unreachable)))
        (func (export "berm_tool_read")
          (if (call $ok (call $read (i32.const 0) (i32.const 7)))
            (then (drop (call $done (i32.const 16) (i32.const 4))))))
        (func (export "berm_tool_write")
          (if (call $ok (call $write (i32.const 65536) (i32.const 3670027)))
            (then (drop (call $done (i32.const 16) (i32.const 4))))))"#;
    berm_fixtures::wat_program(
        &["hold", "trap", "read", "write"],
        &[
            "berm.done",
            "berm.fail",
            "berm.reply",
            "fs.read",
            "fs.write",
        ],
        body,
    )
}

#[test]
fn replies_held_past_the_host_memory_budget_are_refused_and_released_when_calls_end() {
    let budget = 3 * HELD_REPLY;
    let bermd = Bermd::start(&["--max-host-memory", &budget.to_string()]);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("big"), vec![7u8; HELD_REPLY]).unwrap();
    let grants = vec![Grant::Fs {
        dir: dir.path().to_path_buf(),
        read_only: false,
        quota: berm_control::FsQuota::default(),
    }];
    let limits = LimitsSpec {
        deadline_ms: Some(3000),
        memory_bytes: Some(4 << 20),
    };
    let control = bermd.control();
    block_on(control.deploy("holder", &DeployRequest::new(&holder(), grants, limits))).unwrap();
    let over = |syscall: &str, bytes: usize, held: usize| {
        format!(
            "`{syscall}`: holding {bytes} more bytes would take `holder` past its host memory \
             budget of {budget} bytes (bermd --max-host-memory); its calls already hold {held} \
             bytes in replies not yet pulled and requests in flight. Pull each reply before the \
             next syscall, or make fewer calls at once"
        )
    };
    // A request copied out of the program counts too.
    let answer = block_on(control.call("holder_write", b"{}".to_vec())).unwrap();
    assert_eq!(answer.outcome, CallOutcome::Failed, "{answer:?}");
    assert_eq!(answer.text, over("fs.write", 3_670_016, 0));
    // Calls that trap holding a reply give it back: were it kept, these three would fill
    // the budget and every hold below would be refused.
    for _ in 0..3 {
        let error = block_on(control.call("holder_trap", b"{}".to_vec())).unwrap_err();
        assert!(error.to_string().contains("unreachable"), "{error}");
    }
    // Four calls at once, each holding its reply until its deadline: three fit the budget.
    let holds: Vec<_> = (0..4)
        .map(|_| {
            let home = bermd.home.clone();
            std::thread::spawn(move || {
                let control = berm_control::Client::from_home(&home);
                block_on(control.call("holder_hold", b"{}".to_vec()))
            })
        })
        .collect();
    let (mut timed_out, mut refused) = (0, Vec::new());
    for hold in holds {
        match hold.join().unwrap() {
            Err(e) if e.to_string().contains("ran past its deadline") => timed_out += 1,
            Ok(answer) if answer.outcome == CallOutcome::Failed => refused.push(answer.text),
            other => panic!("unexpected: {other:?}"),
        }
    }
    assert_eq!(timed_out, 3, "{refused:?}");
    assert_eq!(refused, [over("fs.read", HELD_REPLY, budget)]);
    // Calls that met their deadline gave their replies back: the next call is served.
    for _ in 0..4 {
        let answer = block_on(control.call("holder_read", b"{}".to_vec())).unwrap();
        assert_eq!(answer.text, "read", "{answer:?}");
    }
}

/// A plain HTTP server on loopback that answers `GET /SENT/LEN` with a head promising `LEN`
/// bytes of body and sends `SENT` of them; when that is less than it promised, it then holds
/// the connection open (for a minute at most), as a server that trickles a large body would.
fn trickling_server() -> std::net::SocketAddr {
    use std::io::Read;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            std::thread::spawn(move || {
                let mut request = Vec::new();
                let mut byte = [0u8; 1];
                while !request.ends_with(b"\r\n\r\n") && stream.read(&mut byte).unwrap_or(0) == 1 {
                    request.push(byte[0]);
                }
                let line = String::from_utf8_lossy(&request).into_owned();
                let path = line.split(' ').nth(1).unwrap_or_default().to_string();
                let mut numbers = path.trim_start_matches('/').split('/');
                let mut next = || -> usize { numbers.next().unwrap_or("0").parse().unwrap_or(0) };
                let (sent, promised) = (next(), next());
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {promised}\r\n\r\n"
                );
                if stream.write_all(head.as_bytes()).is_err() {
                    return;
                }
                // Written in pieces, so a client that stops reading stops the writing too.
                for _ in 0..sent / 4096 {
                    if stream.write_all(&[b'a'; 4096]).is_err() {
                        return;
                    }
                }
                let _ = stream.write_all(&vec![b'a'; sent % 4096]);
                if sent < promised {
                    std::thread::sleep(Duration::from_secs(60));
                }
            });
        }
    });
    addr
}

/// Item 12: an `http.fetch` response counts against the program's host memory budget as it
/// arrives, not once it is whole: a body that would take the program past its budget stops
/// being received at once, with `too_large` naming the budget (instead of being held in full,
/// uncounted, until the fetch's deadline); what it held is given back when the fetch ends, so
/// the program's next fetches are served, and so are other programs.
#[test]
fn an_http_fetch_response_counts_against_the_host_memory_budget_as_it_arrives() {
    const BUDGET: usize = 1 << 20;
    let server = trickling_server();
    let bermd = Bermd::start(&["--max-host-memory", &BUDGET.to_string()]);
    let net = format!("net=127.0.0.1:{}", server.port());
    let limits = LimitsSpec {
        deadline_ms: Some(20_000),
        memory_bytes: None,
    };
    bermd.deploy("fetch", "fetch", &[&net], limits);
    // The same program with a short deadline.
    let short = LimitsSpec {
        deadline_ms: Some(1500),
        memory_bytes: None,
    };
    bermd.deploy("brief", "fetch", &[&net], short);
    bermd.deploy("echo", "echo", &[], LimitsSpec::default());
    let control = bermd.control();
    let get = |tool: &str, sent: usize, promised: usize| {
        let args = serde_json::json!({"url": format!("http://{server}/{sent}/{promised}")});
        block_on(control.call(tool, args.to_string().into_bytes())).unwrap()
    };
    let fetch = |sent, promised| get("fetch_get", sent, promised);

    // 1.5 MiB of a promised 2 MiB (under the 4 MiB response cap), and then nothing: the
    // budget stops it while it arrives.
    let refused = fetch(3 << 19, 2 << 20);
    assert_eq!(refused.outcome, CallOutcome::Failed, "{refused:?}");
    for part in [
        &format!(
            "the response from 127.0.0.1:{} was stopped at ",
            server.port()
        ),
        &format!("past its host memory budget of {BUDGET} bytes (bermd --max-host-memory)"),
        "(too_large)",
    ] {
        assert!(refused.text.contains(part), "{part}: {}", refused.text);
    }

    // Given back: whole bodies of half the budget, one after another, are served.
    for _ in 0..3 {
        let served = fetch(1 << 19, 1 << 19);
        assert_eq!(served.outcome, CallOutcome::Done, "{}", served.text);
        let page: serde_json::Value = serde_json::from_str(&served.text).unwrap();
        assert_eq!(page["body"].as_str().unwrap().len(), 1 << 19);
    }
    // A body under the budget that never ends: the fetch ends before the call's deadline
    // with `timeout`, and what it held is given back.
    let stalled = get("brief_get", 1 << 19, 1 << 20);
    assert_eq!(stalled.outcome, CallOutcome::Failed, "{stalled:?}");
    assert!(stalled.text.contains("(timeout)"), "{}", stalled.text);
    let served = get("brief_get", 3 << 18, 3 << 18);
    assert_eq!(served.outcome, CallOutcome::Done, "{}", served.text);

    // The host stayed up, and other programs were served throughout.
    let echoed = block_on(control.call("echo_echo", br#"{"message":"still here"}"#.to_vec()));
    assert!(echoed.unwrap().text.contains("still here"));
}
