//! Half-close on every relayed socket, booted for real: a client that writes its request and
//! shuts down its write side at once (`printf … | socat - UNIX-CONNECT:…`) still gets the
//! whole greeting and reply, on `control.sock`, `logs.sock` and `rpc-0.sock`, every time.
//!
//! Like vm.rs, the test prints `SKIPPED: <why>` only where nothing can boot the guest, and
//! fails instead under `BERM_VM_REQUIRE=1`.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::Shutdown;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use berm::GuestArch;
use berm_vm_protocol::{Event, GuestLine, Service};
use common::{boot_notes, scratch_to_boot};
use serde_json::Value;

/// Tries per socket.
const TRIES: usize = 20;

/// Connects to `socket`, writes `request`, shuts down the write side and reads lines until
/// `done` accepts one or the stream ends; returns every line read.
fn half_closed_exchange(socket: &Path, request: &[u8], done: impl Fn(&str) -> bool) -> Vec<String> {
    let mut stream = UnixStream::connect(socket)
        .unwrap_or_else(|e| panic!("connecting to {}: {e}", socket.display()));
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    stream.write_all(request).unwrap();
    stream.shutdown(Shutdown::Write).unwrap();
    let mut lines = Vec::new();
    for line in BufReader::new(stream).lines() {
        let Ok(line) = line else { break };
        let finished = done(&line);
        lines.push(line);
        if finished {
            break;
        }
    }
    lines
}

fn guest_line(service: Service, line: &str) -> Option<GuestLine> {
    GuestLine::parse(service, line.as_bytes()).ok()
}

#[test]
fn every_relayed_socket_answers_a_client_that_half_closed() {
    let Some(tmp) = scratch_to_boot(GuestArch::HOST) else {
        return;
    };
    let mut vmm = boot_notes(tmp.path());
    let run = vmm.run_dir.clone();

    let mut failures = Vec::new();
    for i in 0..TRIES {
        // No request at all (`socat - UNIX-CONNECT:… </dev/null`): the greeting still comes.
        let lines = half_closed_exchange(&run.join("control.sock"), b"", |l| {
            guest_line(Service::Control, l).is_some_and(|g| matches!(g.event, Event::Greeting(_)))
        });
        if !lines.iter().any(|l| {
            guest_line(Service::Control, l).is_some_and(|g| matches!(g.event, Event::Greeting(_)))
        }) {
            failures.push(format!("control, no request, try {i}: {lines:?}"));
        }
        // A status request: the greeting, then the status reply.
        let lines =
            half_closed_exchange(&run.join("control.sock"), b"{\"op\":\"status\"}\n", |l| {
                guest_line(Service::Control, l).is_some_and(|g| matches!(g.event, Event::Status(_)))
            });
        if !lines.iter().any(|l| {
            guest_line(Service::Control, l).is_some_and(|g| matches!(g.event, Event::Status(_)))
        }) {
            failures.push(format!("control, status, try {i}: {lines:?}"));
        }
        // The log port takes no requests: the greeting and the backlog come.
        let lines = half_closed_exchange(&run.join("logs.sock"), b"", |l| {
            guest_line(Service::Logs, l).is_some_and(|g| matches!(g.event, Event::Greeting(_)))
        });
        if !lines.iter().any(|l| {
            guest_line(Service::Logs, l).is_some_and(|g| matches!(g.event, Event::Greeting(_)))
        }) {
            failures.push(format!("logs, try {i}: {lines:?}"));
        }
        // MCP: initialize and tools/list, then EOF; both answers come, in full.
        let request = concat!(
            r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"half-close","version":"0"}}}"#,
            "\n",
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            "\n",
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#,
            "\n",
        );
        let lines = half_closed_exchange(&run.join("rpc-0.sock"), request.as_bytes(), |l| {
            serde_json::from_str::<Value>(l).is_ok_and(|v| v["id"] == 2)
        });
        let answered = |id: u64| {
            lines.iter().any(|l| {
                serde_json::from_str::<Value>(l)
                    .is_ok_and(|v| v["id"] == id && v["result"].is_object())
            })
        };
        if !answered(1) || !answered(2) {
            failures.push(format!("rpc-0, try {i}: {lines:?}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} half-closed exchanges got no whole reply:\n{}",
        failures.len(),
        4 * TRIES,
        failures.join("\n")
    );
    vmm.shut_down();
}
