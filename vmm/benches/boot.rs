//! Boot benchmarks for `berm-vmm run`, per hypervisor: spawn → greeting, spawn → exit after a
//! shutdown request, request → exit, the guest's own phase uptimes from its events, and the
//! peak RSS of berm-vmm and of its hypervisor child. Prints a markdown section on stdout
//! (scripts/bench-vm writes it into docs/perf-vm.md). Never asserted: speed is reported.
//!
//! `BERM_BENCH_RUNS` (default 11) boots per hypervisor; the first is a warm-up.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use berm_vm_protocol::client::GuestConnection;
use berm_vm_protocol::{Event, Request, Service};
use berm_vmm::detect::Detection;
use common::{median, status_kib};

#[derive(Default)]
struct Sample {
    greeting_ms: f64,
    exit_ms: f64,
    shutdown_ms: f64,
    boot_start_uptime: f64,
    boot_complete_uptime: f64,
    power_off_uptime_after_request: f64,
    vmm_hwm_kib: f64,
    hypervisor_hwm_kib: f64,
}

fn children(pid: u32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

fn boot_once(hypervisor: &str, run_dir: &Path) -> Result<Sample, String> {
    let spawned = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_berm-vmm"))
        .args(["run", "--hypervisor", hypervisor, "--run-dir"])
        .arg(run_dir)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(run_dir.with_extension("stderr")).map_err(|e| e.to_string())?)
        .spawn()
        .map_err(|e| e.to_string())?;
    let deadline = spawned + Duration::from_secs(60);
    let mut control =
        GuestConnection::connect(&run_dir.join("control.sock"), Service::Control, deadline)
            .map_err(|e| e.to_string())?;
    let mut sample = Sample {
        greeting_ms: spawned.elapsed().as_secs_f64() * 1e3,
        ..Sample::default()
    };
    let complete = control
        .wait_for(deadline, |l| matches!(l.event, Event::BootComplete(_)))
        .map_err(|e| e.to_string())?;
    sample.boot_complete_uptime = complete.uptime_ms as f64;
    for seen in control.seen() {
        if let Event::BootStart(_) = seen.event {
            sample.boot_start_uptime = seen.uptime_ms as f64;
        }
    }
    let pid = child.id();
    sample.vmm_hwm_kib = status_kib(pid, "VmHWM:");
    sample.hypervisor_hwm_kib = children(pid)
        .into_iter()
        .filter(|c| {
            std::fs::read_to_string(format!("/proc/{c}/comm"))
                .is_ok_and(|n| !n.starts_with("vhost"))
        })
        .map(|c| status_kib(c, "VmHWM:"))
        .fold(0.0, f64::max);
    let status = control.status(deadline).map_err(|e| e.to_string())?;
    let requested = Instant::now();
    control
        .send(Request::Shutdown, deadline)
        .map_err(|e| e.to_string())?;
    let off = control
        .wait_for(deadline, |l| matches!(l.event, Event::PowerOff(_)))
        .map_err(|e| e.to_string())?;
    sample.power_off_uptime_after_request = off.uptime_ms.saturating_sub(status.uptime_ms) as f64;
    drop(control);
    loop {
        if let Some(code) = child.try_wait().map_err(|e| e.to_string())? {
            if code.code() != Some(0) {
                return Err(format!("berm-vmm exited with {code}"));
            }
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            return Err("berm-vmm did not exit".into());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    sample.exit_ms = spawned.elapsed().as_secs_f64() * 1e3;
    sample.shutdown_ms = requested.elapsed().as_secs_f64() * 1e3;
    Ok(sample)
}

fn main() {
    // `cargo bench` passes --bench; nothing else is accepted.
    let runs = common::runs();
    let detection = Detection::probe();
    let tmp = common::scratch_dir("berm-bench");
    let columns = [
        "hypervisor",
        "runs",
        "spawn → greeting",
        "spawn → exit (after shutdown)",
        "shutdown request → exit",
        "guest boot_start uptime",
        "guest boot_complete uptime",
        "shutdown in guest (status → power_off)",
        "berm-vmm peak RSS",
        "hypervisor peak RSS",
    ];
    common::each_backend(&detection, &columns, &["0"], |hypervisor, accel| {
        let mut samples = Vec::new();
        let mut failures = Vec::new();
        for i in 0..runs {
            let run_dir = tmp.join(format!("{hypervisor}-{i}"));
            let result = boot_once(hypervisor, &run_dir);
            // A failed run's dir (console.log) and berm-vmm's stderr are kept for a look.
            if common::file_run(i, result, &run_dir, &mut samples, &mut failures) {
                let _ = std::fs::remove_dir_all(&run_dir);
                let _ = std::fs::remove_file(run_dir.with_extension("stderr"));
            }
        }
        let m = |f: fn(&Sample) -> f64| median(samples.iter().map(f).collect());
        let name = common::hypervisor_label(hypervisor, accel);
        println!(
            "| {name} | {} (+1 warm-up{}) | {:.0} ms | {:.0} ms | {:.1} ms | {:.0} ms | {:.0} ms | {:.0} ms | {:.1} MiB | {:.1} MiB |",
            samples.len(),
            common::failed_note(&failures),
            m(|s| s.greeting_ms),
            m(|s| s.exit_ms),
            m(|s| s.shutdown_ms),
            m(|s| s.boot_start_uptime),
            m(|s| s.boot_complete_uptime),
            m(|s| s.power_off_uptime_after_request),
            m(|s| s.vmm_hwm_kib) / 1024.0,
            m(|s| s.hypervisor_hwm_kib) / 1024.0,
        );
    });
    // Empty unless a run failed (its files are kept there).
    let _ = std::fs::remove_dir(&tmp);
}
