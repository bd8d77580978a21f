//! Splitting a byte stream into bounded lines.
//!
//! Used on both sides: the host reads guest lines with it, berm-init reads host requests with
//! it. A line longer than [`MAX_LINE_BYTES`] (newline included) is an error that ends the
//! connection: resynchronising after an oversized line would mean reading an unbounded amount
//! of attacker-chosen bytes.

use std::io::{self, Read};

use crate::MAX_LINE_BYTES;

/// Why no line could be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadLineError {
    /// The peer sent more than [`MAX_LINE_BYTES`] without a newline.
    #[error("peer sent more than {MAX_LINE_BYTES} bytes without a newline")]
    TooLong,
    /// The peer closed the stream in the middle of a line.
    #[error("peer closed the stream after {0} bytes of an unfinished line")]
    Truncated(usize),
    /// The read timed out (the stream's read timeout, set by the caller from its deadline).
    #[error("timed out waiting for a line")]
    TimedOut,
    /// Any other I/O error.
    #[error("reading a line failed")]
    Io(#[source] io::Error),
}

/// Reads newline-terminated lines of at most [`MAX_LINE_BYTES`] from `R`.
pub struct LineReader<R> {
    inner: R,
    buf: Vec<u8>,
    /// Bytes of `buf` before this index hold no newline (already scanned).
    scanned: usize,
    /// Set after an error that leaves the stream out of sync.
    poisoned: bool,
}

impl<R: Read> LineReader<R> {
    /// Wraps a stream.
    pub fn new(inner: R) -> Self {
        Self {
            inner,
            buf: Vec::with_capacity(4096),
            scanned: 0,
            poisoned: false,
        }
    }

    /// The wrapped stream, e.g. to set its read timeout.
    pub fn get_ref(&self) -> &R {
        &self.inner
    }

    /// The next line without its newline, or `None` at a clean end of stream.
    ///
    /// After [`ReadLineError::TooLong`] or [`ReadLineError::Truncated`] every later call fails
    /// the same way; after [`ReadLineError::TimedOut`] reading may continue.
    pub fn read_line(&mut self) -> Result<Option<Vec<u8>>, ReadLineError> {
        self.read_line_by(|_| Ok(()))
    }

    /// Like [`LineReader::read_line`], but calls `before_read` before every read from the
    /// stream, so a caller can re-arm a read timeout from its deadline (or stop with
    /// [`ReadLineError::TimedOut`]): a peer that drips one byte at a time cannot stretch a
    /// wait past its deadline.
    pub fn read_line_by(
        &mut self,
        mut before_read: impl FnMut(&R) -> Result<(), ReadLineError>,
    ) -> Result<Option<Vec<u8>>, ReadLineError> {
        if self.poisoned {
            return Err(ReadLineError::TooLong);
        }
        loop {
            if let Some(pos) = self.buf[self.scanned..].iter().position(|&b| b == b'\n') {
                let end = self.scanned + pos;
                let mut line: Vec<u8> = self.buf.drain(..=end).collect();
                line.pop();
                self.scanned = 0;
                return Ok(Some(line));
            }
            self.scanned = self.buf.len();
            if self.buf.len() >= MAX_LINE_BYTES {
                self.poisoned = true;
                self.buf = Vec::new();
                return Err(ReadLineError::TooLong);
            }
            before_read(&self.inner)?;
            let mut chunk = [0u8; 8192];
            let room = (MAX_LINE_BYTES - self.buf.len()).min(chunk.len());
            match self.inner.read(&mut chunk[..room]) {
                Ok(0) if self.buf.is_empty() => return Ok(None),
                Ok(0) => {
                    self.poisoned = true;
                    return Err(ReadLineError::Truncated(self.buf.len()));
                }
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    return Err(ReadLineError::TimedOut);
                }
                Err(e) => return Err(ReadLineError::Io(e)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader that hands out its data in fixed-size pieces, like a slow socket.
    struct Trickle<'a>(&'a [u8], usize);

    impl Read for Trickle<'_> {
        fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
            let n = self.0.len().min(self.1).min(out.len());
            out[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }

    #[test]
    fn splits_lines_across_reads() {
        let mut reader = LineReader::new(Trickle(b"ab\ncd\n\nef\n", 3));
        let mut lines = Vec::new();
        while let Some(line) = reader.read_line().unwrap() {
            lines.push(line);
        }
        assert_eq!(lines, [&b"ab"[..], b"cd", b"", b"ef"]);
    }

    #[test]
    fn a_line_at_the_limit_passes_and_one_byte_more_poisons() {
        let mut ok = vec![b'x'; MAX_LINE_BYTES - 1];
        ok.push(b'\n');
        assert_eq!(
            LineReader::new(&ok[..]).read_line().unwrap().unwrap().len(),
            MAX_LINE_BYTES - 1
        );

        let mut too_long = vec![b'x'; MAX_LINE_BYTES];
        too_long.extend_from_slice(b"\n{}\n");
        let mut reader = LineReader::new(Trickle(&too_long, 7000));
        assert!(matches!(reader.read_line(), Err(ReadLineError::TooLong)));
        assert!(
            matches!(reader.read_line(), Err(ReadLineError::TooLong)),
            "stays poisoned"
        );
    }

    #[test]
    fn an_endless_line_is_cut_off_without_reading_it_all() {
        let flood = io::repeat(b'a');
        let mut reader = LineReader::new(flood);
        assert!(matches!(reader.read_line(), Err(ReadLineError::TooLong)));
    }

    #[test]
    fn an_unfinished_last_line_is_reported() {
        let mut reader = LineReader::new(&b"{}\n{\"ev"[..]);
        assert_eq!(reader.read_line().unwrap().unwrap(), b"{}");
        assert!(matches!(
            reader.read_line(),
            Err(ReadLineError::Truncated(4))
        ));
    }
}
