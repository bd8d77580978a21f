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
    /// The buffer holds a different number of fields than the request needs.
    WrongCount {
        /// How many fields the request needs.
        expected: usize,
        /// How many were found.
        found: usize,
    },
}

impl core::fmt::Display for FrameError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            FrameError::Truncated => write!(f, "framed request is truncated"),
            FrameError::WrongCount { expected, found } => {
                write!(f, "framed request has {found} fields, expected {expected}")
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

/// Splits a framed buffer into its fields.
pub fn decode(mut buf: &[u8]) -> Result<Vec<&[u8]>, FrameError> {
    let mut fields = Vec::new();
    while !buf.is_empty() {
        let (len, rest) = buf.split_first_chunk::<4>().ok_or(FrameError::Truncated)?;
        let len = u32::from_le_bytes(*len) as usize;
        if rest.len() < len {
            return Err(FrameError::Truncated);
        }
        let (field, rest) = rest.split_at(len);
        fields.push(field);
        buf = rest;
    }
    Ok(fields)
}

/// Splits a framed buffer into exactly `N` fields.
pub fn decode_exact<const N: usize>(buf: &[u8]) -> Result<[&[u8]; N], FrameError> {
    let fields = decode(buf)?;
    let found = fields.len();
    fields
        .try_into()
        .map_err(|_| FrameError::WrongCount { expected: N, found })
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
    }
}
