//! Density: N one-app VMs (the notes app) started side by side, for N in `BERM_DENSITY_STEPS`
//! (default `1,5,10,20`). For each N it reports spawn → first answered `tools/call` (median and
//! slowest over the N VMs, all spawned at once), host memory per VM (resident set of berm-vmm
//! plus every process it started: the hypervisor and, for QEMU, vhost-device-vsock), and guest
//! memory in use (the configured size less the guest's `MemAvailable` from berm-init's `status`), each read
//! once every VM of the step answered. `BERM_DENSITY_MEMORY` sets the guest memory in MiB
//! (default: berm-vmm's own default). Prints a markdown table; never asserted.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use berm_vm_protocol::client::GuestConnection;
use berm_vm_protocol::{Event, Request, Service};
use berm_vmm::detect::Detection;
use common::{NOTES_LIST, app_folder, call_once, median, status_kib};
use serde_json::json;

/// Guest memory when `BERM_DENSITY_MEMORY` is not set: berm-vmm's default.
const DEFAULT_MEMORY_MIB: u32 = 512;

/// One VM of a step.
struct Vm {
    child: Child,
    run_dir: PathBuf,
    spawned: Instant,
    first_call_ms: Option<f64>,
}

/// Resident set (`VmRSS`) of `pid` and of every descendant, in KiB.
fn tree_rss_kib(pid: u32) -> f64 {
    let mut total = 0.0;
    let mut stack = vec![pid];
    while let Some(pid) = stack.pop() {
        let rss = status_kib(pid, "VmRSS:");
        if rss.is_finite() {
            total += rss;
        }
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            continue;
        };
        for task in tasks.flatten() {
            let children =
                std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
            stack.extend(
                children
                    .split_whitespace()
                    .filter_map(|c| c.parse::<u32>().ok()),
            );
        }
    }
    total
}

fn spawn(app: &Path, work: &Path, memory: u32) -> Result<Vm, String> {
    std::fs::create_dir_all(work).map_err(|e| e.to_string())?;
    let run_dir = work.join("run");
    let mut command = Command::new(env!("CARGO_BIN_EXE_berm-vmm"));
    command
        .args(["run", "--boot-timeout", "600", "--run-dir"])
        .arg(&run_dir)
        .arg("--state")
        .arg(work.join("state.img"))
        .arg("--app")
        .arg(app)
        .arg("--memory")
        .arg(memory.to_string());
    let stderr = std::fs::File::create(work.join("stderr")).map_err(|e| e.to_string())?;
    let spawned = Instant::now();
    let child = command
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .map_err(|e| e.to_string())?;
    Ok(Vm {
        child,
        run_dir,
        spawned,
        first_call_ms: None,
    })
}

/// Shuts every VM down through its control port, then waits for the processes.
fn stop(vms: &mut [Vm]) {
    let deadline = Instant::now() + Duration::from_secs(120);
    for vm in vms.iter() {
        if let Ok(mut control) =
            GuestConnection::connect(&vm.run_dir.join("control.sock"), Service::Control, deadline)
        {
            let _ = control.send(Request::Shutdown, deadline);
        }
    }
    for vm in vms.iter_mut() {
        while Instant::now() < deadline {
            if let Ok(Some(_)) = vm.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = vm.child.kill();
        let _ = vm.child.wait();
    }
}

/// Guest memory in use, MiB: the configured size less the guest's `MemAvailable` (berm-init's
/// `status`), as the apps bench counts it.
fn guest_used_mib(vm: &Vm, memory: u32) -> Option<f64> {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut control =
        GuestConnection::connect(&vm.run_dir.join("control.sock"), Service::Control, deadline)
            .ok()?;
    let status = control.status(deadline).ok()?;
    match &status.event {
        Event::Status(s) => Some(f64::from(memory) - s.mem_available_kib as f64 / 1024.0),
        _ => None,
    }
}

fn step(n: usize, app: &Path, tmp: &Path, memory: u32) -> String {
    let mut vms = Vec::new();
    let mut failures = Vec::new();
    for i in 0..n {
        match spawn(app, &tmp.join(format!("n{n}-{i}")), memory) {
            Ok(vm) => vms.push(vm),
            Err(e) => failures.push(format!("spawn {i}: {e}")),
        }
    }
    let deadline = Instant::now() + Duration::from_secs(900);
    while Instant::now() < deadline && vms.iter().any(|vm| vm.first_call_ms.is_none()) {
        for vm in vms.iter_mut().filter(|vm| vm.first_call_ms.is_none()) {
            if call_once(&vm.run_dir.join("rpc-0.sock"), NOTES_LIST, &json!({})).is_some() {
                vm.first_call_ms = Some(vm.spawned.elapsed().as_secs_f64() * 1e3);
            } else if let Ok(Some(code)) = vm.child.try_wait() {
                failures.push(format!("{}: exited {code}", vm.run_dir.display()));
                vm.first_call_ms = Some(f64::NAN);
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let answered: Vec<f64> = vms
        .iter()
        .filter_map(|vm| vm.first_call_ms)
        .filter(|ms| ms.is_finite())
        .collect();
    let host_mib: Vec<f64> = vms
        .iter()
        .map(|vm| tree_rss_kib(vm.child.id()) / 1024.0)
        .collect();
    let guest_mib: Vec<f64> = vms
        .iter()
        .filter_map(|vm| guest_used_mib(vm, memory))
        .collect();
    let vmm_mib: Vec<f64> = vms
        .iter()
        .map(|vm| status_kib(vm.child.id(), "VmRSS:") / 1024.0)
        .collect();
    let host_total: f64 = host_mib.iter().sum();
    stop(&mut vms);
    let slowest = answered.iter().copied().fold(f64::NAN, f64::max);
    format!(
        "| {n} | {} of {n}{} | {:.0} ms | {slowest:.0} ms | {:.1} MiB | {:.1} MiB | {:.0} MiB | {:.1} MiB |",
        answered.len(),
        if failures.is_empty() {
            String::new()
        } else {
            format!(" ({})", failures.join("; "))
        },
        median(answered.clone()),
        median(host_mib),
        median(vmm_mib),
        median(guest_mib),
        host_total,
    )
}

fn main() {
    let detection = Detection::probe();
    let steps: Vec<usize> = std::env::var("BERM_DENSITY_STEPS")
        .unwrap_or_else(|_| "1,5,10,20".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let memory: u32 = std::env::var("BERM_DENSITY_MEMORY")
        .ok()
        .and_then(|m| m.parse().ok())
        .unwrap_or(DEFAULT_MEMORY_MIB);
    let tmp = common::scratch_dir("berm-bench-density");
    let app = app_folder(&tmp, "notes", "notes", "\"kv\"");
    println!(
        "Hypervisor: qemu ({}); guest memory: {} MiB.",
        common::qemu_accel(&detection),
        memory
    );
    println!();
    println!(
        "| VMs | answered | spawn → first call (median) | slowest | host memory per VM (berm-vmm + hypervisor + vsock) | of which berm-vmm | guest memory in use | host memory, all VMs |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for n in steps {
        println!("{}", step(n, &app, &tmp, memory));
    }
    let _ = std::fs::remove_dir_all(&tmp);
}
