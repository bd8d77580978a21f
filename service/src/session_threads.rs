//! The threads MCP sessions on a socket are served on: one single-threaded runtime per core,
//! each session on one of them for its whole life ([`SessionThreads`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Serving threads for socket sessions, one per core, each a single-threaded tokio runtime.
///
/// A session's request passes through several tasks (rmcp reads it on the session's task,
/// handles it on a task of its own, and writes the answer from a third). On a work-stealing
/// runtime each hand-off may wake the other worker, and on a small VM waking a parked vCPU
/// costs more than the call: a `tools/call` over `mcp.sock` was twice as slow on bermd's
/// two-worker runtime as with one worker. Here every task of a session stays on its thread,
/// so a request costs the one wake-up of the read. Sessions are spread over the threads by
/// how many each serves; the calls themselves still move to the call threads when they run
/// long, so one session's program cannot hold up the other sessions of its thread for more
/// than an epoch tick.
pub struct SessionThreads {
    threads: Vec<SessionThread>,
}

/// One serving thread: its runtime's handle, and how many sessions it serves.
struct SessionThread {
    handle: tokio::runtime::Handle,
    sessions: Arc<AtomicUsize>,
}

impl SessionThreads {
    /// One serving thread per core (at least one), named `berm-session`; they live as long as
    /// the process.
    ///
    /// # Errors
    /// When a thread or its runtime cannot be started.
    pub fn start() -> std::io::Result<SessionThreads> {
        let count = std::thread::available_parallelism().map_or(2, |n| n.get());
        let threads = (0..count)
            .map(|_| SessionThread::start())
            .collect::<std::io::Result<Vec<_>>>()?;
        Ok(SessionThreads { threads })
    }

    /// Runs `session` on the serving thread with the fewest sessions, counted until it ends.
    /// What it owns of the runtime (a socket registered with its reactor, a timer) must be
    /// made inside it, on that thread.
    pub fn spawn<F>(&self, session: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let Some(thread) = self
            .threads
            .iter()
            .min_by_key(|t| t.sessions.load(Ordering::Relaxed))
        else {
            return;
        };
        let sessions = thread.sessions.clone();
        sessions.fetch_add(1, Ordering::Relaxed);
        thread.handle.spawn(async move {
            // Counted down when the session ends, or when its task is dropped.
            let _serving = Serving(sessions);
            session.await;
        });
    }
}

/// Counts a session down when dropped.
struct Serving(Arc<AtomicUsize>);

impl Drop for Serving {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl SessionThread {
    fn start() -> std::io::Result<SessionThread> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let handle = runtime.handle().clone();
        std::thread::Builder::new()
            .name("berm-session".into())
            // Drives the runtime, and so every session spawned on it, until the process ends.
            .spawn(move || runtime.block_on(std::future::pending::<()>()))?;
        Ok(SessionThread {
            handle,
            sessions: Arc::default(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_go_to_the_thread_serving_fewest_and_are_counted_down_when_they_end() {
        let threads = SessionThreads::start().expect("threads");
        let (release, released) = tokio::sync::oneshot::channel::<()>();
        let (started, on_started) = std::sync::mpsc::channel();
        let first = started.clone();
        threads.spawn(async move {
            let me = std::thread::current();
            first.send((me.name().map(str::to_string), me.id())).ok();
            let _ = released.await;
        });
        let (name, first_thread) = on_started.recv().expect("the first session ran");
        assert_eq!(name.as_deref(), Some("berm-session"));
        let serving: usize = threads
            .threads
            .iter()
            .map(|t| t.sessions.load(Ordering::Relaxed))
            .sum();
        assert_eq!(serving, 1);
        // While the first is open, the next goes to a thread serving none.
        threads.spawn(async move {
            let me = std::thread::current();
            started.send((me.name().map(str::to_string), me.id())).ok();
        });
        let (_, second_thread) = on_started.recv().expect("the second session ran");
        if threads.threads.len() > 1 {
            assert_ne!(first_thread, second_thread);
        }
        release.send(()).ok();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while threads
            .threads
            .iter()
            .any(|t| t.sessions.load(Ordering::Relaxed) != 0)
        {
            assert!(
                std::time::Instant::now() < deadline,
                "sessions not counted down"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }
}
