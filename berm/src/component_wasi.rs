//! What WASI 0.2 gives one call of a component (docs/components.md): no environment, no
//! arguments, no stdin, stdout and stderr into the program's log (bounded), the `fs=`
//! directory as the one preopen (read-only), and outgoing HTTP sent by the host's own
//! `http.fetch` syscall, so every request passes the host's egress rules and nothing here
//! connects anywhere.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Instant;

use berm_abi::frame;
use bytes::Bytes;
use http_body_util::BodyExt;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxBuilder};
use wasmtime_wasi_http::Error as HttpError;
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpHooks};

use crate::invocation::Program;
use crate::syscall::{Kind, Reply, Syscall, SyscallContext, SyscallError};

/// Bytes of stdout and stderr together one call may put in the log; the rest is dropped,
/// and the log says how much.
pub(crate) const MAX_STDIO_BYTES: usize = 64 << 10;

/// Largest body of a `wasi:http` request the host collects before handing it to the egress.
const MAX_HTTP_BODY: usize = 4 << 20;

/// One call's WASI state.
pub(crate) struct ComponentCtx {
    pub wasi: WasiCtx,
    pub table: ResourceTable,
    pub http: WasiHttpCtx,
    pub hooks: Egress,
    pub output: Output,
}

impl ComponentCtx {
    /// The state of a call of `program`: its `fs=` directory (when it has one and imports
    /// the filesystem) as the one read-only preopen, its output captured.
    pub fn new(program: &Arc<Program>, deadline: Instant, trace: Option<crate::CallTrace>) -> Self {
        let output = Output::default();
        let mut builder = WasiCtxBuilder::new();
        builder
            .stdout(output.clone())
            .stderr(output.clone())
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false);
        if let Some(dir) = &program.wasi_preopen {
            // A directory that cannot be opened now leaves the program without a preopen; its
            // file calls fail as they would with none, and the log says why.
            if let Err(e) = builder.preopened_dir(dir, "/", FsPerms::ReadOnly) {
                tracing::warn!(target: "program", program = %program.name, "fs directory {}: {e:#}", dir.display());
            }
        }
        ComponentCtx {
            wasi: builder.build(),
            table: ResourceTable::new(),
            http: WasiHttpCtx::new(),
            hooks: Egress {
                program: program.clone(),
                fetch: program.http_fetch.clone(),
                deadline,
                trace,
            },
            output,
        }
    }
}

/// What a call wrote to stdout and stderr, up to [`MAX_STDIO_BYTES`].
#[derive(Clone, Default)]
pub(crate) struct Output(Arc<Mutex<Captured>>);

#[derive(Default)]
struct Captured {
    bytes: Vec<u8>,
    dropped: usize,
}

impl Output {
    /// Writes what was captured to the log as the program's lines.
    pub fn flush(&self, program: &str, tool: &str) {
        let captured = std::mem::take(&mut *self.0.lock().unwrap_or_else(|p| p.into_inner()));
        for line in String::from_utf8_lossy(&captured.bytes).lines() {
            tracing::info!(target: "program", program, tool, "{line}");
        }
        if captured.dropped > 0 {
            tracing::warn!(
                target: "program",
                program,
                tool,
                "{} more bytes of stdout/stderr dropped (at most {MAX_STDIO_BYTES} per call)",
                captured.dropped
            );
        }
    }
}

impl IsTerminal for Output {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for Output {
    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

impl tokio::io::AsyncWrite for Output {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let mut captured = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let room = MAX_STDIO_BYTES.saturating_sub(captured.bytes.len());
        let kept = buf.len().min(room);
        captured.bytes.extend_from_slice(&buf[..kept]);
        captured.dropped += buf.len() - kept;
        // Always all of it: a program flooding its output is cut, not failed.
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// `wasi:http`'s sender: the host's `http.fetch` syscall, with the call's context.
pub(crate) struct Egress {
    program: Arc<Program>,
    fetch: Option<Syscall>,
    deadline: Instant,
    trace: Option<crate::CallTrace>,
}

type Sent = Result<
    (
        http::Response<wasmtime_wasi_http::WasiBody>,
        Box<dyn Future<Output = Result<(), wasmtime_wasi_http::Error>> + Send>,
    ),
    wasmtime_wasi_http::Error,
>;

impl WasiHttpHooks for Egress {
    // The host's `http.fetch` names the host itself; a guest's `host` header is not passed.
    fn set_host_header(&mut self) -> bool {
        false
    }

    fn send_request(
        &mut self,
        request: http::Request<wasmtime_wasi_http::WasiBody>,
        _options: Option<wasmtime_wasi_http::RequestOptions>,
        fut: Box<dyn Future<Output = Result<(), wasmtime_wasi_http::Error>> + Send>,
    ) -> Box<dyn Future<Output = Sent> + Send> {
        drop(fut);
        let program = self.program.clone();
        let fetch = self.fetch.clone();
        let deadline = self.deadline;
        let trace = self.trace.clone();
        Box::new(async move {
            let Some(fetch) = fetch else {
                return Err(HttpError::HttpRequestDenied);
            };
            let (parts, body) = request.into_parts();
            // Bounded before the egress sees it: it refuses past its own (smaller) cap.
            let body = http_body_util::Limited::new(body, MAX_HTTP_BODY)
                .collect()
                .await
                .map_err(|_| HttpError::HttpRequestBodySize(None))?
                .to_bytes();
            let mut headers = Vec::new();
            for (name, value) in &parts.headers {
                headers.push(name.as_str().as_bytes().to_vec());
                headers.push(value.as_bytes().to_vec());
            }
            let header_refs: Vec<&[u8]> = headers.iter().map(Vec::as_slice).collect();
            let headers = frame::encode(&header_refs);
            let url = parts.uri.to_string();
            let mut request = frame::encode(&[
                parts.method.as_str().as_bytes(),
                url.as_bytes(),
                &headers,
                &body,
            ]);
            let reply = send(&program, &fetch, deadline, trace.as_ref(), &mut request).await;
            let bytes = match reply {
                Ok(Reply::Staged(bytes) | Reply::Reserved(bytes, _)) => bytes,
                Ok(Reply::Word(_)) => Vec::new(),
                Err(SyscallError::Code { code, message }) => {
                    tracing::info!(target: "program", program = %program.name, "wasi:http refused ({}): {message}", code.name());
                    return Err(http_error(code, message));
                }
                Err(SyscallError::Trap(message)) => {
                    return Err(HttpError::InternalError(Some(message)));
                }
            };
            let response = response_of(&bytes).map_err(|e| HttpError::InternalError(Some(e)))?;
            let done: Box<dyn Future<Output = Result<(), wasmtime_wasi_http::Error>> + Send> =
                Box::new(async { Ok(()) });
            Ok((response, done))
        })
    }
}

/// Runs the `http.fetch` handler as a syscall of the call would.
async fn send(
    program: &Arc<Program>,
    fetch: &Syscall,
    deadline: Instant,
    trace: Option<&crate::CallTrace>,
    request: &mut [u8],
) -> Result<Reply, SyscallError> {
    let context = SyscallContext {
        program: &program.name,
        tool: "",
        digest: &program.info.digest,
        caller: None,
        deadline,
        data: program.data.as_deref(),
        trace,
        host_memory: &program.host_memory,
    };
    match &fetch.kind {
        Kind::Immediate(handler) => handler(&context, request),
        Kind::Blocking(handler) => {
            let pending = handler(&context, request)?;
            pending.await
        }
    }
}

/// The WASI error code for a refusal of `http.fetch`.
fn http_error(code: berm_abi::word::ErrorCode, message: String) -> HttpError {
    use berm_abi::word::ErrorCode as Code;
    match code {
        Code::Denied => HttpError::HttpRequestDenied,
        Code::Timeout => HttpError::ConnectionTimeout,
        Code::TooLarge => HttpError::HttpResponseBodySize(None),
        Code::Invalid => HttpError::HttpRequestUriInvalid,
        _ => HttpError::InternalError(Some(message)),
    }
}

/// The response in `http.fetch`'s reply, frames `[status, headers, body]`.
fn response_of(reply: &[u8]) -> Result<http::Response<wasmtime_wasi_http::WasiBody>, String> {
    let [status, headers, body] =
        frame::decode_exact::<3>(reply).map_err(|e| format!("http.fetch reply: {e}"))?;
    let status: u16 = std::str::from_utf8(status)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or("http.fetch reply: bad status")?;
    let mut response = http::Response::builder().status(status);
    let fields = frame::decode(headers).map_err(|e| format!("http.fetch reply headers: {e}"))?;
    for pair in fields.chunks(2) {
        if let [name, value] = pair {
            response = response.header(*name, *value);
        }
    }
    let body = http_body_util::Full::new(Bytes::copy_from_slice(body))
        .map_err(|never| match never {})
        .boxed_unsync();
    response.body(body).map_err(|e| e.to_string())
}
