//! After boot: berm-vmm watches its own control connection and the hypervisor until the VM
//! ends, keeps the guest's log port in `guest.log`, answers a stop signal by asking the
//! guest to shut down, and decides the exit code from what the guest reported
//! ([`ExitStatus`]), never from the hypervisor's exit code alone.

use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::Arc;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use berm_vm_protocol::client::{ConnectError, GuestConnection, ReceiveError};
use berm_vm_protocol::host::GreetedLine;
use berm_vm_protocol::host_event::StopSignalLine;
use berm_vm_protocol::{BootFailed, Event, GuestLine, HostEvent, PowerOff, Service};

use crate::connector::{Connector, Target};
use crate::exit::ExitStatus;
use crate::report;
use crate::run_dir::RunDir;

/// How long berm-vmm waits for the guest to reset after `power_off` before killing it.
const RESET_GRACE: Duration = Duration::from_secs(5);
/// How long a guest has to power off after berm-vmm got a stop signal.
const STOP_GRACE: Duration = Duration::from_secs(5);
/// How long berm-vmm waits, after the hypervisor ended, for lines still in flight.
const DRAIN: Duration = Duration::from_secs(1);

/// How a VM run ended.
#[derive(Debug)]
pub struct Outcome {
    /// The exit status.
    pub status: ExitStatus,
    /// One sentence for a person.
    pub summary: String,
}

enum Watch {
    Greeted(GuestLine),
    Line(GuestLine),
    ConnectFailed(ConnectError),
    Ended(String),
}

/// What the supervisor has learned from the control stream so far.
#[derive(Default)]
struct Seen {
    greeted: bool,
    power_off: Option<PowerOff>,
    power_off_at: Option<Instant>,
    boot_failed: Option<BootFailed>,
    watch_problem: Option<String>,
}

impl Seen {
    /// Takes one guest line: relays it into the record and keeps what decides the verdict.
    fn line(&mut self, line: GuestLine) {
        report::guest(&line);
        match line.event {
            Event::BootFailed(failed) => self.boot_failed = Some(failed),
            Event::PowerOff(off) => {
                self.power_off = Some(off);
                self.power_off_at = Some(Instant::now());
            }
            _ => {}
        }
    }

    /// The verdict once the VM has ended.
    fn verdict(self, hypervisor_exit: std::process::ExitStatus, console: &Path) -> Outcome {
        match (self.power_off, self.boot_failed) {
            (Some(off), _) if off.exit_code == 0 => finish(
                ExitStatus::Clean,
                format!("the guest powered off ({})", off.reason),
            ),
            (Some(off), Some(failed)) => finish(
                ExitStatus::BootFailed,
                format!(
                    "the guest's boot failed at {}: {} (guest exit code {})",
                    failed.step, failed.message, off.exit_code
                ),
            ),
            (Some(off), None) => finish(
                ExitStatus::GuestError,
                format!(
                    "the guest powered off with exit code {} ({})",
                    off.exit_code, off.reason
                ),
            ),
            (None, _) => {
                let why = self
                    .watch_problem
                    .unwrap_or_else(|| "no power_off line".into());
                finish(
                    ExitStatus::Crashed,
                    format!(
                        "the VM ended ({hypervisor_exit}) without power_off: {why}; see {}",
                        console.display()
                    ),
                )
            }
        }
    }
}

/// How long berm-vmm waits, once the VM has ended, for the log port's last lines (the
/// apps' last receipts among them) to be written.
const LOGS_DRAIN: Duration = Duration::from_secs(2);

/// Watches the control stream and the hypervisor until the VM ends, then lets the log
/// port's reader finish (at most [`LOGS_DRAIN`]).
pub(super) fn supervise(
    run: &RunDir,
    connector: &Arc<Connector>,
    children: &mut [Child],
    boot_timeout: Duration,
    started: Instant,
) -> Outcome {
    let logs = run.logs.clone();
    let guest_log = run.dir.join("guest.log");
    let receipts = run.dir.join("receipts");
    let log_connector = Arc::clone(connector);
    let (drained, pumped) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        pump_logs(
            &log_connector,
            &logs,
            &guest_log,
            receipts,
            started + boot_timeout,
        );
        drop(drained);
    });
    let outcome = watch(run, connector, children, boot_timeout, started);
    // Disconnected when the reader ends; a reader still blocked is left behind.
    let _ = pumped.recv_timeout(LOGS_DRAIN);
    outcome
}

/// [`supervise`]'s watch: the control stream and the hypervisor, until the VM ends.
fn watch(
    run: &RunDir,
    connector: &Arc<Connector>,
    children: &mut [Child],
    boot_timeout: Duration,
    started: Instant,
) -> Outcome {
    let console = run.console.clone();
    std::thread::spawn(move || {
        crate::log_cap::watch_console(&console, crate::log_cap::CONSOLE_LOG_CAP)
    });
    let rx = watch_control(
        Arc::clone(connector),
        run.control.clone(),
        started + boot_timeout,
    );
    let mut seen = Seen::default();
    let mut stop_signal_at: Option<Instant> = None;
    let hypervisor_exit = loop {
        match rx.recv_timeout(Duration::from_millis(20)) {
            Ok(Watch::Greeted(line)) => {
                seen.greeted = true;
                report::host(HostEvent::GuestGreeted(GreetedLine {
                    after_ms: started.elapsed().as_millis() as u64,
                    boot_id: line.boot_id,
                }));
            }
            Ok(Watch::Line(line)) => seen.line(line),
            Ok(Watch::ConnectFailed(e)) => return not_greeted(run, children, &e),
            Ok(Watch::Ended(message)) => seen.watch_problem = Some(message),
            Err(RecvTimeoutError::Timeout) | Err(RecvTimeoutError::Disconnected) => {}
        }
        if let Ok(Some(status)) = children[0].try_wait() {
            break status;
        }
        if crate::sys::stop_requested() && stop_signal_at.is_none() {
            stop_signal_at = Some(Instant::now());
            request_shutdown(Arc::clone(connector), run.control.clone());
        }
        if stop_signal_at.is_some_and(|at| at.elapsed() > STOP_GRACE) {
            let _ = children[0].kill();
        }
        if seen
            .power_off_at
            .is_some_and(|at| at.elapsed() > RESET_GRACE)
        {
            let _ = children[0].kill();
        }
    };
    // Lines can still be in flight when the hypervisor is gone.
    let deadline = Instant::now() + DRAIN;
    while seen.power_off.is_none() && seen.watch_problem.is_none() && seen.greeted {
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(Watch::Line(line)) => seen.line(line),
            Ok(Watch::Ended(message)) => seen.watch_problem = Some(message),
            Ok(_) => {}
            Err(_) => break,
        }
    }
    stop(children);
    seen.verdict(hypervisor_exit, &run.console)
}

/// Holds berm-vmm's own control connection on a thread of its own and passes on what it
/// reads, until `power_off` (after which closing tells berm-init the line arrived).
fn watch_control(
    connector: Arc<Connector>,
    control: PathBuf,
    deadline: Instant,
) -> mpsc::Receiver<Watch> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let open = || connector.connect(Target::Control);
        let mut conn =
            match GuestConnection::connect_with(&control, Service::Control, deadline, open) {
                Ok(conn) => conn,
                Err(e) => return drop(tx.send(Watch::ConnectFailed(e))),
            };
        let _ = tx.send(Watch::Greeted(conn.greeting().clone()));
        loop {
            match conn.receive(Instant::now() + Duration::from_secs(3600)) {
                Ok(line) => {
                    let last = matches!(line.event, Event::PowerOff(_));
                    let _ = tx.send(Watch::Line(line));
                    if last {
                        // Closing tells berm-init the line arrived; it resets right after.
                        return;
                    }
                }
                Err(ReceiveError::TimedOut) => {}
                Err(e) => {
                    let message = match &e {
                        ReceiveError::Line(line) => format!("{e}: {line}"),
                        _ => e.to_string(),
                    };
                    return drop(tx.send(Watch::Ended(message)));
                }
            }
        }
    });
    rx
}

/// The guest never greeted: a VM that already ended crashed, one still running timed out.
fn not_greeted(run: &RunDir, children: &mut [Child], error: &ConnectError) -> Outcome {
    let exited = children[0].try_wait().ok().flatten();
    stop(children);
    match exited {
        Some(status) => finish(
            ExitStatus::Crashed,
            format!(
                "the VM ended before the guest greeted ({status}); see {}",
                run.console.display()
            ),
        ),
        None => finish(
            ExitStatus::BootTimeout,
            format!("{error}; see {}", run.console.display()),
        ),
    }
}

/// A stop signal: asks the guest to shut down in order, on a connection of its own (the
/// watcher's is busy reading); the supervisor kills the VM if that does not end it in time.
fn request_shutdown(connector: Arc<Connector>, control: PathBuf) {
    report::host(HostEvent::StopSignal(StopSignalLine {
        action: "shutdown requested".into(),
    }));
    std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(2);
        let open = || connector.connect(Target::Control);
        if let Ok(mut conn) =
            GuestConnection::connect_with(&control, Service::Control, deadline, open)
        {
            let _ = conn.send(berm_vm_protocol::Request::Shutdown, deadline);
            let _ = conn.wait_for(deadline + STOP_GRACE, |l| {
                matches!(l.event, Event::PowerOff(_))
            });
        }
    });
}

/// Keeps the guest's log port (berm-init's own lines and every app's bermd output) in
/// `guest.log` in the run dir, one parsed and re-escaped line each, so a failed app can be
/// read after the fact. Lines a host connects too late for are still there: the guest keeps a
/// backlog for new connections. The apps' receipt lines go to their own files
/// ([`crate::log_cap::ReceiptFiles`]).
fn pump_logs(
    connector: &Connector,
    logs: &std::path::Path,
    path: &std::path::Path,
    receipts: PathBuf,
    deadline: Instant,
) {
    let mut receipts = crate::log_cap::ReceiptFiles::new(receipts);
    let open = || connector.connect(Target::Logs);
    let Ok(mut conn) = GuestConnection::connect_with(logs, Service::Logs, deadline, open) else {
        return;
    };
    let Ok(mut file) = crate::log_cap::CappedLog::open(path, crate::log_cap::GUEST_LOG_CAP) else {
        return;
    };
    while let Ok(line) = conn.receive(Instant::now() + Duration::from_secs(3600)) {
        if let Event::Receipt(receipt) = &line.event {
            let note = match receipts.write(&line.boot_id, &receipt.app, &receipt.line) {
                Ok(note) => note,
                Err(e) => Some(format!(
                    "could not keep app {}'s receipts: {e}",
                    receipt.app.escape_debug()
                )),
            };
            if let Some(note) = note
                && file
                    .write(format!("[berm-vmm] {note}\n").as_bytes())
                    .is_err()
            {
                return;
            }
            continue;
        }
        if let Event::Log(log) = &line.event {
            let text = format!(
                "{:>8} {:?} {}: {}\n",
                line.uptime_ms,
                log.level,
                log.source,
                log.message.escape_debug()
            );
            if file.write(text.as_bytes()).is_err() {
                return;
            }
        }
    }
}

pub(super) fn stop(children: &mut [Child]) {
    for child in children.iter_mut() {
        if let Ok(None) = child.try_wait() {
            let _ = child.kill();
        }
        let _ = child.wait();
    }
}

fn finish(status: ExitStatus, summary: String) -> Outcome {
    Outcome { status, summary }
}
