//! What the VM benchmarks share: reading a process's peak memory, and medians.
#![allow(dead_code)]

/// A `kB` field of `/proc/<pid>/status` (e.g. `VmHWM:`), or NaN if it cannot be read.
pub fn status_kib(pid: u32, field: &str) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                l.strip_prefix(field)
                    .map(|v| v.trim().trim_end_matches(" kB").parse().ok())
            })
        })
        .flatten()
        .unwrap_or(f64::NAN)
}

/// The median; NaN for no values.
pub fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    match n {
        0 => f64::NAN,
        _ if n % 2 == 1 => values[n / 2],
        _ => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}
