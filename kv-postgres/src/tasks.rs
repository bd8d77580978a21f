//! Tasks in the database, so that any replica answers for a task another one runs: the
//! running replica (the owner) publishes what `tasks/get` shows; the others read it, and
//! leave a cancel or input responses for the owner to take on its next poll.
//!
//! What `tasks/get` shows and each answer arrive here sealed by bermd: this crate stores and
//! returns them as opaque bytes (an answer as opaque text under its key), and never sees a
//! result or an answer in the clear (`migrations/0003_sealed_tasks.sql`).
//!
//! JSON travels as text and is cast in SQL, so tokio-postgres needs no JSON feature.

use std::time::Duration;

use crate::{PgKv, PgKvError, connection, database};

/// The most bytes of input responses waiting for one task's owner: a client that sends more
/// before the owner takes them is refused.
pub const MAX_WAITING_RESPONSE_BYTES: i32 = 1 << 20;

/// A task as the database has it.
#[derive(Debug, Clone, PartialEq)]
pub struct SharedTask {
    /// What `tasks/get` shows (rmcp's `DetailedTask`), as its owner sealed it.
    pub detail: Vec<u8>,
    /// Whether it has ended (completed, failed or cancelled).
    pub terminal: bool,
    /// How long since its owner last said it was still running it.
    pub unseen_for: Duration,
}

/// What another replica asked of a task this one runs.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskOrder {
    /// The task.
    pub id: String,
    /// `tasks/cancel` was sent for it.
    pub cancel: bool,
    /// Input responses sent with `tasks/update`, by key, as a JSON object (each value as the
    /// replica that took it sealed it).
    pub responses: String,
}

/// What became of a cancel or answers left for a task's owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskOrderOutcome {
    /// Left for the owner to take.
    Left,
    /// There is no such task (or it has expired).
    Unknown,
    /// The task has ended: nothing was left.
    Ended,
}

impl PgKv {
    /// Records task `id`, run by `owner`, as `detail` (sealed) shows it, kept until
    /// `keep_for` from now (a later publish of the same task keeps the first expiry). Also
    /// deletes every task past its expiry. Only the owner's row is ever overwritten.
    pub async fn publish_task(
        &self,
        id: &str,
        owner: &str,
        detail: Vec<u8>,
        terminal: bool,
        keep_for: Duration,
    ) -> Result<(), PgKvError> {
        let (pool, id, owner) = (self.pool.clone(), id.to_string(), owner.to_string());
        let keep_ms = i64::try_from(keep_for.as_millis()).unwrap_or(i64::MAX);
        self.run(async move {
            let client = connection(&pool).await?;
            client
                .execute(
                    "INSERT INTO berm_tasks (id, owner, detail, terminal, expires_at)
                     VALUES ($1, $2, $3, $4, now() + $5::bigint * interval '1 millisecond')
                     ON CONFLICT (id) DO UPDATE
                         SET detail = EXCLUDED.detail, terminal = EXCLUDED.terminal, seen_at = now()
                         WHERE berm_tasks.owner = EXCLUDED.owner",
                    &[&id, &owner, &detail, &terminal, &keep_ms],
                )
                .await
                .map_err(database)?;
            client
                .execute("DELETE FROM berm_tasks WHERE expires_at < now()", &[])
                .await
                .map_err(database)?;
            Ok(())
        })
        .await
    }

    /// Task `id`, unless there is none or it has expired.
    pub async fn task(&self, id: &str) -> Result<Option<SharedTask>, PgKvError> {
        let (pool, id) = (self.pool.clone(), id.to_string());
        self.run(async move {
            let client = connection(&pool).await?;
            let row = client
                .query_opt(
                    "SELECT detail, terminal,
                            (extract(epoch FROM now() - seen_at) * 1000)::bigint
                     FROM berm_tasks WHERE id = $1 AND expires_at >= now()",
                    &[&id],
                )
                .await
                .map_err(database)?;
            Ok(row.map(|row| SharedTask {
                detail: row.get(0),
                terminal: row.get(1),
                unseen_for: Duration::from_millis(row.get::<_, i64>(2).max(0) as u64),
            }))
        })
        .await
    }

    /// Leaves a cancel for task `id`'s owner, unless it has ended.
    pub async fn cancel_task(&self, id: &str) -> Result<TaskOrderOutcome, PgKvError> {
        let (pool, id) = (self.pool.clone(), id.to_string());
        self.run(async move {
            let client = connection(&pool).await?;
            let row = client
                .query_opt(
                    "UPDATE berm_tasks SET cancel_requested = cancel_requested OR NOT terminal
                     WHERE id = $1 AND expires_at >= now()
                     RETURNING terminal",
                    &[&id],
                )
                .await
                .map_err(database)?;
            Ok(match row.map(|row| row.get::<_, bool>(0)) {
                None => TaskOrderOutcome::Unknown,
                Some(true) => TaskOrderOutcome::Ended,
                Some(false) => TaskOrderOutcome::Left,
            })
        })
        .await
    }

    /// Leaves input responses (a JSON object by key) for task `id`'s owner, beside any it
    /// has not taken yet, unless the task has ended.
    ///
    /// # Errors
    /// [`PgKvError::Database`] when more than [`MAX_WAITING_RESPONSE_BYTES`] would wait.
    pub async fn answer_task(
        &self,
        id: &str,
        responses: String,
    ) -> Result<TaskOrderOutcome, PgKvError> {
        let (pool, id) = (self.pool.clone(), id.to_string());
        self.run(async move {
            let client = connection(&pool).await?;
            let row = client
                .query_opt(
                    "UPDATE berm_tasks SET responses = responses || $2::text::jsonb
                     WHERE id = $1 AND expires_at >= now() AND NOT terminal
                       AND octet_length(responses::text) + octet_length($2) <= $3
                     RETURNING 1",
                    &[&id, &responses, &MAX_WAITING_RESPONSE_BYTES],
                )
                .await
                .map_err(database)?;
            if row.is_some() {
                return Ok(TaskOrderOutcome::Left);
            }
            let found = client
                .query_opt(
                    "SELECT terminal FROM berm_tasks WHERE id = $1 AND expires_at >= now()",
                    &[&id],
                )
                .await
                .map_err(database)?;
            match found.map(|row| row.get::<_, bool>(0)) {
                None => Ok(TaskOrderOutcome::Unknown),
                Some(true) => Ok(TaskOrderOutcome::Ended),
                Some(false) => Err(PgKvError::Database(format!(
                    "more than {MAX_WAITING_RESPONSE_BYTES} bytes of input responses wait for this task's replica"
                ))),
            }
        })
        .await
    }

    /// Takes what other replicas asked of `owner`'s open tasks (each order once), and
    /// marks them all as still running.
    pub async fn take_task_orders(&self, owner: &str) -> Result<Vec<TaskOrder>, PgKvError> {
        let (pool, owner) = (self.pool.clone(), owner.to_string());
        self.run(async move {
            let client = connection(&pool).await?;
            let rows = client
                .query(
                    "WITH taken AS (
                         SELECT id, cancel_requested, responses FROM berm_tasks
                         WHERE owner = $1 AND NOT terminal
                           AND (cancel_requested OR responses <> '{}'::jsonb)
                         FOR UPDATE
                     )
                     UPDATE berm_tasks t
                         SET cancel_requested = false, responses = '{}'::jsonb
                     FROM taken WHERE t.id = taken.id
                     RETURNING taken.id, taken.cancel_requested, taken.responses::text",
                    &[&owner],
                )
                .await
                .map_err(database)?;
            client
                .execute(
                    "UPDATE berm_tasks SET seen_at = now() WHERE owner = $1 AND NOT terminal",
                    &[&owner],
                )
                .await
                .map_err(database)?;
            Ok(rows
                .iter()
                .map(|row| TaskOrder {
                    id: row.get(0),
                    cancel: row.get(1),
                    responses: row.get(2),
                })
                .collect())
        })
        .await
    }
}
