//! Safe wrappers over the imports: the calling convention, calls between
//! programs, and the syscalls a host may grant.
//!
//! Importing is what makes a syscall reachable: a program that never calls
//! `kv::get` does not import `kv.get`, and `berm inspect` shows exactly what
//! it imports.

use core::fmt;

use berm_abi::frame;
use berm_abi::word::{self, ErrorCode};

use crate::sys;

/// A syscall that did not succeed: the ABI code and the host's message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    /// Why.
    pub code: ErrorCode,
    /// The host's words.
    pub message: String,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.message, self.code.name())
    }
}

impl std::error::Error for Error {}

/// Pulls the staged reply of the last syscall.
fn take_reply() -> Vec<u8> {
    let len = word::split(sys::reply(&mut [])).1 as usize;
    let mut buf = vec![0u8; len];
    if len > 0 {
        sys::reply(&mut buf);
    }
    buf
}

/// Turns a word into `(status, len)` or an [`Error`] with its message.
fn check(answer: i64) -> Result<(u32, u32), Error> {
    if answer >= 0 {
        return Ok(word::split(answer));
    }
    let message = String::from_utf8_lossy(&take_reply()).into_owned();
    let code = ErrorCode::from_word(answer).unwrap_or(ErrorCode::Io);
    Err(Error { code, message })
}

/// Runs a tool: installs the panic hook, pulls the arguments, and reports
/// the result or failure. The generated exports call this.
pub fn run(tool: impl FnOnce(&[u8]) -> Result<String, String>) {
    // Each call runs on a fresh instance, so the hook is installed per call.
    std::panic::set_hook(Box::new(|info| {
        let message = info.to_string();
        sys::panic(message.as_bytes());
    }));
    let len = word::split(sys::args(&mut [])).1 as usize;
    let mut args = vec![0u8; len];
    if len > 0 {
        sys::args(&mut args);
    }
    let result = tool(&args);
    if ask::ASKED.load(core::sync::atomic::Ordering::Relaxed) {
        // The call ended with the question; what the tool returned after it is not a result.
        return;
    }
    match result {
        Ok(result) => sys::done(result.as_bytes()),
        Err(message) => sys::fail(message.as_bytes()),
    };
}

/// Why a call to another program did not produce a result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallError {
    /// Refused before anything ran: no such program or tool, the depth
    /// limit, or arguments over the cap.
    Refused {
        /// Why.
        code: ErrorCode,
        /// The host's words.
        message: String,
    },
    /// The callee ran and reported a failure.
    Failed(String),
    /// The callee ran and hit a host error (trap, deadline, memory cap).
    Fault(String),
}

impl fmt::Display for CallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CallError::Refused { message, .. } => write!(f, "refused: {message}"),
            CallError::Failed(message) => write!(f, "failed: {message}"),
            CallError::Fault(message) => write!(f, "fault: {message}"),
        }
    }
}

impl std::error::Error for CallError {}

/// Calls `program.tool` with `args` (serialized as JSON) and returns its
/// result text. Nested calls share this call's deadline.
pub fn call<A: serde::Serialize + ?Sized>(
    program: &str,
    tool: &str,
    args: &A,
) -> Result<String, CallError> {
    let args = serde_json::to_vec(args).map_err(|e| CallError::Refused {
        code: ErrorCode::Invalid,
        message: format!("could not serialize the arguments: {e}"),
    })?;
    let request = frame::encode(&[program.as_bytes(), tool.as_bytes(), &args]);
    match check(sys::call(&request)) {
        Ok((status, _)) => {
            let text = String::from_utf8_lossy(&take_reply()).into_owned();
            if status == word::STATUS_DONE {
                Ok(text)
            } else {
                Err(CallError::Failed(text))
            }
        }
        Err(Error {
            code: ErrorCode::Fault,
            message,
        }) => Err(CallError::Fault(message)),
        Err(Error { code, message }) => Err(CallError::Refused { code, message }),
    }
}

/// Content blocks beside the result text: what an MCP client shows as images, audio and
/// resources. Each adds one block, in order, after the text the tool returns; a tool whose
/// blocks are the whole result returns an empty `String`. Blocks count against the result
/// size cap, at most 64 per call, and are dropped when the tool fails. The host checks each
/// one and stops the call with a message naming the field when a block is malformed.
pub mod content {
    use berm_abi::content::{Kind, encode};

    use crate::sys;

    fn add(kind: Kind, uri: &str, mime_type: &str, body: &[u8]) {
        // A malformed block stops the call in the host, with its reason: nothing to return.
        sys::content(&encode(kind, uri, mime_type, body));
    }

    /// More text, as its own block.
    pub fn text(text: &str) {
        add(Kind::Text, "", "", text.as_bytes());
    }

    /// An image: its bytes and media type (`image/png`, `image/svg+xml`…).
    pub fn image(mime_type: &str, bytes: &[u8]) {
        add(Kind::Image, "", mime_type, bytes);
    }

    /// Audio: its bytes and media type (`audio/wav`…).
    pub fn audio(mime_type: &str, bytes: &[u8]) {
        add(Kind::Audio, "", mime_type, bytes);
    }

    /// A resource's contents as text, under its URI; `mime_type` may be empty.
    pub fn resource_text(uri: &str, mime_type: &str, text: &str) {
        add(Kind::ResourceText, uri, mime_type, text.as_bytes());
    }

    /// A resource's contents as bytes, under its URI; `mime_type` may be empty.
    pub fn resource_blob(uri: &str, mime_type: &str, bytes: &[u8]) {
        add(Kind::ResourceBlob, uri, mime_type, bytes);
    }

    /// A link to a resource by URI, with a name for people; `mime_type` may be empty.
    pub fn resource_link(uri: &str, name: &str, mime_type: &str) {
        add(Kind::ResourceLink, uri, mime_type, name.as_bytes());
    }
}

/// Progress on long work: reaches the MCP client that made the call, as
/// `notifications/progress`, when its request asked for progress; otherwise (and in a call
/// from another program) it goes nowhere. Always available, no grant.
pub mod progress {
    use berm_abi::frame;

    use super::{Error, check};
    use crate::sys;

    /// Reports `progress` (of `total`, when known) with an optional message. `progress` must
    /// not go back below an earlier report, and both must be finite and at least 0; the host
    /// refuses anything else with `invalid`. Past 1000 reports in a call the rest are dropped.
    pub fn report(progress: f64, total: Option<f64>, message: Option<&str>) -> Result<(), Error> {
        let total = total.map(|t| t.to_string()).unwrap_or_default();
        let request = frame::encode(&[
            progress.to_string().as_bytes(),
            total.as_bytes(),
            message.unwrap_or_default().as_bytes(),
        ]);
        check(sys::progress(&request)).map(|_| ())
    }
}

/// Asking the client for input: a person's answer (elicitation), a model's (sampling), or
/// the client's roots. [`ask::ask`] ends the call with the questions and a state of the
/// program's own; the host asks the client and runs the tool again, in a fresh instance,
/// where [`ask::input`] gives the answers and the state back. Needs the `ask` grant.
///
/// ```ignore
/// pub fn greet() -> Result<String, String> {
///     let input = berm_guest::ask::input();
///     match input.response("name") {
///         Some(answer) => Ok(format!("Hello, {}!", answer["content"]["name"])),
///         None => {
///             berm_guest::ask::ask(
///                 &serde_json::json!({"name": {"method": "elicitation/create", "params": {
///                     "message": "What is your name?",
///                     "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}}}}}),
///                 b"",
///             );
///             Ok(String::new())
///         }
///     }
/// }
/// ```
pub mod ask {
    use core::sync::atomic::{AtomicBool, Ordering};

    use berm_abi::{frame, word};
    use serde_json::Value;

    use crate::sys;

    /// Set once the tool asked: the tool's own return value is then not sent.
    pub(crate) static ASKED: AtomicBool = AtomicBool::new(false);

    /// What this run of the tool got from an earlier [`ask`]: nothing on a first run.
    #[derive(Debug, Clone, Default, PartialEq)]
    pub struct Input {
        /// The client's answers by the keys asked (an elicitation's `{"action", "content"}`,
        /// a sampling `{"role", "content", "model"}`, a `{"roots": […]}`). A client may leave
        /// some out or add others: check what is there, and ask again for what is missing.
        pub responses: serde_json::Map<String, Value>,
        /// The state given to [`ask`], unchanged (the host sealed it while the client held
        /// it); empty on a first run, and when the client did not send it back.
        pub state: Vec<u8>,
        /// The client's declared capabilities (`{"elicitation": {…}, "sampling": {…},
        /// "roots": {…}}`), `Null` when the host does not know them.
        pub capabilities: Value,
    }

    impl Input {
        /// The answer to the request asked under `key`.
        pub fn response(&self, key: &str) -> Option<&Value> {
            self.responses.get(key)
        }

        /// Whether the client declared `capability` (`elicitation`, `sampling`, `roots`); true
        /// when its capabilities are unknown, since the host then cannot check either.
        pub fn supports(&self, capability: &str) -> bool {
            match &self.capabilities {
                Value::Object(declared) => declared.contains_key(capability),
                _ => true,
            }
        }
    }

    /// What the host handed this run (see [`Input`]).
    pub fn input() -> Input {
        let len = word::split(sys::input(&mut [])).1 as usize;
        if len == 0 {
            return Input::default();
        }
        let mut buf = vec![0u8; len];
        sys::input(&mut buf);
        let Ok([responses, state, capabilities]) = frame::decode_exact::<3>(&buf) else {
            return Input::default();
        };
        Input {
            responses: serde_json::from_slice(responses).unwrap_or_default(),
            state: state.to_vec(),
            capabilities: serde_json::from_slice(capabilities).unwrap_or(Value::Null),
        }
    }

    /// Ends the call asking the client: `requests` is a JSON object of MCP requests by key
    /// (`{"method": "elicitation/create" | "sampling/createMessage" | "roots/list",
    /// "params": {…}}`, at most 16), `state` up to 16 KiB the tool gets back. What the tool
    /// returns after this is not sent. A malformed request stops the call with its reason.
    pub fn ask(requests: &Value, state: &[u8]) {
        let requests = serde_json::to_vec(requests).unwrap_or_default();
        ASKED.store(true, Ordering::Relaxed);
        sys::ask(&frame::encode(&[&requests, state]));
    }
}

/// `log`: lines in the host's log, tagged with the program.
pub mod log {
    use super::*;

    fn write(level: &str, message: &str) {
        let mut request = frame::encode(&[level.as_bytes(), message.as_bytes()]);
        // A log line that the host refuses is not worth failing a tool over.
        let _ = check(sys::log_write(&mut request));
    }

    /// Logs at error level.
    pub fn error(message: &str) {
        write("error", message);
    }
    /// Logs at warn level.
    pub fn warn(message: &str) {
        write("warn", message);
    }
    /// Logs at info level.
    pub fn info(message: &str) {
        write("info", message);
    }
    /// Logs at debug level.
    pub fn debug(message: &str) {
        write("debug", message);
    }
}

/// `clock`: wall-clock time.
pub mod clock {
    use super::*;

    /// Nanoseconds since the Unix epoch.
    pub fn now() -> Result<u64, Error> {
        let answer = sys::clock_now(&mut []);
        if answer < 0 {
            check(answer)?;
        }
        Ok(answer as u64)
    }

    /// Waits `millis` milliseconds without using the CPU, or until the call's deadline if
    /// that comes first.
    pub fn sleep(millis: u64) -> Result<(), Error> {
        let request = berm_abi::frame::encode(&[millis.to_string().as_bytes()]);
        check(sys::clock_sleep(&mut request.clone())).map(|_| ())
    }
}

/// `random`: cryptographically secure random bytes.
pub mod random {
    use super::*;

    /// Fills `buf` with random bytes.
    pub fn fill(buf: &mut [u8]) -> Result<(), Error> {
        check(sys::random_fill(buf)).map(drop)
    }
}

/// `kv`: the program's own persistent keyspace.
pub mod kv {
    use super::*;

    /// The value under `key`, or `None`.
    pub fn get(key: &[u8]) -> Result<Option<Vec<u8>>, Error> {
        match check(sys::kv_get(&mut frame::encode(&[key]))) {
            Ok(_) => Ok(Some(take_reply())),
            Err(e) if e.code == ErrorCode::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Stores `value` under `key`; durable when this returns.
    pub fn put(key: &[u8], value: &[u8]) -> Result<(), Error> {
        check(sys::kv_put(&mut frame::encode(&[key, value]))).map(drop)
    }

    /// Deletes `key`; returns whether it existed.
    pub fn delete(key: &[u8]) -> Result<bool, Error> {
        match check(sys::kv_delete(&mut frame::encode(&[key]))) {
            Ok(_) => Ok(true),
            Err(e) if e.code == ErrorCode::NotFound => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Every key starting with `prefix`, sorted.
    pub fn list(prefix: &[u8]) -> Result<Vec<Vec<u8>>, Error> {
        check(sys::kv_list(&mut frame::encode(&[prefix])))?;
        let reply = take_reply();
        let keys = frame::decode(&reply).map_err(|e| Error {
            code: ErrorCode::Invalid,
            message: format!("kv.list reply: {e}"),
        })?;
        Ok(keys.into_iter().map(<[u8]>::to_vec).collect())
    }
}

/// `fs`: files under the directory the host granted, by relative path.
pub mod fs {
    use super::*;

    /// One entry of a directory listing.
    #[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
    pub struct Entry {
        /// File name.
        pub name: String,
        /// `file`, `dir` or `symlink`.
        pub kind: String,
        /// Size in bytes.
        pub size: u64,
    }

    /// The contents of `path`.
    pub fn read(path: &str) -> Result<Vec<u8>, Error> {
        check(sys::fs_read(&mut frame::encode(&[path.as_bytes()])))?;
        Ok(take_reply())
    }

    /// Writes `contents` to `path` (atomically, replacing it).
    pub fn write(path: &str, contents: &[u8]) -> Result<(), Error> {
        check(sys::fs_write(&mut frame::encode(&[
            path.as_bytes(),
            contents,
        ])))
        .map(drop)
    }

    /// The entries of directory `path` (`""` or `"."` is the root).
    pub fn list(path: &str) -> Result<Vec<Entry>, Error> {
        check(sys::fs_list(&mut frame::encode(&[path.as_bytes()])))?;
        serde_json::from_slice(&take_reply()).map_err(|e| Error {
            code: ErrorCode::Invalid,
            message: format!("fs.list reply: {e}"),
        })
    }

    /// Removes the file `path`.
    pub fn remove(path: &str) -> Result<(), Error> {
        check(sys::fs_remove(&mut frame::encode(&[path.as_bytes()]))).map(drop)
    }
}

/// `http`: requests to the hosts the deployment grants (`net=HOST[:PORT]`).
///
/// Write `{{secret:NAME}}` ([`secret`]) in a header value or the body where
/// a secret goes: the host puts the value in only on requests to that
/// secret's hosts, so the program never holds it.
pub mod http {
    use super::*;

    /// A response, whole.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct Response {
        /// The HTTP status.
        pub status: u16,
        /// Header names (lowercase) and values.
        pub headers: Vec<(String, Vec<u8>)>,
        /// The body.
        pub body: Vec<u8>,
    }

    impl Response {
        /// The body as text (invalid UTF-8 replaced).
        pub fn text(&self) -> String {
            String::from_utf8_lossy(&self.body).into_owned()
        }

        /// The first value of header `name` (lowercase).
        pub fn header(&self, name: &str) -> Option<&[u8]> {
            self.headers
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.as_slice())
        }
    }

    /// The placeholder for secret `name`: `{{secret:NAME}}`.
    pub fn secret(name: &str) -> String {
        berm_abi::net::secret_placeholder(name)
    }

    /// Sends a request and returns the whole response (redirects to
    /// granted hosts followed). Fails with `denied` (host not granted, or a
    /// secret toward a host it is not bound to), `too_large`, `io` or
    /// `timeout`.
    pub fn fetch(
        method: &str,
        url: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Result<Response, Error> {
        let mut framed = Vec::new();
        for (name, value) in headers {
            frame::push(&mut framed, name.as_bytes());
            frame::push(&mut framed, value.as_bytes());
        }
        let mut request = frame::encode(&[method.as_bytes(), url.as_bytes(), &framed, body]);
        check(sys::http_fetch(&mut request))?;
        let reply = take_reply();
        let bad = |what: &str| Error {
            code: ErrorCode::Invalid,
            message: format!("http.fetch reply: {what}"),
        };
        let [status, headers, body] =
            frame::decode_exact::<3>(&reply).map_err(|e| bad(&e.to_string()))?;
        let status = core::str::from_utf8(status)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| bad("the status is not a number"))?;
        let fields = frame::decode(headers).map_err(|e| bad(&e.to_string()))?;
        let headers = fields
            .chunks_exact(2)
            .map(|pair| {
                (
                    String::from_utf8_lossy(pair[0]).into_owned(),
                    pair[1].to_vec(),
                )
            })
            .collect();
        Ok(Response {
            status,
            headers,
            body: body.to_vec(),
        })
    }

    /// `GET url`.
    pub fn get(url: &str) -> Result<Response, Error> {
        fetch("GET", url, &[], &[])
    }

    /// `POST url` with `value` as a JSON body (and `extra` headers, e.g. an
    /// `authorization` holding a secret placeholder).
    pub fn post_json<T: serde::Serialize + ?Sized>(
        url: &str,
        value: &T,
        extra: &[(&str, &str)],
    ) -> Result<Response, Error> {
        let body = serde_json::to_vec(value).map_err(|e| Error {
            code: ErrorCode::Invalid,
            message: format!("could not serialize the body: {e}"),
        })?;
        let mut headers = vec![("content-type", "application/json")];
        headers.extend_from_slice(extra);
        fetch("POST", url, &headers, &body)
    }
}
