//! MCP over a Unix socket: newline-delimited JSON-RPC, one session per
//! connection, behind a frame guard.
//!
//! The guard sits between the socket and rmcp. It bounds every incoming line
//! and answers what rmcp would silently drop — a line over the cap, or one
//! that is not JSON — with a JSON-RPC error (`id: null`, since no id can be
//! read from it), so a client always learns why it got no answer. Whole
//! lines only ever reach the socket, so those errors never split a message
//! rmcp is writing.

use std::path::Path;
use std::sync::Arc;

use rmcp::ServiceExt;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::Mutex;

use crate::mcp::McpServer;
use crate::service::Service;

/// Largest JSON-RPC message bermd reads by default: the largest arguments a
/// call accepts, with room for the envelope.
pub const DEFAULT_MAX_FRAME_BYTES: usize = 4 << 20;

/// JSON-RPC parse error.
const PARSE_ERROR: i64 = -32700;
/// JSON-RPC invalid request.
const INVALID_REQUEST: i64 = -32600;

/// Accepts MCP connections on `listener` forever.
pub async fn serve_unix(listener: UnixListener, service: Arc<Service>, max_frame: usize) {
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                tracing::warn!("mcp.sock accept: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                continue;
            }
        };
        let service = service.clone();
        tokio::spawn(async move {
            let (read, write) = stream.into_split();
            serve_stream(read, write, service, max_frame).await;
        });
    }
}

/// Serves one MCP session over any byte stream (a Unix socket, stdio, a
/// vsock stream), behind the frame guard.
pub async fn serve_stream<R, W>(read: R, write: W, service: Arc<Service>, max_frame: usize)
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let writer = Arc::new(Mutex::new(write));
    let (session_side, guard_side) = tokio::io::duplex(256 << 10);
    let (from_session, to_session) = tokio::io::split(guard_side);
    let inbound = tokio::spawn(guard_inbound(read, to_session, writer.clone(), max_frame));
    let outbound = tokio::spawn(relay_outbound(from_session, writer));
    match McpServer::new(service).serve(session_side).await {
        Ok(running) => {
            let _ = running.waiting().await;
        }
        Err(e) => tracing::debug!("mcp session ended before it began: {e}"),
    }
    // The session has dropped its end of the pipe, so the relay drains what
    // rmcp wrote and then ends; the client gets every answer.
    inbound.abort();
    let _ = outbound.await;
}

/// Reads bounded lines from the client; forwards whole JSON lines to rmcp and
/// answers the rest itself.
async fn guard_inbound<R, S, W>(read: R, mut session: S, writer: Arc<Mutex<W>>, max_frame: usize)
where
    R: AsyncRead + Unpin,
    S: AsyncWrite + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut read = BufReader::with_capacity(64 << 10, read);
    let mut line = Vec::new();
    loop {
        line.clear();
        let oversized = match read_bounded_line(&mut read, &mut line, max_frame).await {
            Ok(Some(oversized)) => oversized,
            Ok(None) | Err(_) => break,
        };
        let reply = if let Some(size) = oversized {
            Some(error_line(
                INVALID_REQUEST,
                &format!(
                    "message of {size} bytes or more exceeds bermd's frame cap of {max_frame} bytes"
                ),
            ))
        } else if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        } else if let Err(e) = serde_json::from_slice::<serde::de::IgnoredAny>(&line) {
            Some(error_line(PARSE_ERROR, &format!("not valid JSON: {e}")))
        } else {
            None
        };
        match reply {
            Some(reply) => {
                if write_line(&writer, reply.as_bytes()).await.is_err() {
                    break;
                }
            }
            None => {
                if session.write_all(&line).await.is_err()
                    || session.write_all(b"\n").await.is_err()
                {
                    break;
                }
            }
        }
    }
    let _ = session.shutdown().await;
}

/// Reads one line (without its newline) into `line`. `Ok(None)` at end of
/// stream; `Ok(Some(Some(n)))` when the line passed `max` bytes (it is
/// consumed and dropped, `n` is how much was seen); `Ok(Some(None))` for a
/// line within bounds.
async fn read_bounded_line<R: AsyncRead + Unpin>(
    read: &mut BufReader<R>,
    line: &mut Vec<u8>,
    max: usize,
) -> std::io::Result<Option<Option<usize>>> {
    let mut seen = 0usize;
    let mut oversized = false;
    loop {
        let buffer = read.fill_buf().await?;
        if buffer.is_empty() {
            return Ok(if seen == 0 {
                None
            } else if oversized {
                Some(Some(seen))
            } else {
                Some(None)
            });
        }
        let (chunk, done) = match buffer.iter().position(|b| *b == b'\n') {
            Some(at) => (&buffer[..at], Some(at + 1)),
            None => (buffer, None),
        };
        seen += chunk.len();
        if !oversized && seen > max {
            oversized = true;
            line.clear();
        }
        if !oversized {
            line.extend_from_slice(chunk);
        }
        let consumed = done.unwrap_or(buffer.len());
        read.consume(consumed);
        if done.is_some() {
            return Ok(Some(if oversized { Some(seen) } else { None }));
        }
    }
}

/// Copies rmcp's output to the client a whole line at a time.
async fn relay_outbound<S, W>(session: S, writer: Arc<Mutex<W>>)
where
    S: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut session = BufReader::with_capacity(64 << 10, session);
    let mut line = Vec::new();
    loop {
        line.clear();
        match session.read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {
                if write_line(&writer, &line).await.is_err() {
                    break;
                }
            }
        }
    }
}

async fn write_line<W: AsyncWrite + Unpin>(writer: &Mutex<W>, line: &[u8]) -> std::io::Result<()> {
    let mut writer = writer.lock().await;
    writer.write_all(line).await?;
    if !line.ends_with(b"\n") {
        writer.write_all(b"\n").await?;
    }
    writer.flush().await
}

fn error_line(code: i64, message: &str) -> String {
    let mut line = serde_json::json!({
        "jsonrpc": "2.0",
        "id": null,
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
