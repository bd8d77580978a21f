//! Tasks (the MCP tasks extension, SEP-2663): long-running calls that return a handle at
//! once and a result later.
//!
//! rmcp's [`TaskManager`] keeps each task's state and answers `tasks/get`, `tasks/update`
//! and `tasks/cancel`; this module holds bermd's bounds on it. A task lives in this bermd's
//! memory: it outlives the client connection that started it, not a restart of bermd, and
//! another replica does not know it.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rmcp::task_manager::TaskManager;

/// The longest a task may run unless `bermd --max-task-deadline-ms` says otherwise.
pub const DEFAULT_MAX_TASK_DEADLINE: Duration = Duration::from_secs(60 * 60);

/// Tasks not yet finished (running, or waiting for the client's input) at once.
pub const MAX_OPEN_TASKS: usize = 256;

/// Bytes of finished tasks' results bermd holds for clients to fetch, at most: a result
/// past it is replaced by an error saying so.
pub const MAX_HELD_RESULT_BYTES: usize = 256 << 20;

/// How long past its deadline a task stays in the books: rmcp marks a task that outlives
/// its TTL failed, and keeps a finished one one more TTL for clients to fetch.
pub const TTL_SLACK: Duration = Duration::from_secs(60);

/// Most rounds of questions one task may ask its client.
pub const MAX_TASK_ROUNDS: usize = 16;

/// bermd's tasks, and the bounds it keeps on them.
pub struct Tasks {
    manager: TaskManager,
    max_deadline: Duration,
    /// Finished results still held, with when rmcp lets go of each at the latest.
    held: Mutex<VecDeque<(Instant, usize)>>,
}

impl Tasks {
    /// No tasks yet; none may run longer than `max_deadline`.
    pub fn new(max_deadline: Duration) -> Tasks {
        Tasks {
            manager: TaskManager::new(),
            max_deadline,
            held: Mutex::new(VecDeque::new()),
        }
    }

    /// rmcp's manager, which runs and answers for the tasks.
    pub fn manager(&self) -> &TaskManager {
        &self.manager
    }

    /// A task's deadline: the tool's own task deadline, or else the program's call
    /// deadline, and never more than the cap.
    pub fn deadline(&self, spec: &berm_manifest::TaskSpec, program_deadline: Duration) -> Duration {
        spec.deadline_ms
            .map(Duration::from_millis)
            .unwrap_or(program_deadline)
            .min(self.max_deadline)
    }

    /// The TTL a task with `deadline` is created with.
    pub fn ttl(deadline: Duration) -> Duration {
        deadline + TTL_SLACK
    }

    /// Whether there is room for another open task.
    pub fn has_room(&self) -> bool {
        self.manager.running_task_count() < MAX_OPEN_TASKS
    }

    /// Counts a finished result of `bytes` that rmcp keeps for `ttl`; `false` when holding
    /// it would pass [`MAX_HELD_RESULT_BYTES`].
    pub fn hold(&self, bytes: usize, ttl: Duration) -> bool {
        let now = Instant::now();
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        held.retain(|(until, _)| *until > now);
        let total: usize = held.iter().map(|(_, b)| b).sum();
        if total.saturating_add(bytes) > MAX_HELD_RESULT_BYTES {
            return false;
        }
        // rmcp drops a finished task one TTL after it finished.
        held.push_back((now + ttl, bytes));
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadlines_and_held_results_are_capped() {
        let tasks = Tasks::new(Duration::from_secs(3600));
        let spec = |ms| berm_manifest::TaskSpec {
            support: berm_manifest::TaskSupport::Optional,
            deadline_ms: ms,
        };
        let call = Duration::from_secs(30);
        assert_eq!(tasks.deadline(&spec(None), call), call);
        assert_eq!(
            tasks.deadline(&spec(Some(120_000)), call),
            Duration::from_secs(120)
        );
        assert_eq!(
            tasks.deadline(&spec(Some(10 * 3_600_000)), call),
            Duration::from_secs(3600)
        );
        let ttl = Duration::from_secs(60);
        assert!(tasks.hold(MAX_HELD_RESULT_BYTES - 10, ttl));
        assert!(tasks.hold(10, ttl));
        assert!(!tasks.hold(1, ttl));
        // Results rmcp has let go of no longer count.
        let expired = Tasks::new(Duration::from_secs(1));
        assert!(expired.hold(MAX_HELD_RESULT_BYTES, Duration::ZERO));
        assert!(expired.hold(MAX_HELD_RESULT_BYTES, Duration::ZERO));
    }
}
