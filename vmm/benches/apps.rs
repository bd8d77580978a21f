//! App boot benchmarks for `berm-vmm run --app …`, per hypervisor and layout (one app, two
//! apps): spawn of berm-vmm → the first answered `tools/call` on `rpc-0.sock`, the guest's
//! phase uptimes from berm-init's events, guest memory in use once every app is ready, and the
//! peak RSS of berm-vmm. Prints a markdown section on stdout (scripts/bench-vm writes it into
//! docs/perf-vm.md). Never asserted: speed is reported.
//!
//! `BERM_BENCH_RUNS` (default 11) boots per row; the first is a warm-up (it also fills
//! berm-vmm's compiled-code cache). Each boot gets a fresh state disk.
//! `BERM_BENCH_PREVIOUS_VMM=PATH` also measures another berm-vmm binary (a previous build, its
//! pinned artifacts in the same store), booting in turn with this one.
//! `BERM_BENCH_ARCHES=x86_64,aarch64` measures each guest architecture (default: the host's);
//! a foreign one boots under QEMU/TCG only, with this build only.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use berm_vm_protocol::client::GuestConnection;
use berm_vm_protocol::{Event, Request, Service};
use berm_vmm::detect::Detection;
use common::{NOTES_LIST, app_folder, call_once, configured_memory_mib, median, status_kib};
use serde_json::json;

#[derive(Default)]
struct Sample {
    first_call_ms: f64,
    boot_start_uptime: f64,
    first_app_started_uptime: f64,
    last_app_ready_uptime: f64,
    boot_complete_uptime: f64,
    guest_memory_mib: f64,
    guest_used_mib: f64,
    vmm_hwm_kib: f64,
}

fn boot_once(
    vmm: &Path,
    hypervisor: &str,
    arch: Option<&str>,
    apps: &[PathBuf],
    work: &Path,
) -> Result<Sample, String> {
    let run_dir = work.join("run");
    let stderr_path = work.join("stderr");
    let spawned = Instant::now();
    let mut command = Command::new(vmm);
    command
        .args(["run", "--hypervisor", hypervisor, "--run-dir"])
        .arg(&run_dir)
        .arg("--state")
        .arg(work.join("state.img"));
    if let Some(arch) = arch {
        command.args(["--arch", arch]);
    }
    for app in apps {
        command.arg("--app").arg(app);
    }
    let mut child = command
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&stderr_path).map_err(|e| e.to_string())?)
        .spawn()
        .map_err(|e| e.to_string())?;
    let deadline = spawned + Duration::from_secs(300);
    let socket = run_dir.join("rpc-0.sock");
    loop {
        if call_once(&socket, NOTES_LIST, &json!({})).is_some() {
            break;
        }
        if Instant::now() > deadline || child.try_wait().map_err(|e| e.to_string())?.is_some() {
            let _ = child.kill();
            return Err("no answered tools/call".into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut sample = Sample {
        first_call_ms: spawned.elapsed().as_secs_f64() * 1e3,
        ..Sample::default()
    };
    let mut control =
        GuestConnection::connect(&run_dir.join("control.sock"), Service::Control, deadline)
            .map_err(|e| e.to_string())?;
    let complete = control
        .wait_for(deadline, |l| matches!(l.event, Event::BootComplete(_)))
        .map_err(|e| e.to_string())?;
    sample.boot_complete_uptime = complete.uptime_ms as f64;
    for seen in control.seen() {
        let at = seen.uptime_ms as f64;
        match &seen.event {
            Event::BootStart(_) => sample.boot_start_uptime = at,
            Event::AppStarted(_) if sample.first_app_started_uptime == 0.0 => {
                sample.first_app_started_uptime = at;
            }
            Event::AppReady(_) => sample.last_app_ready_uptime = at,
            _ => {}
        }
    }
    sample.guest_memory_mib = configured_memory_mib(&run_dir);
    let status = control.status(deadline).map_err(|e| e.to_string())?;
    if let Event::Status(status) = &status.event {
        sample.guest_used_mib = sample.guest_memory_mib - status.mem_available_kib as f64 / 1024.0;
    }
    sample.vmm_hwm_kib = status_kib(child.id(), "VmHWM:");
    control
        .send(Request::Shutdown, deadline)
        .map_err(|e| e.to_string())?;
    let _ = control.wait_for(deadline, |l| matches!(l.event, Event::PowerOff(_)));
    drop(control);
    loop {
        if let Some(code) = child.try_wait().map_err(|e| e.to_string())? {
            if code.code() != Some(0) {
                return Err(format!("berm-vmm exited with {code}"));
            }
            return Ok(sample);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            return Err("berm-vmm did not exit".into());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The table's columns.
const COLUMNS: [&str; 10] = [
    "hypervisor",
    "apps",
    "runs",
    "spawn → first answered tools/call",
    "guest boot_start",
    "first app_started",
    "last app_ready",
    "boot_complete",
    "guest memory in use",
    "berm-vmm peak RSS",
];

fn main() {
    let runs = common::runs();
    let detection = Detection::probe();
    let tmp = common::scratch_dir("berm-bench-apps");
    let notes = app_folder(&tmp, "notes", "notes", "\"kv\"");
    let echo = app_folder(&tmp, "echo", "echo", "");
    common::print_header(&COLUMNS);
    let arches: Vec<String> = std::env::var("BERM_BENCH_ARCHES")
        .unwrap_or_else(|_| std::env::consts::ARCH.to_string())
        .split(',')
        .map(str::to_string)
        .collect();
    for arch in &arches {
        // The host's own architecture boots as before (no --arch, every hypervisor, the
        // previous build too); a foreign one only under QEMU/TCG, this build only.
        let foreign = (arch != std::env::consts::ARCH).then_some(arch.as_str());
        for hypervisor in ["qemu", "krun"] {
            if foreign.is_some() && hypervisor == "krun" {
                continue;
            }
            measure(
                &Row {
                    hypervisor,
                    foreign,
                    detection: &detection,
                    runs,
                    tmp: &tmp,
                },
                &notes,
                &echo,
            );
        }
    }
    let _ = std::fs::remove_dir_all(tmp.join("notes"));
    let _ = std::fs::remove_dir_all(tmp.join("echo"));
    let _ = std::fs::remove_dir(&tmp);
}

/// One hypervisor and guest architecture of the table.
struct Row<'a> {
    hypervisor: &'a str,
    /// The guest architecture when it is not the host's.
    foreign: Option<&'a str>,
    detection: &'a Detection,
    runs: usize,
    tmp: &'a Path,
}

/// Boots each layout `row.runs` times with each build and prints its rows.
fn measure(row: &Row<'_>, notes: &Path, echo: &Path) {
    let Row {
        hypervisor,
        foreign,
        detection,
        runs,
        tmp,
    } = *row;
    if hypervisor == "krun"
        && let Some(why) = common::krun_unmeasurable(detection)
    {
        println!(
            "{}",
            common::unmeasurable_row(COLUMNS.len(), &["–", "0"], why)
        );
        return;
    }
    // A foreign guest is emulated whatever the host has.
    let accel = match foreign {
        Some(_) => "tcg",
        None => common::qemu_accel(detection),
    };
    for (label, apps) in [
        ("1 (notes)", vec![notes.to_path_buf()]),
        (
            "2 (notes, echo)",
            vec![notes.to_path_buf(), echo.to_path_buf()],
        ),
    ] {
        // The previous build, when given, boots in turn with this one, so both see the
        // same machine.
        let mut builds = vec![("this build", PathBuf::from(env!("CARGO_BIN_EXE_berm-vmm")))];
        if let Some(previous) = std::env::var_os("BERM_BENCH_PREVIOUS_VMM")
            && foreign.is_none()
        {
            builds.insert(0, ("previous build", PathBuf::from(previous)));
        }
        let mut samples: Vec<Vec<Sample>> = builds.iter().map(|_| Vec::new()).collect();
        let mut failures: Vec<Vec<String>> = builds.iter().map(|_| Vec::new()).collect();
        for i in 0..runs {
            for (b, (_, vmm)) in builds.iter().enumerate() {
                let work = tmp.join(format!(
                    "{hypervisor}-{}-{}-{b}-{i}",
                    foreign.unwrap_or("host"),
                    apps.len()
                ));
                let _ = std::fs::create_dir_all(&work);
                let result = boot_once(vmm, hypervisor, foreign, &apps, &work);
                if common::file_run(i, result, &work, &mut samples[b], &mut failures[b]) {
                    let _ = std::fs::remove_dir_all(&work);
                }
            }
        }
        for (b, (build, _)) in builds.iter().enumerate() {
            let m = |f: fn(&Sample) -> f64| median(samples[b].iter().map(f).collect());
            let mut name = common::hypervisor_label(hypervisor, accel);
            if let Some(arch) = foreign {
                name = format!("{name}, {arch} guest");
            }
            if builds.len() > 1 {
                name = format!("{name}, {build}");
            }
            println!(
                "| {name} | {label} | {} (+1 warm-up{}) | {:.0} ms | {:.0} ms | {:.0} ms | {:.0} ms | {:.0} ms | {:.0} MiB of {:.0} | {:.1} MiB |",
                samples[b].len(),
                common::failed_note(&failures[b]),
                m(|s| s.first_call_ms),
                m(|s| s.boot_start_uptime),
                m(|s| s.first_app_started_uptime),
                m(|s| s.last_app_ready_uptime),
                m(|s| s.boot_complete_uptime),
                m(|s| s.guest_used_mib),
                m(|s| s.guest_memory_mib),
                m(|s| s.vmm_hwm_kib) / 1024.0,
            );
        }
    }
}
