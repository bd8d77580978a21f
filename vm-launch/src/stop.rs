//! Stopping a running VM: the guest's own shutdown first, berm-vmm's signals after.

use std::fs::File;
use std::path::Path;
use std::time::{Duration, Instant};

use berm_vm_protocol::client::GuestConnection;
use berm_vm_protocol::{Event, Request, Service};

use crate::layout::STOPPING;
use crate::record::{Launch, retire, signal, wait_gone};

/// Asks the guest to shut down on `control.sock` and waits for its `power_off`; `false`
/// when the request could not be sent.
fn shutdown(control: &Path, grace: Duration) -> bool {
    let deadline = Instant::now() + grace.min(Duration::from_secs(5));
    let Ok(mut conn) = GuestConnection::connect(control, Service::Control, deadline) else {
        return false;
    };
    if conn.send(Request::Shutdown, deadline).is_err() {
        return false;
    }
    let _ = conn.wait_for(Instant::now() + grace, |line| {
        matches!(line.event, Event::PowerOff(_))
    });
    true
}

/// Stops a running VM: the `shutdown` op (SIGTERM to berm-vmm when it cannot be sent, which
/// makes berm-vmm send it), SIGKILL after `grace`; then its sockets and launch record go.
/// Says how it ended.
pub fn stop_running(vm_dir: &Path, launch: &Launch, grace: Duration) -> String {
    let _ = File::create(vm_dir.join(STOPPING));
    let sent = launch
        .run_dir
        .as_ref()
        .is_some_and(|dir| shutdown(&dir.join("control.sock"), grace));
    if !sent {
        signal(launch, libc::SIGTERM);
    }
    let how = if wait_gone(launch, grace) {
        if sent {
            "the guest shut down".to_owned()
        } else {
            "berm-vmm stopped it on SIGTERM".to_owned()
        }
    } else {
        signal(launch, libc::SIGKILL);
        wait_gone(launch, Duration::from_secs(5));
        format!(
            "killed: it had not ended {} s after the shutdown request",
            grace.as_secs()
        )
    };
    retire(vm_dir, launch);
    how
}
