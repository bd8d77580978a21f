//! Calls as Prometheus metrics: how many, how they ended and how long they took, per tool;
//! how many run now; how much memory bermd holds. Served as `/metrics` in the Prometheus
//! text format (through the `prometheus-client` crate), behind the HTTP listener's token, or
//! on a listener of its own (`bermd --metrics ADDR`).
//!
//! Labels are only ever a deployed program's and tool's names and a fixed outcome word, never
//! anything a client sends: a call to a tool that does not exist is counted without labels,
//! so a client cannot grow the series without bound. Nothing of a call's arguments or
//! result is recorded.

use std::sync::atomic::{AtomicI64, AtomicU64};
use std::time::Instant;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// How a call ended, as the `outcome` label says it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The tool returned a result.
    Ok,
    /// The program reported a failure (the tool's own error result).
    Failed,
    /// bermd refused or ended the call: busy, bad arguments, trap, deadline, memory.
    Error,
    /// The caller went away or cancelled before it ended.
    Cancelled,
}

impl Outcome {
    fn word(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Failed => "failed",
            Outcome::Error => "error",
            Outcome::Cancelled => "cancelled",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    program: String,
    tool: String,
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolLabels {
    program: String,
    tool: String,
}

type Durations = Family<ToolLabels, Histogram, fn() -> Histogram>;

/// The registry and its metrics, shared by every call path.
pub struct Metrics {
    registry: Registry,
    calls: Family<CallLabels, Counter>,
    durations: Durations,
    in_flight: Gauge<i64, AtomicI64>,
    unknown_tool: Counter<u64, AtomicU64>,
    resident: Gauge<i64, AtomicI64>,
}

/// From 10 µs (a call is a few) up by fourfold steps to about 3 minutes.
fn duration_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.000_01, 4.0, 13))
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// An empty registry with every metric declared.
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("berm");
        let calls = Family::<CallLabels, Counter>::default();
        registry.register(
            "calls",
            "Tool calls that ended, by program, tool and outcome (ok, failed, error, cancelled)",
            calls.clone(),
        );
        let durations: Durations = Family::new_with_constructor(duration_histogram);
        registry.register(
            "call_duration_seconds",
            "Wall-clock time of a tool call, from admission to its end, by program and tool",
            durations.clone(),
        );
        let in_flight = Gauge::<i64, AtomicI64>::default();
        registry.register(
            "calls_in_flight",
            "Tool calls running now",
            in_flight.clone(),
        );
        let unknown_tool = Counter::<u64, AtomicU64>::default();
        registry.register(
            "calls_unknown_tool",
            "Calls naming a tool that is not deployed (unlabelled: the name is the client's)",
            unknown_tool.clone(),
        );
        let resident = Gauge::<i64, AtomicI64>::default();
        registry.register(
            "resident_memory_bytes",
            "bermd's resident memory, read when scraped",
            resident.clone(),
        );
        Metrics {
            registry,
            calls,
            durations,
            in_flight,
            unknown_tool,
            resident,
        }
    }

    /// Starts timing a call of `program`'s `tool`; the call counts as in flight until the
    /// returned timer is finished or dropped (a dropped one ends as [`Outcome::Cancelled`]).
    pub fn start(&self, program: &str, tool: &str) -> CallTimer<'_> {
        self.in_flight.inc();
        CallTimer {
            metrics: self,
            program: program.to_string(),
            tool: tool.to_string(),
            started: Instant::now(),
            done: false,
        }
    }

    /// Counts a call to a tool that is not deployed.
    pub fn unknown_tool(&self) {
        self.unknown_tool.inc();
    }

    /// The Prometheus text exposition of every metric now.
    pub fn encode(&self) -> String {
        if let Some(bytes) = resident_bytes() {
            self.resident.set(bytes);
        }
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

/// One call being timed ([`Metrics::start`]).
pub struct CallTimer<'a> {
    metrics: &'a Metrics,
    program: String,
    tool: String,
    started: Instant,
    done: bool,
}

impl CallTimer<'_> {
    /// Records the call's end.
    pub fn finish(mut self, outcome: Outcome) {
        self.record(outcome);
    }

    fn record(&mut self, outcome: Outcome) {
        if self.done {
            return;
        }
        self.done = true;
        self.metrics.in_flight.dec();
        self.metrics
            .durations
            .get_or_create(&ToolLabels {
                program: self.program.clone(),
                tool: self.tool.clone(),
            })
            .observe(self.started.elapsed().as_secs_f64());
        self.metrics
            .calls
            .get_or_create(&CallLabels {
                program: std::mem::take(&mut self.program),
                tool: std::mem::take(&mut self.tool),
                outcome: outcome.word().to_string(),
            })
            .inc();
    }
}

impl Drop for CallTimer<'_> {
    fn drop(&mut self) {
        self.record(Outcome::Cancelled);
    }
}

/// Resident set size from `/proc/self/status` (`VmRSS`, in kB; Linux); `None` elsewhere.
fn resident_bytes() -> Option<i64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: i64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_are_counted_by_outcome_and_a_dropped_one_is_cancelled() {
        let metrics = Metrics::new();
        metrics.start("notes", "add").finish(Outcome::Ok);
        metrics.start("notes", "add").finish(Outcome::Failed);
        drop(metrics.start("notes", "list"));
        let running = metrics.start("notes", "list");
        metrics.unknown_tool();
        let text = metrics.encode();
        for line in [
            r#"berm_calls_total{program="notes",tool="add",outcome="ok"} 1"#,
            r#"berm_calls_total{program="notes",tool="add",outcome="failed"} 1"#,
            r#"berm_calls_total{program="notes",tool="list",outcome="cancelled"} 1"#,
            "berm_calls_in_flight 1",
            "berm_calls_unknown_tool_total 1",
            r#"berm_call_duration_seconds_count{program="notes",tool="add"} 2"#,
        ] {
            assert!(text.contains(line), "{line} in:\n{text}");
        }
        running.finish(Outcome::Error);
        assert!(metrics.encode().contains("berm_calls_in_flight 0"));
    }
}
