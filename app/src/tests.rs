//! Every refusal of [`load`], with its message, and what a good folder reads
//! as.

use super::*;

/// A folder holding `berm.toml` with `manifest` and the files `wasm`.
fn folder(manifest: &str, wasm: &[&str]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join(MANIFEST), manifest).unwrap();
    for name in wasm {
        let path = dir.path().join(name);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, b"\0asm\x01\0\0\0").unwrap();
    }
    dir
}

/// The message `load` refuses `manifest` with (the files in `wasm` exist).
fn refusal(manifest: &str, wasm: &[&str]) -> String {
    let dir = folder(manifest, wasm);
    match load(dir.path()) {
        Ok(app) => panic!("accepted: {app:?}"),
        Err(e) => e.to_string(),
    }
}

fn assert_has(message: &str, parts: &[&str]) {
    for part in parts {
        assert!(message.contains(part), "{message:?} lacks {part:?}");
    }
}

const ONE: &str = r#"
[[program]]
name = "notes"
wasm = "notes.wasm"
"#;

#[test]
fn a_full_manifest_reads_with_every_value() {
    let dir = folder(
        r#"
name = "notes"
call_deadline_ms = 2500

[limits]
cpu = 0.5
memory_mb = 128
pids = 32

[[program]]
name = "notes"
wasm = "bin/notes.wasm"
grants = ["kv", "log", "fs=files/notes:rw:bytes=1048576:entries=100"]
memory_mb = 64

[[program]]
name = "echo"
wasm = "echo.wasm"
"#,
        &["bin/notes.wasm", "echo.wasm"],
    );
    let app = load(dir.path()).unwrap();
    let root = fs::canonicalize(dir.path()).unwrap();
    assert_eq!(app.dir, root);
    assert_eq!(app.name, "notes");
    assert_eq!(app.call_deadline_ms, Some(2500));
    assert_eq!(
        app.limits,
        Limits {
            cpu_millicores: 500,
            memory_mb: 128,
            pids: 32
        }
    );
    assert_eq!(app.limits.cpu_max(), "50000 100000");
    assert_eq!(app.limits.memory_max_bytes(), 128 << 20);
    assert_eq!(app.programs.len(), 2);
    let notes = &app.programs[0];
    assert_eq!(notes.name, "notes");
    assert_eq!(notes.wasm, root.join("bin/notes.wasm"));
    assert_eq!(notes.wasm_relative, "bin/notes.wasm");
    assert_eq!(
        texts(&notes.grants),
        ["kv", "log", "fs=files/notes:rw:bytes=1048576:entries=100"]
    );
    assert_eq!(notes.memory_mb, Some(64));
    assert_eq!(
        texts(&notes.resolve_grants(Path::new("/workspace/notes/data"))),
        [
            "kv",
            "log",
            "fs=/workspace/notes/data/files/notes:rw:bytes=1048576:entries=100"
        ]
    );
    assert_eq!(notes.read().unwrap(), b"\0asm\x01\0\0\0");
    assert_eq!(app.programs[1].grants, Vec::<Grant>::new());
    assert_eq!(app.programs[1].memory_mb, None);
}

#[test]
fn defaults_fill_what_is_absent() {
    let dir = folder(&format!("name = \"a\"\n{ONE}"), &["notes.wasm"]);
    let app = load(dir.path()).unwrap();
    assert_eq!(app.limits, Limits::default());
    assert_eq!(app.limits.cpu_millicores, 1000);
    assert_eq!(app.limits.cpu_max(), "100000 100000");
    assert_eq!(app.limits.memory_mb, 256);
    assert_eq!(app.limits.pids, 64);
    assert_eq!(app.call_deadline_ms, None);
}

#[test]
fn cpu_may_be_an_integer_and_rounds_to_millicores() {
    let dir = folder(
        &format!("name = \"a\"\n[limits]\ncpu = 2\n{ONE}"),
        &["notes.wasm"],
    );
    assert_eq!(load(dir.path()).unwrap().limits.cpu_max(), "200000 100000");
    let dir = folder(
        &format!("name = \"a\"\n[limits]\ncpu = 0.01\n{ONE}"),
        &["notes.wasm"],
    );
    let limits = load(dir.path()).unwrap().limits;
    assert_eq!(limits.cpu_millicores, 10);
    assert_eq!(limits.cpu_max(), "1000 100000");
}

#[test]
fn refuses_a_missing_folder_and_manifest() {
    let message = match load(Path::new("/nonexistent/berm-app")) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("accepted"),
    };
    assert_has(
        &message,
        &["app folder /nonexistent/berm-app", "No such file"],
    );
    let dir = tempfile::tempdir().unwrap();
    let message = load(dir.path()).unwrap_err().to_string();
    assert_has(&message, &["berm.toml: cannot read it", "No such file"]);
}

#[test]
fn refuses_a_manifest_that_is_a_directory_or_too_large() {
    let dir = tempfile::tempdir().unwrap();
    fs::create_dir(dir.path().join(MANIFEST)).unwrap();
    let message = load(dir.path()).unwrap_err().to_string();
    assert_has(&message, &["berm.toml: not a regular file"]);

    let big = format!("name = \"a\"\n# {}\n", "x".repeat(70_000));
    let message = refusal(&big, &[]);
    assert_has(&message, &["berm.toml: ", "over the cap of 65536 bytes"]);
}

#[test]
fn refuses_toml_that_does_not_parse() {
    let message = refusal("name = ", &[]);
    assert_has(&message, &["berm.toml: ", "line 1"]);
}

#[test]
fn refuses_unknown_keys_everywhere() {
    let message = refusal(&format!("name = \"a\"\ncolour = 1\n{ONE}"), &["notes.wasm"]);
    assert_has(&message, &["berm.toml: ", "unknown field `colour`"]);
    let message = refusal(
        &format!("name = \"a\"\n[limits]\ndisk_mb = 1\n{ONE}"),
        &["notes.wasm"],
    );
    assert_has(&message, &["unknown field `disk_mb`", "cpu"]);
    let message = refusal(
        "name = \"a\"\n[[program]]\nname = \"p\"\nwasm = \"p.wasm\"\ngrant = [\"kv\"]\n",
        &["p.wasm"],
    );
    assert_has(&message, &["unknown field `grant`", "grants"]);
}

#[test]
fn refuses_a_missing_name_or_wasm() {
    let message = refusal(ONE, &["notes.wasm"]);
    assert_has(&message, &["missing field `name`"]);
    let message = refusal("name = \"a\"\n[[program]]\nname = \"p\"\n", &[]);
    assert_has(&message, &["program `p`: give `wasm = "]);
}

#[test]
fn refuses_bad_app_names() {
    for name in ["", "Notes", "1notes", "no_tes", "a.b", &"a".repeat(32)] {
        let message = refusal(&format!("name = {name:?}\n{ONE}"), &["notes.wasm"]);
        assert_has(
            &message,
            &[
                "berm.toml: `name` = ",
                "use 1-31 characters of a-z, 0-9 and `-`, starting with a letter",
            ],
        );
    }
    let dir = folder(
        &format!("name = \"{}\"\n{ONE}", "a".repeat(31)),
        &["notes.wasm"],
    );
    load(dir.path()).unwrap();
}

#[test]
fn refuses_call_deadlines_out_of_range() {
    for value in [0, 600_001] {
        let message = refusal(
            &format!("name = \"a\"\ncall_deadline_ms = {value}\n{ONE}"),
            &["notes.wasm"],
        );
        assert_has(
            &message,
            &[&format!(
                "`call_deadline_ms` = {value}: allowed 1 to 600000"
            )],
        );
    }
    let message = refusal(
        &format!("name = \"a\"\ncall_deadline_ms = -5\n{ONE}"),
        &["notes.wasm"],
    );
    assert_has(&message, &["berm.toml: ", "-5"]);
}

#[test]
fn refuses_limits_out_of_range() {
    let limit = |key: &str, value: &str| {
        refusal(
            &format!("name = \"a\"\n[limits]\n{key} = {value}\n{ONE}"),
            &["notes.wasm"],
        )
    };
    for value in ["0.009", "64.5", "0", "nan"] {
        assert_has(
            &limit("cpu", value),
            &["`limits.cpu` = ", "allowed 0.01 to 64 cores"],
        );
    }
    for value in ["15", "65537"] {
        assert_has(
            &limit("memory_mb", value),
            &[&format!(
                "`limits.memory_mb` = {value}: allowed 16 to 65536"
            )],
        );
    }
    for value in ["7", "4097"] {
        assert_has(
            &limit("pids", value),
            &[&format!("`limits.pids` = {value}: allowed 8 to 4096")],
        );
    }
}

#[test]
fn refuses_no_programs_and_too_many() {
    let message = refusal("name = \"a\"\n", &[]);
    assert_has(
        &message,
        &["berm.toml: no `[[program]]`: an app holds 1 to 64 programs"],
    );
    let mut manifest = String::from("name = \"a\"\n");
    for i in 0..65 {
        manifest.push_str(&format!(
            "[[program]]\nname = \"p{i}\"\nwasm = \"p.wasm\"\n"
        ));
    }
    let message = refusal(&manifest, &["p.wasm"]);
    assert_has(&message, &["65 programs: an app holds 1 to 64"]);
}

#[test]
fn refuses_bad_and_duplicate_program_names() {
    let message = refusal(
        "name = \"a\"\n[[program]]\nname = \"my.prog\"\nwasm = \"p.wasm\"\n",
        &["p.wasm"],
    );
    assert_has(&message, &["program name \"my.prog\": use 1-64 of a-z"]);
    let message = refusal(
        "name = \"a\"\n[[program]]\nname = \"p\"\nwasm = \"p.wasm\"\n[[program]]\nname = \"p\"\nwasm = \"p.wasm\"\n",
        &["p.wasm"],
    );
    assert_has(
        &message,
        &["program `p` is listed twice: program names must be unique"],
    );
}

#[test]
fn refuses_program_memory_out_of_range() {
    for (value, app) in [(0, 256), (1025, 65536), (300, 256)] {
        let message = refusal(
            &format!(
                "name = \"a\"\n[limits]\nmemory_mb = {app}\n[[program]]\nname = \"p\"\nwasm = \"p.wasm\"\nmemory_mb = {value}\n"
            ),
            &["p.wasm"],
        );
        assert_has(
            &message,
            &[&format!(
                "program `p`: `memory_mb` = {value}: allowed 1 to 1024 and at most the app's `limits.memory_mb` ({app})"
            )],
        );
    }
}

fn with_grants(grants: &str) -> String {
    refusal(
        &format!("name = \"a\"\n[[program]]\nname = \"p\"\nwasm = \"p.wasm\"\ngrants = {grants}\n"),
        &["p.wasm"],
    )
}

/// Grants as their text form.
fn texts(grants: &[Grant]) -> Vec<String> {
    grants.iter().map(Grant::to_string).collect()
}

#[test]
fn refuses_unknown_grants() {
    for grant in ["http", "FS=x"] {
        assert_has(
            &with_grants(&format!("[{grant:?}]")),
            &[
                &format!("program `p`: unknown grant `{grant}`"),
                "use log, clock, random, kv, fs=DIR[:ro|:rw][:bytes=N][:entries=N], net=HOST[:PORT]",
            ],
        );
    }
}

/// What `berm.toml` refuses is exactly what the control API's grant parser refuses, with
/// its message: one parser, so a folder the host accepts never boots a VM whose bermd
/// refuses it.
#[test]
fn grants_are_read_by_the_one_grant_parser() {
    for grant in [
        "kv=1",
        "fs",
        "fs=",
        "fs=:ro",
        "fs=data:ro:rw",
        "fs=data:bytes=99999999999999999999",
        "fs=data:bytes=1:bytes=2",
        "call=",
    ] {
        let message = grant.parse::<Grant>().unwrap_err().to_string();
        assert_has(
            &with_grants(&format!("[{grant:?}]")),
            &[&format!("program `p`: {message}")],
        );
    }
}

proptest::proptest! {
    /// The host reads `berm.toml` with [`check_grants`]; the guest's bermd gets the same
    /// grants as typed JSON and reads them with [`Grant`]'s serde form. Both accept exactly
    /// the same set: `berm.toml` refuses only what the parser refuses, plus an `fs` directory
    /// that is not a plain relative path.
    #[test]
    fn the_host_and_the_guest_accept_the_same_grants(
        text in "(log|kv|clock|random|net=|secret:|fs=|call=)[a-zA-Z0-9_.:=*/-]{0,16}"
    ) {
        let host = check_grants(Path::new("berm.toml"), "p", std::slice::from_ref(&text));
        let parsed = text.parse::<Grant>();
        match (&host, &parsed) {
            (Ok(grants), Ok(grant)) => {
                proptest::prop_assert_eq!(grants, &vec![grant.clone()]);
                let json = serde_json::to_string(grants).unwrap();
                let guest: Vec<Grant> = serde_json::from_str(&json).unwrap();
                proptest::prop_assert_eq!(&guest, grants);
            }
            (Err(AppError::FsGrant { .. }), Ok(Grant::Fs { .. })) => {}
            (Err(AppError::Grant { source, .. }), Err(error)) => {
                proptest::prop_assert_eq!(&**source, error);
            }
            _ => proptest::prop_assert!(false, "{text:?}: host {host:?}, parser {parsed:?}"),
        }
    }
}

#[test]
fn net_and_secret_grants_follow_the_one_rule() {
    for (grant, problem) in [
        ("net=", "the host is empty"),
        ("net=127.0.0.1", "needs its port too"),
        ("net=*.com", "top-level"),
        ("secret:a b=x.com", "write secret:NAME=HOST[:PORT]"),
        ("secret:tok=10.0.0.1", "needs its port too"),
    ] {
        assert_has(
            &with_grants(&format!("[{grant:?}]")),
            &[&format!("program `p`: grant `{grant}`"), problem],
        );
    }
}

#[test]
fn refuses_fs_grants_that_name_host_paths_or_the_whole_data_directory() {
    for (grant, problem) in [
        ("fs=/etc", "absolute paths are refused"),
        ("fs=/etc:ro", "absolute paths are refused"),
        ("fs=../up", "`..` is refused"),
        ("fs=a/../../b:rw", "`..` is refused"),
        ("fs=a/./..", "`..` is refused"),
        // `.` passed the relative-path check and reached every app's files.
        ("fs=.", "it names the directory itself, not one inside it"),
        ("fs=./", "it names the directory itself, not one inside it"),
        (
            "fs=././:rw",
            "it names the directory itself, not one inside it",
        ),
        (
            "fs=.//.:ro",
            "it names the directory itself, not one inside it",
        ),
    ] {
        let message = with_grants(&format!("[{grant:?}]"));
        // Exact from the manifest's name on (before it: the temporary folder).
        let expected = format!(
            "/berm.toml: program `p`: grant {grant:?}: {problem}; an app's fs directory is a \
             directory inside bermd's data directory, named relative to it, without `..` \
             (e.g. `fs=notes`)"
        );
        assert!(
            message.ends_with(&expected),
            "{message:?} is not …{expected:?}"
        );
    }
    assert_has(
        &with_grants(r#"["fs=a", "fs=b:ro"]"#),
        &["program `p`: at most one fs directory may be granted"],
    );
}

#[test]
fn fs_grants_inside_the_data_directory_are_kept_as_written() {
    for grant in ["fs=notes", "fs=./notes", "fs=notes/./files:rw"] {
        let dir = folder(
            &format!(
                "name = \"a\"\n[[program]]\nname = \"p\"\nwasm = \"p.wasm\"\ngrants = [{grant:?}]\n"
            ),
            &["p.wasm"],
        );
        let app = load(dir.path()).unwrap();
        let resolved = app.programs[0].resolve_grants(Path::new("/home/u/.berm/data"));
        let Grant::Fs { dir, .. } = &resolved[0] else {
            panic!("{resolved:?}")
        };
        assert!(
            dir.starts_with("/home/u/.berm/data/notes"),
            "{grant}: {dir:?}"
        );
    }
}

fn with_wasm(path: &str, files: &[&str]) -> String {
    refusal(
        &format!("name = \"a\"\n[[program]]\nname = \"p\"\nwasm = {path:?}\n"),
        files,
    )
}

#[test]
fn refuses_wasm_paths_that_are_not_plain_and_relative() {
    for (path, problem) in [
        ("/bin/p.wasm", "absolute paths are refused"),
        ("../p.wasm", "`..` is refused"),
        ("a/../../p.wasm", "`..` is refused"),
        ("", "it is empty"),
        (".", "it names the directory itself, not one inside it"),
    ] {
        assert_has(
            &with_wasm(path, &[]),
            &[
                &format!("program `p`: `wasm` = {path:?}: {problem}"),
                "use a path relative to the app folder",
            ],
        );
    }
}

#[test]
fn refuses_missing_and_non_regular_wasm_files() {
    assert_has(
        &with_wasm("p.wasm", &[]),
        &["program `p`: wasm file ", "p.wasm: No such file"],
    );
    let dir = folder(
        "name = \"a\"\n[[program]]\nname = \"p\"\nwasm = \"sub\"\n",
        &[],
    );
    fs::create_dir(dir.path().join("sub")).unwrap();
    let message = load(dir.path()).unwrap_err().to_string();
    assert_has(
        &message,
        &["program `p`: wasm file ", "sub: not a regular file"],
    );
}

#[test]
fn refuses_a_symlink_that_leads_out_but_follows_one_that_stays_in() {
    let outside = tempfile::tempdir().unwrap();
    fs::write(outside.path().join("x.wasm"), b"\0asm").unwrap();
    let dir = folder(
        "name = \"a\"\n[[program]]\nname = \"p\"\nwasm = \"p.wasm\"\n",
        &["real.wasm"],
    );
    std::os::unix::fs::symlink(outside.path().join("x.wasm"), dir.path().join("p.wasm")).unwrap();
    let message = load(dir.path()).unwrap_err().to_string();
    assert_has(
        &message,
        &["program `p`: wasm file ", "leads outside the app folder"],
    );

    fs::remove_file(dir.path().join("p.wasm")).unwrap();
    std::os::unix::fs::symlink("real.wasm", dir.path().join("p.wasm")).unwrap();
    let app = load(dir.path()).unwrap();
    assert_eq!(app.programs[0].wasm_relative, "p.wasm");
}

#[test]
fn read_refuses_a_file_that_grew_past_the_cap() {
    let dir = folder(&format!("name = \"a\"\n{ONE}"), &["notes.wasm"]);
    let app = load(dir.path()).unwrap();
    let file = fs::File::create(dir.path().join("notes.wasm")).unwrap();
    file.set_len(MAX_WASM_BYTES + 1).unwrap();
    let message = app.programs[0].read().unwrap_err().to_string();
    assert_has(
        &message,
        &[
            "program `notes`: wasm file ",
            "over the cap of 67108864 bytes",
        ],
    );
}

#[test]
fn sha256_hex_is_lowercase_hex() {
    assert_eq!(
        sha256_hex(b""),
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    );
}

/// The repository's own folders and the example in docs/apps.md load.
#[test]
fn the_shipped_examples_and_the_documented_one_load() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut checked = 0;
    for entry in fs::read_dir(root.join("examples/apps")).unwrap() {
        let source = entry.unwrap().path();
        let name = source.file_name().unwrap().to_str().unwrap().to_string();
        let manifest = fs::read_to_string(source.join(MANIFEST)).unwrap();
        let wasm = format!("{name}.wasm");
        let dir = folder(&manifest, &[&wasm]);
        let app = load(dir.path()).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(app.name, name);
        checked += 1;
    }
    assert_eq!(checked, 10);

    let doc = fs::read_to_string(root.join("docs/apps.md")).unwrap();
    let start = doc.find("cat > /tmp/journal/berm.toml <<'EOF'\n").unwrap();
    let body = &doc[start..];
    let body = &body[body.find('\n').unwrap() + 1..];
    let manifest = &body[..body.find("\nEOF\n").unwrap()];
    let dir = folder(manifest, &["notes.wasm", "files.wasm"]);
    let app = load(dir.path()).unwrap();
    assert_eq!(app.name, "journal");
    assert_eq!(app.limits.cpu_max(), "50000 100000");
    assert_eq!(
        texts(&app.programs[1].resolve_grants(Path::new("/home/u/.berm/data"))),
        ["fs=/home/u/.berm/data/attachments:rw"]
    );
}

/// A one-program app granting `secret:TOKEN=api.example.com`, with
/// `secrets` as its `[program.secrets]` table.
fn with_secrets(secrets: &str) -> String {
    format!(
        "name = \"a\"\n[[program]]\nname = \"notes\"\nwasm = \"notes.wasm\"\n\
         grants = [\"secret:TOKEN=api.example.com\"]\n[program.secrets]\n{secrets}\n"
    )
}

#[test]
fn secret_files_are_named_per_program_outside_the_folder() {
    let dir = folder(
        &with_secrets(r#"TOKEN = "/etc/berm/token""#),
        &["notes.wasm"],
    );
    let app = load(dir.path()).unwrap();
    assert_eq!(
        app.programs[0]
            .secret_files
            .get("TOKEN")
            .map(PathBuf::as_path),
        Some(Path::new("/etc/berm/token"))
    );
    // From the home directory.
    let dir = folder(
        &with_secrets(r#"TOKEN = "~/.secrets/token""#),
        &["notes.wasm"],
    );
    let home = PathBuf::from(std::env::var_os("HOME").unwrap());
    assert_eq!(
        load(dir.path()).unwrap().programs[0].secret_files["TOKEN"],
        home.join(".secrets/token")
    );
    // No [program.secrets]: nothing.
    let dir = folder(&format!("name = \"a\"\n{ONE}"), &["notes.wasm"]);
    assert!(
        load(dir.path()).unwrap().programs[0]
            .secret_files
            .is_empty()
    );
    // Two programs binding one name: each its own file.
    let mut two = String::from("name = \"a\"\n");
    for name in ["one", "two"] {
        two.push_str(&format!(
            "[[program]]\nname = \"{name}\"\nwasm = \"notes.wasm\"\n\
             grants = [\"secret:TOKEN=api.example.com\"]\n\
             [program.secrets]\nTOKEN = \"/etc/berm/{name}\"\n"
        ));
    }
    let app = load(folder(&two, &["notes.wasm"]).path()).unwrap();
    let files: Vec<&Path> = app
        .programs
        .iter()
        .map(|p| p.secret_files["TOKEN"].as_path())
        .collect();
    assert_eq!(
        files,
        [Path::new("/etc/berm/one"), Path::new("/etc/berm/two")]
    );
}

#[test]
fn a_guest_keeps_secret_file_names_for_the_host_and_checks_nothing_of_them() {
    // Inside the microVM the guest's $HOME is berm's own workspace: a `~/` name read there
    // would land in berm's state and be refused, though the host reads the value.
    let dir = folder(
        &with_secrets(r#"TOKEN = "~/.berm/secrets/x/TOKEN""#),
        &["notes.wasm"],
    );
    assert!(load(dir.path()).is_err());
    let app = load_with(dir.path(), SecretValues::OnHost).unwrap();
    assert_eq!(
        app.programs[0].secret_files["TOKEN"],
        Path::new("~/.berm/secrets/x/TOKEN")
    );
    // Names and bindings are still checked.
    let dir = folder(&with_secrets(r#"OTHER = "/etc/other""#), &["notes.wasm"]);
    assert_has(
        &load_with(dir.path(), SecretValues::OnHost)
            .unwrap_err()
            .to_string(),
        &["the program does not bind it"],
    );
}

#[test]
fn the_app_level_secrets_table_is_refused_saying_where_each_entry_goes() {
    let manifest = r#"name = "a"
[secrets]
TOKEN = "~/.secrets/token"
STRAY = "/etc/stray"
[[program]]
name = "one"
wasm = "notes.wasm"
grants = ["secret:TOKEN=api.example.com"]
[[program]]
name = "two"
wasm = "notes.wasm"
grants = ["secret:TOKEN=http://127.0.0.1:8080"]
"#;
    let dir = folder(manifest, &["notes.wasm"]);
    let file = fs::canonicalize(dir.path()).unwrap().join(MANIFEST);
    assert_eq!(
        load(dir.path()).unwrap_err().to_string(),
        format!(
            "{}: the app-level [secrets] table is refused: secret files are named per program, \
             so that two programs that bind one name never share a value. Move each entry into \
             a [program.secrets] table written after the keys of the [[program]] that binds \
             it, then delete [secrets]: `STRAY = \"/etc/stray\"`: no program binds it, delete \
             it; `TOKEN = \"~/.secrets/token\"` into program `one`, program `two`",
            file.display()
        )
    );
}

#[test]
fn a_secret_file_in_berms_own_directories_is_refused() {
    let home = PathBuf::from(std::env::var_os("HOME").unwrap());
    let dir = folder(
        &with_secrets(r#"TOKEN = "~/.config/berm/token""#),
        &["notes.wasm"],
    );
    let file = fs::canonicalize(dir.path()).unwrap().join(MANIFEST);
    let key = home.join(".config/berm/token");
    assert_eq!(
        load(dir.path()).unwrap_err().to_string(),
        format!(
            "{}: program `notes`: [program.secrets] TOKEN: {} is inside {} (berm's \
             configuration and the host's signing key): keep secret values out of berm's own \
             directories, e.g. run `mkdir -m 700 ~/.secrets && mv {} ~/.secrets/` and name \
             the file there",
            file.display(),
            key.display(),
            home.join(".config/berm").display(),
            key.display()
        )
    );
    let dir = folder(
        &with_secrets(r#"TOKEN = "~/.berm/secrets/x/TOKEN""#),
        &["notes.wasm"],
    );
    assert_has(
        &load(dir.path()).unwrap_err().to_string(),
        &["is inside", "bermd's state and its secret store"],
    );
}

#[test]
fn refuses_secret_files_inside_the_folder_relative_or_unbound() {
    assert_has(
        &refusal(&with_secrets(r#"TOKEN = "token.txt""#), &["notes.wasm"]),
        &[
            "program `notes`: [program.secrets] TOKEN",
            "absolute path or from ~/",
        ],
    );
    assert_has(
        &refusal(
            &with_secrets(r#"TOKEN = "/etc/../root/token""#),
            &["notes.wasm"],
        ),
        &["without `..`"],
    );
    assert_has(
        &refusal(
            &with_secrets(r#"OTHER = "/etc/berm/other""#),
            &["notes.wasm"],
        ),
        &[
            "[program.secrets] OTHER",
            "the program does not bind it",
            "secret:OTHER=HOST",
        ],
    );
    assert_has(
        &refusal(
            &with_secrets(r#""bad name" = "/etc/berm/x""#),
            &["notes.wasm"],
        ),
        &["a secret's name is"],
    );
    // The folder's own files, named by their absolute path (canonical, as
    // `load` sees the folder) or through a link that leads in.
    let dir = folder(&with_secrets(""), &["notes.wasm"]);
    let inside = fs::canonicalize(dir.path()).unwrap().join("token");
    let manifest = with_secrets(&format!("TOKEN = {:?}", inside.display().to_string()));
    fs::write(dir.path().join(MANIFEST), manifest).unwrap();
    assert_has(
        &load(dir.path()).unwrap_err().to_string(),
        &["is inside the app folder", "~/.secrets/"],
    );
    let outside = tempfile::tempdir().unwrap();
    let link = outside.path().join("link");
    std::os::unix::fs::symlink(&inside, &link).unwrap();
    fs::write(&inside, "v").unwrap();
    let manifest = with_secrets(&format!("TOKEN = {:?}", link.display().to_string()));
    fs::write(dir.path().join(MANIFEST), manifest).unwrap();
    assert_has(
        &load(dir.path()).unwrap_err().to_string(),
        &["is inside the app folder"],
    );
}

#[test]
fn a_secret_bound_to_http_names_cleartext_and_other_schemes_are_refused() {
    let manifest = |grant: &str| {
        format!(
            "name = \"a\"\n[[program]]\nname = \"notes\"\nwasm = \"notes.wasm\"\n\
             grants = [\"{grant}\"]\n"
        )
    };
    let dir = folder(&manifest("secret:T=http://127.0.0.1:8080"), &["notes.wasm"]);
    assert!(load(dir.path()).is_ok());
    assert_has(
        &refusal(&manifest("secret:T=ftp://a.example.com"), &["notes.wasm"]),
        &["http:// (cleartext, named explicitly), https:// or no scheme (HTTPS)"],
    );
}

#[test]
fn a_program_is_a_file_in_the_folder_or_a_pinned_image_and_not_both() {
    let hex = "0".repeat(64);
    let both = refusal(
        &format!(
            "name = \"a\"\n[[program]]\nname = \"p\"\nwasm = \"p.wasm\"\nimage = \"r.test/p@sha256:{hex}\"\n"
        ),
        &["p.wasm"],
    );
    assert_has(&both, &["program `p`", "not both"]);
    let neither = refusal("name = \"a\"\n[[program]]\nname = \"p\"\n", &[]);
    assert_has(&neither, &["program `p`", "`wasm = ", "`image = "]);
    let tag = refusal(
        "name = \"a\"\n[[program]]\nname = \"p\"\nimage = \"r.test/p:v1\"\n",
        &[],
    );
    assert_has(&tag, &["`image` = \"r.test/p:v1\"", "not pinned by digest"]);
}

#[test]
fn an_image_is_read_from_the_store_only_once_found_and_only_as_pinned() {
    let wasm = b"\0asm\x01\0\0\0".to_vec();
    let manifest = format!(
        r#"{{"schemaVersion":2,"layers":[{{"digest":"sha256:{}","size":8}}]}}"#,
        sha256_hex(&wasm)
    );
    let pin = sha256_hex(manifest.as_bytes());
    let dir = folder(
        &format!("name = \"a\"\n[[program]]\nname = \"p\"\nimage = \"r.test/p@sha256:{pin}\"\n"),
        &[],
    );
    let mut app = load(dir.path()).unwrap();
    assert_eq!(
        app.programs[0].wasm_relative,
        format!("r.test/p@sha256:{pin}")
    );
    // Not yet found: reading says where it comes from.
    let unresolved = app.programs[0].read().unwrap_err().to_string();
    assert_has(
        &unresolved,
        &["program `p`", "program store", "berm pull --app"],
    );
    let store_dir = tempfile::tempdir().unwrap();
    let store = ProgramStore::new(store_dir.path());
    let missing = app.resolve_images(&store).unwrap_err().to_string();
    assert_has(&missing, &["program `p`", "not in the program store"]);
    let image = app.programs[0].image.clone().unwrap();
    store.put(&image, manifest.as_bytes(), &wasm).unwrap();
    app.resolve_images(&store).unwrap();
    assert_eq!(app.programs[0].read().unwrap(), wasm);
    // Bytes swapped under the store after it was found are refused when read.
    fs::write(&app.programs[0].wasm, b"\0asm\x01\0\0\0\0").unwrap();
    let swapped = app.programs[0].read().unwrap_err().to_string();
    assert_has(&swapped, &["program `p`", "not the sha256:"]);
}

#[test]
fn serve_as_gives_tools_served_names_each_once() {
    let dir = folder(
        "name = \"a\"\n[[program]]\nname = \"p\"\nwasm = \"p.wasm\"\n[program.serve_as]\nadd = \"add_note\"\n",
        &["p.wasm"],
    );
    let app = load(dir.path()).unwrap();
    assert_eq!(app.programs[0].serve_as["add"], "add_note");
    let refused = refusal(
        "name = \"a\"\n[[program]]\nname = \"p\"\nwasm = \"p.wasm\"\n[program.serve_as]\nadd = \"Add Note\"\n",
        &["p.wasm"],
    );
    assert_has(
        &refused,
        &[
            "program `p`: `serve_as`:",
            "`Add Note` is not a valid served name",
        ],
    );
    let twice = refusal(
        "name = \"a\"\n[[program]]\nname = \"p\"\nwasm = \"p.wasm\"\n[program.serve_as]\nadd = \"x\"\n\
         [[program]]\nname = \"q\"\nwasm = \"p.wasm\"\n[program.serve_as]\nlist = \"x\"\n",
        &["p.wasm"],
    );
    assert_has(&twice, &["program `q`", "`x` is given to two tools"]);
}
