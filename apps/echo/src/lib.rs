//! echo: the smallest useful program, and the one the benchmarks call.

/// Says back what it is given.
///
/// # Usage
/// Reach for echo to check that berm's tools are wired up end to end, or to
/// see exactly what arguments a tool receives.
#[berm_guest::program]
mod echo {
    /// Repeat a message, unchanged.
    ///
    /// # Arguments
    /// - `message`: the text to repeat
    #[berm(read_only, idempotent)]
    pub fn echo(message: String) -> String {
        message
    }

    /// Reverse a message, character by character.
    ///
    /// # Arguments
    /// - `message`: the text to reverse
    #[berm(read_only, idempotent)]
    pub fn reverse(message: String) -> String {
        message.chars().rev().collect()
    }

    /// Fail on purpose with the given message: shows how a program's own
    /// failure reaches the model (as a result marked as an error).
    ///
    /// # Arguments
    /// - `message`: the failure message
    #[berm(read_only)]
    pub fn fail(message: String) -> Result<String, String> {
        Err(message)
    }
}
