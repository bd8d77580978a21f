//! MCP over a Unix socket: newline-delimited JSON-RPC, one session per
//! connection, behind a frame guard.
//!
//! The guard is rmcp's transport for the session. It bounds every incoming
//! line, and answers itself every line rmcp would silently drop, answer
//! vaguely or mishandle — a line over the cap, one that is not JSON, JSON
//! that is not a JSON-RPC message, a request whose id is already in flight,
//! a response to a request bermd never made or that was already answered — with a JSON-RPC error that
//! says what was wrong, so a client always learns why it got no answer and
//! a broken line costs only itself. Whole lines only ever reach the socket,
//! so those errors never split a message rmcp is writing.

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rmcp::model::{ClientNotification, ClientRequest, JsonRpcMessage, RequestId};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::{RoleServer, ServiceExt};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::Mutex;

use crate::mcp::McpServer;
use crate::service::Service;
pub use crate::session_threads::SessionThreads;

mod call_line;

/// Largest JSON-RPC message bermd reads by default: the largest arguments a
/// call accepts, with room for the envelope.
pub const DEFAULT_MAX_FRAME_BYTES: usize = 4 << 20;

/// JSON-RPC parse error.
const PARSE_ERROR: i64 = -32700;
/// JSON-RPC invalid request.
const INVALID_REQUEST: i64 = -32600;

/// How many MCP sessions one listener serves at once, unless `bermd
/// --max-connections` says otherwise.
pub const DEFAULT_MAX_CONNECTIONS: usize = 256;

/// How many new MCP sessions one listener starts per second, unless `bermd
/// --max-session-rate` says otherwise (up to a second's worth at once). A
/// session's set-up — accept, rmcp's `initialize`, the tasks it starts — is
/// work on the serving threads, the ones that answer every call; a client
/// opening connections in a loop could otherwise make them do it thousands
/// of times a second. At 100 a second it costs them about 1% of a core.
pub const DEFAULT_MAX_SESSION_RATE: u32 = 100;

/// JSON-RPC server error: the refusal a client over the cap gets.
const SERVER_BUSY: i64 = -32000;

/// New sessions a second on one listener, as a token bucket holding one
/// second's worth: a client that connects now and then is never held up,
/// one that connects in a loop gets the rate. Socket listeners wait for a
/// token before accepting, so connections past the rate wait in the
/// kernel's listen backlog, costing nobody CPU; HTTP, where a request cannot
/// be left unread, answers 429 instead.
#[derive(Clone)]
pub struct SessionRate {
    bucket: Arc<std::sync::Mutex<Bucket>>,
    per_second: u32,
}

struct Bucket {
    tokens: f64,
    at: Instant,
    /// When bermd last said it is holding sessions back (at most once a
    /// minute, so a flood does not flood the log too).
    warned: Option<Instant>,
}

impl SessionRate {
    /// At most `per_second` new sessions a second (at least 1).
    pub fn new(per_second: u32) -> SessionRate {
        let per_second = per_second.max(1);
        SessionRate {
            bucket: Arc::new(std::sync::Mutex::new(Bucket {
                tokens: f64::from(per_second),
                at: Instant::now(),
                warned: None,
            })),
            per_second,
        }
    }

    /// The rate, in new sessions a second.
    pub fn per_second(&self) -> u32 {
        self.per_second
    }

    /// Takes one new session's token, or says how long until there is one.
    /// `listener` names it in the log line a held-back session causes.
    pub fn try_take(&self, listener: &str) -> Result<(), Duration> {
        // Nothing panics while the lock is held; a poisoned lock still
        // holds a consistent bucket.
        let mut bucket = self.bucket.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        let rate = f64::from(self.per_second);
        let refill = now.duration_since(bucket.at).as_secs_f64() * rate;
        bucket.tokens = (bucket.tokens + refill).min(rate);
        bucket.at = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            return Ok(());
        }
        if bucket
            .warned
            .is_none_or(|at| now.duration_since(at) >= Duration::from_secs(60))
        {
            bucket.warned = Some(now);
            tracing::warn!(
                listener,
                per_second = self.per_second,
                "new sessions arrive faster than the session rate (bermd --max-session-rate); \
                 holding them back"
            );
        }
        Err(Duration::from_secs_f64((1.0 - bucket.tokens) / rate))
    }

    /// Waits until a new session may start, and takes its token.
    async fn take(&self, listener: &str) {
        while let Err(wait) = self.try_take(listener) {
            tokio::time::sleep(wait).await;
        }
    }
}

/// The sessions one listener may serve at once. A client past the cap is
/// accepted only to be told so — one JSON-RPC error line naming the cap and
/// the flag — and closed, which costs bermd an accept and a write, so a
/// client opening connections in a loop cannot hold slots, threads or
/// descriptors, and the sessions already open keep their latency.
///
/// New sessions also come at most at the listener's [`SessionRate`]: the
/// accept loop waits for [`SessionCap::pace`] before each accept.
#[derive(Clone)]
pub struct SessionCap {
    slots: Arc<tokio::sync::Semaphore>,
    max: usize,
    rate: SessionRate,
    listener: &'static str,
    threads: Arc<SessionThreads>,
}

impl SessionCap {
    /// At most `max` sessions at once on `listener` (named in the refusal),
    /// and at most `per_second` new ones a second, each served on one of
    /// `threads`.
    pub fn new(
        listener: &'static str,
        max: usize,
        per_second: u32,
        threads: Arc<SessionThreads>,
    ) -> SessionCap {
        let max = max.max(1);
        SessionCap {
            slots: Arc::new(tokio::sync::Semaphore::new(max)),
            max,
            rate: SessionRate::new(per_second),
            listener,
            threads,
        }
    }

    /// Waits until the listener may accept its next connection. Until then
    /// connections wait in the kernel's listen backlog: a client opening
    /// them in a loop waits there too, and costs no one CPU.
    pub async fn pace(&self) {
        self.rate.take(self.listener).await;
    }

    /// Serves one accepted connection as an MCP session on a serving thread
    /// ([`SessionThreads`]), or refuses it when the cap is reached. `open`
    /// makes its two halves there, on the thread whose reactor then waits on
    /// them.
    pub fn serve<C, R, W>(
        &self,
        connection: C,
        open: fn(C) -> std::io::Result<(R, W)>,
        service: Arc<Service>,
        max_frame: usize,
    ) where
        C: Send + 'static,
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let listener = self.listener;
        let slot = match self.slots.clone().try_acquire_owned() {
            Ok(slot) => slot,
            Err(_) => {
                let refusal = error_line(
                    None,
                    SERVER_BUSY,
                    &format!(
                        "bermd already serves {} sessions on {listener}, its cap (bermd --max-connections); \
                         try again when one closes",
                        self.max
                    ),
                );
                tracing::warn!(listener, max = self.max, "session refused: at the cap");
                self.threads.spawn(async move {
                    let Ok((read, mut write)) = open(connection) else {
                        return;
                    };
                    // A client that does not read cannot hold the refusal open.
                    let _ = tokio::time::timeout(Duration::from_secs(1), async {
                        write.write_all(refusal.as_bytes()).await?;
                        write.shutdown().await
                    })
                    .await;
                    drop(read);
                });
                return;
            }
        };
        self.threads.spawn(async move {
            match open(connection) {
                Ok((read, write)) => serve_stream(read, write, service, max_frame).await,
                Err(e) => tracing::warn!(listener, "mcp connection: {e}"),
            }
            drop(slot);
        });
    }
}

/// Accepts MCP connections on `listener` forever, at most `cap` at once and
/// at its rate.
pub async fn serve_unix(
    listener: UnixListener,
    service: Arc<Service>,
    max_frame: usize,
    cap: SessionCap,
) {
    loop {
        cap.pace().await;
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                tracing::warn!("mcp.sock accept: {e}");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        // Moved to a serving thread, whose reactor then waits on it.
        let stream = match stream.into_std() {
            Ok(stream) => stream,
            Err(e) => {
                tracing::warn!("mcp.sock connection: {e}");
                continue;
            }
        };
        cap.serve(stream, open_unix, service.clone(), max_frame);
    }
}

/// A Unix connection's two halves, on the serving thread that runs it.
fn open_unix(
    stream: std::os::unix::net::UnixStream,
) -> std::io::Result<(
    tokio::net::unix::OwnedReadHalf,
    tokio::net::unix::OwnedWriteHalf,
)> {
    Ok(UnixStream::from_std(stream)?.into_split())
}

/// Serves one MCP session over any byte stream (a Unix socket, stdio, a
/// vsock stream), behind the frame guard.
pub async fn serve_stream<R, W>(read: R, write: W, service: Arc<Service>, max_frame: usize)
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let transport = GuardedTransport::new(read, write, max_frame);
    match McpServer::new(service).serve(transport).await {
        Ok(running) => {
            let _ = running.waiting().await;
        }
        Err(e) => tracing::debug!("mcp session ended before it began: {e}"),
    }
}

/// rmcp's transport for one session, with the frame guard built into its
/// reader: it reads bounded lines from the client, hands rmcp the ones that
/// parse as JSON-RPC and answers the rest itself. The guard runs inside
/// rmcp's own receive, so a message costs no task hop or copy beyond what
/// rmcp's stock transport costs, and each line is parsed once.
///
/// `receive` is cancel-safe, as rmcp needs: its loop drops a pending receive
/// whenever another event (an answer going out) comes first. So everything
/// read of an unfinished line lives in `self`, never in the future, and the
/// guard's own answers are written by a task of their own, which a dropped
/// receive cannot cut off halfway through a line.
struct GuardedTransport<R, W> {
    read: BufReader<R>,
    /// The line being read, up to the frame cap.
    line: Vec<u8>,
    /// How many bytes of the line being read have arrived (past the cap
    /// they are counted and dropped).
    seen: usize,
    max_frame: usize,
    /// Taken on close; the answers of rmcp and of the guard share it, and
    /// each is written whole under the lock, so lines never interleave.
    write: Arc<Mutex<Option<W>>>,
    /// The guard's answer being written. The next line is read only after
    /// it is out, so a client that sends garbage without reading gets
    /// backpressure rather than a queue that grows.
    answering: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
    /// The ids of the requests handed to rmcp and not yet answered. rmcp
    /// keys the requests it is serving by id: a second request with the id
    /// of one in flight takes its place, and one of the two answers is
    /// dropped — which one depends on timing. So the guard refuses such a
    /// request itself. An id leaves when rmcp sends its answer (`send`), or
    /// when the client cancels the request (rmcp then forgets it and sends
    /// nothing). Both are seen on rmcp's loop, between receives, so this
    /// set and rmcp's agree at every receive.
    in_flight: HashSet<RequestId>,
    /// Whether rmcp has finished its handshake: it has answered a request
    /// other than `ping` or `discover` with a result. Until then rmcp ends
    /// the session at any notification (such as an early
    /// `notifications/initialized`), losing what follows, so the guard
    /// drops notifications until then.
    greeted: bool,
    /// Before the handshake ends, the `ping` and `discover` requests in
    /// flight: their results do not end it.
    probes: HashSet<RequestId>,
    /// The ids of bermd's own requests to the client (a program asking for input on a
    /// 2025-11-25 session) not yet answered: only a response or error with one of these
    /// reaches rmcp.
    asked: HashSet<RequestId>,
}

impl<R, W> GuardedTransport<R, W>
where
    R: AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send + 'static,
{
    fn new(read: R, write: W, max_frame: usize) -> Self {
        GuardedTransport {
            read: BufReader::with_capacity(64 << 10, read),
            line: Vec::new(),
            seen: 0,
            max_frame,
            write: Arc::new(Mutex::new(Some(write))),
            answering: None,
            in_flight: HashSet::new(),
            greeted: false,
            probes: HashSet::new(),
            asked: HashSet::new(),
        }
    }

    /// Reads until the current line is complete. `Ok(None)` at the end of
    /// the stream with nothing pending; `Ok(Some(Some(n)))` when the line
    /// passed the cap (it was consumed and dropped; `n` bytes were seen);
    /// `Ok(Some(None))` when `self.line` holds a line within bounds. Safe
    /// to drop at its await: each chunk is copied and consumed in one step.
    async fn read_line(&mut self) -> std::io::Result<Option<Option<usize>>> {
        loop {
            let buffer = self.read.fill_buf().await?;
            if buffer.is_empty() {
                let seen = std::mem::take(&mut self.seen);
                return Ok(if seen == 0 {
                    None
                } else if seen > self.max_frame {
                    Some(Some(seen))
                } else {
                    Some(None)
                });
            }
            let (chunk, done) = match buffer.iter().position(|b| *b == b'\n') {
                Some(at) => (&buffer[..at], Some(at + 1)),
                None => (buffer, None),
            };
            let was_oversized = self.seen > self.max_frame;
            self.seen += chunk.len();
            if self.seen > self.max_frame {
                if !was_oversized {
                    self.line = Vec::new();
                }
            } else {
                self.line.extend_from_slice(chunk);
            }
            let consumed = done.unwrap_or(buffer.len());
            self.read.consume(consumed);
            if done.is_some() {
                let seen = std::mem::take(&mut self.seen);
                return Ok(Some((seen > self.max_frame).then_some(seen)));
            }
        }
    }

    /// What the guard makes of one line within bounds: a message for rmcp,
    /// nothing (blank, or a message that must not be answered), or an
    /// answer. A message rmcp can read costs one parse; only a line it
    /// cannot read is parsed again, to say what is wrong with it.
    fn judge(&mut self) -> Judgement {
        let line = self
            .line
            .strip_prefix(b"\xEF\xBB\xBF")
            .unwrap_or(&self.line);
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.iter().all(u8::is_ascii_whitespace) {
            return Judgement::Skip;
        }
        // The message a session sends most, read straight into rmcp's types.
        if let Some(message) = call_line::read(line) {
            return self.admit(message);
        }
        let error = match serde_json::from_slice::<RxJsonRpcMessage<RoleServer>>(line) {
            Ok(message) => return self.admit(message),
            Err(error) => error,
        };
        // The slow path, for lines rmcp cannot take: say why.
        match serde_json::from_slice::<serde_json::Value>(line) {
            Err(e) => Judgement::Answer(error_line(
                None,
                PARSE_ERROR,
                &format!("not valid JSON: {e}"),
            )),
            Ok(value) => self.refuse(&value, &error),
        }
    }

    /// A message rmcp can read: handed to it, unless rmcp would mishandle it.
    fn admit(&mut self, message: RxJsonRpcMessage<RoleServer>) -> Judgement {
        match &message {
            JsonRpcMessage::Request(request) => {
                if !self.in_flight.insert(request.id.clone()) {
                    // Answered with no id: an error carrying this id would
                    // pass for the answer to the request still in flight.
                    return Judgement::Answer(error_line(
                        None,
                        INVALID_REQUEST,
                        &format!(
                            "request id {} is already in use by a request bermd is still \
                             answering; give each request an id of its own",
                            shown(&serde_json::json!(request.id))
                        ),
                    ));
                }
                if !self.greeted
                    && matches!(
                        request.request,
                        ClientRequest::PingRequest(_) | ClientRequest::DiscoverRequest(_)
                    )
                {
                    self.probes.insert(request.id.clone());
                }
            }
            JsonRpcMessage::Notification(_) if !self.greeted => {
                tracing::debug!("dropping a notification sent before the session began");
                return Judgement::Skip;
            }
            JsonRpcMessage::Notification(notification) => {
                if let ClientNotification::CancelledNotification(cancelled) =
                    &notification.notification
                    && let Some(id) = &cancelled.params.request_id
                {
                    // rmcp forgets the request and drops its answer.
                    self.in_flight.remove(id);
                }
            }
            JsonRpcMessage::Response(response) => {
                if !self.asked.remove(&response.id) {
                    return Judgement::Answer(unasked(&serde_json::json!(response.id)));
                }
            }
            // The client's refusal of a request bermd made goes to rmcp, which hands it
            // to the call waiting for it. Any other error is never answered: two peers
            // that answer errors with errors would do so forever.
            JsonRpcMessage::Error(error) => {
                let ours = error.id.as_ref().is_some_and(|id| self.asked.remove(id));
                if !ours {
                    tracing::debug!(id = ?error.id, "ignoring an error object from the client");
                    return Judgement::Skip;
                }
            }
        }
        Judgement::Message(Box::new(message))
    }

    /// The answer to JSON rmcp cannot read as a JSON-RPC message: what is
    /// wrong with it, under its id when it has one that can be read and is
    /// not in flight (otherwise `id: null`).
    fn refuse(&self, value: &serde_json::Value, error: &serde_json::Error) -> Judgement {
        let Some(object) = value.as_object() else {
            let problem = if value.is_array() {
                "a batch (a JSON array) is not supported: send one message per line".to_owned()
            } else {
                format!("a JSON-RPC message is a JSON object, not {}", shown(value))
            };
            return Judgement::Answer(error_line(None, INVALID_REQUEST, &problem));
        };
        let id = object.get("id");
        let Some(method) = object.get("method") else {
            if object.contains_key("result") {
                return Judgement::Answer(unasked(id.unwrap_or(&serde_json::Value::Null)));
            }
            if object.contains_key("error") {
                tracing::debug!("ignoring an error object from the client: {error}");
                return Judgement::Skip;
            }
            let problem =
                r#"neither a request nor a response: it has no "method", "result" or "error""#;
            return Judgement::Answer(error_line(self.answerable(id), INVALID_REQUEST, problem));
        };
        let Some(id) = id else {
            // A notification gets no answer, even a malformed one; rmcp
            // ignores those it does not know.
            tracing::debug!("ignoring a notification rmcp cannot read: {error}");
            return Judgement::Skip;
        };
        let problem = match object.get("jsonrpc") {
            None => r#"it has no "jsonrpc": "2.0""#.to_owned(),
            Some(version) if version != "2.0" => {
                format!(r#""jsonrpc" must be "2.0", not {}"#, shown(version))
            }
            Some(_) if serde_json::from_value::<RequestId>(id.clone()).is_err() => {
                format!("a request id is a string or an integer, not {}", shown(id))
            }
            Some(_) if !method.is_string() => {
                format!(r#""method" must be a string, not {}"#, shown(method))
            }
            Some(_) => format!("not a request bermd can read: {error}"),
        };
        Judgement::Answer(error_line(
            self.answerable(Some(id)),
            INVALID_REQUEST,
            &problem,
        ))
    }

    /// `id` as the id of an answer: when it is a request id and no request
    /// in flight has it (an error under that id would pass for its answer).
    fn answerable(&self, id: Option<&serde_json::Value>) -> Option<RequestId> {
        serde_json::from_value::<RequestId>(id?.clone())
            .ok()
            .filter(|id| !self.in_flight.contains(id))
    }
}

/// The answer to a response from the client. Its id numbers bermd's
/// requests, not the client's, so the answer carries none.
fn unasked(id: &serde_json::Value) -> String {
    error_line(
        None,
        INVALID_REQUEST,
        &format!(
            "bermd made no request with id {} that is waiting for an answer: it takes \
             responses only to its own requests (a program asking for input)",
            shown(id)
        ),
    )
}

/// `value` as JSON, cut short when long: a client's value quoted back in a
/// message.
fn shown(value: &serde_json::Value) -> String {
    const MAX_CHARS: usize = 40;
    let text = value.to_string();
    match text.char_indices().nth(MAX_CHARS) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text,
    }
}

enum Judgement {
    Message(Box<RxJsonRpcMessage<RoleServer>>),
    Skip,
    Answer(String),
}

impl<R, W> Transport<RoleServer> for GuardedTransport<R, W>
where
    R: AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send + 'static,
{
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        // A request of bermd's own: its answer will be let through.
        if let JsonRpcMessage::Request(request) = &item {
            self.asked.insert(request.id.clone());
        }
        // The request this answers is no longer in flight: its id may be
        // used again.
        if let Some(id) = match &item {
            JsonRpcMessage::Response(response) => Some(&response.id),
            JsonRpcMessage::Error(error) => error.id.as_ref(),
            _ => None,
        } {
            self.in_flight.remove(id);
            if !self.greeted {
                let probe = self.probes.remove(id);
                if !probe && matches!(item, JsonRpcMessage::Response(_)) {
                    self.greeted = true;
                    self.probes = HashSet::new();
                }
            }
        }
        // Serialized and, when the socket takes it at once, written here rather than in the
        // future: rmcp runs the future as a task of its own, which would put the answer out
        // only after rmcp's loop and that task had each had their turn.
        let started = match serde_json::to_vec(&item) {
            Ok(mut line) => {
                line.push(b'\n');
                start_line(&self.write, line)
            }
            Err(e) => Started::Done(Err(std::io::Error::other(e))),
        };
        let write = self.write.clone();
        async move {
            match started {
                Started::Done(written) => written,
                Started::Part {
                    mut writer,
                    line,
                    written,
                } => finish_line(&mut writer, &line[written..]).await,
                Started::Waiting(line) => write_line(&write, &line).await,
            }
        }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        loop {
            if let Some(answering) = self.answering.as_mut() {
                let written = answering.await;
                self.answering = None;
                if !matches!(written, Ok(Ok(()))) {
                    return None;
                }
            }
            let oversized = match self.read_line().await {
                Ok(Some(oversized)) => oversized,
                Ok(None) => return None,
                Err(e) => {
                    tracing::debug!("mcp session read: {e}");
                    return None;
                }
            };
            // From here to the return nothing awaits, so the line is
            // judged and cleared in one step.
            let judgement = match oversized {
                Some(size) => Judgement::Answer(error_line(
                    None,
                    INVALID_REQUEST,
                    &format!(
                        "message of {size} bytes or more exceeds bermd's frame cap of {} bytes",
                        self.max_frame
                    ),
                )),
                None => self.judge(),
            };
            self.line.clear();
            match judgement {
                Judgement::Message(message) => return Some(*message),
                Judgement::Skip => {}
                Judgement::Answer(answer) => {
                    let write = self.write.clone();
                    self.answering = Some(tokio::spawn(async move {
                        write_line(&write, answer.as_bytes()).await
                    }));
                }
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        // Dropping the writer ends the client's side once rmcp's pending
        // answers (which hold the lock in turn) are written.
        let writer = self.write.lock().await.take();
        if let Some(mut writer) = writer {
            writer.shutdown().await?;
        }
        Ok(())
    }
}

/// How far [`start_line`] got with a line.
enum Started<W> {
    /// All of it was written and flushed, or writing it failed.
    Done(std::io::Result<()>),
    /// The socket took `written` bytes of it and then would block: the rest is written
    /// under the writer's lock, which is held until then so no other line cuts in.
    Part {
        writer: tokio::sync::OwnedMutexGuard<Option<W>>,
        line: Vec<u8>,
        written: usize,
    },
    /// Another line is being written, or waits to be: this one queues behind it.
    Waiting(Vec<u8>),
}

/// Writes as much of `line` as the socket takes now, without waiting: the answer to a
/// request leaves while its handler's task is still on the thread. Lines keep their order,
/// because the lock is taken only when no line holds it or waits for it.
fn start_line<W: AsyncWrite + Unpin>(writer: &Arc<Mutex<Option<W>>>, line: Vec<u8>) -> Started<W> {
    use std::task::{Context, Poll, Waker};
    let Ok(mut guard) = writer.clone().try_lock_owned() else {
        return Started::Waiting(line);
    };
    let Some(stream) = guard.as_mut() else {
        return Started::Done(Err(std::io::ErrorKind::NotConnected.into()));
    };
    // Nothing waits on this context: whatever would block is finished by `finish_line`,
    // whose polls register the real waker.
    let mut cx = Context::from_waker(Waker::noop());
    let mut written = 0;
    while written < line.len() {
        match std::pin::Pin::new(&mut *stream).poll_write(&mut cx, &line[written..]) {
            Poll::Ready(Ok(0)) => return Started::Done(Err(std::io::ErrorKind::WriteZero.into())),
            Poll::Ready(Ok(n)) => written += n,
            Poll::Ready(Err(e)) => return Started::Done(Err(e)),
            Poll::Pending => break,
        }
    }
    if written == line.len()
        && let Poll::Ready(flushed) = std::pin::Pin::new(&mut *stream).poll_flush(&mut cx)
    {
        return Started::Done(flushed);
    }
    Started::Part {
        writer: guard,
        line,
        written,
    }
}

/// Writes the rest of a line [`start_line`] began (possibly nothing but the flush).
async fn finish_line<W: AsyncWrite + Unpin>(
    writer: &mut tokio::sync::OwnedMutexGuard<Option<W>>,
    rest: &[u8],
) -> std::io::Result<()> {
    let Some(stream) = writer.as_mut() else {
        return Err(std::io::ErrorKind::NotConnected.into());
    };
    stream.write_all(rest).await?;
    stream.flush().await
}

/// Writes one whole line, unless the session has closed its writer.
async fn write_line<W: AsyncWrite + Unpin>(
    writer: &Mutex<Option<W>>,
    line: &[u8],
) -> std::io::Result<()> {
    let mut writer = writer.lock().await;
    let Some(writer) = writer.as_mut() else {
        return Err(std::io::ErrorKind::NotConnected.into());
    };
    writer.write_all(line).await?;
    if !line.ends_with(b"\n") {
        writer.write_all(b"\n").await?;
    }
    writer.flush().await
}

/// A JSON-RPC error as a line; `id: null` when there is no id to answer.
fn error_line(id: Option<RequestId>, code: i64, message: &str) -> String {
    let mut line = serde_json::json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": { "code": code, "message": message },
    })
    .to_string();
    line.push('\n');
    line
}

/// Binds a Unix socket at `path` with mode 0600, replacing a stale socket
/// file (one nothing listens on).
pub fn bind_private(path: &Path) -> std::io::Result<UnixListener> {
    use std::os::unix::fs::PermissionsExt;
    if path.exists() {
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AddrInUse,
                format!("another process listens on {}", path.display()),
            ));
        }
        std::fs::remove_file(path)?;
    }
    let listener = UnixListener::bind(path)?;
    // The directory is 0700 already; this closes the socket to the group
    // and others even if the directory is opened up later.
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(listener)
}

/// Connects to a Unix socket (for tests and tools).
pub async fn connect(path: &Path) -> std::io::Result<UnixStream> {
    UnixStream::connect(path).await
}
