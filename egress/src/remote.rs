//! `http.fetch` over a stream: how a microVM's bermd hands a request to the host dialer in
//! berm-vmm (`docs/design/vm-protocol.md`, "Egress").
//!
//! One request per connection. The guest writes
//!
//! ```text
//! u32 BE  request length N      (at most Caps::max_request_bytes + framing)
//! u32 BE  milliseconds left     (before the call's deadline, as the guest sees it)
//! u8      program name length P (1 to 64)
//! P bytes the program's name    (whose grants and secrets apply, within the port's app)
//! N bytes Request::encode
//! ```
//!
//! and the host answers once, then closes:
//!
//! ```text
//! u8      0 for a response, else the ABI error code (denied 3, too_large 4, io 5, …)
//! u32 BE  length M
//! M bytes Response::encode, or the error message (UTF-8)
//! ```
//!
//! The host reads nothing it has not bounded first: a length over the cap is answered
//! `too_large` without reading the rest, garbage is `invalid`, and a guest that writes too
//! slowly, or half a request and then nothing, is cut off at [`READ_TIMEOUT`]. The request
//! is checked against the host's own [`crate::Egress`] of the program it names (that
//! program's grants and secrets as the host read them from the app folder): the port decides
//! the app, the name picks one of that app's programs, and nothing the guest writes widens
//! them. Secrets are keyed by (program, name), so two programs that each bind `TOKEN` send
//! their own values. A guest bermd that lies about the program gets only what another
//! program of its own app could already ask for through it.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::{Caps, Egress, ErrorCode, FetchError, Request, Response};

/// How long the host waits for a whole request once a connection is accepted.
pub const READ_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the host waits for the guest to take the reply.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest error message sent back.
pub const MAX_MESSAGE_BYTES: usize = 4 << 10;
/// What framing adds to a request beyond [`Caps::max_request_bytes`] (method, the frame
/// lengths, header frames).
const REQUEST_FRAMING: usize = 64 + 8 * (4 + 2 * crate::wire::MAX_HEADERS);
/// What a reply adds to the body cap: the status, the response head (hyper reads at most
/// 64 KiB of it) and the frames around it.
const REPLY_HEAD: usize = 128 << 10;

/// Longest program name on the wire (berm's program names are at most 64 bytes).
pub const MAX_PROGRAM_BYTES: usize = 64;

/// One app's egress at the host: each program's own [`Egress`], by name, which [`serve`]
/// picks from by the name the guest writes. Every program's egress has the same caps.
pub struct Programs {
    caps: Caps,
    by_name: BTreeMap<String, Egress>,
}

impl Programs {
    /// No program yet; requests are bounded by `caps` before the program is known.
    pub fn new(caps: Caps) -> Programs {
        Programs {
            caps,
            by_name: BTreeMap::new(),
        }
    }

    /// Serves `program`'s requests with `egress`.
    pub fn insert(&mut self, program: impl Into<String>, egress: Egress) {
        self.by_name.insert(program.into(), egress);
    }

    /// The caps a request is bounded by.
    pub fn caps(&self) -> &Caps {
        &self.caps
    }
}

/// The largest request a guest may write under `caps`.
pub fn max_request(caps: &Caps) -> usize {
    caps.max_request_bytes + REQUEST_FRAMING
}

/// The largest reply a host may write under `caps`.
pub fn max_reply(caps: &Caps) -> usize {
    caps.max_response_bytes + REPLY_HEAD
}

fn io(message: impl Into<String>) -> FetchError {
    FetchError::new(ErrorCode::Io, message)
}

/// The guest's side: sends `program`'s `request` on `stream` (blocking; the caller sets the
/// stream's timeouts) with `left` to go, and reads the one reply, bounded by `caps`, its
/// bytes counted in `holding` before they are read.
pub fn send<S: Read + Write>(
    mut stream: S,
    program: &str,
    request: &Request,
    left: Duration,
    caps: &Caps,
    holding: &dyn crate::Holding,
) -> Result<Response, FetchError> {
    if program.is_empty() || program.len() > MAX_PROGRAM_BYTES {
        return Err(io(format!(
            "program name of {} bytes: 1 to {MAX_PROGRAM_BYTES} go to the host dialer",
            program.len()
        )));
    }
    let bytes = request.encode();
    let broke = |what: &str, e: std::io::Error| {
        let code = if matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ) {
            ErrorCode::Timeout
        } else {
            ErrorCode::Io
        };
        FetchError::new(code, format!("the host dialer: {what}: {e}"))
    };
    let len = u32::try_from(bytes.len()).map_err(|_| io("the request is over 4 GiB"))?;
    let ms = u32::try_from(left.as_millis()).unwrap_or(u32::MAX);
    let mut head = Vec::with_capacity(9 + program.len());
    head.extend_from_slice(&len.to_be_bytes());
    head.extend_from_slice(&ms.to_be_bytes());
    head.push(program.len() as u8);
    head.extend_from_slice(program.as_bytes());
    let sent = stream
        .write_all(&head)
        .and_then(|()| stream.write_all(&bytes))
        .and_then(|()| stream.flush());
    let mut head = [0u8; 5];
    let read = stream.read_exact(&mut head);
    match (sent, read) {
        (_, Ok(())) => {}
        // The host may answer before it reads the request (a connection over the app's cap
        // is turned away at once) and close: its reply says why, so it wins over the broken
        // pipe the rest of the request met.
        (Err(e), Err(_)) => return Err(broke("sending the request", e)),
        (Ok(()), Err(e)) => return Err(broke("reading the reply", e)),
    }
    let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
    let cap = if head[0] == 0 {
        max_reply(caps)
    } else {
        MAX_MESSAGE_BYTES
    };
    if len > cap {
        return Err(io(format!(
            "the host dialer's reply is {len} bytes, over the cap of {cap}"
        )));
    }
    if head[0] == 0 {
        holding.hold(len).map_err(|why| {
            FetchError::new(
                ErrorCode::TooLarge,
                format!("the host dialer's reply of {len} bytes was not read: {why}"),
            )
        })?;
    }
    let mut body = vec![0u8; len];
    stream
        .read_exact(&mut body)
        .map_err(|e| broke("reading the reply", e))?;
    if head[0] == 0 {
        return Response::decode_owned(body);
    }
    let code = ErrorCode::from_word(-i64::from(head[0]))
        .ok_or_else(|| io(format!("the host dialer answered error code {}", head[0])))?;
    Err(FetchError::new(
        code,
        String::from_utf8_lossy(&body).into_owned(),
    ))
}

/// Why the host stopped serving one connection (the guest got an error reply where it could
/// still take one).
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The guest sent less than a whole request in time, or the connection broke.
    #[error("reading the request: {0}")]
    Read(String),
    /// The request was refused before any fetch (bad length or framing).
    #[error("refused: {0}")]
    Refused(FetchError),
    /// The reply could not be written in time.
    #[error("writing the reply: {0}")]
    Write(String),
}

/// The host's side of one connection: reads one request within [`READ_TIMEOUT`], fetches it
/// through the egress of the program it names (that program's grants and secrets as the host
/// holds them, `programs`) and writes the reply.
/// Returns the request's outcome code (`None` for a response) for the dialer's log.
/// `read_timeout` is [`READ_TIMEOUT`] but in tests.
pub async fn serve<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    programs: &Programs,
    read_timeout: Duration,
) -> Result<Option<ErrorCode>, ServeError> {
    let read = tokio::time::timeout(read_timeout, read_request(&mut stream, programs)).await;
    let (egress, request, left) = match read {
        Ok(Ok(got)) => got,
        Ok(Err(ReadError::Refused(e))) => {
            let _ = reply(&mut stream, &Err(e.clone())).await;
            return Err(ServeError::Refused(e));
        }
        Ok(Err(ReadError::Io(e))) => return Err(ServeError::Read(e.to_string())),
        Err(_) => {
            let e = io(format!(
                "no whole request within {} ms",
                read_timeout.as_millis()
            ));
            let _ = reply(&mut stream, &Err(e.clone())).await;
            return Err(ServeError::Read(e.message));
        }
    };
    let deadline = std::time::Instant::now() + left;
    let outcome = egress.fetch(request, deadline).await;
    let code = outcome.as_ref().err().map(|e| e.code);
    reply(&mut stream, &outcome)
        .await
        .map_err(|e| ServeError::Write(e.to_string()))?;
    Ok(code)
}

enum ReadError {
    Refused(FetchError),
    Io(std::io::Error),
}

async fn read_request<'p, S: AsyncRead + Unpin>(
    stream: &mut S,
    programs: &'p Programs,
) -> Result<(&'p Egress, Request, Duration), ReadError> {
    let caps = programs.caps();
    let mut head = [0u8; 9];
    stream
        .read_exact(&mut head[..8])
        .await
        .map_err(ReadError::Io)?;
    let len = u32::from_be_bytes([head[0], head[1], head[2], head[3]]) as usize;
    let ms = u32::from_be_bytes([head[4], head[5], head[6], head[7]]);
    if len > max_request(caps) {
        return Err(ReadError::Refused(FetchError::new(
            ErrorCode::TooLarge,
            format!(
                "the request is {len} bytes, over the cap of {} bytes",
                caps.max_request_bytes
            ),
        )));
    }
    stream
        .read_exact(&mut head[8..])
        .await
        .map_err(ReadError::Io)?;
    let name_len = usize::from(head[8]);
    if name_len == 0 || name_len > MAX_PROGRAM_BYTES {
        return Err(ReadError::Refused(FetchError::new(
            ErrorCode::Invalid,
            format!("a program name of {name_len} bytes: 1 to {MAX_PROGRAM_BYTES}"),
        )));
    }
    let mut name = vec![0u8; name_len];
    stream.read_exact(&mut name).await.map_err(ReadError::Io)?;
    let name = String::from_utf8_lossy(&name);
    let egress = programs.by_name.get(name.as_ref()).ok_or_else(|| {
        ReadError::Refused(FetchError::new(
            ErrorCode::Denied,
            format!(
                "program `{}` of this app has no net or secret grants at the host dialer",
                name.chars().filter(|c| !c.is_control()).collect::<String>()
            ),
        ))
    })?;
    let mut bytes = vec![0u8; len];
    stream.read_exact(&mut bytes).await.map_err(ReadError::Io)?;
    let request = Request::decode(&bytes, caps).map_err(ReadError::Refused)?;
    Ok((egress, request, Duration::from_millis(u64::from(ms))))
}

/// Writes the one reply for `outcome` and closes the host's side, within [`WRITE_TIMEOUT`]
/// (also how the dialer turns away a connection over its cap).
pub async fn reply<S: AsyncWrite + Unpin>(
    stream: &mut S,
    outcome: &Result<Response, FetchError>,
) -> std::io::Result<()> {
    let (kind, bytes) = match outcome {
        Ok(response) => (0u8, response.encode()),
        Err(e) => {
            let mut message = e.message.clone().into_bytes();
            message.truncate(MAX_MESSAGE_BYTES);
            (e.code as u8, message)
        }
    };
    let mut out = Vec::with_capacity(5 + bytes.len());
    out.push(kind);
    out.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
    out.extend_from_slice(&bytes);
    let write = async {
        stream.write_all(&out).await?;
        stream.flush().await?;
        stream.shutdown().await
    };
    tokio::time::timeout(WRITE_TIMEOUT, write)
        .await
        .unwrap_or_else(|_| Err(std::io::ErrorKind::TimedOut.into()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{EgressConfig, Trust};

    /// One app whose one program `p` may reach `rules`.
    fn egress(rules: &[&str]) -> Programs {
        let mut programs = Programs::new(Caps::default());
        programs.insert(
            "p",
            Egress::new(EgressConfig {
                rules: rules.iter().map(|r| r.parse().unwrap()).collect(),
                secrets: Vec::new(),
                store: None,
                caps: Caps::default(),
                trust: Trust::new(&[]).unwrap(),
                forward: None,
            }),
        );
        programs
    }

    /// The host's answer to raw bytes a hostile guest writes, then closes its side.
    async fn answer(
        egress: &Programs,
        bytes: &[u8],
    ) -> (Vec<u8>, Result<Option<ErrorCode>, String>) {
        let (mut guest, host) = tokio::io::duplex(1 << 20);
        guest.write_all(bytes).await.unwrap();
        guest.shutdown().await.unwrap();
        let served = serve(host, egress, READ_TIMEOUT)
            .await
            .map_err(|e| e.to_string());
        let mut out = Vec::new();
        guest.read_to_end(&mut out).await.unwrap();
        (out, served)
    }

    #[tokio::test]
    async fn a_hostile_guest_gets_a_clear_error_and_never_holds_the_dialer() {
        let egress = egress(&["127.0.0.1:1"]);
        // A length past the cap: refused before anything is read or allocated.
        let mut big = Vec::new();
        big.extend_from_slice(&u32::MAX.to_be_bytes());
        big.extend_from_slice(&1000u32.to_be_bytes());
        let (out, served) = answer(&egress, &big).await;
        assert_eq!(out[0], ErrorCode::TooLarge as u8);
        assert!(String::from_utf8_lossy(&out[5..]).contains("over the cap"));
        assert!(served.unwrap_err().contains("refused"));
        // Garbage of a fitting length: invalid.
        let mut garbage = 5u32.to_be_bytes().to_vec();
        garbage.extend_from_slice(&1000u32.to_be_bytes());
        garbage.extend_from_slice(b"\x01phello");
        let (out, _) = answer(&egress, &garbage).await;
        assert_eq!(out[0], ErrorCode::Invalid as u8);
        // No program name, or one too long: invalid, before the rest is read.
        for name_len in [0u8, 65] {
            let mut bad = 5u32.to_be_bytes().to_vec();
            bad.extend_from_slice(&1000u32.to_be_bytes());
            bad.push(name_len);
            let (out, _) = answer(&egress, &bad).await;
            assert_eq!(out[0], ErrorCode::Invalid as u8);
            assert!(String::from_utf8_lossy(&out[5..]).contains("1 to 64"));
        }
        // A program the app does not hold (or holds without egress): denied, by name.
        let mut other = 5u32.to_be_bytes().to_vec();
        other.extend_from_slice(&1000u32.to_be_bytes());
        other.extend_from_slice(b"\x01qhello");
        let (out, _) = answer(&egress, &other).await;
        assert_eq!(out[0], ErrorCode::Denied as u8);
        assert_eq!(
            String::from_utf8_lossy(&out[5..]),
            "program `q` of this app has no net or secret grants at the host dialer"
        );
        // Half a request, then the guest closes its side: no reply to wait for, no hang.
        let (out, served) = answer(&egress, &[0, 0, 0]).await;
        assert!(out.is_empty());
        assert!(served.unwrap_err().contains("reading the request"));
    }

    #[tokio::test]
    async fn a_guest_that_drips_is_cut_off() {
        let egress = egress(&["127.0.0.1:1"]);
        let (mut guest, host) = tokio::io::duplex(1024);
        guest.write_all(&[0, 0]).await.unwrap();
        let served = serve(host, &egress, Duration::from_millis(200))
            .await
            .unwrap_err();
        assert!(
            served.to_string().contains("no whole request within"),
            "{served}"
        );
        let mut out = Vec::new();
        guest.read_to_end(&mut out).await.unwrap();
        assert_eq!(out[0], ErrorCode::Io as u8);
    }

    #[tokio::test]
    async fn the_hosts_grants_decide_and_replies_round_trip() {
        let egress = egress(&["127.0.0.1:1"]);
        let request = Request {
            method: "GET".into(),
            url: "http://127.0.0.1:2/x".into(),
            headers: Vec::new(),
            body: Vec::new(),
        };
        let (guest, host) = tokio::io::duplex(1 << 16);
        let server = tokio::spawn(async move { serve(host, &egress, READ_TIMEOUT).await });
        let client = tokio::task::spawn_blocking(move || {
            let guest = tokio_util_bridge::Blocking(guest);
            send(
                guest,
                "p",
                &request,
                Duration::from_secs(5),
                &Caps::default(),
                &crate::Unbounded,
            )
        });
        let err = client.await.unwrap().unwrap_err();
        assert_eq!(err.code, ErrorCode::Denied, "{err}");
        assert!(
            err.message.contains("not in this program's net grants"),
            "{err}"
        );
        assert_eq!(server.await.unwrap().unwrap(), Some(ErrorCode::Denied));
    }

    /// What the guest side hands on: nothing its own grants refuse, and only placeholders
    /// bound toward the URL's host.
    #[tokio::test]
    async fn the_guest_side_refuses_early_and_forwards_the_rest() {
        #[derive(Debug, Default)]
        struct Recorder(std::sync::Mutex<Vec<String>>);
        impl crate::Forward for Recorder {
            fn forward(
                &self,
                request: &Request,
                _: Duration,
                _: &dyn crate::Holding,
            ) -> Result<Response, FetchError> {
                self.0.lock().unwrap().push(request.url.clone());
                Ok(Response {
                    status: 200,
                    headers: Vec::new(),
                    body: b"from the host".to_vec(),
                })
            }
        }
        let recorder = std::sync::Arc::new(Recorder::default());
        let egress = Egress::new(EgressConfig {
            rules: vec!["127.0.0.1:1".parse().unwrap()],
            secrets: vec![crate::secret::Binding {
                name: "tok".into(),
                rule: "http://127.0.0.1:1".parse().unwrap(),
            }],
            store: None,
            caps: Caps::default(),
            trust: Trust::new(&[]).unwrap(),
            forward: Some(recorder.clone()),
        });
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        let get = |url: &str, header: &[u8]| Request {
            method: "GET".into(),
            url: url.into(),
            headers: vec![("authorization".into(), header.to_vec())],
            body: Vec::new(),
        };
        let response = egress
            .fetch(get("http://127.0.0.1:1/a", b"{{secret:tok}}"), deadline)
            .await
            .unwrap();
        assert_eq!(response.body, b"from the host");
        let err = egress
            .fetch(get("http://127.0.0.1:2/", b""), deadline)
            .await
            .unwrap_err();
        assert_eq!(err.code, ErrorCode::Denied);
        let err = egress
            .fetch(get("http://127.0.0.1:1/", b"{{secret:other}}"), deadline)
            .await
            .unwrap_err();
        assert_eq!(err.code, ErrorCode::Denied);
        assert_eq!(*recorder.0.lock().unwrap(), ["http://127.0.0.1:1/a"]);
    }

    /// A blocking Read + Write over a tokio duplex, for the guest's side in tests.
    mod tokio_util_bridge {
        use std::io::{Read, Write};

        use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

        pub struct Blocking(pub DuplexStream);

        impl Read for Blocking {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                tokio::runtime::Handle::current().block_on(self.0.read(buf))
            }
        }

        impl Write for Blocking {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                tokio::runtime::Handle::current().block_on(self.0.write(buf))
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
    }
}
