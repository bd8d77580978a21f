//! Tasks (the MCP tasks extension, SEP-2663): long-running calls that return a handle at
//! once and a result later.
//!
//! rmcp's [`TaskManager`] keeps each task's state and answers `tasks/get`, `tasks/update`
//! and `tasks/cancel`; this module holds bermd's bounds on it: how many tasks are open, in
//! all and per session ([`open`]), and that a task that has ended takes no more answers and
//! no cancel. A task runs in the bermd that started it: it outlives the client connection
//! that started it, not a restart of bermd.
//!
//! With the kv in PostgreSQL (`bermd --kv-url-file`), replicas share their tasks there
//! ([`berm_kv_postgres::PgKv::publish_task`]): the replica running a task publishes what
//! `tasks/get` shows whenever it changes (checked every [`POLL`]), before its
//! `CreateTaskResult` goes out; any other replica answers `tasks/get` from that, and leaves a
//! `tasks/cancel` or a `tasks/update` there for the running replica to take on its next poll.
//! What a row holds (a program's result and questions, a client's answers) is sealed
//! ([`seal`]) under a key derived from the ask key, which replicas share. An open task whose
//! replica has not been heard from for [`STALE_AFTER`] is reported `failed`: a task does not
//! survive the replica that runs it.

use std::collections::HashMap;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine as _;
use rmcp::ErrorData as McpError;
use rmcp::model::{DetailedTask, TaskPayload, TaskStatus};
use rmcp::task_manager::TaskManager;

pub mod open;
pub mod seal;

use open::{Client, Full, OpenTasks, Slot};
use seal::TaskSeal;

/// The longest a task may run unless `bermd --max-task-deadline-ms` says otherwise.
pub const DEFAULT_MAX_TASK_DEADLINE: Duration = Duration::from_secs(60 * 60);

/// Tasks not yet finished (running, or waiting for the client's input) at once.
pub const MAX_OPEN_TASKS: usize = 256;

/// Of [`MAX_OPEN_TASKS`], how many one session may hold unless `bermd
/// --max-tasks-per-session` says otherwise: a quarter, so that one client cannot hold every
/// task for as long as their deadlines allow. Requests outside a session share one such cap
/// ([`open`]).
pub const DEFAULT_MAX_TASKS_PER_SESSION: usize = 64;

/// Bytes of finished tasks' results bermd holds for clients to fetch, at most: a result
/// past it is replaced by an error saying so.
pub const MAX_HELD_RESULT_BYTES: usize = 256 << 20;

/// How long past its deadline a task stays in the books: rmcp marks a task that outlives
/// its TTL failed, and keeps a finished one one more TTL for clients to fetch.
pub const TTL_SLACK: Duration = Duration::from_secs(60);

/// Most rounds of questions one task may ask its client.
pub const MAX_TASK_ROUNDS: usize = 16;

/// How often a replica publishes its tasks' changes and takes other replicas' cancels and
/// answers, when tasks are shared.
pub const POLL: Duration = Duration::from_millis(200);

/// How long an open task's replica may go unheard before other replicas report the task
/// `failed`.
pub const STALE_AFTER: Duration = Duration::from_secs(10);

/// What a sealed `tasks/get` answer is, for [`TaskSeal`].
const DETAIL: &str = "detail";

/// bermd's tasks, and the bounds it keeps on them.
pub struct Tasks {
    manager: TaskManager,
    max_deadline: Duration,
    /// The tasks open now, in all and by session.
    open: OpenTasks,
    /// Finished results still held, with when rmcp lets go of each at the latest.
    held: Mutex<VecDeque<(Instant, usize)>>,
    /// The tasks replicas share, with the kv in PostgreSQL.
    shared: Option<Arc<Shared>>,
}

/// This replica's part in the tasks replicas share.
struct Shared {
    pg: Arc<berm_kv_postgres::PgKv>,
    /// What seals a task's row.
    seal: Arc<TaskSeal>,
    /// This bermd's name among the replicas: random, so a restart is another replica.
    owner: String,
    /// The open tasks this replica runs: what was last published of each (in the clear, to
    /// tell a change), and how long its row is kept.
    owned: Mutex<HashMap<String, (String, Duration)>>,
    /// Whether the poller runs.
    polling: std::sync::atomic::AtomicBool,
}

impl Tasks {
    /// No tasks yet; none may run longer than `max_deadline`, and one session may hold at
    /// most `max_per_session` open. With `pg`, tasks are shared with the other replicas that
    /// use that database, sealed with `seal`.
    pub fn new(
        max_deadline: Duration,
        max_per_session: usize,
        pg: Option<Arc<berm_kv_postgres::PgKv>>,
        seal: Arc<TaskSeal>,
    ) -> Tasks {
        let shared = pg.map(|pg| {
            let mut id = [0u8; 8];
            // Only a name among replicas: a failed read leaves zeros, and the pid beside it.
            let _ = getrandom::fill(&mut id);
            Arc::new(Shared {
                pg,
                seal,
                owner: format!("{}-{}", hex::encode(id), std::process::id()),
                owned: Mutex::new(HashMap::new()),
                polling: std::sync::atomic::AtomicBool::new(false),
            })
        });
        Tasks {
            manager: TaskManager::new(),
            max_deadline,
            open: OpenTasks::new(MAX_OPEN_TASKS, max_per_session),
            held: Mutex::new(VecDeque::new()),
            shared,
        }
    }

    /// Records a task this replica just started, so that any replica answers for it from
    /// now on; rmcp keeps it `ttl` past its end, and so does the database. Without shared
    /// tasks, nothing to do.
    ///
    /// # Errors
    /// The database did not take it: the caller cancels the task and says so.
    pub async fn started(&self, id: &str, ttl: Duration) -> Result<(), String> {
        let Some(shared) = &self.shared else {
            return Ok(());
        };
        let detail = self
            .manager
            .get_task(id)
            .map_err(|e| e.message.to_string())?;
        let json = serde_json::to_string(&detail).unwrap_or_default();
        let sealed = shared
            .seal
            .seal(id, DETAIL, json.as_bytes())
            .map_err(|e| e.to_string())?;
        // rmcp keeps a task until one TTL past its end; a task ends within its TTL.
        let keep_for = ttl.saturating_mul(2);
        shared
            .pg
            .publish_task(id, &shared.owner, sealed, false, keep_for)
            .await
            .map_err(|e| e.to_string())?;
        shared
            .owned
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id.to_string(), (json, keep_for));
        if !shared
            .polling
            .swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            tokio::spawn(poll(self.manager.clone(), shared.clone()));
        }
        Ok(())
    }

    /// `tasks/get`: this replica's task, or else one another replica runs.
    pub async fn get(&self, id: &str) -> Result<DetailedTask, McpError> {
        let local = self.manager.get_task(id);
        let (Err(unknown), Some(shared)) = (&local, &self.shared) else {
            return local;
        };
        match shared.get(id).await? {
            Some(detail) => Ok(detail),
            None => Err(unknown.clone()),
        }
    }

    /// `tasks/update`: to this replica's task, or left for the replica that runs it; refused
    /// for a task that has ended.
    pub async fn update(
        &self,
        id: &str,
        responses: rmcp::model::InputResponses,
    ) -> Result<(), McpError> {
        const REFUSED: &str = "it takes no more answers";
        if let Ok(local) = self.manager.get_task(id) {
            refuse_if_ended(id, &local, REFUSED)?;
            return self.manager.update_task(id, responses);
        }
        let Some(shared) = &self.shared else {
            return self.manager.update_task(id, responses);
        };
        let Some(detail) = shared.get(id).await? else {
            return Err(unknown_task(id));
        };
        refuse_if_ended(id, &detail, REFUSED)?;
        let mut sealed = serde_json::Map::new();
        for (key, answer) in responses {
            let json = serde_json::to_vec(&answer).unwrap_or_default();
            let bytes = shared
                .seal
                .seal(id, &answer_of(&key), &json)
                .map_err(|e| McpError::internal_error(e.to_string(), None))?;
            let text = base64::engine::general_purpose::STANDARD_NO_PAD.encode(bytes);
            sealed.insert(key, serde_json::Value::String(text));
        }
        let json = serde_json::Value::Object(sealed).to_string();
        let outcome = shared.pg.answer_task(id, json).await.map_err(unreachable)?;
        order_outcome(id, outcome, REFUSED)
    }

    /// `tasks/cancel`: of this replica's task, or left for the replica that runs it. A task
    /// that has ended is left as it ended: the cancel changes nothing and is acknowledged as
    /// on an active task, since SEP-2663 makes a cancel idempotent (an answer to an ended
    /// task, which would be taken as input, is refused: [`Tasks::update`]).
    pub async fn cancel(&self, id: &str) -> Result<(), McpError> {
        if let Ok(local) = self.manager.get_task(id) {
            if has_ended(&local) {
                return Ok(());
            }
            return self.manager.cancel_task(id);
        }
        let Some(shared) = &self.shared else {
            return self.manager.cancel_task(id);
        };
        let Some(detail) = shared.get(id).await? else {
            return Err(unknown_task(id));
        };
        if has_ended(&detail) {
            return Ok(());
        }
        match shared.pg.cancel_task(id).await.map_err(unreachable)? {
            // It ended between the read above and the order: nothing to cancel.
            berm_kv_postgres::TaskOrderOutcome::Ended => Ok(()),
            outcome => order_outcome(id, outcome, "it can no longer be cancelled"),
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

    /// Counts one more open task of `client`, until the returned slot is dropped (the task's
    /// work holds it, however it ends).
    ///
    /// # Errors
    /// [`Full`], naming the cap that would be passed (bermd's or the session's).
    pub fn admit(&self, client: Client) -> Result<Slot, Full> {
        self.open.admit(client)
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

/// What rmcp answers for a task it does not know: `-32602`, as the extension asks.
fn unknown_task(id: &str) -> McpError {
    McpError::invalid_params(format!("unknown task: {id}"), None)
}

/// The database could not be asked.
fn unreachable(e: berm_kv_postgres::PgKvError) -> McpError {
    McpError::internal_error(format!("the shared tasks in PostgreSQL: {e}"), None)
}

impl Shared {
    /// Task `id` as another replica published it, opened; `failed` when that replica has
    /// not been heard from for [`STALE_AFTER`]; `None` when the database has no such task.
    async fn get(&self, id: &str) -> Result<Option<DetailedTask>, McpError> {
        let Some(task) = self.pg.task(id).await.map_err(unreachable)? else {
            return Ok(None);
        };
        let json = self.seal.open(id, DETAIL, &task.detail).map_err(|e| {
            // The operator's to fix (a replica with another key), not only the client's.
            tracing::warn!("{e}");
            McpError::internal_error(e.to_string(), None)
        })?;
        let detail: DetailedTask = serde_json::from_slice(&json).map_err(|e| {
            McpError::internal_error(format!("task {id} in PostgreSQL does not read: {e}"), None)
        })?;
        if task.terminal || task.unseen_for < STALE_AFTER {
            return Ok(Some(detail));
        }
        let error = McpError::internal_error(
            format!(
                "the replica running this task has not been heard from for {} s: a task does not survive its replica",
                task.unseen_for.as_secs()
            ),
            None,
        );
        let error = match serde_json::to_value(&error) {
            Ok(serde_json::Value::Object(map)) => map,
            _ => serde_json::Map::new(),
        };
        Ok(Some(DetailedTask::new(
            detail.task,
            TaskPayload::Failed { error },
        )))
    }
}

/// What a sealed answer under `key` is, for [`TaskSeal`].
fn answer_of(key: &str) -> String {
    format!("answer {key}")
}

/// `-32602` for a request (`refused` says which) about task `id`, which has ended as
/// `status` says.
fn ended(id: &str, status: Option<TaskStatus>, refused: &str) -> McpError {
    let status = status
        .and_then(|s| serde_json::to_value(s).ok())
        .and_then(|v| v.as_str().map(str::to_string))
        .map(|s| format!(" ({s})"))
        .unwrap_or_default();
    McpError::invalid_params(
        format!("task {id} has already ended{status}: {refused}"),
        None,
    )
}

/// Whether `detail` shows the task has ended (completed, failed or cancelled).
fn has_ended(detail: &DetailedTask) -> bool {
    matches!(
        detail.status(),
        TaskStatus::Completed | TaskStatus::Failed | TaskStatus::Cancelled
    )
}

/// Refuses a request (`refused` says which) about task `id` if `detail` shows it has ended.
fn refuse_if_ended(id: &str, detail: &DetailedTask, refused: &str) -> Result<(), McpError> {
    let status = detail.status();
    match status {
        TaskStatus::Completed | TaskStatus::Failed | TaskStatus::Cancelled => {
            Err(ended(id, Some(status), refused))
        }
        _ => Ok(()),
    }
}

/// What the client hears of an answer or cancel left for the replica running task `id`.
fn order_outcome(
    id: &str,
    outcome: berm_kv_postgres::TaskOrderOutcome,
    refused: &str,
) -> Result<(), McpError> {
    match outcome {
        berm_kv_postgres::TaskOrderOutcome::Left => Ok(()),
        berm_kv_postgres::TaskOrderOutcome::Unknown => Err(unknown_task(id)),
        // It ended between the read above and the order.
        berm_kv_postgres::TaskOrderOutcome::Ended => Err(ended(id, None, refused)),
    }
}

/// This replica's side of sharing: every [`POLL`], publishes what changed in the tasks it
/// runs (and drops the ended ones from its list once published), then takes the cancels and
/// answers other replicas left for them. Runs as long as bermd.
async fn poll(manager: TaskManager, shared: Arc<Shared>) {
    loop {
        tokio::time::sleep(POLL).await;
        let owned: Vec<(String, String, Duration)> = shared
            .owned
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(id, (json, keep))| (id.clone(), json.clone(), *keep))
            .collect();
        if owned.is_empty() {
            continue;
        }
        for (id, last, keep_for) in owned {
            let Ok(detail) = manager.get_task(&id) else {
                // rmcp let go of it (its TTL passed): so does the database, by expiry.
                forget(&shared, &id);
                continue;
            };
            let terminal = matches!(
                detail.status(),
                TaskStatus::Completed | TaskStatus::Failed | TaskStatus::Cancelled
            );
            let json = serde_json::to_string(&detail).unwrap_or_default();
            if json == last {
                continue;
            }
            let sealed = match shared.seal.seal(&id, DETAIL, json.as_bytes()) {
                Ok(sealed) => sealed,
                Err(e) => {
                    // Tried again at the next poll.
                    tracing::warn!(task = %id, "{e}");
                    continue;
                }
            };
            match shared
                .pg
                .publish_task(&id, &shared.owner, sealed, terminal, keep_for)
                .await
            {
                Ok(()) if terminal => forget(&shared, &id),
                Ok(()) => {
                    if let Some(entry) = shared
                        .owned
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .get_mut(&id)
                    {
                        entry.0 = json;
                    }
                }
                // Tried again at the next poll.
                Err(e) => tracing::warn!(task = %id, "publishing a task to PostgreSQL: {e}"),
            }
        }
        match shared.pg.take_task_orders(&shared.owner).await {
            Ok(orders) => {
                for order in orders {
                    if order.cancel {
                        let _ = manager.cancel_task(&order.id);
                    }
                    let responses = opened_answers(&shared.seal, &order.id, &order.responses);
                    if !responses.is_empty() {
                        let _ = manager.update_task(&order.id, responses);
                    }
                }
            }
            Err(e) => tracing::warn!("taking other replicas' task requests from PostgreSQL: {e}"),
        }
    }
}

/// The answers another replica left for task `id` (a JSON object of sealed answers by key),
/// opened; one that does not open is left out, and logged.
fn opened_answers(seal: &TaskSeal, id: &str, sealed: &str) -> rmcp::model::InputResponses {
    let mut responses = rmcp::model::InputResponses::new();
    let Ok(serde_json::Value::Object(by_key)) = serde_json::from_str(sealed) else {
        tracing::warn!(task = %id, "answers left in PostgreSQL are not a JSON object");
        return responses;
    };
    for (key, text) in by_key {
        let opened = text
            .as_str()
            .and_then(|t| {
                base64::engine::general_purpose::STANDARD_NO_PAD
                    .decode(t)
                    .ok()
            })
            .ok_or_else(|| format!("task {id}: its answer {key} in PostgreSQL is not sealed text"))
            .and_then(|bytes| {
                seal.open(id, &answer_of(&key), &bytes)
                    .map_err(|e| e.to_string())
            })
            .and_then(|json| serde_json::from_slice(&json).map_err(|e| e.to_string()));
        match opened {
            Ok(answer) => {
                responses.insert(key, answer);
            }
            Err(e) => tracing::warn!(task = %id, "{e}"),
        }
    }
    responses
}

fn forget(shared: &Shared, id: &str) {
    shared
        .owned
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(id);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadlines_and_held_results_are_capped() {
        let seal = Arc::new(TaskSeal::derive(&[1; 32]));
        let tasks = Tasks::new(Duration::from_secs(3600), 64, None, seal.clone());
        let spec = |ms| berm_manifest::TaskSpec {
            support: berm_manifest::TaskSupport::Optional,
            deadline_ms: ms,
            ask_first: false,
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
        let expired = Tasks::new(Duration::from_secs(1), 64, None, seal);
        assert!(expired.hold(MAX_HELD_RESULT_BYTES, Duration::ZERO));
        assert!(expired.hold(MAX_HELD_RESULT_BYTES, Duration::ZERO));
    }
}
