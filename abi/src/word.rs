//! The `i64` word every import returns.
//!
//! Non-negative: success. The low 32 bits are a length (of the staged reply,
//! or of the arguments), bits 32..40 a syscall-specific status (for `call`:
//! [`STATUS_DONE`] or [`STATUS_FAILED`]); `clock.now` returns its value whole.
//! Negative: `-code`, an [`ErrorCode`], and a message describing it is staged
//! for the guest to pull with `berm.reply`.

/// `call`: the callee finished with a result (staged).
pub const STATUS_DONE: u32 = 0;
/// `call`: the callee ran and reported a failure (message staged).
pub const STATUS_FAILED: u32 = 1;

/// Why a syscall did not succeed. The numbers are part of the ABI.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(i64)]
pub enum ErrorCode {
    /// The request was malformed (bad framing, bad UTF-8, bad name).
    Invalid = 1,
    /// No such key, file, program or tool. For `call`: refused, nothing ran.
    NotFound = 2,
    /// Refused by the host: not granted, or a path that leaves its root.
    Denied = 3,
    /// The request or its reply exceeds a cap.
    TooLarge = 4,
    /// The host could not complete the operation (I/O).
    Io = 5,
    /// `call`: the call-depth limit was reached; refused, nothing ran.
    Depth = 6,
    /// `call`: the callee ran and hit a host error (trap, deadline, memory cap).
    Fault = 7,
    /// The operation conflicts with what exists (e.g. a directory in the way).
    Conflict = 8,
    /// The host gave up waiting (for `http.fetch`: the server did not answer
    /// within the call's deadline or the request's time cap).
    Timeout = 9,
}

impl ErrorCode {
    /// All codes, in numeric order.
    pub const ALL: [ErrorCode; 9] = [
        ErrorCode::Invalid,
        ErrorCode::NotFound,
        ErrorCode::Denied,
        ErrorCode::TooLarge,
        ErrorCode::Io,
        ErrorCode::Depth,
        ErrorCode::Fault,
        ErrorCode::Conflict,
        ErrorCode::Timeout,
    ];

    /// The code for a negative word, if it is one.
    pub fn from_word(word: i64) -> Option<ErrorCode> {
        ErrorCode::ALL
            .into_iter()
            .find(|code| -(*code as i64) == word)
    }

    /// The negative word that carries this code.
    pub fn word(self) -> i64 {
        -(self as i64)
    }

    /// A short lowercase name (`not_found`), used in messages and docs.
    pub fn name(self) -> &'static str {
        match self {
            ErrorCode::Invalid => "invalid",
            ErrorCode::NotFound => "not_found",
            ErrorCode::Denied => "denied",
            ErrorCode::TooLarge => "too_large",
            ErrorCode::Io => "io",
            ErrorCode::Depth => "depth",
            ErrorCode::Fault => "fault",
            ErrorCode::Conflict => "conflict",
            ErrorCode::Timeout => "timeout",
        }
    }
}

/// Packs a success status and a length into a word.
pub fn success(status: u32, len: u32) -> i64 {
    (i64::from(status & 0xff) << 32) | i64::from(len)
}

/// Splits a non-negative word into `(status, len)`.
pub fn split(word: i64) -> (u32, u32) {
    (((word >> 32) & 0xff) as u32, (word & 0xffff_ffff) as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_round_trip() {
        assert_eq!(split(success(STATUS_FAILED, 42)), (STATUS_FAILED, 42));
        assert_eq!(
            split(success(STATUS_DONE, u32::MAX)),
            (STATUS_DONE, u32::MAX)
        );
        for code in ErrorCode::ALL {
            assert_eq!(ErrorCode::from_word(code.word()), Some(code));
            assert!(code.word() < 0);
        }
        assert_eq!(ErrorCode::from_word(-99), None);
        assert_eq!(ErrorCode::from_word(0), None);
    }
}
