//! The host-side client: connect to a run dir's `control.sock` or `logs.sock`, wait for the
//! guest's greeting (retrying, because a hypervisor may accept a connection before the guest
//! listens), then read shape-checked lines and send requests, each against a deadline.

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::framing::{LineReader, ReadLineError};
use crate::{Event, GuestLine, LineError, Request, Service};

/// How long to wait between connection attempts. Not faster: vhost-device-vsock 0.3.0 can
/// stall when connects arrive every few milliseconds before the guest listens.
pub const RETRY_INTERVAL: Duration = Duration::from_millis(100);

/// How many skipped lines [`GuestConnection::wait_for`] keeps for the caller.
pub const SEEN_LIMIT: usize = 1024;

/// Why no greeting arrived.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The deadline passed before a greeting arrived.
    #[error(
        "no greeting from the guest's {service} service at {path} within {waited_ms} ms \
         ({attempts} attempts; last: {last})"
    )]
    TimedOut {
        /// `control` or `logs`.
        service: &'static str,
        /// The socket.
        path: PathBuf,
        /// How long it waited.
        waited_ms: u128,
        /// Connection attempts made.
        attempts: u32,
        /// What the last attempt saw.
        last: String,
    },
    /// The guest's first line was not a valid greeting for this port.
    #[error("the guest's first line on {path} is not a valid {service} greeting")]
    BadGreeting {
        /// `control` or `logs`.
        service: &'static str,
        /// The socket.
        path: PathBuf,
        /// What was wrong with it.
        #[source]
        source: LineError,
    },
    /// The guest's first line was a valid event but not a greeting.
    #[error("the guest's first line on {path} is `{event}`, not a greeting")]
    NotAGreeting {
        /// The socket.
        path: PathBuf,
        /// The event it sent instead.
        event: &'static str,
    },
}

/// Why no line was received.
#[derive(Debug, thiserror::Error)]
pub enum ReceiveError {
    /// The deadline passed.
    #[error("timed out waiting for the guest")]
    TimedOut,
    /// The guest closed the connection.
    #[error("the guest closed the connection")]
    Closed,
    /// The stream broke or sent an unbounded line.
    #[error("reading from the guest failed")]
    Read(#[source] ReadLineError),
    /// A line arrived that the contract does not allow.
    #[error("the guest sent a line the contract does not allow")]
    Line(#[source] LineError),
}

/// Why a request could not be sent.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// Writing to the socket failed or timed out.
    #[error("sending `{op}` to the guest failed")]
    Io {
        /// The request.
        op: &'static str,
        /// What the socket said.
        #[source]
        source: std::io::Error,
    },
}

/// A greeted connection to one of the guest's line services.
pub struct GuestConnection {
    service: Service,
    reader: LineReader<UnixStream>,
    greeting: GuestLine,
    seen: Vec<GuestLine>,
}

fn remaining(deadline: Instant) -> Option<Duration> {
    let left = deadline.saturating_duration_since(Instant::now());
    // A zero timeout means "block forever" to the socket API, so the deadline has passed.
    (left >= Duration::from_millis(1)).then_some(left)
}

/// Sets the stream's read timeout to what is left before `deadline`.
fn arm(stream: &UnixStream, deadline: Instant) -> Result<(), ReadLineError> {
    let left = remaining(deadline).ok_or(ReadLineError::TimedOut)?;
    stream
        .set_read_timeout(Some(left))
        .map_err(ReadLineError::Io)
}

impl GuestConnection {
    /// Connects to `path` and waits for `service`'s greeting, retrying every
    /// [`RETRY_INTERVAL`] while the socket is missing, refuses, resets or closes, until
    /// `deadline`.
    pub fn connect(path: &Path, service: Service, deadline: Instant) -> Result<Self, ConnectError> {
        Self::connect_with(path, service, deadline, || UnixStream::connect(path))
    }

    /// [`GuestConnection::connect`] with each attempt's socket made by `open` instead of a
    /// `connect(2)` to `path` (which then only names the socket in errors): for a host process
    /// that is not allowed to connect itself and is handed connections instead.
    pub fn connect_with(
        path: &Path,
        service: Service,
        deadline: Instant,
        mut open: impl FnMut() -> std::io::Result<UnixStream>,
    ) -> Result<Self, ConnectError> {
        let started = Instant::now();
        let mut attempts = 0u32;
        let mut last = String::from("not tried");
        while remaining(deadline).is_some() {
            attempts += 1;
            match Self::attempt(path, service, deadline, &mut open) {
                Ok(Ok(conn)) => return Ok(conn),
                Ok(Err(why)) => last = why,
                Err(refused) => return Err(refused),
            }
            if let Some(left) = remaining(deadline) {
                std::thread::sleep(left.min(RETRY_INTERVAL));
            }
        }
        Err(ConnectError::TimedOut {
            service: service.name(),
            path: path.to_owned(),
            waited_ms: started.elapsed().as_millis(),
            attempts,
            last,
        })
    }

    /// One attempt: `Ok(Err(why))` means "try again", `Err` means the guest answered with
    /// something that is not a greeting, which no retry will fix.
    fn attempt(
        path: &Path,
        service: Service,
        deadline: Instant,
        open: &mut impl FnMut() -> std::io::Result<UnixStream>,
    ) -> Result<Result<Self, String>, ConnectError> {
        let stream = match open() {
            Ok(stream) => stream,
            Err(e) => return Ok(Err(format!("connect: {e}"))),
        };
        let mut reader = LineReader::new(stream);
        let line = match reader.read_line_by(|stream| arm(stream, deadline)) {
            Ok(Some(line)) => line,
            Ok(None) => return Ok(Err("closed before the greeting".into())),
            Err(e) => return Ok(Err(e.to_string())),
        };
        let greeting =
            GuestLine::parse(service, &line).map_err(|source| ConnectError::BadGreeting {
                service: service.name(),
                path: path.to_owned(),
                source,
            })?;
        if !matches!(greeting.event, Event::Greeting(_)) {
            return Err(ConnectError::NotAGreeting {
                path: path.to_owned(),
                event: greeting.event.name(),
            });
        }
        Ok(Ok(Self {
            service,
            reader,
            greeting,
            seen: Vec::new(),
        }))
    }

    /// The greeting this connection started with.
    pub fn greeting(&self) -> &GuestLine {
        &self.greeting
    }

    /// The service this connection speaks to.
    pub fn service(&self) -> Service {
        self.service
    }

    /// The next line, checked against this port's contract.
    pub fn receive(&mut self, deadline: Instant) -> Result<GuestLine, ReceiveError> {
        match self.reader.read_line_by(|stream| arm(stream, deadline)) {
            Ok(Some(line)) => GuestLine::parse(self.service, &line).map_err(ReceiveError::Line),
            Ok(None) => Err(ReceiveError::Closed),
            Err(ReadLineError::TimedOut) => Err(ReceiveError::TimedOut),
            Err(e) => Err(ReceiveError::Read(e)),
        }
    }

    /// Receives lines until one satisfies `wanted`; the others are kept in [`Self::seen`]
    /// (the most recent [`SEEN_LIMIT`]). The deadline bounds the whole wait, so a guest that
    /// floods valid lines cannot stretch it.
    pub fn wait_for(
        &mut self,
        deadline: Instant,
        mut wanted: impl FnMut(&GuestLine) -> bool,
    ) -> Result<GuestLine, ReceiveError> {
        loop {
            let line = self.receive(deadline)?;
            if wanted(&line) {
                return Ok(line);
            }
            if self.seen.len() == SEEN_LIMIT {
                self.seen.remove(0);
            }
            self.seen.push(line);
        }
    }

    /// Lines skipped by [`Self::wait_for`], oldest first.
    pub fn seen(&self) -> &[GuestLine] {
        &self.seen
    }

    /// Sends one request.
    pub fn send(&mut self, request: Request, deadline: Instant) -> Result<(), SendError> {
        let op = match request {
            Request::Status => "status",
            Request::Shutdown => "shutdown",
        };
        let io = |source| SendError::Io { op, source };
        let left = remaining(deadline).ok_or_else(|| {
            io(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "deadline passed",
            ))
        })?;
        let mut stream = self.reader.get_ref();
        stream.set_write_timeout(Some(left)).map_err(io)?;
        stream.write_all(request.to_line().as_bytes()).map_err(io)
    }

    /// Sends `status` and waits for the reply (or an `error` reply).
    pub fn status(&mut self, deadline: Instant) -> Result<GuestLine, StatusError> {
        self.send(Request::Status, deadline)?;
        Ok(self.wait_for(deadline, |line| {
            matches!(line.event, Event::Status(_) | Event::Error(_))
        })?)
    }
}

/// Why a `status` round trip failed.
#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    /// The request could not be sent.
    #[error("sending the status request failed")]
    Send(#[from] SendError),
    /// No reply arrived.
    #[error("no status reply")]
    Receive(#[from] ReceiveError),
}
