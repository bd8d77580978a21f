//! Signed programs through the CLI, against a real registry (Debian's docker-registry) and a
//! real bermd: `berm trust keygen`, `berm push --sign-key`, `berm trust verify`, `berm deploy
//! --verify-key` (the right key deploys; a wrong key, an unsigned program and a malformed key
//! are refused before anything is deployed) and the trust policy in force for `berm pull`.

#[path = "../../oci/tests/support/registry.rs"]
mod registry;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use registry::TestRegistry;

const PASSWORD: &str = "correct horse";

/// One user's world: a BERM_HOME with bermd running in it, and a config directory for the
/// trust policy.
struct World {
    dir: tempfile::TempDir,
    bermd: Child,
}

impl World {
    fn start() -> World {
        let dir = tempfile::tempdir().unwrap();
        let bermd = Path::new(env!("CARGO_BIN_EXE_berm")).with_file_name("bermd");
        assert!(
            bermd.exists(),
            "{} is not built: run cargo build -p berm-service",
            bermd.display()
        );
        let home = dir.path().join("home");
        let child = Command::new(bermd)
            .env("BERM_HOME", &home)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        while std::os::unix::net::UnixStream::connect(home.join("control.sock")).is_err() {
            assert!(Instant::now() < deadline, "bermd did not come up");
            std::thread::sleep(Duration::from_millis(20));
        }
        std::fs::create_dir_all(dir.path().join("config/berm")).unwrap();
        World { dir, bermd: child }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn berm_in(&self, cwd: &Path, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_berm"))
            .args(args)
            .current_dir(cwd)
            .env("BERM_HOME", self.path("home"))
            .env("XDG_CONFIG_HOME", self.path("config"))
            .env("COSIGN_PASSWORD", PASSWORD)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    fn berm(&self, args: &[&str]) -> Output {
        self.berm_in(self.dir.path(), args)
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = self.berm(args);
        assert_eq!(
            out.status.code(),
            Some(0),
            "berm {args:?}: {}",
            text(&out.stderr)
        );
        format!("{}{}", text(&out.stdout), text(&out.stderr))
    }

    fn refused(&self, args: &[&str]) -> String {
        let out = self.berm(args);
        assert_eq!(
            out.status.code(),
            Some(2),
            "berm {args:?} should fail: {}",
            text(&out.stdout)
        );
        text(&out.stderr)
    }

    fn deployed(&self) -> String {
        self.ok(&["ls"])
    }

    fn policy(&self, text: &str) {
        std::fs::write(self.path("config/berm/trust.toml"), text).unwrap();
    }
}

impl Drop for World {
    fn drop(&mut self) {
        let _ = self.bermd.kill();
        let _ = self.bermd.wait();
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn wasm(name: &str) -> String {
    berm_fixtures::example_path(name).display().to_string()
}

#[test]
fn signed_programs_deploy_and_others_are_refused_before_anything_is_deployed() {
    let registry = TestRegistry::start();
    let world = World::start();
    for who in ["alice", "mallory"] {
        std::fs::create_dir(world.path(who)).unwrap();
        let out = world.berm_in(&world.path(who), &["trust", "keygen"]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        assert!(
            text(&out.stdout).contains("public key"),
            "{}",
            text(&out.stdout)
        );
    }
    let key = |who: &str, file: &str| world.path(&format!("{who}/{file}")).display().to_string();
    // keygen never overwrites.
    let again = world.berm_in(&world.path("alice"), &["trust", "keygen"]);
    assert_eq!(again.status.code(), Some(2));
    assert!(
        text(&again.stderr).contains("exists"),
        "{}",
        text(&again.stderr)
    );

    let echo = registry.reference("berm/echo:v1");
    let notes = registry.reference("berm/notes:v1");
    let pushed = world.ok(&[
        "push",
        &echo,
        &wasm("echo"),
        "--sign-key",
        &key("alice", "cosign.key"),
    ]);
    assert!(pushed.contains("signed"), "{pushed}");
    world.ok(&["push", &notes, &wasm("notes")]);

    // verify: the right key, then a wrong one, then an unsigned program.
    let verified = world.ok(&[
        "trust",
        "verify",
        &echo,
        "--key",
        &key("alice", "cosign.pub"),
    ]);
    assert!(
        verified.contains("verified") && verified.contains("cosign.pub"),
        "{verified}"
    );
    let wrong = world.refused(&[
        "trust",
        "verify",
        &echo,
        "--key",
        &key("mallory", "cosign.pub"),
    ]);
    assert!(wrong.contains("no valid signature"), "{wrong}");
    let unsigned = world.refused(&[
        "trust",
        "verify",
        &notes,
        "--key",
        &key("alice", "cosign.pub"),
    ]);
    assert!(unsigned.contains("is not signed"), "{unsigned}");
    let nothing = world.refused(&["trust", "verify", &echo]);
    assert!(
        nothing.contains("--key") && nothing.contains("trust.toml"),
        "{nothing}"
    );

    // deploy --verify-key refuses before anything is deployed.
    let wrong = world.refused(&[
        "deploy",
        "echo",
        &echo,
        "--verify-key",
        &key("mallory", "cosign.pub"),
    ]);
    assert!(
        wrong.contains("refusing") && wrong.contains("no valid signature"),
        "{wrong}"
    );
    let unsigned = world.refused(&[
        "deploy",
        "notes",
        &notes,
        "--verify-key",
        &key("alice", "cosign.pub"),
    ]);
    assert!(unsigned.contains("is not signed"), "{unsigned}");
    let private = world.refused(&[
        "deploy",
        "echo",
        &echo,
        "--verify-key",
        &key("alice", "cosign.key"),
    ]);
    assert!(private.contains("private key"), "{private}");
    let file = world.refused(&[
        "deploy",
        "echo",
        &wasm("echo"),
        "--verify-key",
        &key("alice", "cosign.pub"),
    ]);
    assert!(file.contains("is a file"), "{file}");
    assert!(
        !world.deployed().contains("echo") && !world.deployed().contains("notes"),
        "{}",
        world.deployed()
    );
    let out = world.ok(&[
        "deploy",
        "echo",
        &echo,
        "--verify-key",
        &key("alice", "cosign.pub"),
    ]);
    assert!(
        out.contains("signed by") && out.contains("deployed echo"),
        "{out}"
    );

    // inspect REF shows the signatures, and which key holds.
    let shown = world.ok(&[
        "inspect",
        &echo,
        "--verify-key",
        &key("alice", "cosign.pub"),
    ]);
    assert!(
        shown.contains("signatures: 1 stored at") && shown.contains("signed by"),
        "{shown}"
    );
    let shown = world.ok(&[
        "inspect",
        &echo,
        "--verify-key",
        &key("mallory", "cosign.pub"),
    ]);
    assert!(shown.contains("NOT verified"), "{shown}");
    let shown = world.ok(&["inspect", &notes]);
    assert!(shown.contains("signatures: 0 stored at"), "{shown}");

    // A wrong password is named.
    let mut command = Command::new(env!("CARGO_BIN_EXE_berm"));
    let out = command
        .args([
            "trust",
            "sign",
            &notes,
            "--key",
            &key("alice", "cosign.key"),
        ])
        .env("COSIGN_PASSWORD", "wrong")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("COSIGN_PASSWORD"),
        "{}",
        text(&out.stderr)
    );

    // The trust policy: the whole `berm` namespace on this registry must be signed by alice.
    world.policy(&format!(
        "[[require]]\nreferences = [\"{}/berm/*\"]\nkeys = [\"{}\"]\n",
        registry.addr,
        key("alice", "cosign.pub")
    ));
    let out_file = world.path("notes.wasm").display().to_string();
    let refused = world.refused(&["pull", &notes, "-o", &out_file]);
    assert!(
        refused.contains("is not signed") && refused.contains("trust.toml"),
        "{refused}"
    );
    assert!(!world.path("notes.wasm").exists(), "nothing is written");
    let refused = world.refused(&["deploy", "notes", &notes]);
    assert!(refused.contains("is not signed"), "{refused}");
    // An app folder naming it by image is held to the same policy when its programs are
    // pulled into a program store.
    let pushed: serde_json::Value =
        serde_json::from_str(&world.ok(&["push", &notes, &wasm("notes"), "--json"])).unwrap();
    let app = world.path("app");
    std::fs::create_dir(&app).unwrap();
    std::fs::write(
        app.join("berm.toml"),
        format!(
            "name = \"signed\"\n[[program]]\nname = \"notes\"\nimage = \"{}\"\n",
            pushed["pinned"].as_str().unwrap()
        ),
    )
    .unwrap();
    let store = world.path("store").display().to_string();
    let pull_app = ["pull", "--app", app.to_str().unwrap(), "--store", &store];
    let refused = world.refused(&pull_app);
    assert!(
        refused.contains("is not signed") && refused.contains("program `notes`"),
        "{refused}"
    );
    assert!(!world.path("store/sha256").exists(), "nothing is stored");
    world.ok(&[
        "pull",
        &echo,
        "-o",
        &world.path("echo.wasm").display().to_string(),
    ]);
    // Outside the rule's references, nothing is required.
    let elsewhere = registry.reference("other/notes:v1");
    world.ok(&["push", &elsewhere, &wasm("notes")]);
    world.ok(&["pull", &elsewhere, "-o", &out_file]);
    // Signed, notes passes the policy too; verify without --key checks the policy's rule.
    world.ok(&[
        "trust",
        "sign",
        &notes,
        "--key",
        &key("alice", "cosign.key"),
    ]);
    world.ok(&["trust", "verify", &notes]);
    world.ok(&["deploy", "notes", &notes]);
    let pulled = world.ok(&pull_app);
    assert!(pulled.contains("pulled   notes"), "{pulled}");
    // A policy that does not parse refuses rather than allows.
    world.policy("[[require]]\nreference = \"oops\"\n");
    let refused = world.refused(&["pull", &elsewhere, "-o", &out_file]);
    assert!(
        refused.contains("trust policy") && refused.contains("unknown field"),
        "{refused}"
    );
}

/// `berm push` of `program` to `repo_and_tag` on `registry`: its pinned reference.
fn push_pinned(
    world: &World,
    registry: &TestRegistry,
    repo_and_tag: &str,
    program: &str,
) -> String {
    let out = world.ok(&[
        "push",
        &registry.reference(repo_and_tag),
        &wasm(program),
        "--json",
    ]);
    let pushed: serde_json::Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    pushed["pinned"].as_str().unwrap().to_string()
}

/// An app folder `name` whose one program, `notes`, is named by `image`.
fn folder_naming(world: &World, name: &str, image: &str) -> String {
    let dir = world.path(name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("berm.toml"),
        format!("name = \"{name}\"\n[[program]]\nname = \"notes\"\nimage = \"{image}\"\n"),
    )
    .unwrap();
    dir.display().to_string()
}

fn keygen(world: &World, who: &str) {
    std::fs::create_dir_all(world.path(who)).unwrap();
    let out = world.berm_in(&world.path(who), &["trust", "keygen"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

/// Item: programs already in the store skipped the signature check. A program the store
/// holds is held to --verify-key and the trust policy as a pulled one is: by the signatures
/// recorded for its own repository, checked against the keys required now, or else by the
/// registry; a program stored under one reference never passes for another.
#[test]
fn stored_programs_do_not_skip_the_signature_check() {
    let registry = TestRegistry::start();
    let world = World::start();
    keygen(&world, "alice");
    keygen(&world, "mallory");
    let key = |who: &str, file: &str| world.path(&format!("{who}/{file}")).display().to_string();

    // The same program, unsigned, in a repository no rule covers and in acme's: one digest.
    let evil = push_pinned(&world, &registry, "evil/notes:v1", "notes");
    let acme = push_pinned(&world, &registry, "acme/notes:v1", "notes");
    let digest = |pinned: &str| pinned.rsplit_once('@').unwrap().1.to_string();
    assert_eq!(digest(&evil), digest(&acme), "{evil} {acme}");
    let evil_app = folder_naming(&world, "evil", &evil);
    let acme_app = folder_naming(&world, "acme", &acme);
    let store = world.path("store").display().to_string();
    let pull = |app: &str, extra: &[&str]| -> Vec<String> {
        let mut args: Vec<String> = ["pull", "--app", app, "--store", &store]
            .map(String::from)
            .to_vec();
        args.extend(extra.iter().map(|s| s.to_string()));
        args
    };
    fn strs(args: &[String]) -> Vec<&str> {
        args.iter().map(String::as_str).collect()
    }
    let ok = |args: Vec<String>| world.ok(&strs(&args));
    let refused = |args: Vec<String>| world.refused(&strs(&args));

    let pulled = ok(pull(&evil_app, &[]));
    assert!(pulled.contains("pulled   notes"), "{pulled}");
    // --verify-key holds for what the store already has.
    let unsigned = refused(pull(
        &evil_app,
        &["--verify-key", &key("alice", "cosign.pub")],
    ));
    assert!(
        unsigned.contains("is not signed") && unsigned.contains("program `notes`"),
        "{unsigned}"
    );

    // A rule for acme's repositories: the second folder's program is stored already (the
    // first folder pulled its digest), and is refused all the same.
    let rule = |who: &str| {
        world.policy(&format!(
            "[[require]]\nreferences = [\"{}/acme/*\"]\nkeys = [\"{}\"]\n",
            registry.addr,
            key(who, "cosign.pub")
        ))
    };
    rule("alice");
    let unsigned = refused(pull(&acme_app, &[]));
    assert!(
        unsigned.contains("is not signed") && unsigned.contains("trust.toml"),
        "{unsigned}"
    );

    // Signed by alice on acme's repository, it passes, and the signature is recorded.
    world.ok(&["trust", "sign", &acme, "--key", &key("alice", "cosign.key")]);
    let present = ok(pull(&acme_app, &["--json"]));
    assert!(
        present.contains("\"present\"") && present.contains("signed by"),
        "{present}"
    );
    let record = world
        .path("store/sha256")
        .join(digest(&acme).trim_start_matches("sha256:"))
        .join("provenance.json");
    let recorded = std::fs::read_to_string(&record).unwrap();
    assert!(recorded.contains("/acme/notes"), "{recorded}");

    // The record is acme's repository's: the same bytes under evil's name still need their
    // own signature.
    let unsigned = refused(pull(
        &evil_app,
        &["--verify-key", &key("alice", "cosign.pub")],
    ));
    assert!(unsigned.contains("is not signed"), "{unsigned}");

    // A key rotated in the policy applies to what is stored: alice's recorded signature does
    // not meet a rule that now names mallory.
    rule("mallory");
    let rotated = refused(pull(&acme_app, &[]));
    assert!(rotated.contains("no valid signature"), "{rotated}");
    rule("alice");

    // Recorded, it is checked against the keys without the registry.
    drop(registry);
    let offline = ok(pull(&acme_app, &[]));
    assert!(
        offline.contains("present") && offline.contains("as recorded in the program store"),
        "{offline}"
    );
    // A requirement no record meets fails closed when the registry cannot be read.
    let closed = refused(pull(
        &acme_app,
        &["--verify-key", &key("mallory", "cosign.pub")],
    ));
    assert!(
        closed.contains("no signature recorded") && closed.contains("--verify-key"),
        "{closed}"
    );
    // A record that does not parse refuses, naming the file.
    std::fs::write(&record, "{").unwrap();
    let damaged = refused(pull(&acme_app, &[]));
    assert!(
        damaged.contains("provenance.json") && damaged.contains("remove the file"),
        "{damaged}"
    );
}

/// Item: trust-policy matching did not normalise registries. Every spelling of a registry
/// meets the rules naming it: against the real registry (`localhost` for a rule naming
/// `127.0.0.1`), and for registries this machine cannot reach, as `berm trust policy` shows.
#[test]
fn trust_policy_matching_normalises_registries() {
    let registry = TestRegistry::start();
    let world = World::start();
    keygen(&world, "alice");
    let alice = world.path("alice/cosign.pub").display().to_string();
    let pinned = push_pinned(&world, &registry, "berm/notes:v1", "notes");
    let port = registry.addr.rsplit_once(':').unwrap().1.to_string();
    let digest = pinned.rsplit_once('@').unwrap().1.to_string();
    world.policy(&format!(
        "[[require]]\nreferences = [\"127.0.0.1:*/berm/*\"]\nkeys = [\"{alice}\"]\n"
    ));
    let out_file = world.path("notes.wasm").display().to_string();
    for spelling in [
        format!("localhost:{port}/berm/notes:v1"),
        format!("LOCALHOST:{port}/berm/notes@{digest}"),
    ] {
        let refused = world.refused(&["pull", &spelling, "-o", &out_file]);
        assert!(refused.contains("is not signed"), "{spelling}: {refused}");
        assert!(!world.path("notes.wasm").exists(), "{spelling}");
        let refused = world.refused(&["deploy", "notes", &spelling]);
        assert!(refused.contains("is not signed"), "{spelling}: {refused}");
    }
    let app = folder_naming(
        &world,
        "app",
        &format!("localhost:{port}/berm/notes@{digest}"),
    );
    let store = world.path("store").display().to_string();
    let refused = world.refused(&["pull", "--app", &app, "--store", &store]);
    assert!(refused.contains("is not signed"), "{refused}");

    // Rules naming registries by one spelling, references naming them by another.
    world.policy(&format!(
        "[[require]]\nreferences = [\"GHCR.IO:443/acme/*\"]\nkeys = [\"{alice}\"]\n\
         [[require]]\nreferences = [\"index.docker.io/library/*\"]\nkeys = [\"{alice}\"]\n\
         [[require]]\nreferences = [\"localhost:5000/berm/*\"]\nkeys = [\"{alice}\"]\n"
    ));
    for (reference, name) in [
        ("ghcr.io/acme/x:v1", "ghcr.io/acme/x"),
        ("Ghcr.Io/acme/x", "ghcr.io/acme/x"),
        ("ghcr.io:443/acme/x", "ghcr.io/acme/x"),
        ("alpine", "docker.io/library/alpine"),
        ("docker.io/alpine:3", "docker.io/library/alpine"),
        (
            "registry-1.docker.io/library/alpine",
            "docker.io/library/alpine",
        ),
        (
            "INDEX.DOCKER.IO:443/library/alpine",
            "docker.io/library/alpine",
        ),
        ("127.0.0.1:5000/berm/x", "localhost:5000/berm/x"),
        ("127.1:5000/berm/x", "localhost:5000/berm/x"),
        ("0.0.0.0:5000/berm/x", "localhost:5000/berm/x"),
    ] {
        let shown: serde_json::Value =
            serde_json::from_str(&world.ok(&["trust", "policy", reference, "--json"])).unwrap();
        assert_eq!(shown["name"], name, "{reference}: {shown}");
        assert_eq!(
            shown["rules"].as_array().unwrap().len(),
            1,
            "{reference} escapes: {shown}"
        );
    }
    for outside in [
        "ghcr.io/acmex/x",
        "ghcr.io:8443/acme/x",
        "localhost:5001/berm/x",
    ] {
        let shown: serde_json::Value =
            serde_json::from_str(&world.ok(&["trust", "policy", outside, "--json"])).unwrap();
        assert_eq!(shown["rules"], serde_json::json!([]), "{outside}: {shown}");
    }
    let said = world.ok(&["trust", "policy", "127.0.0.1:5000/berm/x"]);
    assert!(
        said.contains("name       localhost:5000/berm/x") && said.contains("required"),
        "{said}"
    );
}
