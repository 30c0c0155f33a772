//! Prometheus text exposition of every backend's counters and gauges, labelled by backend index
//! and address, plus the emulator's own CPU.

use crate::backend::Snapshot;
use std::fmt::Write;

const FAMILIES: &[(&str, &str, &str)] = &[
    ("emulator_requests_total", "counter", "Requests (gRPC calls) received: served, failed, shed or cut by a stop."),
    (
        "emulator_errors_total",
        "counter",
        "Requests answered with an error at once: fail (503 / UNAVAILABLE) and shed (429 / RESOURCE_EXHAUSTED).",
    ),
    ("emulator_shed_total", "counter", "Requests refused by load shedding (429 / RESOURCE_EXHAUSTED), also in errors."),
    ("emulator_connections_total", "counter", "Connections accepted (one HTTP/2 connection carries many calls)."),
    ("emulator_busy_seconds_total", "counter", "Busy worker time: the CPU analogue of this backend."),
    ("emulator_utilisation", "gauge", "Busy worker time / (workers x 1 s window), as sent in ORCA cpu_utilization."),
    ("emulator_inflight", "gauge", "Requests being served now."),
    ("emulator_queue_length", "gauge", "Requests waiting for a worker."),
    ("emulator_workers", "gauge", "Requests served at once."),
    ("emulator_speed", "gauge", "Current service time multiplier."),
    ("emulator_cold_multiplier", "gauge", "Current warm-up multiplier of the service time (1 = warm)."),
    (
        "emulator_mode",
        "gauge",
        "0 serving, 1 failing, 2 stopped (listener closed), 3 absent (not joined yet), 4 shedding.",
    ),
];

fn value(s: &Snapshot, family: &str) -> f64 {
    match family {
        "emulator_requests_total" => s.requests_total as f64,
        "emulator_errors_total" => s.errors_total as f64,
        "emulator_shed_total" => s.shed_total as f64,
        "emulator_connections_total" => s.connections_total as f64,
        "emulator_busy_seconds_total" => s.busy_seconds_total,
        "emulator_utilisation" => s.utilisation,
        "emulator_inflight" => f64::from(s.inflight),
        "emulator_queue_length" => f64::from(s.queued),
        "emulator_workers" => f64::from(s.workers),
        "emulator_speed" => s.speed,
        "emulator_cold_multiplier" => s.cold_multiplier,
        "emulator_mode" => f64::from(s.mode as u8),
        // A family without a value here shows as NaN: visible, never a wrong number.
        _ => f64::NAN,
    }
}

pub fn render(backends: &[Snapshot], process_cpu_seconds: Option<f64>) -> String {
    let mut out = String::with_capacity(256 + backends.len() * FAMILIES.len() * 80);
    for (name, kind, help) in FAMILIES {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for s in backends {
            let _ = writeln!(out, "{name}{{backend=\"{}\",address=\"{}\"}} {}", s.index, s.address, value(s, name));
        }
    }
    if let Some(cpu) = process_cpu_seconds {
        let _ = writeln!(out, "# HELP process_cpu_seconds_total User and system CPU time of the emulator.");
        let _ = writeln!(out, "# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total {cpu}");
    }
    out
}

/// utime + stime of this process from /proc/self/stat (Linux reports them in USER_HZ = 100 ticks/s).
pub fn process_cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    cpu_seconds_from_stat(&stat)
}

fn cpu_seconds_from_stat(stat: &str) -> Option<f64> {
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15 (1-based).
    let after_name = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / 100.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Mode;

    #[test]
    fn renders_labelled_series() {
        let s = Snapshot {
            index: 3,
            address: "127.0.0.1:18004".into(),
            workers: 2,
            speed: 5.0,
            cold_multiplier: 2.5,
            mode: Mode::Shedding,
            requests_total: 120,
            errors_total: 7,
            shed_total: 3,
            connections_total: 2,
            busy_seconds_total: 1.5,
            utilisation: 0.25,
            inflight: 1,
            queued: 4,
        };
        let text = render(&[s], Some(2.5));
        for line in [
            "# TYPE emulator_requests_total counter",
            "emulator_requests_total{backend=\"3\",address=\"127.0.0.1:18004\"} 120",
            "emulator_errors_total{backend=\"3\",address=\"127.0.0.1:18004\"} 7",
            "emulator_busy_seconds_total{backend=\"3\",address=\"127.0.0.1:18004\"} 1.5",
            "emulator_utilisation{backend=\"3\",address=\"127.0.0.1:18004\"} 0.25",
            "emulator_queue_length{backend=\"3\",address=\"127.0.0.1:18004\"} 4",
            "emulator_shed_total{backend=\"3\",address=\"127.0.0.1:18004\"} 3",
            "emulator_connections_total{backend=\"3\",address=\"127.0.0.1:18004\"} 2",
            "emulator_cold_multiplier{backend=\"3\",address=\"127.0.0.1:18004\"} 2.5",
            "emulator_mode{backend=\"3\",address=\"127.0.0.1:18004\"} 4",
            "process_cpu_seconds_total 2.5",
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line:?} in\n{text}");
        }
    }

    #[test]
    fn cpu_from_proc_stat_survives_spaces_in_the_name() {
        let stat = "42 (my (odd) name) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 1 0";
        assert_eq!(cpu_seconds_from_stat(stat), Some(3.0));
        assert_eq!(cpu_seconds_from_stat("garbage"), None);
    }

    #[test]
    fn own_cpu_is_readable() {
        assert!(process_cpu_seconds().is_some());
    }
}
