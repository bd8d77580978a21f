//! Framing for requests and replies with several parts.
//!
//! A framed buffer is a sequence of fields, each a little-endian `u32` length
//! followed by that many bytes. It is the simplest encoding both sides can
//! write without a serializer, and it carries binary values (kv, files)
//! without escaping.

/// Why a framed buffer could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameError {
    /// The buffer ends inside a length or a field.
    Truncated,
    /// The buffer holds fewer fields than the request needs.
    WrongCount {
        /// How many fields the request needs.
        expected: usize,
        /// How many were found.
        found: usize,
    },
    /// The buffer holds more fields than the request needs. Decoding stops
    /// at the first extra one, so a buffer of millions of empty fields costs
    /// no more than one of `expected + 1`.
    TooMany {
        /// How many fields the request needs.
        expected: usize,
    },
}

impl core::fmt::Display for FrameError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            FrameError::Truncated => write!(f, "framed request is truncated"),
            FrameError::WrongCount { expected, found } => {
                write!(f, "framed request has {found} fields, expected {expected}")
            }
            FrameError::TooMany { expected } => {
                write!(f, "framed request has more than {expected} fields")
            }
        }
    }
}

impl std::error::Error for FrameError {}

/// Appends one field to `out`.
///
/// # Panics
/// If the field is 4 GiB or larger, which no request can be (wasm32 memory).
pub fn push(out: &mut Vec<u8>, field: &[u8]) {
    // A wasm32 guest cannot address 4 GiB, and the host caps requests far
    // below that, so a field that does not fit in u32 is a caller bug.
    let len = u32::try_from(field.len()).expect("a frame field is smaller than 4 GiB");
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(field);
}

/// Encodes `fields` into one framed buffer.
pub fn encode(fields: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::with_capacity(fields.iter().map(|f| f.len() + 4).sum());
    for field in fields {
        push(&mut out, field);
    }
    out
}

/// The fields of a framed buffer, one at a time, each checked against what
/// is left of the buffer before it is returned. It allocates nothing, so a
/// host can walk a guest's region without paying per field.
#[derive(Debug, Clone)]
pub struct Fields<'a> {
    rest: &'a [u8],
    failed: bool,
}

/// Walks the fields of `buf` without allocating.
pub fn fields(buf: &[u8]) -> Fields<'_> {
    Fields {
        rest: buf,
        failed: false,
    }
}

impl<'a> Iterator for Fields<'a> {
    type Item = Result<&'a [u8], FrameError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() || self.failed {
            return None;
        }
        let field = self.rest.split_first_chunk::<4>().and_then(|(len, rest)| {
            let len = u32::from_le_bytes(*len) as usize;
            (rest.len() >= len).then(|| rest.split_at(len))
        });
        match field {
            Some((field, rest)) => {
                self.rest = rest;
                Some(Ok(field))
            }
            None => {
                self.failed = true;
                Some(Err(FrameError::Truncated))
            }
        }
    }
}

/// Splits a framed buffer into its fields, collected. For buffers whose
/// size the reader already trusts (a guest reading the host's reply); a host
/// reading a guest's request uses [`decode_exact`], which never collects.
pub fn decode(buf: &[u8]) -> Result<Vec<&[u8]>, FrameError> {
    fields(buf).collect()
}

/// Splits a framed buffer into exactly `N` fields, stopping at the first
/// field too many: the work and memory are bounded by `N`, whatever the
/// buffer holds.
pub fn decode_exact<const N: usize>(buf: &[u8]) -> Result<[&[u8]; N], FrameError> {
    let mut out: [&[u8]; N] = [&[]; N];
    let mut found = 0;
    for field in fields(buf) {
        let field = field?;
        if found == N {
            return Err(FrameError::TooMany { expected: N });
        }
        out[found] = field;
        found += 1;
    }
    if found < N {
        return Err(FrameError::WrongCount { expected: N, found });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip() {
        let buf = encode(&[b"key", b"", b"value\0with nul"]);
        assert_eq!(
            decode(&buf).unwrap(),
            vec![&b"key"[..], b"", b"value\0with nul"]
        );
        let two = encode(&[b"a", b"b"]);
        let [a, b] = decode_exact::<2>(&two).unwrap();
        assert_eq!((a, b), (&b"a"[..], &b"b"[..]));
        assert_eq!(decode(&[]).unwrap().len(), 0);
    }

    #[test]
    fn bad_frames_are_refused() {
        assert_eq!(decode(&[1, 0, 0]), Err(FrameError::Truncated));
        assert_eq!(decode(&[5, 0, 0, 0, b'a']), Err(FrameError::Truncated));
        assert_eq!(
            decode_exact::<2>(&encode(&[b"a"])),
            Err(FrameError::WrongCount {
                expected: 2,
                found: 1
            })
        );
        assert_eq!(
            decode_exact::<2>(&encode(&[b"a", b"b", b"c"])),
            Err(FrameError::TooMany { expected: 2 })
        );
        assert_eq!(
            decode_exact::<1>(&[0, 0, 0, 0, 9, 0]),
            Err(FrameError::Truncated)
        );
        assert_eq!(
            decode_exact::<2>(&[0, 0, 0, 0, 9, 0]),
            Err(FrameError::Truncated)
        );
    }

    #[test]
    fn a_region_of_empty_frames_stops_at_the_first_extra_field() {
        // 1 MiB of zeros is 262,144 empty fields; decoding one request from
        // it looks at two of them.
        let zeros = vec![0u8; 1 << 20];
        assert_eq!(
            decode_exact::<1>(&zeros),
            Err(FrameError::TooMany { expected: 1 })
        );
        let mut walk = fields(&zeros);
        assert_eq!(walk.next(), Some(Ok(&b""[..])));
        assert_eq!(walk.rest.len(), (1 << 20) - 4);
    }
}
