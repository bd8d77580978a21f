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

crate::codes! {
    /// Why a syscall did not succeed. The numbers are part of the ABI; the names (`not_found`)
    /// are used in messages and docs. `ALL` is in numeric order.
    pub enum ErrorCode: i64 {
        /// The request was malformed (bad framing, bad UTF-8, bad name).
        Invalid = 1 => "invalid",
        /// No such key, file, program or tool. For `call`: refused, nothing ran.
        NotFound = 2 => "not_found",
        /// Refused by the host: not granted, or a path that leaves its root.
        Denied = 3 => "denied",
        /// The request or its reply exceeds a cap.
        TooLarge = 4 => "too_large",
        /// The host could not complete the operation (I/O).
        Io = 5 => "io",
        /// `call`: the call-depth limit was reached; refused, nothing ran.
        Depth = 6 => "depth",
        /// `call`: the callee ran and hit a host error (trap, deadline, memory cap).
        Fault = 7 => "fault",
        /// The operation conflicts with what exists (e.g. a directory in the way).
        Conflict = 8 => "conflict",
        /// The host gave up waiting (for `http.fetch`: the server did not answer
        /// within the call's deadline or the request's time cap).
        Timeout = 9 => "timeout",
    }
}

impl ErrorCode {
    /// The code for a negative word, if it is one.
    pub fn from_word(word: i64) -> Option<ErrorCode> {
        ErrorCode::ALL
            .into_iter()
            .find(|code| -(*code as i64) == word)
    }

    /// The negative word that carries this code.
    pub fn word(self) -> i64 {
        -self.code()
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
