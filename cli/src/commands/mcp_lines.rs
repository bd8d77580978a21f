//! The lines an MCP bridge copies, and which of the client's requests still await an answer.
//!
//! A bridge to a VM's app cannot end a session by passing the client's end of stream on and
//! waiting for the server to close: the QEMU relay keeps the guest's side whole after a
//! client's half-close (vhost-device-vsock turns an end of stream into a shutdown of both
//! directions, which would lose the reply: vmm/src/qemu.rs), so bermd in the guest never sees
//! it; and libkrun's vsock proxy answers a host-side end of stream with a reset (krun-devices
//! 1.19, `virtio/vsock/unix.rs`), which loses the answers still on their way. So a bridge to a
//! VM never half-closes: once stdin has ended, it ends as soon as every request it passed on
//! has its answer, or when the server closes first. Only requests the guest's bermd reads
//! whole are counted: well-formed ones (`"jsonrpc": "2.0"`, a method, a string or integer id)
//! within its frame cap ([`GUEST_FRAME_BYTES`]); it answers any other with a null id, which
//! would otherwise be waited for forever. (A bridge to the local bermd half-closes and waits
//! for bermd to close, as bermd sees the end of stream there.)
//!
//! Lines are bounded ([`MAX_LINE_BYTES`]): the server may be a guest, and a guest that never
//! ends a line must not grow the host's bridge without bound.

use anyhow::{Context, bail};
use serde_json::Value;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt};

/// The longest line either side may send: well above bermd's largest frame (4 MiB by default,
/// `--max-frame-bytes`), and a bound on what a hostile peer can make the bridge hold.
pub const MAX_LINE_BYTES: usize = 64 << 20;

/// The frame cap of a VM's bermd (berm-init starts it with the default `--max-frame-bytes`):
/// a longer request is answered with a null id, so it is not waited for.
pub const GUEST_FRAME_BYTES: usize = 4 << 20;

/// A bounded line reader over one side of the bridge. Cancel-safe: a read that a
/// `tokio::select!` drops keeps what it read in the buffer, and the next call goes on.
pub struct LineReader<R> {
    reader: R,
    buf: Vec<u8>,
    from: &'static str,
}

impl<R: AsyncBufRead + Unpin> LineReader<R> {
    /// Reads `reader`, naming it `from` in errors.
    pub fn new(reader: R, from: &'static str) -> Self {
        Self {
            reader,
            buf: Vec::new(),
            from,
        }
    }

    /// The next line with its newline (a last line without one is returned as it is), or
    /// `None` at the end of the stream.
    pub async fn next_line(&mut self) -> anyhow::Result<Option<Vec<u8>>> {
        loop {
            let room = (MAX_LINE_BYTES + 1).saturating_sub(self.buf.len()) as u64;
            let n = (&mut self.reader)
                .take(room)
                .read_until(b'\n', &mut self.buf)
                .await
                .with_context(|| format!("reading from {}", self.from))?;
            if self.buf.ends_with(b"\n") || (n == 0 && !self.buf.is_empty()) {
                return Ok(Some(std::mem::take(&mut self.buf)));
            }
            if n == 0 {
                return Ok(None);
            }
            if self.buf.len() > MAX_LINE_BYTES {
                bail!(
                    "{} sent a line longer than {} MiB; ending the session",
                    self.from,
                    MAX_LINE_BYTES >> 20
                );
            }
        }
    }
}

/// The ids of the client's requests the server has not answered yet (a multiset: a client
/// may reuse an id).
#[derive(Debug, Default)]
pub struct Pending {
    ids: Vec<Value>,
}

impl Pending {
    /// Notes a line the client sent: a request adds its id; `notifications/cancelled` drops
    /// the request it names, which the server does not answer.
    pub fn client(&mut self, line: &[u8]) {
        if line.len() > GUEST_FRAME_BYTES {
            return;
        }
        let Ok(message) = serde_json::from_slice::<Value>(line) else {
            return;
        };
        if message.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
            return;
        }
        match (
            message.get("method").and_then(Value::as_str),
            message.get("id"),
        ) {
            (Some(_), Some(id)) if id.is_string() || id.is_i64() || id.is_u64() => {
                self.ids.push(id.clone());
            }
            (Some("notifications/cancelled"), None) => {
                if let Some(id) = message.pointer("/params/requestId") {
                    self.answered(id);
                }
            }
            _ => {}
        }
    }

    /// Notes a line the server sent: a response answers the request with its id.
    pub fn server(&mut self, line: &[u8]) {
        let Ok(message) = serde_json::from_slice::<Value>(line) else {
            return;
        };
        if message.get("method").is_none()
            && let Some(id) = message.get("id")
        {
            self.answered(id);
        }
    }

    fn answered(&mut self, id: &Value) {
        if let Some(at) = self.ids.iter().position(|pending| pending == id) {
            self.ids.remove(at);
        }
    }

    /// Whether every request has its answer.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// The unanswered ids, leaving none.
    pub fn take(&mut self) -> Vec<Value> {
        std::mem::take(&mut self.ids)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_well_formed_requests_wait_for_an_answer() {
        let mut pending = Pending::default();
        pending.client(br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#);
        pending.client(br#"{"jsonrpc":"2.0","id":"a","method":"tools/call"}"#);
        pending.client(br#"{"jsonrpc":"1.0","id":9,"method":"tools/list"}"#);
        pending.client(br#"{"jsonrpc":"2.0","id":null,"method":"tools/list"}"#);
        pending.client(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
        pending.client(b"not json\n");
        let mut oversized =
            br#"{"jsonrpc":"2.0","id":3,"method":"tools/list","params":{"x":""#.to_vec();
        oversized.resize(GUEST_FRAME_BYTES, b'x');
        oversized.extend_from_slice(br#""}}"#);
        pending.client(&oversized);
        assert_eq!(pending.ids, vec![Value::from(1), Value::from("a")]);
        // A server request (same id space, other direction) answers nothing.
        pending.server(br#"{"jsonrpc":"2.0","id":1,"method":"roots/list"}"#);
        assert_eq!(pending.ids.len(), 2);
        pending.server(br#"{"jsonrpc":"2.0","id":1,"result":{}}"#);
        pending.client(
            br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"a"}}"#,
        );
        assert!(pending.is_empty());
    }

    #[tokio::test]
    async fn lines_are_read_whole_and_bounded() {
        let input: &[u8] = b"one\ntwo\nlast";
        let mut lines = LineReader::new(input, "the client");
        assert_eq!(lines.next_line().await.unwrap().unwrap(), b"one\n");
        assert_eq!(lines.next_line().await.unwrap().unwrap(), b"two\n");
        assert_eq!(lines.next_line().await.unwrap().unwrap(), b"last");
        assert!(lines.next_line().await.unwrap().is_none());

        let long = vec![b'x'; MAX_LINE_BYTES + 1];
        let mut lines = LineReader::new(long.as_slice(), "the server");
        let error = lines.next_line().await.unwrap_err();
        assert_eq!(
            error.to_string(),
            "the server sent a line longer than 64 MiB; ending the session"
        );
    }
}
