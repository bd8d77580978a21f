//! App boot benchmarks for `berm-vmm run --app …`, per hypervisor and layout (one app, two
//! apps): spawn of berm-vmm → the first answered `tools/call` on `rpc-0.sock`, the guest's
//! phase uptimes from berm-init's events, guest memory in use once every app is ready, and the
//! peak RSS of berm-vmm. Prints a markdown section on stdout (scripts/bench-vm writes it into
//! docs/perf-vm.md). Never asserted: speed is reported.
//!
//! `BERM_BENCH_RUNS` (default 11) boots per row; the first is a warm-up (it also fills
//! berm-vmm's compiled-code cache). Each boot gets a fresh state disk.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use berm_vm_protocol::client::GuestConnection;
use berm_vm_protocol::{Event, Request, Service};
use berm_vmm::detect::Detection;
use common::{NOTES_LIST, app_folder, call_once, median, status_kib};
use serde_json::json;

const MEMORY_MIB: u32 = 512;

#[derive(Default)]
struct Sample {
    first_call_ms: f64,
    boot_start_uptime: f64,
    first_app_started_uptime: f64,
    last_app_ready_uptime: f64,
    boot_complete_uptime: f64,
    guest_used_mib: f64,
    vmm_hwm_kib: f64,
}

fn boot_once(hypervisor: &str, apps: &[PathBuf], work: &Path) -> Result<Sample, String> {
    let run_dir = work.join("run");
    let stderr_path = work.join("stderr");
    let spawned = Instant::now();
    let mut command = Command::new(env!("CARGO_BIN_EXE_berm-vmm"));
    command
        .args(["run", "--hypervisor", hypervisor, "--memory"])
        .arg(MEMORY_MIB.to_string())
        .arg("--run-dir")
        .arg(&run_dir)
        .arg("--state")
        .arg(work.join("state.img"));
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
    let status = control.status(deadline).map_err(|e| e.to_string())?;
    if let Event::Status(status) = &status.event {
        sample.guest_used_mib = f64::from(MEMORY_MIB) - status.mem_available_kib as f64 / 1024.0;
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

fn main() {
    let runs = common::runs();
    let detection = Detection::probe();
    let tmp = std::env::temp_dir().join(format!("berm-bench-apps-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&tmp);
    let notes = app_folder(&tmp, "notes", "notes", "\"kv\"");
    let echo = app_folder(&tmp, "echo", "echo", "");
    println!(
        "| hypervisor | apps | runs | spawn → first answered tools/call | guest boot_start | first app_started | last app_ready | boot_complete | guest memory in use | berm-vmm peak RSS |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for hypervisor in ["qemu", "krun"] {
        if hypervisor == "krun"
            && let Some(why) = common::krun_unmeasurable(&detection)
        {
            println!(
                "| krun | – | 0 | not measurable on this host: /dev/kvm is {why} | | | | | | |"
            );
            continue;
        }
        let accel = common::qemu_accel(&detection);
        for (label, apps) in [
            ("1 (notes)", vec![notes.clone()]),
            ("2 (notes, echo)", vec![notes.clone(), echo.clone()]),
        ] {
            let mut samples = Vec::new();
            let mut failures = Vec::new();
            for i in 0..runs {
                let work = tmp.join(format!("{hypervisor}-{}-{i}", apps.len()));
                let _ = std::fs::create_dir_all(&work);
                match boot_once(hypervisor, &apps, &work) {
                    Ok(sample) if i > 0 => samples.push(sample),
                    Ok(_) => {}
                    Err(e) => {
                        failures.push(format!("{e} (kept: {})", work.display()));
                        continue;
                    }
                }
                let _ = std::fs::remove_dir_all(&work);
            }
            let m = |f: fn(&Sample) -> f64| median(samples.iter().map(f).collect());
            let name = if hypervisor == "qemu" {
                format!("qemu ({accel})")
            } else {
                "krun".into()
            };
            println!(
                "| {name} | {label} | {} (+1 warm-up{}) | {:.0} ms | {:.0} ms | {:.0} ms | {:.0} ms | {:.0} ms | {:.0} MiB of {MEMORY_MIB} | {:.1} MiB |",
                samples.len(),
                if failures.is_empty() {
                    String::new()
                } else {
                    format!(", {} failed: {}", failures.len(), failures.join("; "))
                },
                m(|s| s.first_call_ms),
                m(|s| s.boot_start_uptime),
                m(|s| s.first_app_started_uptime),
                m(|s| s.last_app_ready_uptime),
                m(|s| s.boot_complete_uptime),
                m(|s| s.guest_used_mib),
                m(|s| s.vmm_hwm_kib) / 1024.0,
            );
        }
    }
    let _ = std::fs::remove_dir_all(tmp.join("notes"));
    let _ = std::fs::remove_dir_all(tmp.join("echo"));
    let _ = std::fs::remove_dir(&tmp);
}
