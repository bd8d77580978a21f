//! The open tasks (running, or waiting for answers) this bermd runs, counted in all and by
//! client, so that no one client can hold every task bermd will run.
//!
//! A client is an MCP session: a connection on `mcp.sock`, stdio or an inherited listener,
//! or an HTTP session (a client that sent `initialize`). A request outside any session (a
//! 2026-07-28 client over HTTP) carries nothing that tells its sender from another but the
//! bearer token, which every HTTP client shares: such requests count as one client.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Whose tasks a request's task counts against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Client {
    /// One MCP session, by a number bermd gives it.
    Session(u64),
    /// Every request that came outside a session, together.
    Sessionless,
}

impl Client {
    /// A session no other has been.
    pub fn new_session() -> Client {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        Client::Session(NEXT.fetch_add(1, Ordering::Relaxed))
    }
}

/// Why a task was not started: a cap was reached. The message says which and what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Full {
    /// bermd's own cap, over every client.
    #[error("bermd has {0} tasks open, its cap: wait for one to finish, or cancel one")]
    Bermd(usize),
    /// The session's cap.
    #[error(
        "this session has {0} tasks open, its cap (bermd --max-tasks-per-session): wait for one \
         to finish, or cancel one"
    )]
    Session(usize),
    /// The cap of the requests outside a session, together.
    #[error(
        "requests outside a session have {0} tasks open together, their cap (bermd \
         --max-tasks-per-session): wait for one to finish, or cancel one; a client that opens a \
         session (initialize) gets a cap of its own"
    )]
    Sessionless(usize),
}

/// The counts.
#[derive(Debug, Default)]
struct Counts {
    total: usize,
    by_client: HashMap<Client, usize>,
}

/// The open tasks, in all and by client.
#[derive(Debug)]
pub struct OpenTasks {
    max_total: usize,
    max_per_client: usize,
    counts: Arc<Mutex<Counts>>,
}

impl OpenTasks {
    /// None open yet; at most `max_total` at once, `max_per_client` of them one client's.
    pub fn new(max_total: usize, max_per_client: usize) -> OpenTasks {
        OpenTasks {
            max_total,
            max_per_client: max_per_client.max(1),
            counts: Arc::default(),
        }
    }

    /// Counts one more task of `client`, until the slot is dropped (when the task's work
    /// ends, however it ends).
    ///
    /// # Errors
    /// [`Full`] naming the cap that would be passed; nothing is counted.
    pub fn admit(&self, client: Client) -> Result<Slot, Full> {
        let mut counts = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        if counts.total >= self.max_total {
            return Err(Full::Bermd(self.max_total));
        }
        let mine = counts.by_client.get(&client).copied().unwrap_or(0);
        if mine >= self.max_per_client {
            return Err(match client {
                Client::Session(_) => Full::Session(self.max_per_client),
                Client::Sessionless => Full::Sessionless(self.max_per_client),
            });
        }
        counts.total += 1;
        counts.by_client.insert(client, mine + 1);
        Ok(Slot {
            counts: self.counts.clone(),
            client,
        })
    }

    /// Tasks open now.
    pub fn total(&self) -> usize {
        self.counts.lock().unwrap_or_else(|p| p.into_inner()).total
    }
}

/// One open task's place in the counts; given back on drop.
#[derive(Debug)]
pub struct Slot {
    counts: Arc<Mutex<Counts>>,
    client: Client,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut counts = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        counts.total -= 1;
        if let Some(mine) = counts.by_client.get_mut(&self.client) {
            *mine -= 1;
            if *mine == 0 {
                counts.by_client.remove(&self.client);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_client_has_its_cap_within_bermds() {
        let open = OpenTasks::new(3, 2);
        let (a, b) = (Client::new_session(), Client::new_session());
        let a1 = open.admit(a).unwrap();
        let _a2 = open.admit(a).unwrap();
        assert_eq!(open.admit(a).unwrap_err(), Full::Session(2));
        let _b1 = open.admit(b).unwrap();
        assert_eq!(open.admit(b).unwrap_err(), Full::Bermd(3));
        assert_eq!(open.admit(Client::Sessionless).unwrap_err(), Full::Bermd(3));
        // A task that ends gives its place back, to its client and to bermd.
        drop(a1);
        assert_eq!(open.total(), 2);
        let _s1 = open.admit(Client::Sessionless).unwrap();
        assert_eq!(open.admit(a).unwrap_err(), Full::Bermd(3));
        let wide = OpenTasks::new(10, 1);
        let _s = wide.admit(Client::Sessionless).unwrap();
        assert_eq!(
            wide.admit(Client::Sessionless).unwrap_err(),
            Full::Sessionless(1)
        );
    }
}
