//! App folders that name programs by image reference (`image = "REGISTRY/REPO@sha256:…"`),
//! against a real registry (Debian's docker-registry) and real bermds: `berm pull --app`
//! fills a program store, bermd --app reads it and never the registry, a store edited after
//! the pull is refused, and `berm deploy --app` pulls into $BERM_HOME/programs itself.

#[path = "../../oci/tests/support/registry.rs"]
mod registry;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use registry::TestRegistry;

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn berm(home: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_berm"))
        .args(args)
        .env("BERM_HOME", home)
        .env("XDG_CONFIG_HOME", home.join("config"))
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn ok(home: &Path, args: &[&str]) -> String {
    let out = berm(home, args);
    assert_eq!(
        out.status.code(),
        Some(0),
        "berm {args:?}: {}",
        text(&out.stderr)
    );
    format!("{}{}", text(&out.stdout), text(&out.stderr))
}

fn bermd_path() -> PathBuf {
    let bermd = Path::new(env!("CARGO_BIN_EXE_berm")).with_file_name("bermd");
    assert!(bermd.exists(), "{} is not built", bermd.display());
    bermd
}

/// A running bermd, stopped when dropped, so a failing assertion leaves none behind.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        berm_fixtures::terminate(&self.0);
        let _ = self.0.wait();
    }
}

/// bermd on `home` with `args`, once its control socket answers; or its exit and stderr
/// when it stops first.
fn bermd(home: &Path, args: &[&str]) -> Result<Running, (Option<i32>, String)> {
    let log = home.with_extension("log");
    let mut child = Command::new(bermd_path())
        .args(args)
        .env("BERM_HOME", home)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return Err((status.code(), std::fs::read_to_string(&log).unwrap()));
        }
        if std::os::unix::net::UnixStream::connect(home.join("control.sock")).is_ok() {
            return Ok(Running(child));
        }
        assert!(Instant::now() < deadline, "bermd did not come up");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn stop(running: Running) {
    drop(running);
}

/// `berm push` of the echo example to `repo_and_tag` on `registry`: its pinned reference.
fn push_echo(home: &Path, registry: &TestRegistry, repo_and_tag: &str) -> String {
    let echo = berm_fixtures::example_path("echo");
    let out = ok(
        home,
        &[
            "push",
            &registry.reference(repo_and_tag),
            echo.to_str().unwrap(),
            "--json",
        ],
    );
    let pushed: serde_json::Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    let pinned = pushed["pinned"].as_str().unwrap().to_string();
    assert!(pinned.contains("@sha256:"), "{pinned}");
    pinned
}

#[test]
fn programs_named_by_image_are_pulled_into_a_store_and_read_from_it_verified() {
    let registry = TestRegistry::start();
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir_all(home.join("config")).unwrap();
    let echo = berm_fixtures::example_path("echo");
    let pinned = push_echo(&home, &registry, "berm/echo:v1");

    // A folder with one program by image and one in the folder.
    let app = dir.path().join("app");
    std::fs::create_dir(&app).unwrap();
    std::fs::copy(berm_fixtures::example_path("notes"), app.join("notes.wasm")).unwrap();
    std::fs::write(
        app.join("berm.toml"),
        format!(
            "name = \"imgs\"\n\n[[program]]\nname = \"echo\"\nimage = \"{pinned}\"\n\n\
             [[program]]\nname = \"notes\"\nwasm = \"notes.wasm\"\ngrants = [\"kv\"]\n"
        ),
    )
    .unwrap();
    let app_arg = app.to_str().unwrap();
    let store = dir.path().join("store");
    let store_arg = store.to_str().unwrap();

    // bermd never pulls: without the store filled it refuses, saying how to fill it.
    let serve_home = dir.path().join("serve");
    let (code, log) = bermd(&serve_home, &["--app", app_arg, "--programs", store_arg])
        .map(stop)
        .unwrap_err();
    assert_eq!(code, Some(2), "{log}");
    assert!(log.contains("berm pull --app"), "{log}");

    let pulled = ok(&home, &["pull", "--app", app_arg, "--store", store_arg]);
    assert!(pulled.starts_with("pulled   echo"), "{pulled}");
    let again = ok(
        &home,
        &["pull", "--app", app_arg, "--store", store_arg, "--json"],
    );
    let again: serde_json::Value = serde_json::from_str(&again).unwrap();
    assert_eq!(again["programs"][0]["status"], "present", "{again}");
    let sha256 = again["programs"][0]["sha256"].as_str().unwrap().to_string();
    assert_eq!(
        sha256,
        format!(
            "sha256:{}",
            berm_app::sha256_hex(&std::fs::read(&echo).unwrap())
        )
    );

    // bermd --app serves it from the store; the registry is gone by then.
    drop(registry);
    let served = bermd(&serve_home, &["--app", app_arg, "--programs", store_arg]).unwrap();
    let shout = ok(
        &serve_home,
        &["call", "echo_echo", r#"{"message":"by image"}"#],
    );
    assert_eq!(shout.trim_end(), "by image");
    // `berm ls` shows the digest's first twelve digits.
    let listed = ok(&serve_home, &["ls"]);
    assert!(listed.contains(&sha256[..19]), "{listed}");
    stop(served);

    // A store edited after the pull is refused, naming the program and the mismatch.
    let entry = std::fs::read_dir(store.join("sha256"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    std::fs::write(
        entry.join("program.wasm"),
        std::fs::read(app.join("notes.wasm")).unwrap(),
    )
    .unwrap();
    let (code, log) = bermd(&serve_home, &["--app", app_arg, "--programs", store_arg])
        .map(stop)
        .unwrap_err();
    assert_ne!(code, Some(0), "{log}");
    assert!(
        log.contains("program `echo`") && log.contains("not the sha256:"),
        "{log}"
    );

    // A reference that is not pinned is refused when the folder is read.
    std::fs::write(
        app.join("berm.toml"),
        "name = \"imgs\"\n[[program]]\nname = \"echo\"\nimage = \"127.0.0.1:5000/berm/echo:v1\"\n",
    )
    .unwrap();
    let out = berm(&home, &["pull", "--app", app_arg, "--store", store_arg]);
    assert_ne!(out.status.code(), Some(0));
    assert!(
        text(&out.stderr).contains("not pinned by digest"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn deploy_app_pulls_what_the_folder_names_by_image_into_berm_home() {
    let registry = TestRegistry::start();
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir_all(home.join("config")).unwrap();
    let pinned = push_echo(&home, &registry, "berm/echo:v2");
    let app = dir.path().join("app");
    std::fs::create_dir(&app).unwrap();
    std::fs::write(
        app.join("berm.toml"),
        format!("name = \"imgs\"\n[[program]]\nname = \"echo\"\nimage = \"{pinned}\"\n"),
    )
    .unwrap();
    let served = bermd(&home, &[]).unwrap();
    let deployed = ok(&home, &["deploy", "--app", app.to_str().unwrap()]);
    assert!(deployed.contains("pulled echo"), "{deployed}");
    assert!(home.join("programs/sha256").is_dir());
    let said = ok(&home, &["call", "echo_echo", r#"{"message":"deployed"}"#]);
    assert_eq!(said.trim_end(), "deployed");
    stop(served);
}
