//! How much of an app's output berm-init relays: a token bucket per app, so one app printing
//! in a loop cannot flood the log port, the host's `guest.log` or the other apps' lines.
//!
//! The pipe is always drained (bermd never blocks on its own output); lines over the budget
//! are dropped and counted, and the count is said once the app is back under it.

use std::time::Instant;

/// Bytes per second an app's output may average.
pub const RATE_BYTES_PER_SEC: u64 = 64 * 1024;
/// Bytes an app may print at once before the rate applies.
pub const BURST_BYTES: u64 = 256 * 1024;
/// What one line costs at least, so empty lines are not free.
const MIN_LINE_COST: u64 = 64;

/// One app's budget.
pub struct RateLimit {
    tokens: u64,
    last: Instant,
    dropped: u64,
}

/// What to do with a line.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Relay it; if lines were dropped before it, say how many first.
    Relay {
        /// Lines dropped since the last relayed one.
        dropped_before: u64,
    },
    /// Over budget: drop it.
    Drop,
}

impl RateLimit {
    /// A full bucket.
    pub fn new(now: Instant) -> Self {
        Self {
            tokens: BURST_BYTES,
            last: now,
            dropped: 0,
        }
    }

    /// Charges a line of `len` bytes at `now`.
    pub fn admit(&mut self, len: usize, now: Instant) -> Verdict {
        let elapsed = now.saturating_duration_since(self.last);
        let refill = (elapsed.as_micros() as u64).saturating_mul(RATE_BYTES_PER_SEC) / 1_000_000;
        if refill > 0 {
            self.tokens = (self.tokens.saturating_add(refill)).min(BURST_BYTES);
            self.last = now;
        }
        let cost = (len as u64).max(MIN_LINE_COST);
        if cost > self.tokens {
            self.dropped += 1;
            return Verdict::Drop;
        }
        self.tokens -= cost;
        Verdict::Relay {
            dropped_before: std::mem::take(&mut self.dropped),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_flood_is_cut_to_the_rate_and_the_drop_is_counted() {
        let start = Instant::now();
        let mut limit = RateLimit::new(start);
        let line = 1024;
        let mut relayed = 0;
        for _ in 0..10_000 {
            if let Verdict::Relay { .. } = limit.admit(line, start) {
                relayed += 1;
            }
        }
        assert_eq!(relayed, BURST_BYTES as usize / line);
        // One second later the bucket holds a second's worth; the first relayed line reports
        // what was dropped.
        let later = start + Duration::from_secs(1);
        assert_eq!(
            limit.admit(line, later),
            Verdict::Relay {
                dropped_before: 10_000 - relayed as u64
            }
        );
        let mut more = 1;
        while let Verdict::Relay { .. } = limit.admit(line, later) {
            more += 1;
        }
        assert_eq!(more, RATE_BYTES_PER_SEC as usize / line);
    }
}
