//! `berm vm up` starts berm-vmm with one `VmConfig` in a file (`<VM dir>/vmm.json`, mode 0600)
//! and keeps it in the launch record; a running VM an older berm started (whose record holds
//! no configuration) is rebooted afresh, with a message, not an error. Nothing boots:
//! `BERM_VMM` is a script that reports its one app ready and sleeps.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// A fake berm-vmm: keeps its arguments beside itself, says app 0 is ready, then sleeps.
const FAKE_VMM: &str = r#"#!/bin/sh
printf '%s\n' "$@" > "$(dirname "$0")/args"
printf '%s\n' '{"source":"berm-init","boot_id":"ab-12","uptime_ms":5,"event":"app_ready","app":"notes","index":0,"pid":7,"ms":3,"tools":1,"programs":[]}' >&2
exec sleep 30
"#;

fn berm(root: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_berm"))
        .args(args)
        .env("XDG_RUNTIME_DIR", root.join("rt"))
        .env("BERM_HOME", root.join("home"))
        .env("BERM_VMM", root.join("vmm/berm-vmm"))
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn kill(pid: u64) {
    let _ = Command::new("kill").arg(pid.to_string()).status();
}

fn json(path: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

#[test]
fn up_writes_one_configuration_and_reboots_an_older_berms_vm_afresh() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    std::fs::create_dir_all(root.join("rt")).unwrap();
    std::fs::create_dir_all(root.join("vmm")).unwrap();
    let vmm = root.join("vmm/berm-vmm");
    std::fs::write(&vmm, FAKE_VMM).unwrap();
    std::fs::set_permissions(&vmm, std::fs::Permissions::from_mode(0o755)).unwrap();
    let app: PathBuf = root.join("notes");
    std::fs::create_dir_all(&app).unwrap();
    std::fs::write(
        app.join("notes.wasm"),
        berm_fixtures::wat_program(&["add"], &[], ""),
    )
    .unwrap();
    let toml = "name = \"notes\"\n\n[[program]]\nname = \"notes\"\nwasm = \"notes.wasm\"\n";
    std::fs::write(app.join("berm.toml"), toml).unwrap();
    let app = app.canonicalize().unwrap();
    let vm_dir = root.join("rt/berm/vm/notes");

    let up = [
        "vm",
        "up",
        "--app",
        app.to_str().unwrap(),
        "--no-state",
        "--arch",
        "aarch64",
        "--hypervisor",
        "qemu",
        "--cpus",
        "2",
        "--memory",
        "256",
        "--env",
        "BERM_X=1",
    ];
    let out = berm(root, &up);
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{said}");
    let config_file = vm_dir.join("vmm.json");
    let args = std::fs::read_to_string(root.join("vmm/args")).unwrap();
    assert_eq!(args, format!("run\n--config\n{}\n", config_file.display()));
    use std::os::unix::fs::MetadataExt;
    assert_eq!(
        std::fs::metadata(&config_file).unwrap().mode() & 0o777,
        0o600
    );
    let config = json(&config_file);
    assert_eq!(config["apps"], serde_json::json!([app]));
    assert_eq!(config["arch"], "aarch64");
    assert_eq!(config["hypervisor"], "qemu");
    assert_eq!(config["cpus"], 2);
    assert_eq!(config["memory_mib"], 256);
    assert_eq!(config["env"], serde_json::json!(["BERM_X=1"]));
    assert_eq!(config["accept"], false);
    assert_eq!(config["state"], serde_json::Value::Null);
    assert_eq!(
        config["programs"],
        root.join("home/programs").to_str().unwrap()
    );
    let record = json(&vm_dir.join("vm.json"));
    assert_eq!(record["config"], config);
    assert_eq!(record["arch"], "aarch64");
    assert_eq!(record["hypervisor"], "qemu");
    kill(record["pid"].as_u64().unwrap());

    // A VM an older berm started: running (a live process with the argv it recorded), its
    // record without a configuration or a measurement. The folder counts as changed; with
    // --accept it is stopped and booted afresh from this command's options, saying so.
    let mut old = Command::new("sleep").arg("30").spawn().unwrap();
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", old.id())).unwrap();
    let ticks: u64 = stat[stat.rfind(')').unwrap() + 1..]
        .split_whitespace()
        .nth(19)
        .unwrap()
        .parse()
        .unwrap();
    let older = serde_json::json!({
        "name": "notes", "pid": old.id(), "start_ticks": ticks,
        "argv": ["sleep", "30"], "started_unix": 0,
        "apps": [{"index": 0, "name": "notes", "dir": app}],
        "arch": "x86_64", "hypervisor": "auto", "state": null, "run_dir": null,
    });
    std::fs::write(vm_dir.join("vm.json"), older.to_string()).unwrap();
    let out = berm(root, &[&up[..], &["--accept"]].concat());
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{said}");
    assert!(
        said.contains("\"notes\" was started by an older berm, which recorded no configuration to reboot it with; booting it afresh with this command's options"),
        "{said}"
    );
    assert!(
        old.wait().unwrap().code() != Some(0),
        "the older VM was stopped"
    );
    let record = json(&vm_dir.join("vm.json"));
    assert_eq!(record["config"]["accept"], true);
    assert_eq!(json(&config_file)["accept"], true);
    kill(record["pid"].as_u64().unwrap());
}
