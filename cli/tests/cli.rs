//! The berm CLI against a real bermd: every command, its output and its
//! exit code; what it says when bermd is not running; `berm new` building
//! and deploying as is.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn wasm(app: &str) -> PathBuf {
    root().join(format!("target/wasm32-unknown-unknown/release/{app}.wasm"))
}

/// bermd, started from the workspace's build of it.
struct Bermd {
    child: Child,
    home: PathBuf,
    _dir: Option<tempfile::TempDir>,
}

impl Bermd {
    fn start() -> Bermd {
        Bermd::start_with(&[], Stdio::null())
    }

    /// bermd with `args`, its log going to `log`.
    fn start_with(args: &[&str], log: impl Into<Stdio>) -> Bermd {
        let dir = tempfile::tempdir().unwrap();
        Bermd::start_in(dir.path().join("home"), Some(dir), args, log)
    }

    /// bermd with `args` and its home at `home` (kept while `dir` lives), its log going to
    /// `log`.
    fn start_in(
        home: PathBuf,
        dir: Option<tempfile::TempDir>,
        args: &[&str],
        log: impl Into<Stdio>,
    ) -> Bermd {
        let child = bermd_command(&home, args).stderr(log).spawn().unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        while std::os::unix::net::UnixStream::connect(home.join("control.sock")).is_err() {
            assert!(Instant::now() < deadline, "bermd did not come up");
            std::thread::sleep(Duration::from_millis(20));
        }
        Bermd {
            child,
            home,
            _dir: dir,
        }
    }

    fn berm(&self, args: &[&str]) -> Output {
        berm_in(&self.home, args, None)
    }

    /// `berm deploy NAME <the example NAME> FLAGS…`, which must succeed; its output.
    fn deploy_example(&self, name: &str, flags: &[&str]) -> Output {
        let wasm = wasm(name);
        let out = self.berm(&[&["deploy", name, wasm.to_str().unwrap()], flags].concat());
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        out
    }
}

impl Drop for Bermd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The workspace's bermd with `args` and its home at `home`, stdout discarded.
fn bermd_command(home: &Path, args: &[&str]) -> Command {
    // The bermd binary belongs to berm-service; `cargo test --workspace`
    // builds it next to this one.
    let bermd = Path::new(env!("CARGO_BIN_EXE_berm")).with_file_name("bermd");
    assert!(
        bermd.exists(),
        "{} is not built: run cargo build -p berm-service",
        bermd.display()
    );
    let mut command = Command::new(bermd);
    command
        .args(args)
        .env("BERM_HOME", home)
        .env("BERM_LOG", "debug,rmcp=warn,hyper=warn,rustls=warn")
        .stdout(Stdio::null());
    command
}

fn berm_in(home: &Path, args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_berm"))
        .args(args)
        .env("BERM_HOME", home)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if let Some(text) = stdin {
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
    }
    drop(child.stdin.take());
    child.wait_with_output().unwrap()
}

/// A test CA, a temporary directory, and the CA's certificate written in it as `ca.pem` (for
/// `bermd --extra-ca`).
fn test_ca() -> (berm_egress::testing::TestCa, tempfile::TempDir, PathBuf) {
    let ca = berm_egress::testing::TestCa::new();
    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("ca.pem");
    ca.write_ca(&ca_file);
    (ca, dir, ca_file)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn every_command_says_when_bermd_is_not_running() {
    let dir = tempfile::tempdir().unwrap();
    let echo = wasm("echo");
    let echo = echo.to_str().unwrap();
    for args in [
        vec!["ls"],
        vec!["deploy", "echo", echo],
        vec!["rm", "echo"],
        vec!["call", "echo_echo", "{}"],
        vec!["inspect", "echo"],
        vec!["mcp"],
    ] {
        let out = berm_in(dir.path(), &args, None);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let stderr = text(&out.stderr);
        assert!(
            stderr.contains("bermd is not running"),
            "{args:?}: {stderr}"
        );
        assert!(
            stderr.contains("start it with `bermd &`"),
            "{args:?}: {stderr}"
        );
    }
    // Inspecting a file needs no bermd.
    let out = berm_in(dir.path(), &["inspect", echo], None);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("grants: not deployed"));
}

#[test]
fn deploy_ls_call_inspect_rm_with_their_exit_codes() {
    let bermd = Bermd::start();
    let data = tempfile::tempdir().unwrap();
    std::fs::write(data.path().join("hello.txt"), "hello from disk\n").unwrap();
    let grant = format!("fs={}:ro", data.path().display());

    let out = bermd.deploy_example("echo", &[]);
    assert!(text(&out.stdout).starts_with("deployed echo sha256:"));
    bermd.deploy_example("files", &["--grant", &grant, "--grant", "log"]);
    let out = bermd.berm(&[
        "deploy",
        "bad",
        wasm("echo").to_str().unwrap(),
        "--grant",
        "web",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("unknown grant `web`"));
    let out = bermd.berm(&["deploy", "..", wasm("echo").to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("`..` is not a valid program name"),
        "{stderr}"
    );

    let ls = text(&bermd.berm(&["ls"]).stdout);
    let files_line = ls.lines().find(|l| l.starts_with("files")).unwrap();
    assert!(
        files_line.contains("files_read_file,files_write_file,files_list_dir,files_grep"),
        "{ls}"
    );
    assert!(
        files_line.contains(&format!(
            "log,fs={}:ro",
            std::fs::canonicalize(data.path()).unwrap().display()
        )),
        "{ls}"
    );
    assert!(
        ls.lines()
            .find(|l| l.starts_with("echo"))
            .unwrap()
            .ends_with("none"),
        "{ls}"
    );

    let out = bermd.berm(&["call", "echo_reverse", r#"{"message":"abc"}"#]);
    assert_eq!(
        (out.status.code(), text(&out.stdout)),
        (Some(0), "cba\n".into())
    );
    let out = berm_in(
        &bermd.home,
        &["call", "files_read_file", "-"],
        Some(r#"{"path":"hello.txt"}"#),
    );
    assert_eq!(
        (out.status.code(), text(&out.stdout)),
        (Some(0), "hello from disk\n\n".into())
    );
    let out = bermd.berm(&["call", "echo_fail", r#"{"message":"nope"}"#]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(text(&out.stderr), "echo_fail failed: nope\n");
    let out = bermd.berm(&["call", "files_write_file", r#"{"path":"x","content":"y"}"#]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("the fs grant is read-only"));
    let out = bermd.berm(&["call", "echo_echo", r#"{"message":1}"#]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("`message`: 1 is not of type \"string\""));
    let out = bermd.berm(&["call", "echo_echo", "not json"]);
    assert_eq!(out.status.code(), Some(2));
    let out = bermd.berm(&["call", "nosuch_tool"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("no tool `nosuch_tool` is deployed"));
    // The dotted spelling of earlier versions is refused with the new name.
    let out = bermd.berm(&["call", "echo.echo", r#"{"message":"x"}"#]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains(
            "`echo.echo` is the old dotted spelling: tools are named PROGRAM_TOOL, as MCP clients see them (`echo_echo`)"
        ),
        "{}",
        text(&out.stderr)
    );

    let out = bermd.berm(&["inspect", "files"]);
    let inspect = text(&out.stdout);
    assert!(
        inspect.contains("syscalls imported: fs.list, fs.read, fs.write"),
        "{inspect}"
    );
    assert!(inspect.contains("grants (files): log,fs="), "{inspect}");
    assert!(
        inspect.contains("read_file — Read a UTF-8 text file."),
        "{inspect}"
    );
    assert!(inspect.contains(r#""required":["path"]"#), "{inspect}");
    let out = bermd.berm(&["inspect", wasm("compose").to_str().unwrap()]);
    let inspect = text(&out.stdout);
    assert!(
        inspect.contains(
            "programs called: echo, compose, hostile, files (only these, and only as granted by call=)"
        ),
        "{inspect}"
    );
    assert!(
        inspect.contains("syscalls imported: berm.call"),
        "{inspect}"
    );
    // Deployed with a call grant: `ls` and `inspect` show it, and what it leaves out.
    let compose = wasm("compose");
    let out = bermd.berm(&[
        "deploy",
        "compose",
        compose.to_str().unwrap(),
        "--grant",
        "call=echo_echo",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let ls = text(&bermd.berm(&["ls"]).stdout);
    assert!(
        ls.lines()
            .any(|l| l.starts_with("compose ") && l.ends_with(" call=echo_echo")),
        "{ls}"
    );
    let inspect = text(&bermd.berm(&["inspect", "compose"]).stdout);
    assert!(
        inspect.contains("grants (compose): call=echo_echo\n"),
        "{inspect}"
    );
    assert!(
        inspect.contains(
            "imported but not granted (these trap when called): call=compose, call=hostile, call=files"
        ),
        "{inspect}"
    );
    let out = bermd.berm(&["call", "compose_shout", r#"{"message":"hi"}"#]);
    assert_eq!(text(&out.stdout).trim(), "HI", "{}", text(&out.stderr));
    let out = bermd.berm(&["inspect", wasm("notes").to_str().unwrap(), "--json"]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        json["syscalls"],
        serde_json::json!(["kv.delete", "kv.get", "kv.list", "kv.put"])
    );

    let out = bermd.berm(&["rm", "echo"]);
    assert_eq!(out.status.code(), Some(0));
    let out = bermd.berm(&["rm", "echo"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("no program named `echo` is deployed"));
}

#[test]
fn the_mcp_bridge_carries_a_session() {
    let bermd = Bermd::start();
    bermd.berm(&["deploy", "echo", wasm("echo").to_str().unwrap()]);
    let input = [
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo_echo","arguments":{"message":"through the bridge"}}}"#,
    ]
    .join("\n")
        + "\n";
    let out = berm_in(&bermd.home, &["mcp"], Some(&input));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let answers: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let call = answers
        .iter()
        .find(|a| a["id"] == 2)
        .unwrap_or_else(|| panic!("{stdout}"));
    assert_eq!(call["result"]["content"][0]["text"], "through the bridge");
}

/// `berm_fixtures::hostile` through the stdio bridge: each hostile line, in the same
/// write as valid requests, gets exactly its own answer, and the valid requests theirs.
#[test]
fn hostile_lines_through_the_mcp_bridge_cost_only_themselves() {
    use berm_fixtures::hostile;
    let frame_cap = hostile::MAX_FRAME_BYTES.to_string();
    let bermd = Bermd::start_with(&["--max-frame-bytes", &frame_cap], Stdio::null());
    let mut bridge = Command::new(env!("CARGO_BIN_EXE_berm"))
        .arg("mcp")
        .env("BERM_HOME", &bermd.home)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // A lost answer would leave the test reading forever: past the deadline the bridge
    // is killed, and the read fails saying what was answered.
    let (done, finished) = std::sync::mpsc::channel::<()>();
    let pid = bridge.id().to_string();
    let watchdog = std::thread::spawn(move || {
        if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
            finished.recv_timeout(Duration::from_secs(300))
        {
            let _ = Command::new("kill").args(["-KILL", &pid]).status();
        }
    });
    let mut stdin = bridge.stdin.take().unwrap();
    let mut stdout = std::io::BufReader::new(bridge.stdout.take().unwrap());
    hostile::initialize(&mut stdin, &mut stdout);
    hostile::assert_each_costs_only_itself(&mut stdin, &mut stdout, 10);
    drop(stdin);
    assert!(bridge.wait().unwrap().success());
    drop(done);
    watchdog.join().unwrap();
}

#[test]
fn berm_new_scaffolds_a_program_that_builds_and_deploys_as_is() {
    let bermd = Bermd::start();
    let work = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_berm"))
        .args(["new", "greeter"])
        .current_dir(work.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let crate_dir = work.path().join("greeter");
    // Share the build cache of the example programs.
    let target = root().join("target/berm-new-test");
    let build = Command::new(env!("CARGO"))
        .args(["build", "--release", "--target", "wasm32-unknown-unknown"])
        .env("CARGO_TARGET_DIR", &target)
        .current_dir(&crate_dir)
        .output()
        .unwrap();
    assert!(build.status.success(), "{}", text(&build.stderr));
    let image = target.join("wasm32-unknown-unknown/release/greeter.wasm");
    let out = bermd.berm(&["deploy", "greeter", image.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = bermd.berm(&["call", "greeter_hello", r#"{"name":"berm"}"#]);
    assert_eq!(text(&out.stdout), "hello, berm\n");
    let out = Command::new(env!("CARGO_BIN_EXE_berm"))
        .args(["new", "Bad.Name"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

/// `berm new --lang rust|ts|python`: each scaffold builds with its one command into a
/// component that deploys as is, lists its tool and answers a call. The TypeScript and
/// Python builds take their toolchains from scripts/setup-components (which
/// scripts/build-apps.sh runs first) and are cached by content, so a second run copies them.
#[test]
fn berm_new_scaffolds_a_component_in_each_language_that_builds_with_one_command() {
    let bermd = Bermd::start();
    let work = tempfile::tempdir().unwrap();
    let node = Command::new(root().join("scripts/setup-node"))
        .output()
        .unwrap();
    assert!(node.status.success(), "{}", text(&node.stderr));
    let path = format!(
        "{}:{}",
        text(&node.stdout).trim(),
        std::env::var("PATH").unwrap_or_default()
    );
    // One build cache for the scaffolds, the core-module test's too.
    let target = root().join("target/berm-new-test");
    for (lang, name, build, image) in [
        (
            "rust",
            "greet-rs",
            &["cargo", "build", "--release", "--target", "wasm32-wasip2"][..],
            target.join("wasm32-wasip2/release/greet_rs.wasm"),
        ),
        (
            "ts",
            "greet-ts",
            &["npm", "run", "build"][..],
            work.path().join("greet-ts/greet-ts.wasm"),
        ),
        (
            "python",
            "greet-py",
            &["./build"][..],
            work.path().join("greet-py/greet-py.wasm"),
        ),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_berm"))
            .args(["new", "--lang", lang, name])
            .current_dir(work.path())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        assert!(
            text(&out.stdout).contains(&build.join(" ")),
            "berm new prints the one build command: {}",
            text(&out.stdout)
        );
        let built = Command::new(build[0])
            .args(&build[1..])
            .env("CARGO_TARGET_DIR", &target)
            .env("PATH", &path)
            .current_dir(work.path().join(name))
            .output()
            .unwrap();
        assert!(
            built.status.success(),
            "{lang}: {}{}",
            text(&built.stdout),
            text(&built.stderr)
        );
        // A Python program needs `random` (CPython reseeds itself at every call); `berm new`
        // prints the deploy command with it.
        let mut deploy = vec!["deploy", name, image.to_str().unwrap()];
        if lang == "python" {
            assert!(text(&out.stdout).contains("--grant random"));
            deploy.extend(["--grant", "random"]);
        }
        let out = bermd.berm(&deploy);
        assert_eq!(out.status.code(), Some(0), "{lang}: {}", text(&out.stderr));
        let out = bermd.berm(&["call", &format!("{name}_hello"), r#"{"name":"berm"}"#]);
        assert_eq!(
            text(&out.stdout).trim_end(),
            if lang == "rust" {
                // A plain WIT export's result travels as `{"result": …}` (docs/components.md).
                r#"{"result":"hello, berm"}"#
            } else {
                "hello, berm"
            },
            "{lang}: {}",
            text(&out.stderr)
        );
    }
}

/// A ready-made app folder assembled by scripts/build-apps.sh.
fn app_folder(name: &str) -> PathBuf {
    let dir = root().join("target/apps").join(name);
    assert!(
        dir.join("berm.toml").exists(),
        "{} is missing — run scripts/build-apps.sh first",
        dir.display()
    );
    dir
}

#[test]
fn deploy_app_deploys_every_program_of_a_folder_or_none() {
    let bermd = Bermd::start();

    // A folder whose second program is not a program: checked whole before
    // the first deploy, so nothing is deployed, and the message names it.
    let folder = tempfile::tempdir().unwrap();
    std::fs::copy(wasm("echo"), folder.path().join("echo.wasm")).unwrap();
    std::fs::write(folder.path().join("broken.wasm"), b"\0asm\x01\0\0\0").unwrap();
    std::fs::write(
        folder.path().join("berm.toml"),
        "name = \"pair\"\n[[program]]\nname = \"echo\"\nwasm = \"echo.wasm\"\n[[program]]\nname = \"broken\"\nwasm = \"broken.wasm\"\n",
    )
    .unwrap();
    let out = bermd.berm(&["deploy", "--app", folder.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stdout));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("app `pair`: program `broken`") && stderr.contains("nothing was deployed"),
        "{stderr}"
    );
    let out = bermd.berm(&["ls"]);
    assert!(!text(&out.stdout).contains("echo"), "{}", text(&out.stdout));

    // A bad berm.toml: the berm-app message.
    std::fs::write(folder.path().join("berm.toml"), "name = \"Pair\"\n").unwrap();
    let out = bermd.berm(&["deploy", "--app", folder.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("berm.toml: `name` = \"Pair\": use 1-31 characters"),
        "{}",
        text(&out.stderr)
    );

    // --app does not mix with a single program's arguments.
    let out = bermd.berm(&["deploy", "echo", "x.wasm", "--app", "."]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("cannot be used with"),
        "{}",
        text(&out.stderr)
    );

    // The real notes folder: deployed under its program name with its grant
    // and bounds.
    let notes = app_folder("notes");
    let out = bermd.berm(&["deploy", "--app", notes.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.starts_with("deployed notes sha256:"), "{stdout}");
    assert!(
        stdout.contains("app notes: 1 program(s) deployed from"),
        "{stdout}"
    );
    let out = bermd.berm(&["ls", "--json"]);
    let listed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let program = &listed[0];
    assert_eq!(program["name"], "notes", "{listed}");
    assert_eq!(program["grants"], serde_json::json!(["kv"]), "{listed}");
    assert_eq!(program["limits"]["deadline_ms"], 10000, "{listed}");
    assert_eq!(program["limits"]["memory_bytes"], 64 << 20, "{listed}");
    let out = bermd.berm(&[
        "call",
        "notes_add",
        r#"{"title":"app","text":"from a folder"}"#,
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));

    // An fs grant lands under the data directory.
    let out = bermd.berm(&["deploy", "--app", app_folder("files").to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(bermd.home.join("data/files").is_dir());
    let out = bermd.berm(&[
        "call",
        "files_write_file",
        r#"{"path":"a.txt","content":"x"}"#,
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(bermd.home.join("data/files/a.txt").exists());
}

/// An app folder named `notes` in `parent/sub` whose one program `notes` (the notes example)
/// is granted kv; the folder, canonical.
fn notes_folder(parent: &Path, sub: &str) -> PathBuf {
    let folder = parent.join(sub);
    std::fs::create_dir(&folder).unwrap();
    std::fs::copy(wasm("notes"), folder.join("notes.wasm")).unwrap();
    std::fs::write(
        folder.join("berm.toml"),
        "name = \"notes\"\n[[program]]\nname = \"notes\"\nwasm = \"notes.wasm\"\ngrants = [\"kv\"]\n",
    )
    .unwrap();
    std::fs::canonicalize(folder).unwrap()
}

/// `program `notes`: deployed … as DIGEST; keyspace: 2 keys (one note), N bytes; stored secrets: TOKEN`
/// with N the size of notes' keyspace log in `home`.
fn notes_line(home: &Path, from: &str) -> String {
    let bytes = std::fs::metadata(home.join("state/notes/kv.log"))
        .unwrap()
        .len();
    let digest = format!(
        "sha256:{}",
        berm_app::sha256_hex(&std::fs::read(wasm("notes")).unwrap())
    );
    let from = match from {
        "" => "left by a removed deployment".to_string(),
        from => format!("{from} as {digest}"),
    };
    format!("  program `notes`: {from}; keyspace: 2 keys, {bytes} bytes; stored secrets: TOKEN")
}

/// The refusal of app `notes` in `dir` that would take over `line`, as berm and bermd print it.
fn takeover_refusal(dir: &Path, line: &str) -> String {
    format!(
        "app `notes` ({}) would take over what the folder did not create:\n{line}\nnothing was \
         deployed: add --accept to deploy the folder over it and keep that state, or give these \
         programs other names in berm.toml\n",
        dir.display()
    )
}

/// A plain `berm deploy notes` with a note in its keyspace and a stored secret.
fn plain_notes_with_state(bermd: &Bermd) {
    bermd.deploy_example("notes", &["--grant", "kv"]);
    let out = bermd.berm(&["call", "notes_add", r#"{"title":"t","text":"plain"}"#]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = berm_in(
        &bermd.home,
        &["secret", "set", "notes", "TOKEN"],
        Some("v\n"),
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

/// Issue 25: a folder that reuses a name inherits that program's keyspace and secrets, so
/// deploying it over a plain deploy, another folder's deployment or a removed one's state
/// needs --accept, and the refusal and the accepted run print one list of what is taken
/// over. The same folder again needs nothing.
#[test]
fn deploy_app_over_state_it_did_not_create_needs_accept() {
    let bermd = Bermd::start();
    plain_notes_with_state(&bermd);
    let dirs = tempfile::tempdir().unwrap();
    let mine = notes_folder(dirs.path(), "mine");
    let record = bermd.home.join("deployments/notes.json");
    let before = std::fs::read(&record).unwrap();
    let plain = notes_line(&bermd.home, "deployed by a plain `berm deploy`");

    // Refused, with the exact list; nothing is written.
    let out = bermd.berm(&["deploy", "--app", mine.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stdout));
    assert_eq!(
        text(&out.stderr),
        format!("berm: {}", takeover_refusal(&mine, &plain))
    );
    assert_eq!(text(&out.stdout), "");
    assert_eq!(std::fs::read(&record).unwrap(), before);

    // --accept: the same list, then the deploy, recorded as the folder's.
    let out = bermd.berm(&["deploy", "--app", mine.to_str().unwrap(), "--accept"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let notice = format!(
        "app `notes` ({}): --accept: taking over what the folder did not create:\n{plain}\n",
        mine.display()
    );
    assert!(
        text(&out.stdout).starts_with(&notice),
        "{}",
        text(&out.stdout)
    );
    let out = bermd.berm(&["ls", "--json"]);
    let listed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(listed[0]["app_dir"], mine.to_str().unwrap(), "{listed}");
    // The keyspace came along.
    let out = bermd.berm(&["call", "notes_list", "{}"]);
    assert!(text(&out.stdout).contains("\"t\""), "{}", text(&out.stdout));

    // The same folder again: nothing to accept, nothing printed about it.
    let out = bermd.berm(&["deploy", "--app", mine.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        !text(&out.stdout).contains("--accept"),
        "{}",
        text(&out.stdout)
    );

    // Another folder with the same program name: refused, naming the first folder.
    let other = notes_folder(dirs.path(), "other");
    let out = bermd.berm(&["deploy", "--app", other.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stdout));
    let from_mine = notes_line(
        &bermd.home,
        &format!("deployed from the app folder {}", mine.display()),
    );
    assert_eq!(
        text(&out.stderr),
        format!("berm: {}", takeover_refusal(&other, &from_mine))
    );

    // Removed: its keyspace and secret stay, and still need --accept.
    let out = bermd.berm(&["rm", "notes"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = bermd.berm(&["deploy", "--app", other.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stdout));
    assert_eq!(
        text(&out.stderr),
        format!(
            "berm: {}",
            takeover_refusal(&other, &notes_line(&bermd.home, ""))
        )
    );
    let out = bermd.berm(&["ls"]);
    assert!(
        !text(&out.stdout).contains("notes"),
        "{}",
        text(&out.stdout)
    );

    // --accept --json: the list is `accepted`, and the folder now holds the name.
    let out = bermd.berm(&[
        "deploy",
        "--app",
        other.to_str().unwrap(),
        "--accept",
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let printed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(printed["accepted"][0]["program"], "notes", "{printed}");
    assert_eq!(
        printed["accepted"][0]["secrets"],
        serde_json::json!(["TOKEN"])
    );
    assert!(
        printed["accepted"][0].get("deployment").is_none(),
        "{printed}"
    );
    let out = bermd.berm(&["deploy", "--app", other.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

/// An upgrade under a deployed name that changes what the model reads or what the program
/// may reach is refused until `--accept`, naming each change; `berm diff` shows the same.
#[test]
fn an_upgrade_that_changes_tools_or_reach_needs_accept() {
    let bermd = Bermd::start();
    bermd.deploy_example("echo", &[]);
    let files = wasm("files");
    let files = files.to_str().unwrap();
    let running = text(&bermd.berm(&["ls"]).stdout);

    // Another program under the name `echo`: its tools and syscalls differ.
    let out = bermd.berm(&["deploy", "echo", files, "--grant", "log"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stdout));
    let refused = text(&out.stderr);
    for says in [
        "changes what the model reads or what it may reach; nothing was deployed",
        "tool added: read_file",
        "tool removed: echo",
        "syscalls now imported: fs.list, fs.read, fs.write",
        "grants not held before: log",
        "--accept",
    ] {
        assert!(refused.contains(says), "{says}: {refused}");
    }
    assert_eq!(
        text(&bermd.berm(&["ls"]).stdout),
        running,
        "nothing was deployed"
    );

    // berm diff prints the same comparison, file against deployed name.
    let out = bermd.berm(&["diff", "echo", files]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let diff = text(&out.stdout);
    assert!(
        diff.contains("tool added: read_file  [needs --accept]")
            && diff.contains("grants compared only between two deployed programs"),
        "{diff}"
    );

    // With --accept it lands, and says what was accepted.
    let out = bermd.berm(&["deploy", "echo", files, "--grant", "log", "--accept"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("accepted: tool added: read_file"),
        "{}",
        text(&out.stderr)
    );

    // The same image again with fewer grants is narrower: no acceptance needed.
    let out = bermd.berm(&["deploy", "echo", files]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("narrower: grants no longer held: log"),
        "{}",
        text(&out.stderr)
    );
    // And a grant added back is refused again.
    let out = bermd.berm(&["deploy", "echo", files, "--grant", "log"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("grants not held before: log"),
        "{}",
        text(&out.stderr)
    );

    // An fs grant named by another spelling of the same directory is no change.
    let data = tempfile::tempdir().unwrap();
    let canonical = format!("fs={}:ro", data.path().display());
    let dotted = format!("fs={}/./:ro", data.path().display());
    bermd.deploy_example("files", &["--grant", &canonical, "--grant", "log"]);
    let out = bermd.berm(&[
        "deploy", "files", files, "--grant", &dotted, "--grant", "log",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));

    // Between two deployed programs, grants are compared too.
    bermd.deploy_example("files", &["--grant", "log", "--grant", "clock", "--accept"]);
    let out = bermd.berm(&["diff", "echo", "files", "--json"]);
    let changes: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(changes[0]["change"], "grants_added", "{changes}");
    assert_eq!(changes[0]["needs_acceptance"], true, "{changes}");

    // An app folder: redeploying it unchanged needs nothing; a grant added to berm.toml is
    // refused until --accept, and nothing is deployed meanwhile.
    let parent = tempfile::tempdir().unwrap();
    let folder = notes_folder(parent.path(), "app");
    let folder_arg = folder.to_str().unwrap();
    for _ in 0..2 {
        let out = bermd.berm(&["deploy", "--app", folder_arg]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    }
    let toml = std::fs::read_to_string(folder.join("berm.toml")).unwrap();
    std::fs::write(
        folder.join("berm.toml"),
        toml.replace("[\"kv\"]", "[\"kv\", \"clock\"]"),
    )
    .unwrap();
    let before = text(&bermd.berm(&["ls"]).stdout);
    let out = bermd.berm(&["deploy", "--app", folder_arg]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("notes: grants not held before: clock"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(
        text(&bermd.berm(&["ls"]).stdout),
        before,
        "nothing was deployed"
    );
    let out = bermd.berm(&["deploy", "--app", folder_arg, "--accept"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("notes: accepted: grants not held before: clock"),
        "{}",
        text(&out.stderr)
    );

    // The acceptance recorded in berm.toml instead: `accept` naming another version is
    // stale and says so; naming these bytes lets the change land without --accept.
    let digest = berm_app::sha256_hex(&std::fs::read(wasm("notes")).unwrap());
    let toml = std::fs::read_to_string(folder.join("berm.toml")).unwrap();
    let widened = toml.replace("[\"kv\", \"clock\"]", "[\"kv\", \"clock\", \"random\"]");
    let with_accept = |digest: &str| {
        let accept = format!("accept = \"sha256:{digest}\"\n");
        std::fs::write(folder.join("berm.toml"), format!("{widened}{accept}")).unwrap();
    };
    with_accept(&"0".repeat(64));
    let out = bermd.berm(&["deploy", "--app", folder_arg]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stdout));
    let refused = text(&out.stderr);
    assert!(
        refused.contains("notes: grants not held before: random")
            && refused.contains(&format!(
                "berm.toml's `accept` for `notes` names sha256:{}, not this version, sha256:{digest}",
                "0".repeat(64)
            )),
        "{refused}"
    );
    with_accept(&digest);
    let out = bermd.berm(&["deploy", "--app", folder_arg]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("notes: accepted: grants not held before: random"),
        "{}",
        text(&out.stderr)
    );
    // A malformed acceptance is refused when the folder is read.
    std::fs::write(
        folder.join("berm.toml"),
        format!("{widened}accept = \"v2\"\n"),
    )
    .unwrap();
    let out = bermd.berm(&["deploy", "--app", folder_arg]);
    assert_ne!(out.status.code(), Some(0));
    assert!(
        text(&out.stderr).contains("`accept` = \"v2\""),
        "{}",
        text(&out.stderr)
    );
}

/// `bermd --app` over a name a stored deployment holds refuses to start with the same list,
/// and starts with --accept, printing it.
#[test]
fn bermd_app_over_a_stored_deployment_needs_accept() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let folder = notes_folder(dir.path(), "app");
    let bermd = Bermd::start_in(home.clone(), None, &[], Stdio::null());
    plain_notes_with_state(&bermd);
    let line = notes_line(&home, "deployed by a plain `berm deploy`");
    drop(bermd); // Stopped; its home stays.

    let app = ["--app", folder.to_str().unwrap()];
    let out = bermd_command(&home, &app).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(
        stderr.ends_with(&format!("bermd: {}", takeover_refusal(&folder, &line))),
        "{stderr}"
    );

    let log = home.with_file_name("bermd.log");
    let bermd = Bermd::start_in(
        home.clone(),
        None,
        &[&app[..], &["--accept"]].concat(),
        std::fs::File::create(&log).unwrap(),
    );
    let out = bermd.berm(&["call", "notes_list", "{}"]);
    assert!(text(&out.stdout).contains("\"t\""), "{}", text(&out.stdout));
    let notice = format!(
        "bermd: app `notes` ({}): --accept: taking over what the folder did not create:\n{line}\n",
        folder.display()
    );
    assert!(
        std::fs::read_to_string(&log).unwrap().contains(&notice),
        "{notice}"
    );
}

/// The issue's acceptance: `berm deploy fetch … --grant net=127.0.0.1:PORT`,
/// then `fetch_get` returns the page; any other port is refused before a
/// connection is made. HTTPS works with the test's CA named by --extra-ca.
#[test]
fn fetch_get_reaches_the_granted_port_and_nothing_else() {
    use berm_egress::testing::{Reply, TestServer};
    let (ca, _dir, ca_file) = test_ca();
    let page = TestServer::http(|seen| Reply::ok(format!("the page at {}", seen.path)));
    let secure = TestServer::https(&ca, |_| Reply::ok("a verified page"));
    let other = TestServer::http(|_| Reply::ok("must not be reached"));
    let bermd = Bermd::start_with(&["--extra-ca", ca_file.to_str().unwrap()], Stdio::null());
    let (net, net_tls) = (
        format!("net=127.0.0.1:{}", page.port()),
        format!("net=127.0.0.1:{}", secure.port()),
    );
    bermd.deploy_example("fetch", &["--grant", &net, "--grant", &net_tls]);
    let get = |url: String| bermd.berm(&["call", "fetch_get", &format!(r#"{{"url":"{url}"}}"#)]);
    let out = get(format!("{}/hello", page.origin(false)));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let answer: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        answer,
        serde_json::json!({"status": 200, "body": "the page at /hello"})
    );
    let out = get(format!("{}/", secure.origin(true)));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("a verified page"));
    let out = get(format!("{}/", other.origin(false)));
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("is not in this program's net grants") && stderr.ends_with("(denied)\n"),
        "{stderr}"
    );
    assert_eq!(other.connections(), 0);
    let ls = text(&bermd.berm(&["ls"]).stdout);
    assert!(
        ls.contains(&format!("{net},{net_tls}")) || ls.contains(&format!("{net_tls},{net}")),
        "{ls}"
    );
    let inspect = text(&bermd.berm(&["inspect", "fetch"]).stdout);
    assert!(inspect.contains("http.fetch"), "{inspect}");
    assert!(inspect.contains(&net), "{inspect}");
}

/// A secret reaches only its host: the issues reader against an HTTPS
/// stand-in for GitHub's API, which checks the token; the same request
/// toward another granted host is refused, and the value shows up in no
/// output of berm and no line of bermd's log.
#[test]
fn a_secret_reaches_only_its_host_and_is_never_shown() {
    use berm_egress::testing::{Reply, TestServer};
    const TOKEN: &str = "ghp-test-value-7f3a";
    let (ca, dir, ca_file) = test_ca();
    let github = TestServer::https(&ca, |seen| {
        match (seen.path.as_str(), seen.header("authorization")) {
            ("/repos/octo/demo/issues?state=open", Some(auth))
                if auth == format!("Bearer {TOKEN}") =>
            {
                Reply::ok(r#"[{"number":7,"title":"Egress","html_url":"https://x/7","extra":1}]"#)
            }
            _ => Reply {
                status: 401,
                ..Reply::ok("bad credentials")
            },
        }
    });
    let elsewhere = TestServer::https(&ca, |_| Reply::ok("[]"));
    let log = dir.path().join("bermd.log");
    let bermd = Bermd::start_with(
        &["--extra-ca", ca_file.to_str().unwrap()],
        std::fs::File::create(&log).unwrap(),
    );
    let out = berm_in(
        &bermd.home,
        &["secret", "set", "issues", "GITHUB_TOKEN"],
        Some(&format!("{TOKEN}\n")),
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let (api, other) = (
        format!("127.0.0.1:{}", github.port()),
        format!("127.0.0.1:{}", elsewhere.port()),
    );
    let (net_api, net_other) = (format!("net={api}"), format!("net={other}"));
    let secret = format!("GITHUB_TOKEN={api}");
    let grants = [
        "--grant", &net_api, "--grant", &net_other, "--secret", &secret,
    ];
    bermd.deploy_example("issues", &grants);
    let list = |host: &str| {
        bermd.berm(&[
            "call",
            "issues_list",
            &format!(r#"{{"repo":"octo/demo","api":"https://{host}"}}"#),
        ])
    };
    let out = list(&api);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let issues: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(issues[0]["number"], 7);
    let out = list(&other);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("may be sent only to"), "{stderr}");
    assert_eq!(elsewhere.connections(), 0);

    let mut shown = String::new();
    for args in [
        &["secret", "ls", "issues"][..],
        &["ls"],
        &["ls", "--json"],
        &["inspect", "issues"],
        &["inspect", "issues", "--json"],
    ] {
        let out = bermd.berm(args);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?}: {}",
            text(&out.stderr)
        );
        shown.push_str(&text(&out.stdout));
        shown.push_str(&text(&out.stderr));
    }
    assert!(shown.contains("GITHUB_TOKEN"), "{shown}");
    assert!(
        shown.contains(&format!("secret:GITHUB_TOKEN={api}")),
        "{shown}"
    );
    let log_text = std::fs::read_to_string(&log).unwrap();
    assert!(log_text.contains("secret set"), "{log_text}");
    assert!(!shown.contains(TOKEN) && !log_text.contains(TOKEN));
    let secret_file = bermd.home.join("secrets/issues/GITHUB_TOKEN");
    assert_eq!(berm_fixtures::mode(&secret_file), 0o600);
    assert_eq!(std::fs::read_to_string(&secret_file).unwrap(), TOKEN);

    let out = bermd.berm(&["secret", "rm", "issues", "GITHUB_TOKEN"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = list(&api);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("has no value"),
        "{}",
        text(&out.stderr)
    );
    let out = bermd.berm(&["secret", "rm", "issues", "GITHUB_TOKEN"]);
    assert_ne!(out.status.code(), Some(0));
}

/// A program's `[program.secrets]` names a value file outside the folder: under
/// `bermd --app` and through `berm deploy --app`, the issues reader gets
/// the token to its host only, and a file others may read is refused.
#[test]
fn an_app_reads_its_secret_from_the_file_its_manifest_names() {
    use berm_egress::testing::{Reply, TestServer};
    use std::os::unix::fs::PermissionsExt;
    const TOKEN: &str = "ghp-file-value-51c0";
    let (ca, dir, ca_file) = test_ca();
    let github = TestServer::https(&ca, |seen| match seen.header("authorization") {
        Some(auth) if auth == format!("Bearer {TOKEN}") => {
            Reply::ok(r#"[{"number":9,"title":"t"}]"#)
        }
        _ => Reply {
            status: 401,
            ..Reply::ok("bad credentials")
        },
    });
    let api = format!("127.0.0.1:{}", github.port());
    let token = dir.path().join("github-token");
    std::fs::write(&token, format!("{TOKEN}\n")).unwrap();
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
    let folder = dir.path().join("issues-app");
    std::fs::create_dir(&folder).unwrap();
    std::fs::copy(wasm("issues"), folder.join("issues.wasm")).unwrap();
    std::fs::write(
        folder.join("berm.toml"),
        format!(
            "name = \"issues\"\n[[program]]\nname = \"issues\"\nwasm = \"issues.wasm\"\n\
             grants = [\"net={api}\", \"secret:GITHUB_TOKEN={api}\"]\n\
             [program.secrets]\nGITHUB_TOKEN = {:?}\n",
            token.display().to_string()
        ),
    )
    .unwrap();
    let call = format!(r#"{{"repo":"octo/demo","api":"https://{api}"}}"#);
    let ca_arg = ["--extra-ca", ca_file.to_str().unwrap()];

    // bermd --app: read on the host when the request needs it.
    let app = Bermd::start_with(
        &[&ca_arg[..], &["--app", folder.to_str().unwrap()]].concat(),
        Stdio::null(),
    );
    let out = app.berm(&["call", "issues_list", &call]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let issues: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(issues[0]["number"], 9);
    drop(app);

    // berm deploy --app: read and set before anything is deployed.
    let bermd = Bermd::start_with(&ca_arg, Stdio::null());
    let out = bermd.berm(&["deploy", "--app", folder.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(!text(&out.stdout).contains(TOKEN));
    let out = bermd.berm(&["call", "issues_list", &call]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));

    // Readable by others: refused, naming the file and the fix.
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = bermd.berm(&["deploy", "--app", folder.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("chmod 600") && stderr.contains("nothing was deployed"),
        "{stderr}"
    );
    assert!(!stderr.contains(TOKEN), "{stderr}");
}

/// An app folder `issues-app` in `dir` whose program reads GITHUB_TOKEN from `value_file`,
/// with the net and secret grants for `api`.
fn issues_folder(dir: &Path, api: &str, value_file: &Path) -> PathBuf {
    let folder = dir.join("issues-app");
    std::fs::create_dir_all(&folder).unwrap();
    std::fs::copy(wasm("issues"), folder.join("issues.wasm")).unwrap();
    std::fs::write(
        folder.join("berm.toml"),
        format!(
            "name = \"issues\"\n[[program]]\nname = \"issues\"\nwasm = \"issues.wasm\"\n\
             grants = [\"net={api}\", \"secret:GITHUB_TOKEN={api}\"]\n\
             [program.secrets]\nGITHUB_TOKEN = {:?}\n",
            value_file.display().to_string()
        ),
    )
    .unwrap();
    folder
}

/// `contents` in a new file `path`, mode 0600 (its directories made, mode 0700).
fn private_file(path: &Path, contents: &str) {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path.parent().unwrap())
        .unwrap();
    std::fs::write(path, contents).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
}

/// bermd's exit status and what it wrote, once it has stopped: it must refuse to start, and
/// if it serves instead (its control socket in `home` answers) the test fails.
fn refused_at_start(mut command: Command, home: &Path) -> (Option<i32>, String) {
    // A file, not a pipe: a bermd that serves logs more than a pipe holds.
    let log = tempfile::NamedTempFile::new().unwrap();
    let mut child = command.stderr(log.reopen().unwrap()).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return (status.code(), std::fs::read_to_string(log.path()).unwrap());
        }
        if std::os::unix::net::UnixStream::connect(home.join("control.sock")).is_ok() {
            let _ = child.kill();
            let _ = child.wait();
            panic!("bermd started and served instead of refusing the folder");
        }
        assert!(
            Instant::now() < deadline,
            "bermd neither stopped nor came up"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// bermd run with `--home H` while `BERM_HOME` names another directory (as the Kubernetes
/// base runs it): a folder naming another program's stored secret under H as its own value
/// file is refused before anything is served, by bermd and by `berm --home H deploy --app`.
#[test]
fn a_secret_file_under_the_home_given_by_flag_is_refused() {
    const STORED: &str = "ghp-stored-for-another-program";
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("flag-home");
    let stored = home.join("secrets/other/GITHUB_TOKEN");
    private_file(&stored, STORED);
    let folder = issues_folder(dir.path(), "127.0.0.1:9", &stored);
    let env_home = dir.path().join("env-home");
    let home_arg = home.to_str().unwrap();
    let (code, stderr) = refused_at_start(
        bermd_command(
            &env_home,
            &["--home", home_arg, "--app", folder.to_str().unwrap()],
        ),
        &home,
    );
    assert_eq!(code, Some(2), "{stderr}");
    let inside = format!(
        "{} is inside {} (bermd's state and its secret store)",
        stored.display(),
        home.display()
    );
    assert!(stderr.contains(&inside), "{stderr}");
    assert!(!stderr.contains(STORED), "{stderr}");

    let out = berm_in(
        &env_home,
        &[
            "--home",
            home_arg,
            "deploy",
            "--app",
            folder.to_str().unwrap(),
        ],
        None,
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains(&inside), "{stderr}");
}

/// No file bermd reads for itself can be a program's secret: its `--ask-key`, its
/// `--http-token-file`, its `--extra-ca`, by name or through a link.
#[test]
fn a_secret_file_that_is_bermds_ask_key_is_refused() {
    let (_ca, dir, ca_file) = test_ca();
    let ask_key = dir.path().join("keys/ask.key");
    private_file(&ask_key, &format!("{}\n", "ab".repeat(32)));
    let token = dir.path().join("keys/http-token");
    private_file(&token, &"t".repeat(40));
    let link = dir.path().join("innocent-looking");
    std::os::unix::fs::symlink(&ask_key, &link).unwrap();
    let http = "127.0.0.1:0".to_string();
    let cases: [(&Path, &[&str], &str); 4] = [
        (
            &ask_key,
            &["--ask-key", ask_key.to_str().unwrap()],
            "the key that seals asking programs' state (--ask-key)",
        ),
        (
            &link,
            &["--ask-key", ask_key.to_str().unwrap()],
            "the key that seals asking programs' state (--ask-key)",
        ),
        (
            &token,
            &[
                "--http",
                &http,
                "--http-token-file",
                token.to_str().unwrap(),
            ],
            "bermd's HTTP bearer token (--http-token-file)",
        ),
        (
            &ca_file,
            &["--extra-ca", ca_file.to_str().unwrap()],
            "a CA bundle bermd trusts (--extra-ca)",
        ),
    ];
    for (named, flags, what) in cases {
        let case = tempfile::tempdir().unwrap();
        let folder = issues_folder(case.path(), "127.0.0.1:9", named);
        let home = case.path().join("home");
        let args = [flags, &["--app", folder.to_str().unwrap()]].concat();
        let (code, stderr) = refused_at_start(bermd_command(&home, &args), &home);
        assert_eq!(code, Some(2), "{named:?}: {stderr}");
        let real = std::fs::canonicalize(named).unwrap();
        let via = if real == named {
            String::new()
        } else {
            format!(" (through links: {})", real.display())
        };
        let own = format!(
            "{}{via} is {} ({what}), a file berm reads for itself",
            named.display(),
            // What bermd was given, as it names it.
            if named == link { &ask_key } else { named }.display()
        );
        assert!(stderr.contains(&own), "{stderr}");
    }
}

/// The value file is judged when it is read, on the file opened: a folder's link that led to
/// the user's own file when bermd loaded it, and leads into bermd's `--home` later, sends
/// nothing from there.
#[test]
fn a_link_swapped_after_load_into_the_home_given_by_flag_is_refused() {
    use berm_egress::testing::{Reply, TestServer};
    const MINE: &str = "ghp-the-users-own";
    const STORED: &str = "ghp-stored-for-another-program";
    let (ca, dir, ca_file) = test_ca();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let github = {
        let seen = seen.clone();
        TestServer::https(&ca, move |request| {
            let auth = request.header("authorization").unwrap_or("").to_string();
            seen.lock().unwrap().push(auth);
            Reply::ok(r#"[{"number":3,"title":"t"}]"#)
        })
    };
    let api = format!("127.0.0.1:{}", github.port());
    let home = dir.path().join("flag-home");
    let stored_dir = home.join("secrets/other");
    private_file(&stored_dir.join("GITHUB_TOKEN"), STORED);
    let mine = dir.path().join("mine");
    private_file(&mine.join("GITHUB_TOKEN"), MINE);
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&mine, &link).unwrap();
    let folder = issues_folder(dir.path(), &api, &link.join("GITHUB_TOKEN"));
    let log = dir.path().join("bermd.log");
    let mut command = bermd_command(
        &dir.path().join("env-home"),
        &[
            "--home",
            home.to_str().unwrap(),
            "--extra-ca",
            ca_file.to_str().unwrap(),
            "--app",
            folder.to_str().unwrap(),
        ],
    );
    let mut bermd = command
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::os::unix::net::UnixStream::connect(home.join("control.sock")).is_err() {
        assert!(
            Instant::now() < deadline && bermd.try_wait().unwrap().is_none(),
            "bermd did not come up: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let call = format!(r#"{{"repo":"octo/demo","api":"https://{api}"}}"#);
    let list = || berm_in(&home, &["call", "issues_list", &call], None);
    let out = list();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(*seen.lock().unwrap(), [format!("Bearer {MINE}")]);

    // The user's directory becomes a link into bermd's home.
    std::fs::rename(&mine, dir.path().join("mine-away")).unwrap();
    std::os::unix::fs::symlink(&stored_dir, &mine).unwrap();
    let out = list();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let _ = bermd.kill();
    let _ = bermd.wait();
    assert_eq!(*seen.lock().unwrap(), [format!("Bearer {MINE}")]);
    let log = std::fs::read_to_string(&log).unwrap();
    assert!(
        log.contains(&format!("is inside {}", home.display())),
        "{log}"
    );
    assert!(!log.contains(STORED) && !text(&out.stderr).contains(STORED));
}

#[test]
fn search_json_lists_entries_best_first_with_scores() {
    let dir = tempfile::tempdir().unwrap();
    let index = dir.path().join("index");
    std::fs::create_dir_all(index.join("entries")).unwrap();
    let digest = format!("sha256:{}", "a".repeat(64));
    for (name, description) in [
        ("files", "read a file from a granted directory"),
        ("notes", "keep notes in a key value store"),
    ] {
        let entry = format!(
            "name = \"{name}\"\nreference = \"127.0.0.1:5000/{name}@{digest}\"\n\
             digest = \"{digest}\"\npublisher = \"tests\"\ndescription = \"{description}\"\n"
        );
        std::fs::write(index.join(format!("entries/{name}.toml")), entry).unwrap();
    }
    let index = index.to_str().unwrap();
    let out = berm_in(
        dir.path(),
        &["search", "--json", "--index-dir", index, "key value notes"],
        None,
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let found: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let found = found.as_array().unwrap();
    assert_eq!(found[0]["name"], "notes", "{found:?}");
    assert!(found[0]["score"].as_f64().unwrap() > 0.0, "{found:?}");
    assert!(found[0]["reference"].as_str().unwrap().ends_with(&digest));

    let out = berm_in(
        dir.path(),
        &["search", "--json", "--index-dir", index, "nothing matches"],
        None,
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "[]\n");
}

/// bermd serving `--http` on a free loopback port with `flags`, once it has
/// recorded http.json; and its URL.
fn bermd_on_http(flags: &[&str]) -> (Bermd, String) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let bermd = Bermd::start_with(&[&["--http", addr.as_str()], flags].concat(), Stdio::null());
    let deadline = Instant::now() + Duration::from_secs(30);
    while !bermd.home.join("http.json").exists() {
        assert!(Instant::now() < deadline, "bermd wrote no http.json");
        std::thread::sleep(Duration::from_millis(20));
    }
    (bermd, format!("http://{addr}/mcp"))
}

#[test]
fn berm_http_prints_the_url_the_header_and_commands_to_paste() {
    let (bermd, url) = bermd_on_http(&[]);
    let token_file = bermd.home.join("http-token");
    let token = std::fs::read_to_string(&token_file).unwrap();
    let header = format!("Authorization: Bearer {}", token.trim());
    let out = bermd.berm(&["http"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        format!(
            "URL:    {url}\n\
             Header: {header}\n        (the token is in {})\n\n\
             Claude Code:\n  claude mcp add --transport http berm {url} --header \"{header}\"\n\
             MCP Inspector:\n  npx @modelcontextprotocol/inspector --cli {url} --transport http \
             --header \"{header}\" --method tools/list\n",
            token_file.display()
        )
    );
    let out = bermd.berm(&["http", "--json"]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        json,
        serde_json::json!({
            "url": url,
            "token_file": token_file.display().to_string(),
            "headers": {"Authorization": format!("Bearer {}", token.trim())},
        })
    );
    drop(bermd);

    let (bermd, url) = bermd_on_http(&["--no-auth"]);
    let out = bermd.berm(&["http"]);
    assert!(
        text(&out.stdout).starts_with(&format!(
            "URL:    {url}\nHeader: none: bermd runs with --no-auth, so any local process gets in\n"
        )),
        "{}",
        text(&out.stdout)
    );
    drop(bermd);
}

#[test]
fn berm_http_says_when_bermd_serves_no_http() {
    let bermd = Bermd::start();
    let out = bermd.berm(&["http"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        text(&out.stderr),
        format!(
            "berm: bermd is not serving MCP over HTTP ({} does not exist): start it with \
             `bermd --http 127.0.0.1:8765 &`\n",
            bermd.home.join("http.json").display()
        )
    );
    // A bermd killed with SIGKILL leaves its record behind; nothing answers there.
    let (mut bermd, _) = bermd_on_http(&[]);
    bermd.child.kill().unwrap();
    bermd.child.wait().unwrap();
    let out = bermd.berm(&["http"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("but nothing answers there: it is not running"),
        "{}",
        text(&out.stderr)
    );
}

/// `bermd --receipts`: real calls (a fetch with a secret, a call between programs, a
/// failure) leave a log `berm receipts verify` accepts, whose receipts say what each call
/// reached; one call checks against what its client kept; another key is refused.
#[test]
fn every_call_leaves_a_receipt_that_verifies() {
    use berm_egress::testing::{Reply, TestServer};
    const TOKEN: &str = "receipt-token-5e1d";
    let (ca, dir, ca_file) = test_ca();
    let api = TestServer::https(&ca, |seen| match seen.header("authorization") {
        Some(auth) if auth == format!("Bearer {TOKEN}") => {
            Reply::ok(r#"[{"number":3,"title":"Receipts","html_url":"https://x/3"}]"#)
        }
        _ => Reply {
            status: 401,
            ..Reply::ok("bad credentials")
        },
    });
    let receipts = dir.path().join("receipts");
    let key = dir.path().join("host-key.pem");
    let mut bermd = Bermd::start_with(
        &[
            "--extra-ca",
            ca_file.to_str().unwrap(),
            "--receipts",
            receipts.to_str().unwrap(),
            "--receipts-key",
            key.to_str().unwrap(),
            // Seal often, so checkpoints land between receipts as on a slow machine.
            "--receipts-interval-ms",
            "1",
        ],
        Stdio::null(),
    );
    let out = berm_in(
        &bermd.home,
        &["secret", "set", "issues", "GITHUB_TOKEN"],
        Some(&format!("{TOKEN}\n")),
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let host = format!("127.0.0.1:{}", api.port());
    let (net, secret) = (format!("net={host}"), format!("GITHUB_TOKEN={host}"));
    bermd.deploy_example("issues", &["--grant", &net, "--secret", &secret]);
    bermd.deploy_example("echo", &[]);
    bermd.deploy_example("compose", &["--grant", "call=echo"]);
    let arguments = format!(r#"{{"repo":"octo/demo","api":"https://{host}"}}"#);
    let listed = bermd.berm(&["call", "issues_list", &arguments]);
    assert_eq!(listed.status.code(), Some(0), "{}", text(&listed.stderr));
    let shout = bermd.berm(&["call", "compose_shout", r#"{"message":"hi"}"#]);
    assert_eq!(text(&shout.stdout).trim_end(), "HI");
    let failed = bermd.berm(&["call", "echo_fail", r#"{"message":"no"}"#]);
    assert_eq!(failed.status.code(), Some(1));
    berm_fixtures::terminate(&bermd.child);
    bermd.child.wait().unwrap();

    let public = dir.path().join("host.pub");
    let out = berm_in(
        &bermd.home,
        &["attest", "key", "--key", key.to_str().unwrap()],
        None,
    );
    std::fs::write(&public, &out.stdout).unwrap();
    let verify = |extra: &[&str]| {
        let base = [
            "receipts",
            "verify",
            receipts.to_str().unwrap(),
            "--key",
            public.to_str().unwrap(),
        ];
        berm_in(&bermd.home, &[&base[..], extra].concat(), None)
    };
    let out = verify(&["--json"]);
    let verdict: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(0), "{verdict}");
    // issues_list; echo_echo inside compose_shout, then compose_shout; echo_fail.
    assert_eq!(verdict["receipts"], 4, "{verdict}");

    let shown = berm_in(
        &bermd.home,
        &["receipts", "show", receipts.to_str().unwrap()],
        None,
    );
    let receipts_shown: Vec<serde_json::Value> = text(&shown.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let call = |n: usize| &receipts_shown[n]["call"];
    assert_eq!(call(0)["program"], "issues");
    assert_eq!(call(0)["outcome"], "ok");
    assert_eq!(
        call(0)["http"],
        serde_json::json!([{"host": host, "status": 200, "error": null}])
    );
    assert_eq!(call(0)["secrets"], serde_json::json!(["GITHUB_TOKEN"]));
    assert!(call(0)["grants"].to_string().contains(&net), "{}", call(0));
    assert_eq!(call(0)["program_sha256"].as_str().unwrap().len(), 64);
    assert_eq!(call(0)["code_sha256"].as_str().unwrap().len(), 64);
    assert!(!receipts_shown[0].to_string().contains(TOKEN));
    assert_eq!(
        (&call(1)["program"], &call(1)["caller"]),
        (&"echo".into(), &"compose".into())
    );
    assert_eq!(call(2)["program"], "compose");
    assert_eq!(call(2)["calls"][0]["program"], "echo");
    assert_eq!(call(3)["outcome"], "failed");
    // The callee's receipt is the one its caller names.
    let file = berm_receipts::log_files(&receipts).unwrap().remove(0);
    let contents = std::fs::read_to_string(file).unwrap();
    // A checkpoint may have been sealed between any two receipts: skip those lines.
    let echo_line = contents
        .lines()
        .filter(|line| !line.contains("payloadType"))
        .nth(1)
        .unwrap();
    assert_eq!(
        call(2)["calls"][0]["receipt"],
        berm_receipts::format::sha256_hex(echo_line.as_bytes())
    );

    // What the client kept: its arguments (in its own key order and spacing) and result.
    let kept_args = dir.path().join("args.json");
    std::fs::write(
        &kept_args,
        format!(r#"{{ "api": "https://{host}", "repo": "octo/demo" }}"#),
    )
    .unwrap();
    let kept_result = dir.path().join("result.txt");
    let result = text(&listed.stdout);
    std::fs::write(&kept_result, result.strip_suffix('\n').unwrap()).unwrap();
    let (args_path, result_path) = (kept_args.to_str().unwrap(), kept_result.to_str().unwrap());
    let out = verify(&["--arguments", args_path, "--result", result_path]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    assert!(
        text(&out.stdout).contains("receipt 0 records exactly"),
        "{}",
        text(&out.stdout)
    );
    std::fs::write(&kept_result, "[]").unwrap();
    let out = verify(&[
        "--arguments",
        args_path,
        "--result",
        result_path,
        "--seq",
        "0",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stdout).contains("result_mismatch"),
        "{}",
        text(&out.stdout)
    );

    // Another key: every checkpoint refused.
    let other = dir.path().join("other.pem");
    let out = berm_in(
        &bermd.home,
        &["attest", "key", "--key", other.to_str().unwrap()],
        None,
    );
    std::fs::write(&public, &out.stdout).unwrap();
    let out = verify(&[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stdout).contains("signature_invalid"),
        "{}",
        text(&out.stdout)
    );
}

/// A bermd killed with SIGKILL in the middle of calls loses no receipt of a call it
/// answered: the next start seals what it left, and every answered call checks.
#[test]
fn a_killed_bermd_loses_no_receipt_of_an_answered_call() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};
    let dir = tempfile::tempdir().unwrap();
    let receipts = dir.path().join("receipts");
    let key = dir.path().join("host-key.pem");
    let args = [
        "--receipts",
        receipts.to_str().unwrap(),
        "--receipts-key",
        key.to_str().unwrap(),
        // Nothing sealed or synced by bermd itself before the kill.
        "--receipts-interval-ms",
        "60000",
    ];
    let mut bermd = Bermd::start_with(&args, Stdio::null());
    bermd.deploy_example("echo", &[]);
    let answered: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let home = bermd.home.clone();
    let clients: Vec<_> = (0..3)
        .map(|client| {
            let (answered, stop, home) = (answered.clone(), stop.clone(), home.clone());
            std::thread::spawn(move || {
                for i in 0.. {
                    if stop.load(Ordering::SeqCst) {
                        return;
                    }
                    let message = format!("client {client} call {i}");
                    let arguments = serde_json::json!({ "message": message }).to_string();
                    let out = berm_in(&home, &["call", "echo_echo", &arguments], None);
                    if out.status.code() != Some(0) {
                        return;
                    }
                    let result = text(&out.stdout).strip_suffix('\n').unwrap().to_string();
                    answered.lock().unwrap().push((arguments, result));
                }
            })
        })
        .collect();
    berm_fixtures::wait_until(
        Duration::from_secs(60),
        Duration::from_millis(5),
        || answered.lock().unwrap().len() >= 30,
        || "30 calls were not answered".into(),
    );
    bermd.child.kill().unwrap();
    bermd.child.wait().unwrap();
    stop.store(true, Ordering::SeqCst);
    for client in clients {
        client.join().unwrap();
    }
    let answered = answered.lock().unwrap().clone();

    // The next start seals what the killed one left; a clean stop then seals its own.
    let home = bermd.home.clone();
    let mut again = Bermd::start_in(home, None, &args, Stdio::null());
    berm_fixtures::terminate(&again.child);
    again.child.wait().unwrap();
    let public = berm_dsse::HostKey::load_or_create(Some(&key))
        .unwrap()
        .public();
    let report = berm_receipts::verify_dir(&receipts, &public).unwrap();
    assert!(report.ok(), "{:?}", report.problems);
    for (arguments, result) in &answered {
        let arguments: serde_json::Value = serde_json::from_str(arguments).unwrap();
        assert!(
            report.check_call(None, &arguments, result).is_ok(),
            "no sealed receipt for the answered call {arguments}"
        );
    }
    assert!(report.receipts as usize >= answered.len());
}
