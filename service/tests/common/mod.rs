//! Drives a real bermd: a process on a temporary `$BERM_HOME`, reached over
//! its sockets with a plain JSON-RPC line client and the control client.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use berm_control::{Client, DeployRequest, Grant, LimitsSpec};
use serde_json::{Value, json};

/// The example programs scripts/build-apps.sh builds.
pub use berm_fixtures::example as wasm;

/// A bermd process.
pub struct Bermd {
    pub home: PathBuf,
    pub child: Child,
    pub log: PathBuf,
    _dir: Option<tempfile::TempDir>,
}

impl Bermd {
    /// Starts bermd on a fresh home.
    pub fn start(args: &[&str]) -> Bermd {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        let mut bermd = Bermd::start_in(&home, args);
        bermd._dir = Some(dir);
        bermd
    }

    /// Starts bermd on a fresh home with `env` set beside the usual variables.
    pub fn start_with_env(args: &[&str], env: &[(&str, &str)]) -> Bermd {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        let mut bermd = Bermd::start_in_with_env(&home, args, env);
        bermd._dir = Some(dir);
        bermd
    }

    /// Starts bermd on `home` (which may hold earlier state).
    pub fn start_in(home: &Path, args: &[&str]) -> Bermd {
        Bermd::start_in_with_env(home, args, &[])
    }

    fn start_in_with_env(home: &Path, args: &[&str], env: &[(&str, &str)]) -> Bermd {
        let log = home.with_extension(format!(
            "log{}",
            std::process::id() as u64 ^ Instant::now().elapsed().as_nanos() as u64
        ));
        let child = Command::new(env!("CARGO_BIN_EXE_bermd"))
            .args(args)
            .envs(env.iter().copied())
            .env("BERM_HOME", home)
            .env("BERM_LOG", "info,rmcp=warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let bermd = Bermd {
            home: home.to_path_buf(),
            child,
            log,
            _dir: None,
        };
        bermd.wait_ready();
        bermd
    }

    fn wait_ready(&self) {
        berm_fixtures::wait_until(
            Duration::from_secs(60),
            Duration::from_millis(20),
            || {
                UnixStream::connect(self.home.join("mcp.sock")).is_ok()
                    && UnixStream::connect(self.home.join("control.sock")).is_ok()
            },
            || format!("bermd did not come up: {}", self.log_text()),
        );
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn control(&self) -> Client {
        Client::from_home(&self.home)
    }

    /// Deploys through the control API.
    pub fn deploy(
        &self,
        name: &str,
        app: &str,
        grants: &[&str],
        limits: LimitsSpec,
    ) -> berm_control::DeployResponse {
        let grants: Vec<Grant> = grants.iter().map(|g| g.parse().unwrap()).collect();
        block_on(
            self.control()
                .deploy(name, &DeployRequest::new(&wasm(app), grants, limits)),
        )
        .unwrap()
    }

    /// `echo` with the default limits beside `hostile` with `limits`: a well-behaved
    /// program next to one that misbehaves.
    pub fn deploy_echo_and_hostile(&self, limits: LimitsSpec) {
        self.deploy("echo", "echo", &[], LimitsSpec::default());
        self.deploy("hostile", "hostile", &[], limits);
    }

    /// Whether the process is still running.
    pub fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    /// `kill -9`; returns the home and the temporary directory holding it,
    /// for a restart.
    pub fn kill9(mut self) -> (PathBuf, Option<tempfile::TempDir>) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
        (self.home.clone(), self._dir.take())
    }

    /// A session on the MCP socket, initialized.
    pub fn session(&self) -> Session {
        let mut session = Session::connect(&self.home.join("mcp.sock"));
        session.initialize();
        session
    }

    /// `clients` sessions at once, each on its own thread and initialized, each running
    /// `work(client index, session)`; returns what each returned, in client order.
    pub fn concurrently<T: Send + 'static>(
        &self,
        clients: usize,
        work: impl Fn(usize, &mut Session) -> T + Send + Clone + 'static,
    ) -> Vec<T> {
        let socket = self.home.join("mcp.sock");
        let threads: Vec<_> = (0..clients)
            .map(|client| {
                let (socket, work) = (socket.clone(), work.clone());
                std::thread::spawn(move || {
                    let mut session = Session::connect(&socket);
                    session.initialize();
                    work(client, &mut session)
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    }
}

impl Drop for Bermd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs a future on a small runtime.
pub fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(future)
}

/// A newline-delimited JSON-RPC client on the MCP socket.
pub struct Session {
    pub writer: UnixStream,
    pub reader: BufReader<UnixStream>,
    next_id: u64,
}

impl Session {
    pub fn connect(path: &Path) -> Session {
        let writer = UnixStream::connect(path).unwrap();
        writer
            .set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        let reader = BufReader::new(writer.try_clone().unwrap());
        Session {
            writer,
            reader,
            next_id: 1,
        }
    }

    pub fn send_raw(&mut self, bytes: &[u8]) {
        self.writer.write_all(bytes).unwrap();
    }

    pub fn send(&mut self, message: &Value) {
        let mut line = serde_json::to_vec(message).unwrap();
        line.push(b'\n');
        self.send_raw(&line);
    }

    /// The next message that is not a notification.
    pub fn read(&mut self) -> Value {
        loop {
            let mut line = String::new();
            let n = self.reader.read_line(&mut line).unwrap();
            assert!(n > 0, "bermd closed the session");
            let message: Value = serde_json::from_str(&line).unwrap();
            if message.get("method").is_none() {
                return message;
            }
        }
    }

    /// Sends a request and returns its response.
    pub fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        let response = self.read();
        assert_eq!(response["id"], json!(id), "{response}");
        response
    }

    pub fn initialize(&mut self) {
        let response = self.request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "berm-tests", "version": "0"}}),
        );
        assert_eq!(
            response["result"]["serverInfo"]["name"], "bermd",
            "{response}"
        );
        self.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    }

    /// `tools/call`; returns the whole response.
    pub fn call(&mut self, tool: &str, args: Value) -> Value {
        self.request("tools/call", json!({"name": tool, "arguments": args}))
    }
}

/// The JSON-RPC message in a Streamable HTTP answer's body: the body itself when it is plain
/// JSON, or the data of the SSE event that carries an `id`.
pub fn http_message(body: &str) -> &str {
    let body = body.trim();
    body.lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .map(str::trim)
        .find(|line| line.contains("\"id\""))
        .unwrap_or(body)
}
