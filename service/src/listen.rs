//! MCP on a listening socket bermd inherits (`--listen-fd`) instead of
//! sockets it creates.
//!
//! Inside the microVM, berm-init creates the app's AF_VSOCK listener and
//! hands it to bermd, whose seccomp filter then refuses socket(2): bermd
//! must serve everything from that one descriptor. Tests pass an AF_UNIX
//! listener the same way. Accepting and reading go through raw descriptors
//! on tokio's reactor ([`AsyncFd`]), so any stream socket family works.

use std::io;
use std::os::fd::{AsFd, OwnedFd, RawFd};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use rustix::net::{SocketFlags, SocketType, sockopt};
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::service::Service;
use crate::transport;

/// Why an inherited descriptor cannot be listened on.
#[derive(Debug, thiserror::Error)]
pub enum ListenError {
    /// It is not a socket at all.
    #[error(
        "--listen-fd {fd}: not a socket; pass a listening SOCK_STREAM socket (AF_UNIX or AF_VSOCK)"
    )]
    NotSocket {
        /// The descriptor.
        fd: RawFd,
    },
    /// A socket of another type (datagram, seqpacket…).
    #[error("--listen-fd {fd}: a {kind} socket; bermd needs a listening SOCK_STREAM socket")]
    NotStream {
        /// The descriptor.
        fd: RawFd,
        /// Its type.
        kind: String,
    },
    /// A stream socket nobody called listen(2) on (or a connected one).
    #[error(
        "--listen-fd {fd}: a stream socket that is not listening; call listen(2) on it before passing it"
    )]
    NotListening {
        /// The descriptor.
        fd: RawFd,
    },
    /// It could not be registered with the event loop.
    #[error("--listen-fd {fd}: cannot wait on it")]
    Register {
        /// The descriptor.
        fd: RawFd,
        /// Why.
        #[source]
        source: io::Error,
    },
}

/// A checked, listening stream socket, not yet on the event loop.
#[derive(Debug)]
pub struct InheritedListener {
    fd: OwnedFd,
    number: RawFd,
}

impl InheritedListener {
    /// Checks that `fd` is a listening `SOCK_STREAM` socket and makes it
    /// non-blocking. `number` is what the command line said, for messages.
    pub fn check(fd: OwnedFd, number: RawFd) -> Result<InheritedListener, ListenError> {
        let kind = match sockopt::socket_type(&fd) {
            Ok(kind) => kind,
            Err(_) => return Err(ListenError::NotSocket { fd: number }),
        };
        if kind != SocketType::STREAM {
            let kind = match kind {
                SocketType::DGRAM => "SOCK_DGRAM".to_string(),
                SocketType::SEQPACKET => "SOCK_SEQPACKET".to_string(),
                SocketType::RAW => "SOCK_RAW".to_string(),
                other => format!("type {}", other.as_raw()),
            };
            return Err(ListenError::NotStream { fd: number, kind });
        }
        if !sockopt::socket_acceptconn(&fd).unwrap_or(false) {
            return Err(ListenError::NotListening { fd: number });
        }
        rustix::io::ioctl_fionbio(&fd, true).map_err(|e| ListenError::Register {
            fd: number,
            source: e.into(),
        })?;
        Ok(InheritedListener { fd, number })
    }

    /// Serves one MCP session (behind the frame guard) on every connection,
    /// forever. Must run inside the tokio runtime.
    pub fn serve(
        self,
        service: Arc<Service>,
        max_frame: usize,
        cap: transport::SessionCap,
    ) -> Result<impl Future<Output = ()>, ListenError> {
        let number = self.number;
        let listener = crate::sys::register(self.fd)
            .map_err(|source| ListenError::Register { fd: number, source })?;
        Ok(accept_loop(listener, service, max_frame, cap))
    }
}

async fn accept_loop(
    listener: AsyncFd<OwnedFd>,
    service: Arc<Service>,
    max_frame: usize,
    cap: transport::SessionCap,
) {
    loop {
        cap.pace().await;
        let accepted = listener
            .async_io(tokio::io::Interest::READABLE, |fd| {
                rustix::net::accept_with(fd, SocketFlags::NONBLOCK | SocketFlags::CLOEXEC)
                    .map_err(io::Error::from)
            })
            .await;
        let connection = match accepted {
            Ok(connection) => connection,
            Err(e) => {
                // EMFILE and the like: wait rather than spin.
                tracing::warn!("--listen-fd accept: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                continue;
            }
        };
        cap.serve(connection, open_fd, service.clone(), max_frame);
    }
}

/// A connected stream socket of any family, read and written through its
/// descriptor.
/// An accepted connection's two halves, on the serving thread that runs it (whose reactor
/// then waits on it).
fn open_fd(
    connection: OwnedFd,
) -> io::Result<(
    tokio::io::ReadHalf<FdStream>,
    tokio::io::WriteHalf<FdStream>,
)> {
    Ok(tokio::io::split(FdStream::new(connection)?))
}

struct FdStream {
    fd: AsyncFd<OwnedFd>,
}

impl FdStream {
    fn new(fd: OwnedFd) -> io::Result<FdStream> {
        Ok(FdStream {
            fd: crate::sys::register(fd)?,
        })
    }
}

impl AsyncRead for FdStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            let mut guard = ready!(self.fd.poll_read_ready(cx))?;
            let unfilled = buf.initialize_unfilled();
            match guard.try_io(|fd| {
                rustix::io::read(fd.get_ref(), &mut *unfilled).map_err(io::Error::from)
            }) {
                Ok(Ok(n)) => {
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Ok(Err(e)) => return Poll::Ready(Err(e)),
                Err(_would_block) => continue,
            }
        }
    }
}

impl AsyncWrite for FdStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        loop {
            let mut guard = ready!(self.fd.poll_write_ready(cx))?;
            match guard.try_io(|fd| rustix::io::write(fd.get_ref(), data).map_err(io::Error::from))
            {
                Ok(result) => return Poll::Ready(result),
                Err(_would_block) => continue,
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        // Writes go straight to the socket; there is nothing to flush.
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        let fd = self.fd.get_ref().as_fd();
        Poll::Ready(
            rustix::net::shutdown(fd, rustix::net::Shutdown::Write).map_err(io::Error::from),
        )
    }
}
