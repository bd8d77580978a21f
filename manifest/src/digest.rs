//! A program's identity: the sha256 of its bytes.

use std::fmt;
use std::str::FromStr;

use sha2::{Digest as _, Sha256};

/// The sha256 of a program image, written `sha256:<64 hex>`: the same string
/// `berm ls` prints and an OCI registry addresses the program's layer by.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest([u8; 32]);

impl Digest {
    /// The digest of `bytes`.
    pub fn of(bytes: &[u8]) -> Digest {
        Digest(Sha256::digest(bytes).into())
    }

    /// The 64 lowercase hex digits, without the `sha256:` prefix (file names).
    pub fn hex(&self) -> String {
        hex::encode(self.0)
    }

    /// The raw 32 bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sha256:{}", self.hex())
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// A string that is not `sha256:` followed by 64 lowercase hex digits.
#[derive(Debug, thiserror::Error)]
#[error("`{0}` is not a digest: expected `sha256:` followed by 64 lowercase hex digits")]
pub struct DigestParseError(String);

impl FromStr for Digest {
    type Err = DigestParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || DigestParseError(s.chars().take(80).collect());
        let hex_part = s.strip_prefix("sha256:").ok_or_else(bad)?;
        if hex_part.len() != 64
            || !hex_part
                .bytes()
                .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        {
            return Err(bad());
        }
        let mut out = [0u8; 32];
        hex::decode_to_slice(hex_part, &mut out).map_err(|_| bad())?;
        Ok(Digest(out))
    }
}

crate::serde_as_text!(Digest);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_print_and_parse() {
        let d = Digest::of(b"");
        let s = d.to_string();
        assert_eq!(
            s,
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(s.parse::<Digest>().unwrap(), d);
        for bad in [
            "",
            "sha256:",
            "sha256:E3B0",
            "md5:e3b0",
            &s.replace("sha256:", "sha512:"),
        ] {
            assert!(bad.parse::<Digest>().is_err(), "{bad}");
        }
    }
}
