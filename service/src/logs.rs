//! Program logs reach the client: a program's `log.write` during a call
//! becomes `notifications/message` to the MCP session that made the call
//! (logger = the program's name), besides going to bermd's own log. Its
//! `berm.progress` reports take the same queue, as `notifications/progress`,
//! when the request carried a progress token ([`CallProgress`]).
//!
//! The session's [`SessionLog`] is attached to a call as a task-local
//! ([`scope`]), so the `log.write` syscall finds it without the runtime
//! knowing about sessions, and calls of programs that cannot log pay nothing.
//! Messages go through one bounded queue per session to one task that sends
//! them in order; a full queue drops messages rather than slow the program.
//! Each call may send at most [`MAX_MESSAGES_PER_CALL`] messages and
//! [`MAX_BYTES_PER_CALL`] bytes; past that, one warning says so and the rest
//! stay in bermd's log only.

// MCP logging is deprecated in rmcp by SEP-2577 but is what clients up to
// 2025-11-25 speak.
#![allow(deprecated)]

use std::borrow::Cow;
use std::cell::Cell;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};

use rmcp::RoleServer;
use rmcp::model::{
    LoggingLevel, LoggingMessageNotificationParam, ProgressNotificationParam, ProgressToken,
};
use rmcp::service::Peer;
use tokio::sync::{mpsc, oneshot};

/// Messages one call may send to its session.
pub const MAX_MESSAGES_PER_CALL: u32 = 64;

/// Bytes of messages one call may send to its session (each message is also
/// cut at the `log.write` line cap).
pub const MAX_BYTES_PER_CALL: usize = 64 << 10;

/// Messages waiting to be sent on one session before new ones are dropped.
const QUEUE: usize = 256;

tokio::task_local! {
    static CALL_LOG: CallLog;
}

/// Which level a call's log messages are held to.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum CallLevel {
    /// The session's (`logging/setLevel`, up to 2025-11-25).
    Session,
    /// The request's own (`_meta` `io.modelcontextprotocol/logLevel`, 2026-07-28): without
    /// one, no message is sent.
    Request(Option<LoggingLevel>),
}

/// One MCP session's logging: the level the client asked for
/// (`logging/setLevel`, default `info`) and the queue to its peer.
#[derive(Clone, Default)]
pub struct SessionLog {
    shared: Arc<Shared>,
}

struct Shared {
    /// The lowest [`rank`] sent.
    threshold: AtomicU8,
    /// Whether messages were queued since the last [`SessionLog::flush`].
    pending: AtomicBool,
    queue: OnceLock<mpsc::Sender<Queued>>,
}

impl Default for Shared {
    fn default() -> Shared {
        Shared {
            threshold: AtomicU8::new(rank(LoggingLevel::Info)),
            pending: AtomicBool::new(false),
            queue: OnceLock::new(),
        }
    }
}

enum Queued {
    Message(LoggingMessageNotificationParam),
    Progress(ProgressNotificationParam),
    Flushed(oneshot::Sender<()>),
}

impl SessionLog {
    /// `logging/setLevel`: messages below `level` are not sent.
    pub fn set_level(&self, level: LoggingLevel) {
        self.shared.threshold.store(rank(level), Ordering::Relaxed);
    }

    fn queue(&self, peer: &Peer<RoleServer>) -> mpsc::Sender<Queued> {
        self.shared
            .queue
            .get_or_init(|| forwarder(peer.clone()))
            .clone()
    }

    /// Where the progress of one call on this session goes: to `peer`, as
    /// `notifications/progress` for the request's `token`, in order with its log messages.
    pub fn progress_for_call(&self, peer: &Peer<RoleServer>, token: ProgressToken) -> CallProgress {
        CallProgress {
            shared: self.shared.clone(),
            queue: self.queue(peer),
            token,
        }
    }

    /// The log of one call on this session, whose messages go to `peer`.
    pub fn for_call(&self, peer: &Peer<RoleServer>, level: CallLevel) -> CallLog {
        CallLog {
            shared: self.shared.clone(),
            queue: self.queue(peer),
            threshold: match level {
                CallLevel::Session => None,
                CallLevel::Request(Some(level)) => Some(rank(level)),
                // Above every level: nothing is sent.
                CallLevel::Request(None) => Some(u8::MAX),
            },
            sent: Cell::new(0),
            bytes: Cell::new(0),
            capped: Cell::new(false),
        }
    }

    /// Waits until every message queued so far has been handed to the
    /// transport, so a call's messages go out before its result. Free when
    /// nothing was queued.
    pub async fn flush(&self) {
        if !self.shared.pending.swap(false, Ordering::AcqRel) {
            return;
        }
        let Some(queue) = self.shared.queue.get() else {
            return;
        };
        let (done, flushed) = oneshot::channel();
        if queue.send(Queued::Flushed(done)).await.is_ok() {
            let _ = flushed.await;
        }
    }
}

/// The task that sends a session's messages in order; it ends when the
/// session's [`SessionLog`] and every [`CallLog`] are gone or the peer is.
fn forwarder(peer: Peer<RoleServer>) -> mpsc::Sender<Queued> {
    let (queue, mut queued) = mpsc::channel(QUEUE);
    tokio::spawn(async move {
        while let Some(item) = queued.recv().await {
            match item {
                Queued::Message(message) => {
                    if peer.notify_logging_message(message).await.is_err() {
                        break;
                    }
                }
                Queued::Progress(progress) => {
                    if peer.notify_progress(progress).await.is_err() {
                        break;
                    }
                }
                Queued::Flushed(done) => {
                    let _ = done.send(());
                }
            }
        }
    });
    queue
}

/// One call's progress reports, on their way to the session that asked for them. The
/// runtime bounds how many a call makes ([`berm::call::MAX_PROGRESS_REPORTS`]); a full
/// queue drops a report rather than slow the program.
pub struct CallProgress {
    shared: Arc<Shared>,
    queue: mpsc::Sender<Queued>,
    token: ProgressToken,
}

impl berm::ProgressSink for CallProgress {
    fn report(&self, _program: &str, progress: &berm::Progress<'_>) {
        let mut param = ProgressNotificationParam::new(self.token.clone(), progress.progress);
        param.total = progress.total;
        param.message = progress.message.map(|m| escape(m).into_owned());
        if self.queue.try_send(Queued::Progress(param)).is_ok() {
            self.shared.pending.store(true, Ordering::Release);
        }
    }
}

/// One call's log: where its messages go and what of its cap is left.
pub struct CallLog {
    shared: Arc<Shared>,
    queue: mpsc::Sender<Queued>,
    /// The request's own threshold, instead of the session's.
    threshold: Option<u8>,
    sent: Cell<u32>,
    bytes: Cell<usize>,
    capped: Cell<bool>,
}

impl CallLog {
    fn write(&self, program: &str, level: LoggingLevel, message: &str) {
        let threshold = self
            .threshold
            .unwrap_or_else(|| self.shared.threshold.load(Ordering::Relaxed));
        if rank(level) < threshold || self.capped.get() {
            return;
        }
        let bytes = self.bytes.get() + message.len();
        if self.sent.get() >= MAX_MESSAGES_PER_CALL || bytes > MAX_BYTES_PER_CALL {
            self.capped.set(true);
            self.queue(
                program,
                LoggingLevel::Warning,
                format!(
                    "log cap reached ({MAX_MESSAGES_PER_CALL} messages or {MAX_BYTES_PER_CALL} bytes per call): \
                     the rest of this call's messages are only in bermd's log"
                ),
            );
            return;
        }
        self.sent.set(self.sent.get() + 1);
        self.bytes.set(bytes);
        self.queue(program, level, message.to_string());
    }

    fn queue(&self, program: &str, level: LoggingLevel, message: String) {
        let mut param = LoggingMessageNotificationParam::new(level, message.into());
        param.logger = Some(program.to_string());
        // A full queue drops the message: a program must never wait on a
        // slow client.
        if self.queue.try_send(Queued::Message(param)).is_ok() {
            self.shared.pending.store(true, Ordering::Release);
        }
    }
}

/// Runs `call` with `log` as its log: every `log.write` it makes (nested
/// calls included) goes to `log`'s session.
pub async fn scope<F: Future>(log: CallLog, call: F) -> F::Output {
    CALL_LOG.scope(log, call).await
}

/// Sends a program's log line to the session whose call is running, if any.
/// `level` is the program's (`error`, `warn`, `info`, `debug`, `trace`);
/// `message` must already be [`escape`]d.
pub fn forward(program: &str, level: &[u8], message: &str) {
    let level = match level {
        b"error" => LoggingLevel::Error,
        b"warn" => LoggingLevel::Warning,
        b"info" => LoggingLevel::Info,
        _ => LoggingLevel::Debug,
    };
    let _ = CALL_LOG.try_with(|log| log.write(program, level, message));
}

/// `message` with every control character (newlines included) written as an
/// escape (`\n`, `\u{1b}`), so a program cannot forge log lines or terminal
/// sequences, in bermd's log or a client's.
pub fn escape(message: &str) -> Cow<'_, str> {
    if !message.chars().any(char::is_control) {
        return Cow::Borrowed(message);
    }
    let mut out = String::with_capacity(message.len() + 8);
    for c in message.chars() {
        if c.is_control() {
            let _ = write!(out, "{}", c.escape_default());
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// MCP's levels in order of severity.
fn rank(level: LoggingLevel) -> u8 {
    match level {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped() {
        assert_eq!(escape("plain text"), Cow::Borrowed("plain text"));
        assert_eq!(
            escape("ok\nINFO forged line\r\u{1b}[31mred\u{0}"),
            "ok\\nINFO forged line\\r\\u{1b}[31mred\\u{0}"
        );
    }
}
