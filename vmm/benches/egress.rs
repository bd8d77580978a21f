//! `http.fetch` of a 1 KiB loopback response from inside the microVM, through berm-vmm's
//! egress dialer, against the host-direct figures of the same run:
//!
//! - `direct GET`: a new TCP connection from the host, one GET of the page, read to the end
//!   (what the dialer does per request, without it);
//! - `dialer alone`: the same request written to the dialer's run-dir socket from the host
//!   (`berm_egress::remote`), i.e. the dialer's own cost;
//! - `fetch_get in the VM`: `tools/call` of apps/fetch's `get` on `rpc-0.sock`, one MCP session:
//!   the relay into the guest, bermd, the program, its `http.fetch` over vsock to the dialer,
//!   the fetch, and back;
//! - `refused in the guest`: the same call to a port not granted, refused by bermd's own check:
//!   everything but the vsock hop, the dialer and the fetch.
//!
//! Run: `scripts/build-apps.sh && cargo bench -p berm-vmm --bench egress` (needs the pinned
//! artifacts, as the VM tests do). `BERM_BENCH_SAMPLES` (default 200) calls per row after 20
//! warm-up calls. Prints a markdown table; nothing here asserts a speed.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use berm_egress::testing::{Reply, TestServer};
use common::{app_folder, median};
use serde_json::{Value, json};

const WARMUP: usize = 20;

fn samples() -> usize {
    std::env::var("BERM_BENCH_SAMPLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200)
}

/// Median microseconds of `f` over `samples()` calls after the warm-up.
fn measure(mut f: impl FnMut()) -> f64 {
    for _ in 0..WARMUP {
        f();
    }
    let times = (0..samples())
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    median(times)
}

/// One MCP session on a Unix socket.
struct Session {
    writer: UnixStream,
    reader: BufReader<UnixStream>,
    id: u64,
}

impl Session {
    fn open(socket: &Path) -> Session {
        let writer = UnixStream::connect(socket).expect("rpc-0.sock");
        writer
            .set_read_timeout(Some(Duration::from_secs(60)))
            .expect("timeout");
        let reader = BufReader::new(writer.try_clone().expect("clone"));
        let mut session = Session {
            writer,
            reader,
            id: 0,
        };
        session.request("initialize", json!({"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"bench","version":"0"}}));
        session.send(json!({"jsonrpc":"2.0","method":"notifications/initialized"}));
        session
    }

    fn send(&mut self, message: Value) {
        let mut line = message.to_string();
        line.push('\n');
        self.writer.write_all(line.as_bytes()).expect("write");
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        self.id += 1;
        let id = self.id;
        self.send(json!({"jsonrpc":"2.0","id":id,"method":method,"params":params}));
        loop {
            let mut line = String::new();
            assert!(
                self.reader.read_line(&mut line).expect("read") > 0,
                "closed"
            );
            let value: Value = serde_json::from_str(&line).expect("json");
            if value["id"] == id {
                return value;
            }
        }
    }
}

fn main() {
    let page = TestServer::http(|_| Reply::ok(vec![b'x'; 1024]));
    let url = format!("{}/page", page.origin(false));
    let work = tempfile::tempdir().expect("tempdir");
    let app = app_folder(
        work.path(),
        "fetch",
        "fetch",
        &format!("\"net=127.0.0.1:{}\"", page.port()),
    );
    let run_dir = work.path().join("run");
    let mut vmm = Command::new(env!("CARGO_BIN_EXE_berm-vmm"))
        .args(["run", "--run-dir"])
        .arg(&run_dir)
        .arg("--app")
        .arg(&app)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("berm-vmm");
    let socket = run_dir.join("rpc-0.sock");
    let deadline = Instant::now() + Duration::from_secs(300);
    while common::call_once(&socket, "fetch_get", &json!({"url": url})).is_none() {
        assert!(Instant::now() < deadline, "the VM did not answer");
        std::thread::sleep(Duration::from_millis(50));
    }

    let direct = measure(|| {
        let mut stream = TcpStream::connect(("127.0.0.1", page.port())).expect("connect");
        stream
            .write_all(b"GET /page HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            .expect("write");
        let mut out = Vec::new();
        stream.read_to_end(&mut out).expect("read");
        assert!(out.len() > 1024);
    });
    let request = berm_egress::Request {
        method: "GET".into(),
        url: url.clone(),
        headers: Vec::new(),
        body: Vec::new(),
    };
    let dialer_socket = run_dir.join("vsock.sock_6000");
    let dialer = measure(|| {
        let stream = UnixStream::connect(&dialer_socket).expect("dialer");
        let response = berm_egress::remote::send(
            stream,
            "fetch",
            &request,
            Duration::from_secs(10),
            &berm_egress::Caps::default(),
            &berm_egress::Unbounded,
        )
        .expect("dialer reply");
        assert_eq!(response.body.len(), 1024);
    });
    let mut session = Session::open(&socket);
    let in_vm = measure(|| {
        let reply = session.request(
            "tools/call",
            json!({"name": "fetch_get", "arguments": {"url": url}}),
        );
        assert_eq!(reply["result"]["isError"], false, "{reply}");
    });
    // The same call refused by the guest's own check (a port not granted): everything but
    // the vsock hop, the dialer and the fetch.
    let refused_url = "http://127.0.0.1:9/";
    let in_vm_refused = measure(|| {
        let reply = session.request(
            "tools/call",
            json!({"name": "fetch_get", "arguments": {"url": refused_url}}),
        );
        assert_eq!(reply["result"]["isError"], true, "{reply}");
    });
    let _ = vmm.kill();
    let _ = vmm.wait();

    println!("### http.fetch through the microVM's egress dialer (1 KiB loopback page)\n");
    println!(
        "Medians of {} calls after {WARMUP} warm-up calls, one run.\n",
        samples()
    );
    println!("| what | median µs |\n|---|---|");
    println!("| direct GET from the host (new connection) | {direct:.0} |");
    println!("| the dialer alone, from the host (its run-dir socket) | {dialer:.0} |");
    println!("| `fetch_get` in the VM: MCP → bermd → vsock → dialer → page | {in_vm:.0} |");
    println!(
        "| `fetch_get` in the VM refused by the guest's own check (no vsock hop) | {in_vm_refused:.0} |"
    );
    println!(
        "\nThe dialer alone costs {:.0} µs over a direct GET; in the VM the hop to the host and \
         the fetch add {:.0} µs to the same call refused in the guest.",
        dialer - direct,
        in_vm - in_vm_refused
    );
}
