//! What the service benches share: a minimal MCP client on bermd's Unix
//! socket, latency statistics, and a bermd process on a temporary home.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// Median and 99th percentile, in µs.
pub struct Stats {
    pub p50: f64,
    pub p99: f64,
}

impl Stats {
    pub fn of(mut times: Vec<Duration>) -> Stats {
        times.sort();
        let at = |q: f64| {
            times[((times.len() as f64 * q) as usize).min(times.len() - 1)].as_secs_f64() * 1e6
        };
        Stats {
            p50: at(0.50),
            p99: at(0.99),
        }
    }
}

/// Runs `call` `warmup` times, then times it `samples` times.
pub async fn sample<F, Fut>(warmup: usize, samples: usize, mut call: F) -> Stats
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    for _ in 0..warmup {
        call().await;
    }
    let mut times = Vec::with_capacity(samples);
    for _ in 0..samples {
        let start = Instant::now();
        call().await;
        times.push(start.elapsed());
    }
    Stats::of(times)
}

/// The real bermd binary on a fresh home, killed on drop.
pub struct Bermd {
    pub home: PathBuf,
    child: Child,
}

impl Bermd {
    pub fn start(home: &Path, args: &[&str]) -> Bermd {
        Bermd::start_with_env(home, args, &[])
    }

    /// [`Bermd::start`] with `env` set beside the usual variables.
    pub fn start_with_env(home: &Path, args: &[&str], env: &[(&str, &str)]) -> Bermd {
        let child = Command::new(env!("CARGO_BIN_EXE_bermd"))
            .args(args)
            .envs(env.iter().copied())
            .env("BERM_HOME", home)
            .env("BERM_LOG", "error")
            .stdout(Stdio::null())
            .spawn()
            .expect("bermd");
        let deadline = Instant::now() + Duration::from_secs(60);
        while UnixStream::connect(home.join("control.sock")).is_err()
            || UnixStream::connect(home.join("mcp.sock")).is_err()
        {
            assert!(Instant::now() < deadline, "bermd did not come up");
            std::thread::sleep(Duration::from_millis(20));
        }
        Bermd {
            home: home.to_path_buf(),
            child,
        }
    }

    pub fn socket(&self) -> PathBuf {
        self.home.join("mcp.sock")
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

/// CPU time (user + system) the calling thread has used, in seconds.
pub fn thread_cpu() -> f64 {
    cpu_of_stat(&std::fs::read_to_string("/proc/thread-self/stat").unwrap_or_default())
        .map_or(0.0, |(_, seconds)| seconds)
}

/// A thread's name and CPU seconds from its `stat` line.
fn cpu_of_stat(stat: &str) -> Option<(String, f64)> {
    // USER_HZ is 100 on every Linux this runs on.
    const TICKS: f64 = 100.0;
    // The name is in parentheses and may hold spaces; fields follow.
    let (open, close) = (stat.find('(')?, stat.rfind(')')?);
    let fields: Vec<&str> = stat.get(close + 2..)?.split(' ').collect();
    // utime and stime are fields 14 and 15 of stat, 12 and 13 after the name.
    let ticks = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    Some((stat[open + 1..close].to_string(), ticks / TICKS))
}

/// CPU time (user + system) of each thread of process `pid`, summed by
/// thread name, in seconds, from `/proc/<pid>/task/*/stat`.
pub fn cpu_by_thread(pid: &str) -> std::collections::BTreeMap<String, f64> {
    let mut by_name = std::collections::BTreeMap::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return by_name;
    };
    for task in tasks.flatten() {
        let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
        if let Some((name, seconds)) = cpu_of_stat(&stat) {
            *by_name.entry(name).or_insert(0.0) += seconds;
        }
    }
    by_name
}

impl Drop for Bermd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A minimal MCP client: initialize, then one tools/call at a time.
pub struct McpClient {
    writer: UnixStream,
    reader: BufReader<UnixStream>,
    id: u64,
    line: String,
}

impl McpClient {
    pub fn connect(socket: &Path) -> McpClient {
        let mut client = McpClient::connect_stateless(socket);
        client.request("initialize", json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}}));
        client.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        client
    }

    /// A connection that sends no `initialize`: for 2026-07-28 requests, which carry their
    /// protocol version in `_meta`, or for an `initialize` of another version.
    pub fn connect_stateless(socket: &Path) -> McpClient {
        let writer = UnixStream::connect(socket).expect("connect");
        let reader = BufReader::new(writer.try_clone().expect("clone"));
        McpClient {
            writer,
            reader,
            id: 0,
            line: String::new(),
        }
    }

    pub fn send(&mut self, message: &Value) {
        let mut bytes = serde_json::to_vec(message).expect("json");
        bytes.push(b'\n');
        self.writer.write_all(&bytes).expect("write");
    }

    pub fn request(&mut self, method: &str, params: Value) -> Value {
        self.id += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": self.id, "method": method, "params": params}));
        loop {
            self.line.clear();
            self.reader.read_line(&mut self.line).expect("read");
            let answer: Value = serde_json::from_str(&self.line).expect("answer");
            if answer["id"] == json!(self.id) {
                return answer;
            }
        }
    }

    /// Writes `line` (a whole request, newline included) and reads one line back: the same
    /// client work as the floor's, with no JSON built or parsed. The caller reads the
    /// answer from [`McpClient::last_line`] once its timing has stopped.
    pub fn round_trip(&mut self, line: &[u8]) {
        self.writer.write_all(line).expect("write");
        self.line.clear();
        self.reader.read_line(&mut self.line).expect("read");
    }

    /// The last line read.
    pub fn last_line(&self) -> &str {
        &self.line
    }

    /// The served name of `program`'s `tool`, whatever separator bermd
    /// uses, from `tools/list`.
    pub fn tool_name(&mut self, program: &str, tool: &str) -> String {
        let list = self.request("tools/list", json!({}));
        list["result"]["tools"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|t| t["name"].as_str())
            .find(|name| {
                name.strip_prefix(program)
                    .and_then(|rest| rest.strip_suffix(tool))
                    .is_some_and(|sep| !sep.is_empty() && sep.len() <= 2)
            })
            .unwrap_or_else(|| panic!("no {program}/{tool} in {list}"))
            .to_string()
    }

    /// `tools/call` of `name`; the whole answer.
    pub fn call(&mut self, name: &str, arguments: Value) -> Value {
        self.request("tools/call", json!({"name": name, "arguments": arguments}))
    }
}

/// The JSON-RPC message in a Streamable HTTP answer's body: the body itself when it is plain
/// JSON, or the data of its one SSE event.
pub fn http_message(body: &str) -> &str {
    body.lines()
        .find_map(|l| l.strip_prefix("data: ").filter(|d| d.starts_with('{')))
        .unwrap_or(body)
}
