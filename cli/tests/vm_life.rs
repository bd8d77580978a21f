//! `berm vm up`, `ls`, `stop`, `logs`, `berm mcp --vm` and `berm attest NAME` through the
//! real binaries: real boots of the notes app under the workspace's berm-vmm (beside this
//! berm), each with its own `$XDG_RUNTIME_DIR`. Leftovers (a stale pid file, a run left by a
//! SIGKILLed berm-vmm, a name already running, two `up`s at once) and a closed stdout too.
//!
//! A test that cannot boot prints `SKIPPED: <why>`; with `BERM_VM_REQUIRE=1` it fails
//! instead. The artifacts come from the installed store (`scripts/test-vm`), berm-vmm from
//! `cargo build -p berm-vmm`, the app from `scripts/build-apps.sh`.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Output, Stdio};
use std::time::{Duration, Instant};

use berm_pins::{ArtifactKind, ArtifactStore, KernelPins, RootfsPins};
use serde_json::{Value, json};

fn require_or_skip(why: &str) {
    if std::env::var_os("BERM_VM_REQUIRE").is_some_and(|v| v == "1") {
        panic!("BERM_VM_REQUIRE=1 but this test cannot run: {why}");
    }
    eprintln!("SKIPPED: {why}");
}

/// The notes app folder scripts/build-apps.sh assembles, or `None` after a SKIPPED line.
fn notes_app() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/apps/notes");
    if dir.join("notes.wasm").exists() {
        return Some(dir);
    }
    require_or_skip(&format!(
        "{} is not built (scripts/build-apps.sh)",
        dir.display()
    ));
    None
}

/// The installed artifact store, berm-vmm and the notes app, or `None` after a SKIPPED line.
fn bootable() -> Option<(ArtifactStore, PathBuf)> {
    let app = notes_app()?;
    let store = ArtifactStore::from_env().expect("HOME is set");
    let kernel = store.kernel_for(&KernelPins::compiled_in().unwrap());
    let rootfs =
        ArtifactKind::Rootfs.path_in(&store, &RootfsPins::compiled_in().unwrap().image.sha256);
    if !kernel.exists() || !rootfs.exists() {
        require_or_skip(&format!(
            "the pinned artifacts are not installed ({} / {}); run scripts/test-vm",
            kernel.display(),
            rootfs.display()
        ));
        return None;
    }
    if !berm_vmm().exists() {
        require_or_skip(&format!(
            "{} is not built (cargo build -p berm-vmm)",
            berm_vmm().display()
        ));
        return None;
    }
    Some((store, app))
}

fn berm_vmm() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_berm")).with_file_name("berm-vmm")
}

/// A private `$XDG_RUNTIME_DIR` (and a host key) for one test.
struct Env {
    tmp: tempfile::TempDir,
    store: Option<PathBuf>,
    key: String,
}

impl Env {
    fn new(store: Option<&ArtifactStore>) -> Self {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir(tmp.path().join("rt")).unwrap();
        let key = tmp.path().join("host-key.pem").display().to_string();
        Self {
            tmp,
            store: store.map(|s| s.root().to_owned()),
            key,
        }
    }

    fn runtime(&self) -> PathBuf {
        self.tmp.path().join("rt")
    }

    fn vm_dir(&self, name: &str) -> PathBuf {
        self.runtime().join("berm/vm").join(name)
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_berm"));
        command
            .args(args)
            .env("XDG_RUNTIME_DIR", self.runtime())
            .env("BERM_HOME", self.tmp.path().join("no-bermd"))
            .env_remove("BERM_VMM")
            .stdin(Stdio::null());
        if let Some(store) = &self.store {
            command.env("BERM_VM_ARTIFACTS", store);
        }
        command
    }

    fn berm(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }

    /// `berm vm up --json` of the notes app under `name`, without a state disk; `None` after
    /// a SKIPPED line when no hypervisor can boot the guest here.
    fn up(&self, app: &Path, name: &str) -> Option<(Output, Value)> {
        let out = self.berm(&self.up_args(app, name));
        if !out.status.success() && stderr(&out).contains("no_hypervisor") {
            require_or_skip("no hypervisor can boot the guest here");
            return None;
        }
        assert!(out.status.success(), "{}", stderr(&out));
        let vm: Value = serde_json::from_slice(&out.stdout).unwrap();
        Some((out, vm))
    }

    fn up_args<'a>(&'a self, app: &'a Path, name: &'a str) -> Vec<&'a str> {
        vec![
            "vm",
            "up",
            "--app",
            app.to_str().unwrap(),
            "--name",
            name,
            "--no-state",
            "--key",
            &self.key,
            "--json",
        ]
    }

    fn ls(&self) -> Vec<Value> {
        let out = self.berm(&["vm", "ls", "--json"]);
        assert!(out.status.success(), "{}", stderr(&out));
        serde_json::from_slice::<Vec<Value>>(&out.stdout).unwrap()
    }

    /// Writes a pid file by hand, as a run that ended without cleaning up would leave it.
    fn fake_pid_file(&self, name: &str, pid: u32) {
        let dir = self.vm_dir(name);
        std::fs::create_dir_all(&dir).unwrap();
        let launch = json!({
            "name": name, "pid": pid, "start_ticks": null,
            "argv": ["/nonexistent/berm-vmm", "run", "--app", "/nonexistent/notes"],
            "started_unix": 0,
            "apps": [{"index": 0, "name": "notes", "dir": "/nonexistent/notes"}],
            "arch": "x86_64", "hypervisor": "auto", "state": null, "run_dir": null,
        });
        std::fs::write(dir.join("vm.json"), launch.to_string()).unwrap();
    }
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// An MCP session through `berm mcp ARGS`, one JSON-RPC line each way.
struct Mcp {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    /// Its stderr, in a file.
    err: PathBuf,
}

impl Mcp {
    fn start(env: &Env, args: &[&str]) -> Self {
        let err = tempfile::NamedTempFile::new_in(env.tmp.path())
            .unwrap()
            .into_temp_path()
            .keep()
            .unwrap();
        let mut child = env
            .command(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&err).unwrap())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Self {
            child,
            stdin,
            stdout,
            err,
        }
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.err).unwrap()
    }

    /// [`Mcp::initialize`], or `None` after a SKIPPED line when no hypervisor can boot the
    /// guest here.
    fn initialize_or_skip(&mut self) -> Option<Value> {
        self.send(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}));
        let mut line = String::new();
        if self.stdout.read_line(&mut line).unwrap() == 0 {
            let _ = self.child.wait();
            let errors = self.stderr();
            if errors.contains("no_hypervisor") {
                require_or_skip("no hypervisor can boot the guest here");
                return None;
            }
            panic!("berm mcp ended: {errors}");
        }
        self.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        Some(serde_json::from_str(&line).unwrap())
    }

    fn send(&mut self, message: Value) {
        writeln!(self.stdin, "{message}").unwrap();
    }

    /// Sends a request and returns the answer with its id.
    fn request(&mut self, id: u64, method: &str, params: Value) -> Value {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        loop {
            let mut line = String::new();
            if self.stdout.read_line(&mut line).unwrap() == 0 {
                panic!("{method}: closed: {}", self.stderr());
            }
            let answer: Value = serde_json::from_str(&line).unwrap();
            if answer["id"] == id {
                return answer;
            }
        }
    }

    /// `initialize`, then `notifications/initialized`; returns the answer to `initialize`.
    fn initialize(&mut self) -> Value {
        let init = self.request(
            1,
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}),
        );
        self.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        init
    }

    /// Calls tool `name` and returns the text of its answer, which must not be an error.
    fn call(&mut self, id: u64, name: &str, arguments: Value) -> String {
        let answer = self.request(
            id,
            "tools/call",
            json!({"name": name, "arguments": arguments}),
        );
        assert_eq!(answer["result"]["isError"], false, "{answer}");
        answer["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    /// Reads until a message with `method` arrives.
    fn notification(&mut self, method: &str) -> Value {
        loop {
            let mut line = String::new();
            assert_ne!(
                self.stdout.read_line(&mut line).unwrap(),
                0,
                "closed before {method}"
            );
            let message: Value = serde_json::from_str(&line).unwrap();
            if message["method"] == method {
                return message;
            }
        }
    }

    fn finish(mut self) {
        drop(self.stdin);
        let status = self.child.wait().unwrap();
        assert!(status.success(), "{status}");
    }
}

fn exists(path: &str) -> bool {
    Path::new(path).exists()
}

/// up, ls (ready), a call through `berm mcp --vm`, logs, stop, ls (gone), attest NAME.
#[test]
fn up_ls_call_through_mcp_stop() {
    let Some((store, app)) = bootable() else {
        return;
    };
    let env = Env::new(Some(&store));
    let started = Instant::now();
    let Some((out, vm)) = env.up(&app, "notes") else {
        return;
    };
    let booted = started.elapsed();
    assert!(
        stderr(&out).contains("berm vm up: \"notes\" is ready"),
        "{}",
        stderr(&out)
    );
    assert_eq!(vm["status"], "ready", "{vm}");
    let socket = vm["apps"][0]["socket"].as_str().unwrap().to_owned();
    assert_eq!(
        Path::new(&socket),
        env.vm_dir("notes").join("run/rpc-0.sock")
    );
    assert!(exists(&socket));

    let listed = env.ls();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["name"], "notes");
    assert_eq!(listed[0]["status"], "ready");
    assert_eq!(listed[0]["pid"], vm["pid"]);
    assert_eq!(listed[0]["apps"][0]["ready"], true);
    let table = env.berm(&["vm", "ls"]);
    let text = String::from_utf8_lossy(&table.stdout);
    let row = text.lines().nth(1).unwrap();
    assert!(
        row.starts_with("notes ") && row.contains(" ready "),
        "{text}"
    );

    let mut mcp = Mcp::start(&env, &["mcp", "--vm", "notes"]);
    let init = mcp.initialize();
    assert_eq!(init["result"]["serverInfo"]["name"], "bermd", "{init}");
    let tools = mcp.request(2, "tools/list", json!({}));
    let names: Vec<&str> = tools["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(names.contains(&"notes_add"), "{names:?}");
    let added = mcp.request(
        3,
        "tools/call",
        json!({"name": "notes_add", "arguments": {"title": "up", "text": "through berm mcp --vm"}}),
    );
    assert_eq!(added["result"]["isError"], false, "{added}");
    mcp.finish();
    // With one app --app may be left out; a wrong one is named.
    let wrong = env.berm(&["mcp", "--vm", "notes", "--app", "other"]);
    assert_eq!(wrong.status.code(), Some(2));
    assert_eq!(
        stderr(&wrong).trim(),
        "berm: VM \"notes\" has no app \"other\"; it serves 0 (notes)"
    );

    let logs = env.berm(&["vm", "logs", "notes"]);
    assert!(logs.status.success(), "{}", stderr(&logs));
    assert!(String::from_utf8_lossy(&logs.stdout).contains("app_ready"));
    let host = env.berm(&["vm", "logs", "notes", "--host"]);
    let host_lines = String::from_utf8_lossy(&host.stdout);
    assert!(
        host_lines
            .lines()
            .filter_map(|l| berm_vm_protocol::VmmLine::parse(l).ok())
            .any(|l| matches!(
                l,
                berm_vm_protocol::VmmLine::Host(berm_vm_protocol::HostEvent::Endpoints(_))
            )),
        "{host_lines}"
    );

    let stop_started = Instant::now();
    let stopped = env.berm(&["vm", "stop", "notes"]);
    assert!(stopped.status.success(), "{}", stderr(&stopped));
    assert_eq!(
        stderr(&stopped).trim(),
        "berm vm stop: stopped \"notes\": the guest shut down"
    );
    eprintln!(
        "berm vm up: ready after {booted:?}; berm vm stop took {:?}",
        stop_started.elapsed()
    );
    assert!(!exists(&socket), "the sockets are removed");
    assert_eq!(env.ls(), Vec::<Value>::new());
    let again = env.berm(&["vm", "stop", "notes"]);
    assert_eq!(again.status.code(), Some(2));
    assert_eq!(
        stderr(&again).trim(),
        "berm: no VM named \"notes\" is running (berm vm ls lists them)"
    );
    // The last run's record, by the VM's name.
    let attest = env.berm(&["attest", "notes"]);
    assert!(attest.status.success(), "{}", stderr(&attest));
    assert!(
        stderr(&attest).contains("verifies against the compiled-in pins"),
        "{}",
        stderr(&attest)
    );
}

fn wait_dead(pid: u32) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let state = stat.rsplit(')').next().unwrap_or("").trim_start();
        if stat.is_empty() || state.starts_with('Z') {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("pid {pid} did not die");
}

/// Two `up`s at once make one VM; a name already running is refused; a run whose berm-vmm
/// was SIGKILLed is stale in `ls` and cleaned up by the next `up`.
#[test]
fn one_vm_per_name_and_a_killed_run_is_cleaned_up() {
    let Some((store, app)) = bootable() else {
        return;
    };
    let env = Env::new(Some(&store));
    let args = env.up_args(&app, "race");
    let spawn = || {
        env.command(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (a, b) = (spawn(), spawn());
    let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    if !a.status.success() && stderr(&a).contains("no_hypervisor") {
        return require_or_skip("no hypervisor can boot the guest here");
    }
    assert!(
        a.status.success() != b.status.success(),
        "exactly one up starts it:\n{}\n{}",
        stderr(&a),
        stderr(&b)
    );
    let (won, lost) = if a.status.success() { (a, b) } else { (b, a) };
    let vm: Value = serde_json::from_slice(&won.stdout).unwrap();
    let pid = vm["pid"].as_u64().unwrap() as u32;
    assert_eq!(lost.status.code(), Some(2));
    assert!(
        stderr(&lost).ends_with(&format!(
            "berm: VM \"race\" is already running (pid {pid}); stop it first with berm vm stop race\n"
        )),
        "{}",
        stderr(&lost)
    );
    assert_eq!(env.ls().len(), 1);

    // SIGKILL: berm-vmm cannot clean up; its hypervisor dies with it.
    let socket = vm["apps"][0]["socket"].as_str().unwrap().to_owned();
    Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .unwrap();
    wait_dead(pid);
    assert!(exists(&socket), "a killed berm-vmm leaves its sockets");
    let listed = env.ls();
    assert_eq!(listed[0]["status"], "stale", "{listed:?}");
    let gone = format!("its berm-vmm, pid {pid}, is gone");
    assert_eq!(listed[0]["stale"], gone.as_str());
    let table = env.berm(&["vm", "ls"]);
    assert_eq!(
        stderr(&table).trim(),
        format!("berm vm ls: \"race\" is stale: {gone}; berm vm up or berm vm stop cleans it up")
    );
    let mcp = env.berm(&["mcp", "--vm", "race"]);
    assert_eq!(mcp.status.code(), Some(2));
    assert_eq!(
        stderr(&mcp).trim(),
        format!("berm: VM \"race\" is stale ({gone}); berm vm up starts it again")
    );

    // The next up cleans it up and starts the VM again.
    let Some((out, again)) = env.up(&app, "race") else {
        return;
    };
    assert!(
        stderr(&out).starts_with(&format!(
            "berm vm up: cleaned up a stale \"race\": {gone}\n"
        )),
        "{}",
        stderr(&out)
    );
    assert_ne!(again["pid"], vm["pid"]);
    assert_eq!(env.ls()[0]["status"], "ready");
    let stopped = env.berm(&["vm", "stop", "race"]);
    assert!(stopped.status.success(), "{}", stderr(&stopped));
    assert_eq!(env.ls(), Vec::<Value>::new());
}

/// A pid file whose pid is another process now, or no process: stale, named so, and
/// cleaned up without touching that process. Names are checked before anything starts.
#[test]
fn a_stale_pid_file_is_named_and_cleaned_up() {
    let Some(app) = notes_app() else {
        return;
    };
    let env = Env::new(None);
    // A live process that is not berm-vmm.
    let mut other = Command::new("sleep").arg("60").spawn().unwrap();
    env.fake_pid_file("reused", other.id());
    // A process that is gone.
    let mut done = Command::new("true").spawn().unwrap();
    let gone_pid = done.id();
    done.wait().unwrap();
    env.fake_pid_file("gone", gone_pid);

    let listed = env.ls();
    let status: Vec<(&str, &str, &str)> = listed
        .iter()
        .map(|v| {
            (
                v["name"].as_str().unwrap(),
                v["status"].as_str().unwrap(),
                v["stale"].as_str().unwrap(),
            )
        })
        .collect();
    let reused = format!("pid {} is no longer its berm-vmm", other.id());
    let gone = format!("its berm-vmm, pid {gone_pid}, is gone");
    assert_eq!(
        status,
        [
            ("gone", "stale", gone.as_str()),
            ("reused", "stale", reused.as_str())
        ]
    );
    let mcp = env.berm(&["mcp", "--vm", "reused"]);
    assert_eq!(
        stderr(&mcp).trim(),
        format!("berm: VM \"reused\" is stale ({reused}); berm vm up starts it again")
    );
    let stopped = env.berm(&["vm", "stop", "reused"]);
    assert!(stopped.status.success(), "{}", stderr(&stopped));
    assert_eq!(
        stderr(&stopped).trim(),
        format!(
            "berm vm stop: \"reused\" was not running ({reused}); removed its sockets and pid file"
        )
    );
    assert!(
        other.try_wait().unwrap().is_none(),
        "the process that reused the pid is left alone"
    );
    other.kill().unwrap();
    let _ = other.wait();
    assert_eq!(env.ls().len(), 1);

    // Names: reserved, not plain, too long for a socket path.
    let app = app.to_str().unwrap();
    let refused = |name: &str| {
        let out = env.berm(&["vm", "up", "--app", app, "--name", name, "--no-state"]);
        assert_eq!(out.status.code(), Some(2), "{name}");
        stderr(&out).trim().to_owned()
    };
    assert_eq!(
        refused("verify"),
        "berm: \"verify\" cannot name a VM: `berm attest verify` is a subcommand; choose another with --name"
    );
    assert_eq!(
        refused("a/b"),
        "berm: VM name \"a/b\" is not a plain name: letters, digits, '-', '_' and '.', starting with a letter or digit"
    );
    let base = env.runtime().join("berm/vm");
    let max = 107 - base.as_os_str().len() - "/".len() - "/run/".len() - "vsock.sock_6063".len();
    let long = "n".repeat(max.min(64) + 1);
    assert_eq!(
        refused(&long),
        format!(
            "berm: VM name \"{long}\" is {} bytes, longer than the {} that fit: a Unix socket path under {} holds at most 107 bytes",
            long.len(),
            max.min(64),
            base.display()
        )
    );
}

/// A boot berm-vmm refuses: `up` prints berm-vmm's own reason, exits 2 and leaves no VM.
#[test]
fn a_refused_boot_prints_berm_vmms_reason() {
    let Some(app) = notes_app() else {
        return;
    };
    if !berm_vmm().exists() {
        return require_or_skip(&format!(
            "{} is not built (cargo build -p berm-vmm)",
            berm_vmm().display()
        ));
    }
    let env = Env::new(None);
    let out = env.berm(&[
        "vm",
        "up",
        "--app",
        app.to_str().unwrap(),
        "--no-state",
        "--key",
        &env.key,
        "--cpus",
        "99",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        stderr(&out).trim(),
        format!(
            "berm: VM \"notes\" did not start: --cpus 99 is out of range (1 to 16, the guest kernel's NR_CPUS) (berm-vmm exit 5, refused); berm-vmm's output is in {}",
            env.vm_dir("notes").join("vmm.stderr").display()
        )
    );
    assert_eq!(env.ls(), Vec::<Value>::new());
}

/// Reads one line of `command`'s stdout, closes it, and returns how the command ended and
/// what it wrote on stderr.
fn first_line_then_close(mut command: Command) -> (std::process::ExitStatus, String, String) {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = child.stderr.take().unwrap();
    let errors = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = err.read_to_string(&mut text);
        text
    });
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    let status = child.wait().unwrap();
    (status, first, errors.join().unwrap())
}

/// `berm vm ls | head -1` over a long listing, `berm completions` likewise, and berm-vmm
/// with its stderr closed: each ends quietly, never with a panic.
#[test]
fn a_closed_stdout_ends_quietly() {
    let env = Env::new(None);
    for i in 0..1200 {
        env.fake_pid_file(&format!("vm{i:04}"), 1);
    }
    let (status, first, errors) = first_line_then_close(env.command(&["vm", "ls"]));
    assert!(first.starts_with("NAME "), "{first}");
    assert_eq!(status.signal(), Some(libc_sigpipe()), "{status}: {errors}");
    assert!(!errors.contains("panicked"), "{errors}");
    // A script shorter than the pipe's buffer may be written whole before the reader goes.
    let (status, _, errors) = first_line_then_close(env.command(&["completions", "bash"]));
    assert!(
        status.success() || status.signal() == Some(libc_sigpipe()),
        "{status}: {errors}"
    );
    assert_eq!(errors, "");

    // berm-vmm refusing with its stderr closed by the reader: its own exit code (3 without
    // the artifacts, 5 for the missing app), not a panic's 101.
    if !berm_vmm().exists() {
        return require_or_skip(&format!(
            "{} is not built (cargo build -p berm-vmm)",
            berm_vmm().display()
        ));
    }
    let mut vmm = Command::new(berm_vmm())
        .args(["run", "--app", "/nonexistent", "--key"])
        .arg(&env.key)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(vmm.stderr.take());
    let code = vmm.wait().unwrap().code();
    assert!(matches!(code, Some(3 | 5)), "{code:?}");
}

/// Waits up to `timeout` for `done`; whether it came.
fn wait_for(timeout: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    done()
}

/// `berm mcp --app DIR` with the test's key, an idle timeout and `extra` arguments.
fn mcp_app_args<'a>(env: &'a Env, app: &'a Path, idle: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "mcp",
        "--app",
        app.to_str().unwrap(),
        "--key",
        &env.key,
        "--idle-timeout",
        idle,
    ];
    args.extend_from_slice(extra);
    args
}

/// The VM's pid as `berm vm ls` shows it, while exactly one VM is listed.
fn only_pid(env: &Env) -> Option<u64> {
    let listed = env.ls();
    match listed.as_slice() {
        [vm] => {
            assert_eq!(vm["status"], "ready", "{vm}");
            vm["pid"].as_u64()
        }
        [] => None,
        more => panic!("more than one VM: {more:?}"),
    }
}

/// Two `berm mcp --app` clients at once share one VM (booted by one of them, after it
/// cleaned up a stale pid file of the name); it outlives a client that left while another
/// is attached, and stops the idle timeout after the last one is gone, here SIGKILLed.
#[test]
fn mcp_app_clients_share_one_vm_that_stops_when_idle() {
    let Some((store, app)) = bootable() else {
        return;
    };
    let env = Env::new(Some(&store));
    let mut done = Command::new("true").spawn().unwrap();
    let dead = done.id();
    done.wait().unwrap();
    env.fake_pid_file("notes", dead);
    let args = mcp_app_args(&env, &app, "2", &["--no-state"]);
    let (mut a, mut b) = (Mcp::start(&env, &args), Mcp::start(&env, &args));
    let Some(init) = a.initialize_or_skip() else {
        return;
    };
    assert_eq!(init["result"]["serverInfo"]["name"], "bermd", "{init}");
    b.initialize();
    a.call(2, "notes_add", json!({"title": "a", "text": "from a"}));
    let listed = b.call(2, "notes_list", json!({}));
    assert!(listed.contains("\"a\""), "{listed}");
    let pid = only_pid(&env).expect("one VM runs");
    let errors = a.stderr() + &b.stderr();
    assert_eq!(
        errors.matches("berm mcp: booted VM \"notes\"").count(),
        1,
        "{errors}"
    );
    assert!(
        errors.contains(&format!(
            "berm mcp: cleaned up a stale \"notes\": its berm-vmm, pid {dead}, is gone"
        )),
        "{errors}"
    );

    // a leaves; b stays attached well past the idle timeout, so the VM stays.
    a.finish();
    std::thread::sleep(Duration::from_secs(4));
    assert_eq!(only_pid(&env), Some(pid));
    let listed = b.call(3, "notes_list", json!({}));
    assert!(listed.contains("\"a\""), "{listed}");

    // b is killed: the kernel drops its lock, and the VM stops after the idle timeout.
    let killed = Instant::now();
    b.child.kill().unwrap();
    b.child.wait().unwrap();
    assert!(
        wait_for(Duration::from_secs(40), || env.ls().is_empty()),
        "the VM outlived its killed client: {:?}",
        env.ls()
    );
    let stopped_after = killed.elapsed();
    assert!(stopped_after >= Duration::from_secs(2), "{stopped_after:?}");
    wait_dead(pid as u32);
    let log = std::fs::read_to_string(env.vm_dir("notes").join("watch.log")).unwrap();
    assert!(
        log.contains(
            "berm vm watch: stopped \"notes\" after 2 s without a client: the guest shut down"
        ),
        "{log}"
    );
    eprintln!("the VM stopped {stopped_after:?} after its last client was killed");
}

/// Appends a custom section to a wasm file: a changed program that offers the same tools.
fn touch_wasm(wasm: &Path) {
    let mut bytes = std::fs::read(wasm).unwrap();
    bytes.extend_from_slice(&[0x00, 0x03, 0x01, b't', b'x']);
    std::fs::write(wasm, bytes).unwrap();
}

/// A changed app folder: the next `mcp --app` reboots the VM on the same state disk (a note
/// written before is still there) and the attached bridge resumes its session with
/// `list_changed`; an unchanged folder does not reboot; a changed grant is refused with the
/// list of changes until `--accept`; and a stopped VM's folder changed since it last ran on
/// the state disk is refused at boot.
#[test]
fn a_changed_app_folder_reboots_the_vm_on_the_same_disk() {
    let Some((store, built)) = bootable() else {
        return;
    };
    let env = Env::new(Some(&store));
    let app = env.tmp.path().join("notes");
    std::fs::create_dir(&app).unwrap();
    for file in ["berm.toml", "notes.wasm"] {
        std::fs::copy(built.join(file), app.join(file)).unwrap();
    }
    let state = env.tmp.path().join("notes.img").display().to_string();
    let args = mcp_app_args(&env, &app, "60", &["--state", &state]);
    let mut attached = Mcp::start(&env, &args);
    if attached.initialize_or_skip().is_none() {
        return;
    }
    attached.call(
        2,
        "notes_add",
        json!({"title": "before", "text": "kept on the disk"}),
    );
    let first = only_pid(&env).unwrap();

    // Unchanged: a second client attaches to the same VM.
    let mut again = Mcp::start(&env, &args);
    again.initialize();
    assert!(again.call(2, "notes_list", json!({})).contains("before"));
    again.finish();
    assert_eq!(only_pid(&env), Some(first));

    // A changed program with the same tools and grants: a reboot, no --accept.
    touch_wasm(&app.join("notes.wasm"));
    let mut next = Mcp::start(&env, &args);
    next.initialize();
    assert!(next.call(2, "notes_list", json!({})).contains("before"));
    let second = only_pid(&env).unwrap();
    assert_ne!(second, first, "rebooted");
    assert!(
        next.stderr().contains(
            "berm mcp: the app folders of \"notes\" changed; rebooting it on the same state disk\n"
        ),
        "{}",
        next.stderr()
    );
    next.finish();
    attached.notification("notifications/tools/list_changed");
    let listed = attached.call(3, "notes_list", json!({}));
    assert!(listed.contains("before"), "{listed}");
    assert!(
        attached.stderr().contains(&format!(
            "berm mcp: VM \"notes\" rebooted for a changed app folder (berm-vmm pid {second}); the session goes on"
        )),
        "{}",
        attached.stderr()
    );

    // A new grant needs --accept: refused with the list, the VM left alone.
    let toml = std::fs::read_to_string(app.join("berm.toml")).unwrap();
    std::fs::write(
        app.join("berm.toml"),
        toml.replace(r#"grants = ["kv"]"#, r#"grants = ["kv", "clock"]"#),
    )
    .unwrap();
    let refused = env.berm(&args);
    assert_eq!(refused.status.code(), Some(2));
    assert_eq!(
        stderr(&refused).trim(),
        "berm: the app folders of VM \"notes\" changed what its clients are offered:\n  \
         app `notes`, program `notes`: grant `clock` added\n\
         nothing was restarted: add --accept to reboot \"notes\" with them, or undo the change"
    );
    assert_eq!(only_pid(&env), Some(second));
    // berm vm up --accept over the same folder reboots it; the bridge resumes again.
    let app_arg = app.to_str().unwrap();
    let up = env.berm(&[
        "vm", "up", "--app", app_arg, "--state", &state, "--key", &env.key, "--accept",
    ]);
    assert!(up.status.success(), "{}", stderr(&up));
    assert!(
        stderr(&up).contains("(--accept:\n  app `notes`, program `notes`: grant `clock` added)"),
        "{}",
        stderr(&up)
    );
    attached.notification("notifications/tools/list_changed");
    assert!(attached.call(4, "notes_list", json!({})).contains("before"));
    let unchanged = env.berm(&[
        "vm", "up", "--app", app_arg, "--state", &state, "--key", &env.key,
    ]);
    assert_eq!(
        unchanged.status.code(),
        Some(2),
        "an unchanged folder never reboots"
    );

    // berm vm stop ends the session.
    let stopped = env.berm(&["vm", "stop", "notes"]);
    assert!(stopped.status.success(), "{}", stderr(&stopped));
    drop(attached.stdin);
    let status = attached.child.wait().unwrap();
    assert_eq!(status.code(), Some(2));

    // With no VM running there is nothing to compare with on the host, but the guest's bermd
    // compares the folder with what last ran on the state disk: refused at boot, in its words.
    std::fs::write(
        app.join("berm.toml"),
        toml.replace(
            r#"grants = ["kv"]"#,
            r#"grants = ["kv", "clock", "random"]"#,
        ),
    )
    .unwrap();
    let up = env.berm(&[
        "vm", "up", "--app", app_arg, "--state", &state, "--key", &env.key,
    ]);
    assert_eq!(up.status.code(), Some(2), "{}", stderr(&up));
    let said = stderr(&up);
    assert!(
        said.contains("app notes exited with code 2 before it was ready:")
            && said.contains("changed since it last ran here")
            && said.contains("program `notes`: grants not held before: random")
            && said.contains("--accept"),
        "{said}"
    );
}

fn libc_sigpipe() -> i32 {
    13
}
