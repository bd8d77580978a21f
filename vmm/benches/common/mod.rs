//! What the VM benchmarks share: how many runs, whether each backend can be measured here,
//! reading a process's peak memory, and medians.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

/// The served name of the notes app's `list` tool, which every VM bench calls.
pub const NOTES_LIST: &str = "notes_list";

/// A `kB` field of `/proc/<pid>/status` (e.g. `VmHWM:`), or NaN if it cannot be read.
pub fn status_kib(pid: u32, field: &str) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                l.strip_prefix(field)
                    .map(|v| v.trim().trim_end_matches(" kB").parse().ok())
            })
        })
        .flatten()
        .unwrap_or(f64::NAN)
}

/// The guest memory berm-vmm chose for a run, in MiB, from the `vm_config` line of its record
/// (`vmm.jsonl` in the run dir); NaN if it cannot be read.
pub fn configured_memory_mib(run_dir: &Path) -> f64 {
    std::fs::read_to_string(run_dir.join("vmm.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["event"] == "vm_config")
        .and_then(|v| v["memory_mib"].as_f64())
        .unwrap_or(f64::NAN)
}

/// The median; NaN for no values.
pub fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    match n {
        0 => f64::NAN,
        _ if n % 2 == 1 => values[n / 2],
        _ => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

/// Runs per configuration: `BERM_BENCH_RUNS`, 11 by default (the first is a warm-up).
pub fn runs() -> usize {
    std::env::var("BERM_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(11)
}

/// Why krun cannot be measured on this host, or `None` when it can.
pub fn krun_unmeasurable(detection: &berm_vmm::detect::Detection) -> Option<&'static str> {
    if detection.krun_runs_user_space() {
        None
    } else if detection.kvm_pvm {
        Some("kvm_pvm (guest user space faults)")
    } else {
        Some("not hardware KVM")
    }
}

/// Prints the header of a bench's Markdown table with `columns`.
pub fn print_header(columns: &[&str]) {
    println!("| {} |", columns.join(" | "));
    println!("|{}", "---|".repeat(columns.len()));
}

/// The row of krun in a table of `columns` columns on a host where it cannot be measured
/// (`why`): `krun`, then `lead` (the cells before the reason), the reason, and empty cells
/// to the end.
pub fn unmeasurable_row(columns: usize, lead: &[&str], why: &str) -> String {
    let cells: String = lead.iter().map(|cell| format!("{cell} | ")).collect();
    let empty = " |".repeat(columns - 2 - lead.len());
    format!("| krun | {cells}not measurable on this host: /dev/kvm is {why} |{empty}")
}

/// Prints the header of a bench's Markdown table with `columns`, then measures each backend
/// in turn, QEMU then krun, with [`qemu_accel`] for the table; on a host where krun cannot be
/// measured, prints its [`unmeasurable_row`] instead.
pub fn each_backend(
    detection: &berm_vmm::detect::Detection,
    columns: &[&str],
    lead: &[&str],
    mut measure: impl FnMut(&'static str, &'static str),
) {
    print_header(columns);
    let accel = qemu_accel(detection);
    measure("qemu", accel);
    match krun_unmeasurable(detection) {
        Some(why) => println!("{}", unmeasurable_row(columns.len(), lead, why)),
        None => measure("krun", accel),
    }
}

/// A scratch directory for one bench: `<temp dir>/<prefix>-<pid>`, created.
pub fn scratch_dir(prefix: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("{prefix}-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    dir
}

/// The accelerator QEMU would use here, for the table's hypervisor column.
pub fn qemu_accel(detection: &berm_vmm::detect::Detection) -> &'static str {
    detection
        .choose(berm_vmm::detect::Requested::Qemu, berm::GuestArch::HOST)
        .ok()
        .and_then(|c| c.accel)
        .unwrap_or("-")
}

/// The hypervisor column of a result row: `qemu (<accel>)` or `krun`.
pub fn hypervisor_label(hypervisor: &str, accel: &str) -> String {
    if hypervisor == "qemu" {
        format!("qemu ({accel})")
    } else {
        "krun".into()
    }
}

/// Files run `i`'s result: its sample unless it is the warm-up (run 0), or a failure note
/// naming `kept`, the run's directory, which is left for a look. True when the run succeeded
/// and its files can go.
pub fn file_run<S>(
    i: usize,
    result: Result<S, String>,
    kept: &Path,
    samples: &mut Vec<S>,
    failures: &mut Vec<String>,
) -> bool {
    match result {
        Ok(sample) if i > 0 => samples.push(sample),
        Ok(_) => {}
        Err(e) => {
            failures.push(format!("{e} (kept: {})", kept.display()));
            return false;
        }
    }
    true
}

/// The runs column's note: nothing, or how many runs failed and why.
pub fn failed_note(failures: &[String]) -> String {
    if failures.is_empty() {
        String::new()
    } else {
        format!(", {} failed: {}", failures.len(), failures.join("; "))
    }
}

/// Connects, initializes and calls `tool` once; `None` until the app answers.
pub fn call_once(socket: &Path, tool: &str, args: &Value) -> Option<()> {
    let mut stream = UnixStream::connect(socket).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .ok()?;
    let mut reader = BufReader::new(stream.try_clone().ok()?);
    let messages = [
        json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"bench","version":"0"}}}),
        json!({"jsonrpc":"2.0","method":"notifications/initialized"}),
        json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":tool,"arguments":args}}),
    ];
    let mut text = String::new();
    for m in messages {
        text.push_str(&m.to_string());
        text.push('\n');
    }
    stream.write_all(text.as_bytes()).ok()?;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).ok()? == 0 {
            return None;
        }
        let value: Value = serde_json::from_str(&line).ok()?;
        if value["id"] == 2 {
            return (value["result"]["isError"] == false).then_some(());
        }
    }
}

pub fn app_folder(dir: &Path, name: &str, program: &str, grants: &str) -> PathBuf {
    let wasm = berm_fixtures::example_path(program);
    let folder = dir.join(name);
    std::fs::create_dir_all(&folder).expect("app folder");
    std::fs::copy(&wasm, folder.join(format!("{program}.wasm")))
        .unwrap_or_else(|e| panic!("{}: {e} (run scripts/build-apps.sh)", wasm.display()));
    std::fs::write(
        folder.join("berm.toml"),
        format!("name = \"{name}\"\n[[program]]\nname = \"{program}\"\nwasm = \"{program}.wasm\"\ngrants = [{grants}]\n"),
    )
    .expect("berm.toml");
    folder
}
