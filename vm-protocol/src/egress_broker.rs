//! The egress broker's messages: how an app's bermd asks berm-init for a connection to the
//! host dialer, instead of opening a vsock socket itself.
//!
//! berm-init gives each app's bermd one end of an `AF_UNIX` `SOCK_SEQPACKET` socketpair
//! (`bermd --egress-broker-fd N`). Each datagram bermd sends is one [`request`]: eight bytes,
//! an id of bermd's choosing and nothing else, so bermd cannot name a port, a CID or anything
//! else to connect to. berm-init connects to CID 2 on the port it chose for that app
//! (`EGRESS_PORT_BASE + i`) and answers with one [`Reply`] datagram carrying the same id and,
//! on success, the connected socket as `SCM_RIGHTS`. Replies may come in any order.
//!
//! Both sides parse strictly: a request that is not exactly [`REQUEST_LEN`] bytes ends the
//! channel (berm-init stops brokering for that bermd); a reply that does not decode is
//! dropped. See `docs/design/vm-protocol.md`, "Egress".

/// The length of every request: the id, little-endian.
pub const REQUEST_LEN: usize = 8;

/// The longest error message a reply carries; longer ones are cut at a character boundary.
pub const MAX_MESSAGE_BYTES: usize = 256;

/// The longest reply: id, status, message.
pub const MAX_REPLY_LEN: usize = 8 + 1 + MAX_MESSAGE_BYTES;

/// Most connections berm-init has in progress for one app at once, the host dialer's own
/// per-app cap: past it berm-init reads the app's next request only when one is done.
pub const MAX_IN_FLIGHT: usize = 16;

/// Reply status: connected, the socket is attached.
const CONNECTED: u8 = 0;
/// Reply status: refused or failed, the message says why.
const FAILED: u8 = 1;

/// The request with `id`.
pub fn request(id: u64) -> [u8; REQUEST_LEN] {
    id.to_le_bytes()
}

/// Why a request was not one.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    /// Its length was not [`REQUEST_LEN`] (`len` is its real length, past what was read).
    #[error("an egress request is {REQUEST_LEN} bytes, this one was {len}")]
    Length {
        /// The datagram's real length.
        len: usize,
    },
}

/// The id of a request datagram of real length `len`, whose first bytes are in `bytes`.
pub fn parse_request(bytes: &[u8], len: usize) -> Result<u64, RequestError> {
    match <[u8; REQUEST_LEN]>::try_from(bytes) {
        Ok(id) if len == REQUEST_LEN => Ok(u64::from_le_bytes(id)),
        _ => Err(RequestError::Length { len }),
    }
}

/// One answer of berm-init to the request with `id`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    /// The request's id.
    pub id: u64,
    /// `Ok` when the connection is attached; else why there is none.
    pub outcome: Result<(), String>,
}

impl Reply {
    /// The datagram: id (little-endian), status, message (empty on success).
    pub fn encode(&self) -> Vec<u8> {
        let mut bytes = self.id.to_le_bytes().to_vec();
        match &self.outcome {
            Ok(()) => bytes.push(CONNECTED),
            Err(message) => {
                bytes.push(FAILED);
                let mut end = message.len().min(MAX_MESSAGE_BYTES);
                while !message.is_char_boundary(end) {
                    end -= 1;
                }
                bytes.extend_from_slice(&message.as_bytes()[..end]);
            }
        }
        bytes
    }

    /// A datagram of real length `len` (its first bytes in `bytes`), or `None` when it is not
    /// a reply.
    pub fn decode(bytes: &[u8], len: usize) -> Option<Reply> {
        if len != bytes.len() || !(9..=MAX_REPLY_LEN).contains(&len) {
            return None;
        }
        let id = u64::from_le_bytes(bytes[..8].try_into().ok()?);
        let message = &bytes[9..];
        let outcome = match bytes[8] {
            CONNECTED if message.is_empty() => Ok(()),
            FAILED => Err(String::from_utf8_lossy(message).into_owned()),
            _ => return None,
        };
        Some(Reply { id, outcome })
    }
}

/// The channel itself: the socketpair and one datagram each way, through rustix's safe calls
/// (both ends are in the guest, which is Linux).
#[cfg(target_os = "linux")]
pub mod channel {
    use std::io::{self, IoSlice, IoSliceMut};
    use std::mem::MaybeUninit;
    use std::os::fd::{BorrowedFd, OwnedFd};

    use rustix::io::Errno;
    use rustix::net::{
        AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
        SendAncillaryMessage, SendFlags, SocketFlags, SocketType,
    };

    use super::{MAX_REPLY_LEN, REQUEST_LEN, Reply, RequestError};

    /// A connected `AF_UNIX` `SOCK_SEQPACKET` pair, both ends close-on-exec: (berm-init's end,
    /// bermd's end).
    pub fn pair() -> io::Result<(OwnedFd, OwnedFd)> {
        Ok(rustix::net::socketpair(
            AddressFamily::UNIX,
            SocketType::SEQPACKET,
            SocketFlags::CLOEXEC,
            None,
        )?)
    }

    /// Retries `call` while a signal interrupts it.
    fn again<T>(mut call: impl FnMut() -> Result<T, Errno>) -> io::Result<T> {
        loop {
            match call() {
                Err(Errno::INTR) => continue,
                other => return other.map_err(io::Error::from),
            }
        }
    }

    /// berm-init's side: the next request, or `None` once bermd's end is closed (or bermd
    /// sent an empty datagram, which ends the channel too). No control buffer is given, so a
    /// descriptor bermd attaches is discarded by the kernel, never installed in PID 1.
    pub fn receive_request(channel: &OwnedFd) -> io::Result<Option<Result<u64, RequestError>>> {
        let mut buf = [0u8; REQUEST_LEN];
        let (_, len) = again(|| rustix::net::recv(channel, &mut buf[..], RecvFlags::TRUNC))?;
        if len == 0 {
            return Ok(None);
        }
        let read = len.min(REQUEST_LEN);
        Ok(Some(super::parse_request(&buf[..read], len)))
    }

    /// bermd's side: asks for one connection. Never blocks: a full channel is an error.
    pub fn send_request(channel: &OwnedFd, id: u64) -> io::Result<()> {
        let flags = SendFlags::NOSIGNAL | SendFlags::DONTWAIT;
        again(|| rustix::net::send(channel, &super::request(id), flags))?;
        Ok(())
    }

    /// berm-init's side: answers, with `connection` attached on success. Never blocks: a
    /// bermd that does not read its replies loses them (and the connection is closed).
    pub fn send_reply(
        channel: &OwnedFd,
        reply: &Reply,
        connection: Option<BorrowedFd<'_>>,
    ) -> io::Result<()> {
        let bytes = reply.encode();
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
        let mut control = SendAncillaryBuffer::new(&mut space);
        let fds;
        if let Some(fd) = connection {
            fds = [fd];
            control.push(SendAncillaryMessage::ScmRights(&fds));
        }
        let flags = SendFlags::NOSIGNAL | SendFlags::DONTWAIT;
        again(|| rustix::net::sendmsg(channel, &[IoSlice::new(&bytes)], &mut control, flags))?;
        Ok(())
    }

    /// bermd's side: the next reply and the connection attached to it, `None` once
    /// berm-init's end is closed. A datagram that is not a reply comes back as `(None, _)`;
    /// any descriptor beyond the first is closed here.
    pub fn receive_reply(
        channel: &OwnedFd,
    ) -> io::Result<Option<(Option<Reply>, Option<OwnedFd>)>> {
        let mut buf = [0u8; MAX_REPLY_LEN];
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
        let mut control = RecvAncillaryBuffer::new(&mut space);
        let flags = RecvFlags::TRUNC | RecvFlags::CMSG_CLOEXEC;
        let got = again(|| {
            rustix::net::recvmsg(
                channel,
                &mut [IoSliceMut::new(&mut buf)],
                &mut control,
                flags,
            )
        })?;
        let mut connection = None;
        for message in control.drain() {
            if let RecvAncillaryMessage::ScmRights(fds) = message {
                for fd in fds {
                    connection.get_or_insert(fd);
                }
            }
        }
        if got.bytes == 0 && connection.is_none() {
            return Ok(None);
        }
        let read = got.bytes.min(MAX_REPLY_LEN);
        Ok(Some((Reply::decode(&buf[..read], got.bytes), connection)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_is_exactly_its_id() {
        let bytes = request(0x0102_0304_0506_0708);
        assert_eq!(
            parse_request(&bytes, REQUEST_LEN),
            Ok(0x0102_0304_0506_0708)
        );
        // Short, long (seen whole, or truncated by the reader's buffer), empty.
        for (bytes, len) in [
            (&bytes[..7], 7),
            (&[0u8; 9][..], 9),
            (&bytes[..], 4096),
            (&[][..], 0),
        ] {
            assert_eq!(
                parse_request(bytes, len),
                Err(RequestError::Length { len }),
                "{len}"
            );
        }
        assert_eq!(
            parse_request(&[0; 3], 3).unwrap_err().to_string(),
            "an egress request is 8 bytes, this one was 3"
        );
    }

    #[test]
    fn replies_round_trip_and_anything_else_is_dropped() {
        for reply in [
            Reply {
                id: 7,
                outcome: Ok(()),
            },
            Reply {
                id: u64::MAX,
                outcome: Err("connection refused".into()),
            },
            Reply {
                id: 0,
                outcome: Err(String::new()),
            },
        ] {
            let bytes = reply.encode();
            assert_eq!(Reply::decode(&bytes, bytes.len()), Some(reply));
        }
        // A long message is cut to the cap at a character boundary.
        let long = Reply {
            id: 1,
            outcome: Err("é".repeat(MAX_MESSAGE_BYTES)),
        };
        let bytes = long.encode();
        assert_eq!(bytes.len(), MAX_REPLY_LEN);
        let Some(Reply {
            outcome: Err(m), ..
        }) = Reply::decode(&bytes, bytes.len())
        else {
            panic!("{bytes:?}")
        };
        assert_eq!(m, "é".repeat(MAX_MESSAGE_BYTES / 2));

        let ok = Reply {
            id: 1,
            outcome: Ok(()),
        }
        .encode();
        let mut with_text = ok.clone();
        with_text.push(b'x');
        let mut unknown = ok.clone();
        unknown[8] = 9;
        for (bytes, len) in [
            (&ok[..8], 8),
            (&with_text[..], with_text.len()),
            (&unknown[..], unknown.len()),
            (&ok[..], ok.len() + 1),
            (&[0u8; MAX_REPLY_LEN + 1][..], MAX_REPLY_LEN + 1),
        ] {
            assert_eq!(Reply::decode(bytes, len), None, "{bytes:?} {len}");
        }
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_channel_carries_requests_and_replies_with_the_connection_attached() {
        use std::io::{Read, Write};
        use std::os::fd::AsFd;
        let (init, bermd) = channel::pair().unwrap();
        channel::send_request(&bermd, 42).unwrap();
        assert_eq!(channel::receive_request(&init).unwrap(), Some(Ok(42)));

        // The connection arrives as a working descriptor of its own.
        let (mut near, far) = std::os::unix::net::UnixStream::pair().unwrap();
        let reply = Reply {
            id: 42,
            outcome: Ok(()),
        };
        channel::send_reply(&init, &reply, Some(far.as_fd())).unwrap();
        drop(far);
        let (got, fd) = channel::receive_reply(&bermd).unwrap().unwrap();
        assert_eq!(got, Some(reply));
        let mut far = std::os::unix::net::UnixStream::from(fd.unwrap());
        far.write_all(b"x").unwrap();
        let mut byte = [0u8];
        near.read_exact(&mut byte).unwrap();
        assert_eq!(&byte, b"x");

        // A hostile bermd: a long datagram is seen at its real length, even with a
        // descriptor attached (which the kernel discards: berm-init gives no room for it).
        let garbage = [7u8; 4096];
        let space = &mut [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
        let mut control = rustix::net::SendAncillaryBuffer::new(space);
        let fds = [near.as_fd()];
        assert!(control.push(rustix::net::SendAncillaryMessage::ScmRights(&fds)));
        rustix::net::sendmsg(
            &bermd,
            &[std::io::IoSlice::new(&garbage)],
            &mut control,
            rustix::net::SendFlags::empty(),
        )
        .unwrap();
        assert_eq!(
            channel::receive_request(&init).unwrap(),
            Some(Err(RequestError::Length { len: 4096 }))
        );
        // Either end closing is the end of the channel for the other.
        drop(bermd);
        assert_eq!(channel::receive_request(&init).unwrap(), None);
        let (init, bermd) = channel::pair().unwrap();
        drop(init);
        assert!(channel::receive_reply(&bermd).unwrap().is_none());
    }
}
