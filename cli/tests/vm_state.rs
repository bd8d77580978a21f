//! State disks are bound to the app folders that made their workspaces, through the real
//! `berm vm up` and `berm mcp --app`. The check comes before berm-vmm is looked for, so
//! nothing here boots: `BERM_VMM` names a file that is not there, and a boot the check lets
//! through ends with that message instead.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A private runtime and data directory for one test, and app folders in it.
struct Env {
    tmp: tempfile::TempDir,
}

impl Env {
    fn new() -> Self {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir(tmp.path().join("rt")).unwrap();
        Self { tmp }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.tmp.path().join(rel)
    }

    /// An app folder at `rel` named `notes` whose one program has the tool `tool`; with
    /// `accept_itself`, its berm.toml accepts its own program's bytes, as a hostile folder
    /// would to pass the guest's check of what changed.
    fn app(&self, rel: &str, tool: &str, accept_itself: bool) -> PathBuf {
        let dir = self.path(rel);
        std::fs::create_dir_all(&dir).unwrap();
        let wasm = berm_fixtures::wat_program(&[tool], &[], "");
        let accept = match accept_itself {
            true => {
                use sha2::Digest;
                format!(
                    "accept = \"sha256:{}\"\n",
                    hex::encode(sha2::Sha256::digest(&wasm))
                )
            }
            false => String::new(),
        };
        std::fs::write(dir.join("notes.wasm"), &wasm).unwrap();
        std::fs::write(
            dir.join("berm.toml"),
            format!(
                "name = \"notes\"\n\n[[program]]\nname = \"notes\"\nwasm = \"notes.wasm\"\ngrants = [\"kv\"]\n{accept}"
            ),
        )
        .unwrap();
        dir.canonicalize().unwrap()
    }

    /// The default state disk of VM `name`.
    fn disk(&self, name: &str) -> PathBuf {
        self.path(&format!("data/berm/state/{name}.img"))
    }

    /// What berm-vmm does on a first boot: the disk is made (blank here, as nothing boots).
    fn make_disk(&self, name: &str) {
        let disk = self.disk(name);
        std::fs::File::create(&disk)
            .unwrap()
            .set_len(16 << 20)
            .unwrap();
    }

    fn berm(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_berm"))
            .args(args)
            .env("XDG_RUNTIME_DIR", self.path("rt"))
            .env("XDG_DATA_HOME", self.path("data"))
            .env("BERM_HOME", self.path("no-bermd"))
            .env("BERM_VMM", self.path("no-berm-vmm"))
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    /// `berm vm up --app DIR EXTRA…`, which must get past the state disk and stop only at
    /// finding no berm-vmm; its stderr.
    fn up_passes(&self, app: &Path, extra: &[&str]) -> String {
        let out = self.berm(&[&["vm", "up", "--app", app.to_str().unwrap()], extra].concat());
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(
            err.contains("BERM_VMM names") && !err.contains("nothing was started"),
            "{err}"
        );
        err
    }

    /// `berm ARGS`, which must be refused for the state disk `disk` held by `owner`, not
    /// `app`; its stderr.
    fn refused(&self, args: &[&str], disk: &Path, owner: &Path, app: &Path) -> String {
        let disk = disk.canonicalize().unwrap();
        let out = self.berm(args);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(
            err.contains(&format!(
                "state disk {} holds workspaces of other app folders with the same names",
                disk.display()
            )) && err.contains(&format!(
                "workspace `notes` belongs to the app folder {}",
                owner.display()
            )) && err.contains(&format!("not to {}", app.display()))
                && err.contains("nothing was started")
                && err.contains("add --inherit-state"),
            "{err}"
        );
        assert!(!err.contains("BERM_VMM"), "refused before berm-vmm: {err}");
        err
    }

    fn records(&self) -> Vec<(PathBuf, Vec<u8>)> {
        let dir = self.path("data/berm/state/owners");
        let mut records: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .map(|p| {
                let bytes = std::fs::read(&p).unwrap();
                (p, bytes)
            })
            .collect();
        records.sort();
        records
    }
}

/// The item: an app folder cannot take over another app's state disk by reusing its `name`
/// (not even with its berm.toml accepting its own bytes); only `--inherit-state` on the
/// command line hands the workspace over, and a disk made before berm kept owners is bound
/// on its first boot, saying so.
#[test]
fn a_folder_reusing_an_apps_name_does_not_take_over_its_state_disk() {
    let env = Env::new();
    let mine = env.app("apps/notes", "add", false);
    let theirs = env.app("downloads/notes", "steal", true);
    let (mine_arg, theirs_arg) = (mine.to_str().unwrap(), theirs.to_str().unwrap());
    let disk = env.disk("notes");

    // The user's folder boots first: the disk is made, and bound to it.
    env.up_passes(&mine, &[]);
    env.make_disk("notes");
    let records = env.records();
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(
        berm_fixtures::mode(&env.path("data/berm/state/owners")),
        0o700
    );
    assert_eq!(berm_fixtures::mode(&records[0].0), 0o600);
    let record: serde_json::Value = serde_json::from_slice(&records[0].1).unwrap();
    assert_eq!(
        record["disk"],
        disk.canonicalize().unwrap().to_str().unwrap(),
        "{record}"
    );
    assert_eq!(record["apps"]["notes"]["dir"], mine_arg, "{record}");
    assert_eq!(record["apps"]["notes"]["how"], "created", "{record}");

    // Another folder named `notes`: refused by `up` and by `mcp --app`, nothing written.
    env.refused(&["vm", "up", "--app", theirs_arg], &disk, &mine, &theirs);
    env.refused(&["mcp", "--app", theirs_arg], &disk, &mine, &theirs);
    assert_eq!(env.records(), records);
    // The user's own folder still boots on it, and a disk of its own is the other's way.
    env.up_passes(&mine, &[]);
    env.up_passes(&theirs, &["--name", "elsewhere"]);
    env.up_passes(&theirs, &["--no-state"]);

    // Only the command line hands the workspace over, and says so; then the user's folder is
    // the other one.
    let err = env.up_passes(&theirs, &["--inherit-state"]);
    assert!(
        err.contains("--inherit-state: on state disk")
            && err.contains(&format!("belongs to the app folder {mine_arg}")),
        "{err}"
    );
    env.refused(&["vm", "up", "--app", mine_arg], &disk, &theirs, &mine);

    // A disk from before berm kept owners, whose last recorded run was the user's folder:
    // bound to that folder, so the other is refused even on its first boot since.
    let old = env.disk("old");
    env.make_disk("old");
    let vm_dir = env.path("rt/berm/vm/old");
    std::fs::create_dir_all(&vm_dir).unwrap();
    let last = serde_json::json!({
        "name": "old", "pid": 999_999_999, "start_ticks": null,
        "argv": ["/nonexistent/berm-vmm", "run"], "started_unix": 0,
        "apps": [{"index": 0, "name": "notes", "dir": mine_arg}],
        "arch": "x86_64", "hypervisor": "auto", "state": old.to_str().unwrap(), "run_dir": null,
    });
    std::fs::write(vm_dir.join("last.json"), last.to_string()).unwrap();
    let err = env.refused(
        &["vm", "up", "--app", theirs_arg, "--name", "old"],
        &old,
        &mine,
        &theirs,
    );
    assert!(err.contains("which last booted on it"), "{err}");
    let err = env.up_passes(&mine, &["--name", "old"]);
    assert!(
        err.contains(&format!(
            "state disk {} had no record of the app folders its workspaces belong to",
            old.canonicalize().unwrap().display()
        )) && err.contains("bound it to the folders of its last recorded run"),
        "{err}"
    );
    env.refused(
        &["vm", "up", "--app", theirs_arg, "--name", "old"],
        &old,
        &mine,
        &theirs,
    );

    // Such a disk with no run recorded: bound to the first folder that boots on it.
    env.make_disk("bare");
    let err = env.up_passes(&mine, &["--name", "bare"]);
    assert!(err.contains("bound it to the folders booting now"), "{err}");
    env.refused(
        &["vm", "up", "--app", theirs_arg, "--name", "bare"],
        &env.disk("bare"),
        &mine,
        &theirs,
    );
}
