//! What a response costs its host while it comes in. [`crate::Caps`] bound one response;
//! a host that runs many fetches for one program at once (bermd: up to
//! [`crate::Caps::max_in_flight`] for each program, each up to the response cap) also bounds
//! what they hold together, by counting each response's bytes as they arrive against a budget
//! of its own ([`Holding`]). A fetch whose response would pass it stops receiving at once,
//! with `too_large`.

/// A host's count of the bytes one fetch holds while its response arrives. It is told the
/// total so far (more, as bytes arrive; fewer, when a redirect's response is dropped for the
/// next one), and gives it all back when dropped.
pub trait Holding: Send + Sync {
    /// Holds `bytes` in all for this fetch from now on.
    ///
    /// # Errors
    /// A message for the program (it gets `too_large` with it) when holding that many would
    /// pass the host's budget; what was held before stays held.
    fn hold(&self, bytes: usize) -> Result<(), String>;
}

/// No budget beyond the caps: for a host that bounds memory otherwise (the microVM's host
/// dialer, whose replies go to a guest that counts them itself).
#[derive(Debug, Clone, Copy, Default)]
pub struct Unbounded;

impl Holding for Unbounded {
    fn hold(&self, _bytes: usize) -> Result<(), String> {
        Ok(())
    }
}
