//! The egress broker: the only way an app's bermd reaches the host dialer.
//!
//! bermd's seccomp filter refuses `socket(AF_VSOCK)`, so a bermd taken over through a
//! Wasmtime escape cannot connect to another app's egress port (and with it that app's grants
//! and secrets at the host dialer). Instead PID 1 holds one end of a socketpair per app
//! (`berm_vm_protocol::egress_broker`); bermd asks on the other end, and this thread connects
//! to CID 2 on the port PID 1 chose for that app (`EGRESS_PORT_BASE + i`) — nothing bermd
//! sends names a port — and hands back the connected socket.
//!
//! Bounded against a hostile bermd:
//! - at most [`MAX_IN_FLIGHT`] connections in progress per app (the host dialer's own per-app
//!   cap); past it the thread reads that app's next request only when one is done, so a flood
//!   waits in bermd's own socket buffer and costs PID 1 nothing;
//! - each connect gives up after [`CONNECT_TIMEOUT`], each in its own small thread, and replies
//!   never block ([`channel::send_reply`]): no app waits on another, and PID 1's main loop
//!   never waits on any;
//! - a request that is not exactly eight bytes ends the channel, with a warning;
//! - bermd's exit (its end closing) ends the thread.
//!
//! Every app gets a broker, as every app's bermd may be asked for `http.fetch`: PID 1 does not
//! read the app's grants (it has no TOML parser). An app without `net=` or `secret:` grants has
//! no dialer socket on the host, so its port refuses the connection, as it did before.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use berm_vm_protocol::egress_broker::{MAX_IN_FLIGHT, Reply, channel};
use berm_vm_protocol::{EGRESS_PORT_BASE, LogLevel};

use crate::hub::Hub;
use crate::lock::lock;
use crate::sys;

/// How long one connect to the host dialer may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The stack of the broker's threads: they make a few calls and format one message.
const STACK_BYTES: usize = 128 * 1024;

/// Starts the broker of app `name` (index `index`) on `channel`, PID 1's end of its bermd's
/// socketpair. It connects to the app's own egress port only.
pub fn spawn(hub: &Arc<Hub>, name: &str, index: u32, channel: OwnedFd) -> io::Result<()> {
    let port = EGRESS_PORT_BASE + index;
    let hub = Arc::clone(hub);
    let app = name.to_owned();
    std::thread::Builder::new()
        .name(format!("egress-{index}"))
        .stack_size(STACK_BYTES)
        .spawn(move || {
            let connect = move || {
                sys::vsock_connect(port, CONNECT_TIMEOUT)
                    .map_err(|e| format!("berm-init could not connect to vsock port {port}: {e}"))
            };
            if let Err(reason) = serve(channel, connect) {
                hub.log(
                    LogLevel::Warn,
                    format!("app {app}: {reason}; its egress channel is closed"),
                );
            }
        })?;
    Ok(())
}

/// Serves requests on `channel` until bermd closes it (`Ok`) or breaks the protocol (`Err`,
/// why). Each request gets one reply: `connect`'s connection, or its error.
fn serve<C>(channel: OwnedFd, connect: C) -> Result<(), String>
where
    C: Fn() -> Result<OwnedFd, String> + Send + Sync + 'static,
{
    let channel = Arc::new(channel);
    let connect = Arc::new(connect);
    let slots = Arc::new(Slots::default());
    loop {
        let id = match channel::receive_request(&channel) {
            Ok(None) => return Ok(()),
            Ok(Some(Ok(id))) => id,
            Ok(Some(Err(e))) => return Err(format!("its bermd sent a malformed request ({e})")),
            Err(e) => return Err(format!("reading its bermd's requests: {e}")),
        };
        let slot = slots.take();
        let (worker_channel, worker_connect) = (Arc::clone(&channel), Arc::clone(&connect));
        let spawned = std::thread::Builder::new()
            .name("egress-connect".into())
            .stack_size(STACK_BYTES)
            .spawn(move || {
                let outcome = worker_connect();
                answer(&worker_channel, id, outcome);
                drop(slot);
            });
        if let Err(e) = spawned {
            let message = format!("berm-init could not start a thread to connect: {e}");
            answer(&channel, id, Err(message));
        }
    }
}

/// Sends the reply to `id`; a bermd that is gone or not reading loses it (the connection, if
/// any, is closed here).
fn answer(channel: &OwnedFd, id: u64, outcome: Result<OwnedFd, String>) {
    let _ = match outcome {
        Ok(connection) => channel::send_reply(
            channel,
            &Reply {
                id,
                outcome: Ok(()),
            },
            Some(connection.as_fd()),
        ),
        Err(message) => channel::send_reply(
            channel,
            &Reply {
                id,
                outcome: Err(message),
            },
            None,
        ),
    };
}

/// Connections in progress for one app, at most [`MAX_IN_FLIGHT`].
#[derive(Default)]
struct Slots {
    taken: Mutex<usize>,
    freed: Condvar,
}

/// One connection in progress; dropping it frees its slot.
struct Slot(Arc<Slots>);

impl Slots {
    /// Waits for a free slot and takes it.
    fn take(self: &Arc<Self>) -> Slot {
        let mut taken = lock(&self.taken);
        while *taken >= MAX_IN_FLIGHT {
            taken = self.freed.wait(taken).unwrap_or_else(|p| p.into_inner());
        }
        *taken += 1;
        Slot(Arc::clone(self))
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        *lock(&self.0.taken) -= 1;
        self.0.freed.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::unix::net::{UnixListener, UnixStream};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::mpsc;

    /// Holds every connect until opened, counting those that reached it.
    #[derive(Default)]
    struct Gate {
        open: Mutex<bool>,
        opened: Condvar,
        reached: AtomicUsize,
    }

    /// A broker whose connections go to a Unix listener in a temporary directory (the tests
    /// have no host on vsock), and bermd's end of its channel.
    struct Running {
        bermd: OwnedFd,
        listener: UnixListener,
        _dir: tempfile::TempDir,
        ended: mpsc::Receiver<Result<(), String>>,
    }

    fn start(gate: Option<Arc<Gate>>) -> Running {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dialer.sock");
        let listener = UnixListener::bind(&path).unwrap();
        let (init, bermd) = channel::pair().unwrap();
        let connect = move || {
            if let Some(gate) = &gate {
                gate.reached.fetch_add(1, Ordering::SeqCst);
                let open = gate.open.lock().unwrap();
                drop(gate.opened.wait_while(open, |open| !*open).unwrap());
            }
            UnixStream::connect(&path)
                .map(OwnedFd::from)
                .map_err(|e| format!("connecting: {e}"))
        };
        let (tx, ended) = mpsc::channel();
        std::thread::spawn(move || tx.send(serve(init, connect)));
        Running {
            bermd,
            listener,
            _dir: dir,
            ended,
        }
    }

    fn reply(bermd: &OwnedFd) -> (Reply, Option<OwnedFd>) {
        let (reply, fd) = channel::receive_reply(bermd).unwrap().unwrap();
        (reply.unwrap(), fd)
    }

    #[test]
    fn each_request_gets_a_connection_to_the_apps_port_under_its_id() {
        let run = start(None);
        for id in [3, 1, 3] {
            channel::send_request(&run.bermd, id).unwrap();
            let (got, fd) = reply(&run.bermd);
            assert_eq!(
                got,
                Reply {
                    id,
                    outcome: Ok(())
                }
            );
            // The descriptor is connected to the dialer's socket.
            let mut ours = UnixStream::from(fd.unwrap());
            let (mut theirs, _) = run.listener.accept().unwrap();
            ours.write_all(b"GET").unwrap();
            let mut seen = [0u8; 3];
            theirs.read_exact(&mut seen).unwrap();
            assert_eq!(&seen, b"GET");
        }
        // bermd's exit ends the broker.
        drop(run.bermd);
        assert_eq!(run.ended.recv().unwrap(), Ok(()));
    }

    #[test]
    fn a_failed_connect_is_answered_with_its_reason() {
        let run = start(None);
        drop(run.listener);
        channel::send_request(&run.bermd, 9).unwrap();
        let (got, fd) = reply(&run.bermd);
        assert!(fd.is_none());
        let Err(message) = got.outcome else {
            panic!("{got:?}")
        };
        assert!(message.starts_with("connecting: "), "{message}");
        assert_eq!(got.id, 9);
    }

    #[test]
    fn a_malformed_request_closes_the_channel() {
        for garbage in [&[1u8; 7][..], &[2u8; 9][..], &[3u8; 65536][..]] {
            let run = start(None);
            rustix::net::send(&run.bermd, garbage, rustix::net::SendFlags::empty()).unwrap();
            let ended = run.ended.recv().unwrap().unwrap_err();
            assert_eq!(
                ended,
                format!(
                    "its bermd sent a malformed request (an egress request is 8 bytes, this \
                     one was {})",
                    garbage.len()
                )
            );
            // bermd sees the channel closed, with no reply.
            assert!(channel::receive_reply(&run.bermd).unwrap().is_none());
        }
    }

    #[test]
    fn at_most_sixteen_connections_are_in_progress_and_the_rest_wait() {
        let gate = Arc::new(Gate::default());
        let run = start(Some(Arc::clone(&gate)));
        let flood = MAX_IN_FLIGHT as u64 * 4;
        for id in 0..flood {
            channel::send_request(&run.bermd, id).unwrap();
        }
        // The gate holds every connect: sixteen of them are waiting at it, no more.
        let waiting = || gate.reached.load(Ordering::SeqCst);
        while waiting() < MAX_IN_FLIGHT {
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(waiting(), MAX_IN_FLIGHT);
        // Open it: every request is answered, each once.
        *gate.open.lock().unwrap() = true;
        gate.opened.notify_all();
        let mut ids: Vec<u64> = (0..flood).map(|_| reply(&run.bermd).0.id).collect();
        ids.sort_unstable();
        assert_eq!(ids, (0..flood).collect::<Vec<_>>());
    }
}
