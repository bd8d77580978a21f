//! What a call reports of its progress (`berm.progress`), checked by the linker and handed to
//! the host's [`ProgressSink`]: its own module, so that the runtime's programs by name
//! (`call.rs`) and the imports a program is linked with (`linker.rs`) share it without
//! importing each other.

/// One `berm.progress` report, checked: `progress` is finite, not negative, and no less than
/// the call's report before it; `total`, when given, is finite and not negative.
#[derive(Debug, Clone, PartialEq)]
pub struct Progress<'a> {
    /// How far the call has got.
    pub progress: f64,
    /// How far it will go, when the program knows.
    pub total: Option<f64>,
    /// What it is doing, as the program wrote it (UTF-8: anything else is refused), cut at
    /// [`MAX_PROGRESS_MESSAGE`] bytes: a host escapes it as it does log lines.
    pub message: Option<&'a str>,
}

/// Longest `berm.progress` message kept; the rest is cut.
pub const MAX_PROGRESS_MESSAGE: usize = 1024;

/// Reports one call may make; later ones are dropped (the program still gets `0`), so a
/// program reporting in a tight loop cannot flood its caller.
pub const MAX_PROGRESS_REPORTS: u32 = 1000;

/// Where a call's progress goes: the host's way back to whoever made the call from outside
/// (bermd: an MCP request that carried a progress token). The runtime calls it on the thread
/// the program runs on, so it must not block; a report it cannot deliver at once is dropped.
/// A call from one program to another gets none: its progress reaches only its caller, a
/// program, which has no way to read it.
pub trait ProgressSink: Send + Sync {
    /// Hears one report of `program`.
    fn report(&self, program: &str, progress: &Progress<'_>);
}
