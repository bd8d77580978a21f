//! bermd as the microVM runs it: an app folder (`--app`), MCP on an
//! inherited listener (`--listen-fd`) and no socket of its own, the ready
//! line on `--ready-fd`, and precompiled code (`--code-dir`). Real processes
//! and real sockets; an AF_UNIX listener stands in for the VM's AF_VSOCK one.

mod common;

use std::io::{BufRead, BufReader, Read};
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use berm_fixtures::tool_result as result_text;
use common::Session;
use serde_json::{Value, json};

/// A ready-made app folder assembled by scripts/build-apps.sh.
fn app_folder(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../target/apps")
        .join(name);
    assert!(
        dir.join("berm.toml").exists(),
        "{} is missing — run scripts/build-apps.sh first",
        dir.display()
    );
    dir
}

/// Held from making a descriptor inheritable until the child that should
/// inherit it is spawned and the parent's copy is closed, so that no other
/// test's child inherits it too (which would keep a pipe open past its EOF).
static SPAWN: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Lets a child process inherit `fd`.
fn inheritable(fd: &impl std::os::fd::AsFd) {
    rustix::io::fcntl_setfd(fd, rustix::io::FdFlags::empty()).unwrap();
}

/// bermd on an inherited listener, with its ready line read.
struct VmBermd {
    child: Child,
    home: PathBuf,
    socket: PathBuf,
    ready: Value,
    _dir: tempfile::TempDir,
}

impl VmBermd {
    fn start(extra: &[&str]) -> VmBermd {
        VmBermd::start_home(None, extra)
    }

    /// Started on `home` (kept by the caller across starts), else on a fresh one.
    fn start_home(home: Option<&Path>, extra: &[&str]) -> VmBermd {
        let dir = tempfile::tempdir().unwrap();
        let home = home.map_or_else(|| dir.path().join("home"), Path::to_path_buf);
        let socket = dir.path().join("rpc-0.sock");
        let listener = UnixListener::bind(&socket).unwrap();
        let (ready_read, ready_write) = std::io::pipe().unwrap();
        let spawning = SPAWN.lock().unwrap_or_else(|p| p.into_inner());
        inheritable(&listener);
        inheritable(&ready_write);
        let child = Command::new(env!("CARGO_BIN_EXE_bermd"))
            .arg("--home")
            .arg(&home)
            .args(["--listen-fd", &listener.as_raw_fd().to_string()])
            .args(["--ready-fd", &ready_write.as_raw_fd().to_string()])
            .args(extra)
            .env("BERM_LOG", "info,rmcp=warn")
            .env_remove("BERM_HOME")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Only bermd holds these now: EOF on the pipe means it closed it.
        drop(listener);
        drop(ready_write);
        drop(spawning);
        let mut lines = BufReader::new(ready_read);
        let mut line = String::new();
        lines.read_line(&mut line).unwrap();
        let mut child = child;
        if line.is_empty() {
            let _ = child.kill();
            let mut log = String::new();
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut log)
                .unwrap();
            panic!("bermd closed --ready-fd without a ready line: {log}");
        }
        // Exactly one line, then the descriptor is closed.
        let mut rest = String::new();
        lines.read_to_string(&mut rest).unwrap();
        assert_eq!(rest, "", "more than one line on --ready-fd");
        VmBermd {
            child,
            home,
            socket,
            ready: serde_json::from_str(&line).unwrap(),
            _dir: dir,
        }
    }
}

impl Drop for VmBermd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Every socket file under `dir`, recursively.
fn sockets_under(dir: &Path) -> Vec<PathBuf> {
    use std::os::unix::fs::FileTypeExt;
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let kind = entry.file_type().unwrap();
        if kind.is_dir() {
            found.extend(sockets_under(&entry.path()));
        } else if kind.is_socket() {
            found.push(entry.path());
        }
    }
    found
}

#[test]
fn an_app_is_served_on_the_inherited_listener_and_announces_ready() {
    let folder = app_folder("notes");
    let bermd = VmBermd::start(&["--app", folder.to_str().unwrap()]);

    let ready = &bermd.ready;
    assert_eq!(ready["ready"], json!(true), "{ready}");
    assert_eq!(ready["app"], json!("notes"), "{ready}");
    assert_eq!(ready["tools"], json!(4), "{ready}");
    assert!(ready["ms"].as_f64().unwrap() > 0.0, "{ready}");
    let programs = ready["programs"].as_array().unwrap();
    assert_eq!(programs.len(), 1, "{ready}");
    let wasm = std::fs::read(folder.join("notes.wasm")).unwrap();
    assert_eq!(programs[0]["name"], json!("notes"));
    assert_eq!(programs[0]["sha256"], json!(berm_app::sha256_hex(&wasm)));
    assert_eq!(programs[0]["code"], json!("compiled"));
    // Only code mapped from the precompiled directory has a digest to report.
    assert_eq!(programs[0]["code_sha256"], Value::Null, "{ready}");
    assert!(programs[0]["ms"].as_f64().unwrap() > 0.0);

    let mut session = Session::connect(&bermd.socket);
    session.initialize();
    let tools = session.request("tools/list", json!({}));
    let names: Vec<&str> = tools["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"notes_add"), "{names:?}");
    assert_eq!(names.len(), 4, "{names:?}");
    let (text, error) = result_text(&session.call(
        "notes_add",
        json!({"title": "vm", "text": "served on an inherited socket"}),
    ));
    assert!(!error, "{text}");
    let (text, error) = result_text(&session.call("notes_search", json!({"query": "inherited"})));
    assert!(!error && text.contains("vm"), "{text}");
    // A second connection on the same listener gets its own session.
    let mut second = Session::connect(&bermd.socket);
    second.initialize();
    let (text, _) = result_text(&second.call("notes_list", json!({})));
    assert!(text.contains("vm"), "{text}");

    // bermd made no socket of its own, and wrote only under its home.
    assert_eq!(sockets_under(&bermd.home), Vec::<PathBuf>::new());
    assert!(!bermd.home.join("mcp.sock").exists());
    assert!(!bermd.home.join("control.sock").exists());
    // The folder was not copied into the store.
    assert_eq!(
        std::fs::read_dir(bermd.home.join("deployments"))
            .unwrap()
            .count(),
        0
    );
    assert!(bermd.home.join("state/notes/kv.log").exists());

    // SIGTERM is caught from before the ready line: a clean stop, exit 0.
    let mut bermd = bermd;
    berm_fixtures::terminate(&bermd.child);
    let status = bermd.child.wait().unwrap();
    assert_eq!(status.code(), Some(0), "{status:?}");
}

#[test]
fn precompiled_code_from_the_code_dir_is_used() {
    let folder = app_folder("echo");
    let wasm = std::fs::read(folder.join("echo.wasm")).unwrap();
    // What berm-vmm does for the VM, with the host's own (native) engine so
    // that this host can run the code.
    let engine = berm::Engine::new(&berm::EngineConfig::default()).unwrap();
    let precompiled = engine.precompile(&wasm).unwrap();
    let code = tempfile::tempdir().unwrap();
    std::fs::write(code.path().join(&precompiled.file_name), &precompiled.bytes).unwrap();

    let bermd = VmBermd::start(&[
        "--app",
        folder.to_str().unwrap(),
        "--code-dir",
        code.path().to_str().unwrap(),
    ]);
    let program = &bermd.ready["programs"][0];
    assert_eq!(program["code"], json!("precompiled"), "{}", bermd.ready);
    // The digest of the code file it mapped, what the VM's attestation holds against the
    // host's measurement.
    assert_eq!(
        program["code_sha256"],
        json!(berm_app::sha256_hex(&precompiled.bytes)),
        "{}",
        bermd.ready
    );
    // Nothing was compiled into the writable cache.
    assert_eq!(
        std::fs::read_dir(bermd.home.join("cache")).unwrap().count(),
        0
    );
    let mut session = Session::connect(&bermd.socket);
    session.initialize();
    let (text, error) = result_text(&session.call("echo_echo", json!({"message": "hi"})));
    assert_eq!((text.as_str(), error), ("hi", false));
}

#[test]
fn portable_code_is_refused_on_a_host_of_another_target() {
    if cfg!(target_env = "musl") {
        return;
    }
    // The guest's engine configuration on this (glibc) host: it can compile
    // but not run, and bermd says so instead of serving.
    let folder = app_folder("echo");
    let output = bermd_output(&[
        "--app",
        folder.to_str().unwrap(),
        "--cpu-profile",
        "portable",
    ]);
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("program `echo`"), "{stderr}");
    assert!(stderr.contains("does not match the host"), "{stderr}");
}

/// Runs bermd to completion on a fresh home.
fn bermd_output(args: &[&str]) -> Output {
    let dir = tempfile::tempdir().unwrap();
    bermd_output_on(&dir.path().join("home"), args)
}

#[test]
fn a_bad_app_folder_stops_bermd_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("berm.toml"),
        "name = \"bad\"\n[limits]\ncpu = 100\n[[program]]\nname = \"p\"\nwasm = \"p.wasm\"\n",
    )
    .unwrap();
    let output = bermd_output(&["--app", dir.path().to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("berm.toml: `limits.cpu` = 100: allowed 0.01 to 64 cores"),
        "{stderr}"
    );

    // Two folders may not deploy the same program name.
    let echo = app_folder("echo");
    let output = bermd_output(&[
        "--app",
        echo.to_str().unwrap(),
        "--app",
        echo.to_str().unwrap(),
    ]);
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("two app folders are named `echo`"),
        "{stderr}"
    );

    // A folder that reads fine but whose program the runtime refuses.
    std::fs::write(
        dir.path().join("berm.toml"),
        "name = \"bad\"\n[[program]]\nname = \"p\"\nwasm = \"p.wasm\"\n",
    )
    .unwrap();
    std::fs::write(dir.path().join("p.wasm"), b"not wasm").unwrap();
    let output = bermd_output(&["--app", dir.path().to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("app `bad`: program `p`") && stderr.contains("was not deployed"),
        "{stderr}"
    );
}

#[test]
fn listen_fd_refuses_what_is_not_a_listening_stream_socket() {
    let dir = tempfile::tempdir().unwrap();
    let file = std::fs::File::create(dir.path().join("plain")).unwrap();
    let unbound = std::os::unix::net::UnixDatagram::unbound().unwrap();
    let (connected, _peer) = std::os::unix::net::UnixStream::pair().unwrap();
    for (fd, expected) in [
        (
            file.as_raw_fd(),
            "not a socket; pass a listening SOCK_STREAM socket",
        ),
        (
            unbound.as_raw_fd(),
            "a SOCK_DGRAM socket; bermd needs a listening SOCK_STREAM socket",
        ),
        (
            connected.as_raw_fd(),
            "a stream socket that is not listening; call listen(2) on it",
        ),
        (999, "no such open file descriptor"),
        (1, "descriptors 0-2 are stdin, stdout and stderr"),
    ] {
        let output = {
            let _spawning = SPAWN.lock().unwrap_or_else(|p| p.into_inner());
            for fd in [file.as_fd(), unbound.as_fd(), connected.as_fd()] {
                inheritable(&fd);
            }
            let output = Command::new(env!("CARGO_BIN_EXE_bermd"))
                .arg("--home")
                .arg(dir.path().join("home"))
                .args(["--listen-fd", &fd.to_string()])
                .stdin(Stdio::null())
                .output()
                .unwrap();
            for fd in [file.as_fd(), unbound.as_fd(), connected.as_fd()] {
                rustix::io::fcntl_setfd(fd, rustix::io::FdFlags::CLOEXEC).unwrap();
            }
            output
        };
        assert_eq!(output.status.code(), Some(2), "{output:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains(&format!("--listen-fd {fd}: {expected}")),
            "{stderr}"
        );
    }
}

#[test]
fn an_app_beside_the_usual_sockets_is_listed_and_not_stored() {
    let folder = app_folder("files");
    let bermd = {
        // No other test's inheritable descriptor may leak into this child.
        let _spawning = SPAWN.lock().unwrap_or_else(|p| p.into_inner());
        common::Bermd::start(&["--app", folder.to_str().unwrap()])
    };
    let programs = common::block_on(bermd.control().list()).unwrap();
    assert_eq!(programs.len(), 1);
    assert_eq!(programs[0].name, "files");
    // `fs=files:rw` resolved under the data directory, which now exists.
    let data = std::fs::canonicalize(bermd.home.join("data/files")).unwrap();
    assert_eq!(
        programs[0].grants,
        vec![
            berm_control::Grant::Log,
            berm_control::Grant::Fs {
                dir: data,
                read_only: false,
                quota: berm_control::FsQuota::default(),
            }
        ]
    );
    let mut session = bermd.session();
    let tools = session.request("tools/list", json!({}));
    assert!(tools.to_string().contains("files_write_file"), "{tools}");
    assert_eq!(
        std::fs::read_dir(bermd.home.join("deployments"))
            .unwrap()
            .count(),
        0,
        "an app's programs are not recorded in the store"
    );
}

/// bermd run to completion on `home`.
fn bermd_output_on(home: &Path, args: &[&str]) -> Output {
    let _spawning = SPAWN.lock().unwrap_or_else(|p| p.into_inner());
    Command::new(env!("CARGO_BIN_EXE_bermd"))
        .arg("--home")
        .arg(home)
        .args(args)
        .env("BERM_LOG", "warn")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

#[test]
fn an_app_folder_that_changed_since_it_last_ran_here_needs_accept() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let folder = tmp.path().join("notes");
    std::fs::create_dir(&folder).unwrap();
    let notes = std::fs::read(app_folder("notes").join("notes.wasm")).unwrap();
    let echo = std::fs::read(app_folder("echo").join("echo.wasm")).unwrap();
    let toml = |grants: &str, accept: Option<&[u8]>| {
        let accept = accept
            .map(|bytes| format!("accept = \"sha256:{}\"\n", berm_app::sha256_hex(bytes)))
            .unwrap_or_default();
        std::fs::write(
            folder.join("berm.toml"),
            format!("name = \"notes\"\n[[program]]\nname = \"notes\"\nwasm = \"notes.wasm\"\ngrants = [{grants}]\n{accept}"),
        )
        .unwrap();
    };
    let app = ["--app", folder.to_str().unwrap()];
    let with_accept = ["--app", folder.to_str().unwrap(), "--accept"];
    let refused = |args: &[&str]| {
        let output = bermd_output_on(&home, args);
        assert_eq!(output.status.code(), Some(2), "{output:?}");
        String::from_utf8_lossy(&output.stderr).into_owned()
    };
    let starts = |args: &[&str]| {
        let mut bermd = VmBermd::start_home(Some(&home), args);
        assert_eq!(bermd.ready["ready"], json!(true));
        let _ = bermd.child.kill();
        let mut stderr = String::new();
        bermd
            .child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut stderr)
            .unwrap();
        stderr
    };

    // The first start has nothing to compare with, and keeps the record.
    std::fs::write(folder.join("notes.wasm"), &notes).unwrap();
    toml("\"kv\"", None);
    starts(&app);
    let record = home.join("apps/notes.json");
    assert!(record.exists(), "no record at {}", record.display());
    // Unchanged: nothing to accept.
    starts(&app);

    // A grant not held before is refused, naming it; nothing starts.
    toml("\"kv\", \"clock\"", None);
    let stderr = refused(&app);
    assert!(
        stderr.contains("app `notes`")
            && stderr.contains("changed since it last ran here")
            && stderr.contains("program `notes`: grants not held before: clock")
            && stderr.contains("--accept"),
        "{stderr}"
    );
    // --accept starts it and says what it accepted; the record moves on, so the next
    // start needs nothing.
    let stderr = starts(&with_accept);
    assert!(
        stderr.contains("grants not held before: clock (--accept)"),
        "{stderr}"
    );
    starts(&app);
    // Narrowing needs no acceptance.
    toml("\"kv\"", None);
    let stderr = starts(&app);
    assert!(
        stderr.contains("grants no longer held: clock (narrower)"),
        "{stderr}"
    );

    // Other bytes under the same name: their tools and syscalls changed. berm.toml's
    // `accept` naming exactly those bytes accepts them.
    std::fs::write(folder.join("notes.wasm"), &echo).unwrap();
    let stderr = refused(&app);
    assert!(
        stderr.contains("program `notes`: tool removed: add")
            && stderr.contains("program `notes`: tool added: echo"),
        "{stderr}"
    );
    toml("\"kv\"", Some(&echo));
    let stderr = starts(&app);
    assert!(
        stderr.contains("tool added: echo (accepted in berm.toml)"),
        "{stderr}"
    );
    // The acceptance holds for those bytes only.
    std::fs::write(folder.join("notes.wasm"), &notes).unwrap();
    let stderr = refused(&app);
    assert!(
        stderr.contains(&format!(
            "berm.toml's `accept` for `notes` names sha256:{}, not this version, sha256:{}",
            berm_app::sha256_hex(&echo),
            berm_app::sha256_hex(&notes)
        )),
        "{stderr}"
    );

    // A record bermd did not write is refused, not guessed at.
    std::fs::write(&record, b"{\"format\":\"other\"}").unwrap();
    let stderr = refused(&app);
    assert!(
        stderr.contains("cannot be read") && stderr.contains("remove the file"),
        "{stderr}"
    );
}

#[test]
fn an_app_folder_gives_a_tool_the_name_a_client_expects() {
    let folder = app_folder("conformance");
    let bermd = {
        let _spawning = SPAWN.lock().unwrap_or_else(|p| p.into_inner());
        common::Bermd::start(&["--app", folder.to_str().unwrap()])
    };
    let mut session = bermd.session();
    let tools = session.request("tools/list", json!({}));
    let names: Vec<&str> = tools["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    // Served under the name berm.toml gives it, and only under that one.
    assert!(names.contains(&"json_schema_2020_12_tool"), "{names:?}");
    assert!(
        !names.contains(&"test_json_schema_2020_12_tool"),
        "{names:?}"
    );
    let listed = tools["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "json_schema_2020_12_tool")
        .unwrap();
    // The schema goes out as written, 2020-12 keywords and all.
    assert_eq!(
        listed["inputSchema"]["$schema"],
        "https://json-schema.org/draft/2020-12/schema"
    );
    assert_eq!(
        listed["inputSchema"]["$defs"]["address"]["$anchor"],
        "addressDef"
    );
    let done = session.call(
        "json_schema_2020_12_tool",
        json!({"name": "Ada", "contactMethod": "phone", "phone": "555", "address": {"city": "Paris"}}),
    );
    assert_eq!(
        result_text(&done),
        ("Ada in Paris, reachable at 555".to_string(), false)
    );
    // bermd checks arguments against the schema as written: `if`/`then` wants a phone.
    let (text, error) = result_text(&session.call(
        "json_schema_2020_12_tool",
        json!({"contactMethod": "phone", "email": "a@b"}),
    ));
    assert!(error, "{text}");
    assert!(text.contains("phone"), "{text}");
    let old = session.call("test_json_schema_2020_12_tool", json!({}));
    assert_eq!(old["error"]["code"], -32602, "{old}");

    // Another program may not take the name.
    let control = bermd.control();
    let mut request = berm_control::DeployRequest::new(
        &common::wasm("echo"),
        vec![],
        berm_control::LimitsSpec::default(),
    );
    request.serve_as = [("echo".to_string(), "json_schema_2020_12_tool".to_string())].into();
    let refused = common::block_on(control.deploy("echo", &request))
        .unwrap_err()
        .to_string();
    assert!(
        refused.contains(
            "which program `test` already serves: a served name is unique on an endpoint"
        ),
        "{refused}"
    );
    // Nor name a tool the program does not have.
    request.serve_as = [("nope".to_string(), "fine".to_string())].into();
    let refused = common::block_on(control.deploy("echo", &request))
        .unwrap_err()
        .to_string();
    assert!(
        refused.contains("`serve_as` names tool `nope`, which `echo` does not have"),
        "{refused}"
    );
}
