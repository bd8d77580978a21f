//! bermd's side of berm-init's egress broker: in the microVM, bermd opens no vsock socket
//! (its seccomp filter refuses `socket(AF_VSOCK)`); it asks PID 1 for each connection to the
//! host dialer over the channel it inherits (`--egress-broker-fd`), and PID 1 connects to the
//! app's own port. The messages are `berm_vm_protocol::egress_broker`'s.
//!
//! Several fetches may ask at once: each request carries its own id, and one reader thread,
//! started by the first request, hands each reply to the caller waiting for that id. A reply
//! that comes after its caller gave up is dropped, its connection closed.

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use berm_vm_protocol::egress_broker::channel;

/// What a caller gets: the connection, or why there is none.
type Answer = Result<OwnedFd, String>;

/// The channel to berm-init's egress broker.
#[derive(Debug)]
pub struct EgressBroker {
    channel: OwnedFd,
    next_id: AtomicU64,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Callers waiting for their reply, by request id.
    waiting: HashMap<u64, SyncSender<Answer>>,
    /// The reader thread was started.
    reading: bool,
    /// berm-init's end is closed: no reply will come.
    closed: bool,
}

/// Why an inherited descriptor is not a broker channel.
#[derive(Debug, thiserror::Error)]
pub enum BrokerFdError {
    /// Its type could not be read: not a socket.
    #[error(
        "--egress-broker-fd {fd}: not a socket ({source}); pass berm-init's SOCK_SEQPACKET socketpair end"
    )]
    NotASocket {
        /// The descriptor.
        fd: i32,
        /// What getsockopt said.
        source: std::io::Error,
    },
    /// A socket of another type.
    #[error("--egress-broker-fd {fd}: a {kind:?} socket, not SOCK_SEQPACKET")]
    WrongType {
        /// The descriptor.
        fd: i32,
        /// Its type.
        kind: rustix::net::SocketType,
    },
}

impl EgressBroker {
    /// The broker on `channel` (inherited as descriptor `fd`), which must be a
    /// `SOCK_SEQPACKET` socket.
    pub fn new(channel: OwnedFd, fd: i32) -> Result<Arc<EgressBroker>, BrokerFdError> {
        match rustix::net::sockopt::socket_type(&channel) {
            Ok(rustix::net::SocketType::SEQPACKET) => {}
            Ok(kind) => return Err(BrokerFdError::WrongType { fd, kind }),
            Err(e) => {
                return Err(BrokerFdError::NotASocket {
                    fd,
                    source: e.into(),
                });
            }
        }
        Ok(Arc::new(EgressBroker {
            channel,
            next_id: AtomicU64::new(1),
            state: Mutex::new(State::default()),
        }))
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A connection to this app's host dialer, within `timeout`.
    pub fn connect(self: &Arc<Self>, timeout: Duration) -> Answer {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::sync_channel(1);
        {
            let mut state = self.state();
            if state.closed {
                return Err("berm-init's egress broker has closed this app's channel".into());
            }
            if !state.reading {
                let broker = Arc::clone(self);
                std::thread::Builder::new()
                    .name("egress-replies".into())
                    .spawn(move || broker.read_replies())
                    .map_err(|e| format!("no thread to read berm-init's replies: {e}"))?;
                state.reading = true;
            }
            state.waiting.insert(id, tx);
        }
        if let Err(e) = channel::send_request(&self.channel, id) {
            self.state().waiting.remove(&id);
            return Err(format!("asking berm-init for a connection: {e}"));
        }
        match rx.recv_timeout(timeout) {
            Ok(answer) => answer,
            Err(RecvTimeoutError::Timeout) => {
                self.state().waiting.remove(&id);
                Err(format!(
                    "berm-init gave no connection within {} ms",
                    timeout.as_millis()
                ))
            }
            Err(RecvTimeoutError::Disconnected) => {
                Err("berm-init's egress broker closed this app's channel".into())
            }
        }
    }

    /// The reader thread: hands each reply to its caller until berm-init's end closes.
    fn read_replies(&self) {
        while let Ok(Some((reply, connection))) = channel::receive_reply(&self.channel) {
            // berm-init is trusted; a reply that does not decode is dropped all the same.
            let Some(reply) = reply else { continue };
            let Some(caller) = self.state().waiting.remove(&reply.id) else {
                continue;
            };
            let answer = match reply.outcome {
                Ok(()) => connection.ok_or_else(|| "berm-init sent no connection".to_string()),
                Err(message) => Err(message),
            };
            let _ = caller.send(answer);
        }
        let mut state = self.state();
        state.closed = true;
        // Dropping the senders wakes every caller still waiting.
        state.waiting.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use berm_vm_protocol::egress_broker::Reply;
    use std::os::fd::AsFd;

    #[test]
    fn replies_reach_their_own_callers_in_any_order() {
        let (init, bermd) = channel::pair().unwrap();
        let broker = EgressBroker::new(bermd, 6).unwrap();
        let callers: Vec<_> = (0..3)
            .map(|_| {
                let broker = Arc::clone(&broker);
                std::thread::spawn(move || broker.connect(Duration::from_secs(30)))
            })
            .collect();
        let mut ids: Vec<u64> = (0..3)
            .map(|_| channel::receive_request(&init).unwrap().unwrap().unwrap())
            .collect();
        ids.reverse();
        // Each caller's connection is a pipe whose far end carries its id.
        let mut pipes = HashMap::new();
        for &id in &ids[..2] {
            let (read, write) = std::io::pipe().unwrap();
            std::io::Write::write_all(&mut &write, &id.to_le_bytes()).unwrap();
            let reply = Reply {
                id,
                outcome: Ok(()),
            };
            channel::send_reply(&init, &reply, Some(read.as_fd())).unwrap();
            pipes.insert(id, write);
        }
        let refused = Reply {
            id: ids[2],
            outcome: Err("berm-init could not connect to vsock port 6000: refused".into()),
        };
        channel::send_reply(&init, &refused, None).unwrap();
        let mut got: Vec<_> = callers.into_iter().map(|c| c.join().unwrap()).collect();
        let errors: Vec<_> = got.iter().filter_map(|a| a.as_ref().err()).collect();
        assert_eq!(
            errors,
            ["berm-init could not connect to vsock port 6000: refused"]
        );
        got.retain(Result::is_ok);
        let mut seen: Vec<u64> = got
            .into_iter()
            .map(|a| {
                let mut id = [0u8; 8];
                std::io::Read::read_exact(&mut std::fs::File::from(a.unwrap()), &mut id).unwrap();
                u64::from_le_bytes(id)
            })
            .collect();
        seen.sort_unstable();
        let mut sent = ids[..2].to_vec();
        sent.sort_unstable();
        assert_eq!(seen, sent);

        // berm-init gone: a waiting caller is told, and so is every later one.
        let waiting = {
            let broker = Arc::clone(&broker);
            std::thread::spawn(move || broker.connect(Duration::from_secs(30)))
        };
        channel::receive_request(&init).unwrap().unwrap().unwrap();
        drop(init);
        let closed = "berm-init's egress broker closed this app's channel";
        assert_eq!(waiting.join().unwrap().unwrap_err(), closed);
        assert_eq!(
            broker.connect(Duration::from_secs(30)).unwrap_err(),
            "berm-init's egress broker has closed this app's channel"
        );
    }

    #[test]
    fn a_silent_broker_is_a_timeout_and_its_late_reply_is_dropped() {
        let (init, bermd) = channel::pair().unwrap();
        let broker = EgressBroker::new(bermd, 6).unwrap();
        let err = broker.connect(Duration::from_millis(50)).unwrap_err();
        assert_eq!(err, "berm-init gave no connection within 50 ms");
        let id = channel::receive_request(&init).unwrap().unwrap().unwrap();
        let (read, _write) = std::io::pipe().unwrap();
        let late = Reply {
            id,
            outcome: Ok(()),
        };
        channel::send_reply(&init, &late, Some(read.as_fd())).unwrap();
        // The next caller gets its own reply, not the late one.
        let next = {
            let broker = Arc::clone(&broker);
            std::thread::spawn(move || broker.connect(Duration::from_secs(30)))
        };
        let id = channel::receive_request(&init).unwrap().unwrap().unwrap();
        let reply = Reply {
            id,
            outcome: Err("second".into()),
        };
        channel::send_reply(&init, &reply, None).unwrap();
        assert_eq!(next.join().unwrap().unwrap_err(), "second");
    }

    #[test]
    fn only_a_seqpacket_socket_is_taken() {
        let (stream, _) = std::os::unix::net::UnixStream::pair().unwrap();
        let err = EgressBroker::new(stream.into(), 6).unwrap_err();
        assert_eq!(
            err.to_string(),
            "--egress-broker-fd 6: a SocketType(1) socket, not SOCK_SEQPACKET"
        );
        let (read, _write) = std::io::pipe().unwrap();
        let err = EgressBroker::new(read.into(), 7).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("--egress-broker-fd 7: not a socket ("),
            "{err}"
        );
    }
}
