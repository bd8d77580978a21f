//! What the VM test files share: finding the artifacts, skipping loudly, and a running
//! `berm-vmm run` with its stderr lines collected.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use berm::GuestArch;
use berm_pins::{ArtifactStore, KernelPins, RootfsPins};
use berm_vm_protocol::host::HostChild;
use berm_vm_protocol::{GuestLine, HostEvent, VmmLine};
use berm_vmm::detect::Detection;
use serde_json::Value;

pub const BOOT: Duration = Duration::from_secs(90);

/// Starting bermd under TCG, with its programs precompiled on the host.
pub const READY: Duration = Duration::from_secs(120);

/// The static enforcement probe built for an `arch` guest.
pub fn probe_binary(arch: GuestArch) -> PathBuf {
    let target = arch.portable_target();
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../target/{target}/debug/berm-probe"));
    assert!(
        path.exists(),
        "{} is missing: scripts/test-vm builds it (cargo build --target {target} -p berm-probe)",
        path.display()
    );
    path
}

pub fn require_or_skip(why: &str) -> bool {
    if std::env::var_os("BERM_VM_REQUIRE").is_some_and(|v| v == "1") {
        panic!("BERM_VM_REQUIRE=1 but this test cannot run: {why}");
    }
    eprintln!("SKIPPED: {why}");
    false
}

/// The pinned artifacts' paths, or `None` (after a SKIPPED line) if they are not installed.
pub fn pinned() -> Option<(PathBuf, PathBuf)> {
    pinned_for(GuestArch::HOST)
}

/// The pinned artifacts of an `arch` guest, or `None` (after a SKIPPED line).
pub fn pinned_for(arch: GuestArch) -> Option<(PathBuf, PathBuf)> {
    let store = ArtifactStore::from_env().expect("HOME is set");
    let kernel = store.kernel_for(&KernelPins::compiled_in_for(arch.name()).unwrap());
    let rootfs = store.rootfs(
        &RootfsPins::compiled_in_for(arch.name())
            .unwrap()
            .image
            .sha256,
    );
    if !kernel.exists() || !rootfs.exists() {
        require_or_skip(&format!(
            "pinned {arch} artifacts not installed ({} / {}); run scripts/test-vm",
            kernel.display(),
            rootfs.display()
        ));
        return None;
    }
    Some((kernel, rootfs))
}

/// A host that can boot the guest with QEMU (this machine kind) or libkrun.
pub fn bootable() -> bool {
    let detection = Detection::probe();
    if detection.krun_runs_user_space()
        || (detection.qemu.is_some() && detection.vhost_device_vsock.is_some())
    {
        return true;
    }
    require_or_skip("neither hardware KVM nor QEMU + vhost-device-vsock is available")
}

/// The pinned artifacts are installed and this host can boot the host's own guest.
pub fn can_boot() -> bool {
    can_boot_for(GuestArch::HOST)
}

/// A temporary directory for a test that boots an `arch` guest, or `None` (the test is
/// skipped, see [`require_or_skip`]) when this host cannot.
pub fn scratch_to_boot(arch: GuestArch) -> Option<tempfile::TempDir> {
    can_boot_for(arch).then(|| tempfile::tempdir().unwrap())
}

/// The pinned artifacts for `arch` are installed and this host can boot an `arch` guest.
pub fn can_boot_for(arch: GuestArch) -> bool {
    pinned_for(arch).is_some() && bootable_for(arch)
}

/// A host that can boot an `arch` guest: the host's own as [`bootable`] says, another
/// architecture under QEMU's emulation.
pub fn bootable_for(arch: GuestArch) -> bool {
    if arch == GuestArch::HOST {
        return bootable();
    }
    let detection = Detection::probe();
    if detection.qemu_for(arch).is_some() && detection.vhost_device_vsock.is_some() {
        return true;
    }
    require_or_skip(&format!(
        "an {arch} guest needs qemu-system-{arch} and vhost-device-vsock (scripts/setup-vm installs them)"
    ))
}

/// A running `berm-vmm run` with its stderr lines collected.
pub struct Vmm {
    pub child: Child,
    pub lines: mpsc::Receiver<String>,
    pub seen: Vec<String>,
    pub run_dir: PathBuf,
    pub tmp: tempfile::TempDir,
}

impl Vmm {
    pub fn start(args: &[&str], envs: &[(&str, &Path)]) -> Self {
        let args: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_ref()).collect();
        Self::start_in(tempfile::tempdir().unwrap(), &args, envs)
    }

    /// Runs berm-vmm with `args`, which it must refuse before boot: exit code 5 (`refused`)
    /// within `timeout`.
    pub fn refused(args: &[&str], timeout: Duration) -> Self {
        let mut vmm = Self::start(args, &[]);
        assert_eq!(vmm.wait(timeout), 5, "{args:?}: {}", vmm.stderr());
        vmm
    }

    /// Starts `berm-vmm run` with its run dir at `tmp/run` (so a test can put files of its
    /// own beside it before the start).
    pub fn start_in(
        tmp: tempfile::TempDir,
        args: &[&std::ffi::OsStr],
        envs: &[(&str, &Path)],
    ) -> Self {
        Self::start_in_without(tmp, args, envs, &[])
    }

    /// [`Vmm::start_in`] with the variables `removed` taken out of its environment.
    pub fn start_in_without(
        tmp: tempfile::TempDir,
        args: &[&std::ffi::OsStr],
        envs: &[(&str, &Path)],
        removed: &[&str],
    ) -> Self {
        let run_dir = tmp.path().join("run");
        let mut command = Command::new(env!("CARGO_BIN_EXE_berm-vmm"));
        command
            .arg("run")
            .arg("--run-dir")
            .arg(&run_dir)
            .args(args)
            .stdin(Stdio::null())
            .stderr(Stdio::piped())
            .stdout(Stdio::null());
        for name in removed {
            command.env_remove(name);
        }
        for (k, v) in envs {
            command.env(k, v);
        }
        let mut child = command.spawn().unwrap();
        let stderr = child.stderr.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        Self {
            child,
            lines,
            seen: Vec::new(),
            run_dir,
            tmp,
        }
    }

    /// Waits for the process to end and returns its exit code, with all stderr collected.
    pub fn wait(&mut self, timeout: Duration) -> i32 {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                while let Ok(line) = self.lines.recv_timeout(Duration::from_millis(200)) {
                    self.seen.push(line);
                }
                return status.code().expect("berm-vmm ended by a signal");
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!(
                    "berm-vmm did not end within {timeout:?}; stderr so far:\n{}",
                    self.seen.join("\n")
                );
            }
            while let Ok(line) = self.lines.try_recv() {
                self.seen.push(line);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Every line berm-vmm wrote that is one of its typed lines (its own events and the
    /// guest lines it relayed); its words for a person are left out. A line of a known kind
    /// that does not parse fails the test: the writer and this reader share the type.
    pub fn vmm_lines(&self) -> Vec<VmmLine> {
        self.seen.iter().filter_map(|l| vmm_line(l)).collect()
    }

    /// berm-vmm's own events, in order.
    pub fn host_events(&self) -> Vec<HostEvent> {
        self.vmm_lines()
            .into_iter()
            .filter_map(|l| match l {
                VmmLine::Host(event) => Some(event),
                VmmLine::Guest(_) => None,
            })
            .collect()
    }

    /// The guest lines berm-vmm relayed, in order.
    pub fn guest_lines(&self) -> Vec<GuestLine> {
        self.vmm_lines()
            .into_iter()
            .filter_map(|l| match l {
                VmmLine::Guest(line) => Some(line),
                VmmLine::Host(_) => None,
            })
            .collect()
    }

    pub fn stderr(&self) -> String {
        self.seen.join("\n")
    }
}

impl Drop for Vmm {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Vmm {
    /// Waits for the first line berm-vmm writes that `pick` takes (see [`host_event`] and
    /// [`guest_event`]); `what` names it in a failure.
    pub fn wait_line<T>(
        &mut self,
        what: &str,
        timeout: Duration,
        pick: impl Fn(VmmLine) -> Option<T>,
    ) -> T {
        let deadline = Instant::now() + timeout;
        let mut checked = 0;
        loop {
            for line in &self.seen[checked..] {
                if let Some(picked) = vmm_line(line).and_then(&pick) {
                    return picked;
                }
            }
            checked = self.seen.len();
            if let Some(status) = self.child.try_wait().unwrap() {
                while let Ok(line) = self.lines.try_recv() {
                    self.seen.push(line);
                }
                if self.seen.len() > checked {
                    continue;
                }
                panic!(
                    "berm-vmm ended ({status}) before {what}; stderr:\n{}",
                    self.stderr()
                );
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                panic!("no {what} within {timeout:?}; stderr:\n{}", self.stderr());
            }
            if let Ok(line) = self
                .lines
                .recv_timeout(left.min(Duration::from_millis(100)))
            {
                self.seen.push(line);
            }
        }
    }

    /// Asks the guest to shut down on its control port and expects berm-vmm to exit 0.
    pub fn shut_down(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut control = berm_vm_protocol::client::GuestConnection::connect(
            &self.run_dir.join("control.sock"),
            berm_vm_protocol::Service::Control,
            deadline,
        )
        .unwrap();
        control
            .send(berm_vm_protocol::Request::Shutdown, deadline)
            .unwrap();
        let _ = control.wait_for(deadline, |l| {
            matches!(l.event, berm_vm_protocol::Event::PowerOff(_))
        });
        drop(control);
        let code = self.wait(Duration::from_secs(60));
        assert_eq!(code, 0, "stderr:\n{}", self.stderr());
    }
}

/// A newline-delimited JSON-RPC MCP client on a Unix socket (an app's `rpc-<i>.sock`).
pub struct Mcp {
    writer: std::os::unix::net::UnixStream,
    reader: BufReader<std::os::unix::net::UnixStream>,
    next_id: u64,
}

impl Mcp {
    /// Connects and initializes.
    pub fn connect(socket: &Path) -> Mcp {
        let writer = std::os::unix::net::UnixStream::connect(socket)
            .unwrap_or_else(|e| panic!("connecting to {}: {e}", socket.display()));
        writer
            .set_read_timeout(Some(Duration::from_secs(120)))
            .unwrap();
        let reader = BufReader::new(writer.try_clone().unwrap());
        let mut mcp = Mcp {
            writer,
            reader,
            next_id: 0,
        };
        let init = mcp.request(
            "initialize",
            serde_json::json!({"protocolVersion": "2025-06-18", "capabilities": {},
                               "clientInfo": {"name": "berm-vm-tests", "version": "0"}}),
        );
        assert_eq!(init["result"]["serverInfo"]["name"], "bermd", "{init}");
        mcp.send(&serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        mcp
    }

    fn send(&mut self, message: &Value) {
        use std::io::Write;
        let mut line = message.to_string();
        line.push('\n');
        self.writer.write_all(line.as_bytes()).unwrap();
    }

    /// One request and its response.
    pub fn request(&mut self, method: &str, params: Value) -> Value {
        self.try_request(method, params)
            .unwrap_or_else(|e| panic!("MCP {method}: {e}"))
    }

    /// One request and its response, or why none came (the server went away).
    pub fn try_request(&mut self, method: &str, params: Value) -> Result<Value, String> {
        use std::io::Write;
        self.next_id += 1;
        let id = self.next_id;
        let mut line =
            serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
                .to_string();
        line.push('\n');
        self.writer
            .write_all(line.as_bytes())
            .map_err(|e| e.to_string())?;
        loop {
            let mut line = String::new();
            let n = self
                .reader
                .read_line(&mut line)
                .map_err(|e| e.to_string())?;
            if n == 0 {
                return Err("the connection closed".into());
            }
            let value: Value = serde_json::from_str(&line).map_err(|e| e.to_string())?;
            if value["id"] == id {
                return Ok(value);
            }
        }
    }

    /// A `tools/call` that may never be answered (its server may die of it).
    pub fn try_call(&mut self, tool: &str, args: Value) -> Result<Value, String> {
        self.try_request(
            "tools/call",
            serde_json::json!({"name": tool, "arguments": args}),
        )
    }

    /// Every tool name.
    pub fn tools(&mut self) -> Vec<String> {
        let list = self.request("tools/list", serde_json::json!({}));
        list["result"]["tools"]
            .as_array()
            .unwrap_or_else(|| panic!("{list}"))
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_owned())
            .collect()
    }

    /// `tools/call`: (text, is_error).
    pub fn call(&mut self, tool: &str, args: Value) -> (String, bool) {
        let response = self.request(
            "tools/call",
            serde_json::json!({"name": tool, "arguments": args}),
        );
        berm_fixtures::tool_result(&response)
    }
}

/// The built wasm of one of the repository's example programs.
pub use berm_fixtures::example_path as program_wasm;

/// An app folder in `dir`: `berm.toml` with `toml` (programs' wasm copied in by name).
pub fn app_folder(dir: &Path, name: &str, programs: &[&str], toml: &str) -> PathBuf {
    let folder = dir.join(name);
    std::fs::create_dir_all(&folder).unwrap();
    for program in programs {
        std::fs::copy(
            program_wasm(program),
            folder.join(format!("{program}.wasm")),
        )
        .unwrap();
    }
    std::fs::write(folder.join("berm.toml"), toml).unwrap();
    folder
}

/// One of berm-vmm's stderr lines, typed; `None` for its words for a person (not JSON). A
/// JSON line that is not one of its typed lines fails the test.
pub fn vmm_line(line: &str) -> Option<VmmLine> {
    match VmmLine::parse(line) {
        Ok(line) => Some(line),
        Err(berm_vm_protocol::VmmLineError::NotJson) => None,
        Err(e) => panic!("berm-vmm wrote a line no reader can read ({e}): {line}"),
    }
}

/// berm-vmm's events of one kind, typed: `host_event!(vmm.host_events(), Exit)` is every
/// `exit` line as an `ExitLine`.
#[allow(unused_macros)]
macro_rules! host_event {
    ($events:expr, $kind:ident) => {
        $events
            .into_iter()
            .filter_map(|e| match e {
                berm_vm_protocol::HostEvent::$kind(line) => Some(line),
                _ => None,
            })
            .collect::<Vec<_>>()
    };
}
#[allow(unused_imports)]
pub(crate) use host_event;

/// The relayed guest events of one kind, typed: `guest_event!(vmm.guest_lines(), PowerOff)`.
#[allow(unused_macros)]
macro_rules! guest_event {
    ($lines:expr, $kind:ident) => {
        $lines
            .into_iter()
            .filter_map(|l| match l.event {
                berm_vm_protocol::Event::$kind(event) => Some(event),
                _ => None,
            })
            .collect::<Vec<_>>()
    };
}
#[allow(unused_imports)]
pub(crate) use guest_event;

/// The first line of `vmm` that is a host event of this kind, or a panic naming the kind.
#[allow(unused_macros)]
macro_rules! first_host_event {
    ($vmm:expr, $kind:ident) => {
        common::host_event!($vmm.host_events(), $kind)
            .into_iter()
            .next()
            .unwrap_or_else(|| panic!("no {} line; stderr:\n{}", stringify!($kind), $vmm.stderr()))
    };
}
#[allow(unused_imports)]
pub(crate) use first_host_event;

/// For [`Vmm::wait_line`]: a relayed guest event of this kind that `pred` accepts.
#[allow(unused_macros)]
macro_rules! guest_event_where {
    ($kind:ident, $pred:expr) => {
        |line: berm_vm_protocol::VmmLine| match line {
            berm_vm_protocol::VmmLine::Guest(berm_vm_protocol::GuestLine {
                event: berm_vm_protocol::Event::$kind(event),
                ..
            }) if ($pred)(&event) => Some(event),
            _ => None,
        }
    };
}
#[allow(unused_imports)]
pub(crate) use guest_event_where;

/// The child `program` in a `host_sandbox` line's `children`, or a panic naming the line.
pub fn child_named<'a>(children: &'a [HostChild], program: &str) -> &'a HostChild {
    children
        .iter()
        .find(|c| c.program == program)
        .unwrap_or_else(|| panic!("no {program} in {children:?}"))
}

/// `--test-probe PROBE --test-probe-app 0`: the enforcement probe runs in place of app 0's
/// bermd.
pub fn probe_in_app0(probe: &Path) -> [&str; 4] {
    [
        "--test-probe",
        probe.to_str().unwrap(),
        "--test-probe-app",
        "0",
    ]
}

/// berm-vmm booting the notes example (granted kv) as its one app from a folder in `dir`,
/// returned once the guest says the app is ready.
#[allow(dead_code)]
pub fn boot_notes(dir: &Path) -> Vmm {
    let app = app_folder(
        dir,
        "notes",
        &["notes"],
        "name = \"notes\"\n[[program]]\nname = \"notes\"\nwasm = \"notes.wasm\"\ngrants = [\"kv\"]\n",
    );
    let mut vmm = Vmm::start(&["--app", app.to_str().unwrap()], &[]);
    vmm.wait_line(
        "app_ready",
        BOOT + READY,
        guest_event_where!(AppReady, |_: &berm_vm_protocol::AppReady| true),
    );
    vmm
}
