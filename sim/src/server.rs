//! One backend endpoint as the emulator models it: k workers, a FIFO queue, a service time of
//! base x speed x J; utilisation (busy workers / workers) over the last second as its ORCA report
//! says, and CPU (busy workers averaged over the last minute) as Prometheus would.

use std::collections::VecDeque;

/// Seconds of per-second snapshots kept for the one-minute CPU rate.
const CPU_WINDOW_S: usize = 60;

/// One simulated endpoint.
#[derive(Debug, Clone, PartialEq)]
pub struct EndpointSpec {
    /// Index into the file's flattened backend list this endpoint copies (events name those).
    pub origin: usize,
    pub group: usize,
    pub workers: u32,
    /// Mean service time at speed 1, nanoseconds.
    pub base_ns: f64,
    pub speed: f64,
    pub jitter: f64,
}

impl EndpointSpec {
    /// Requests per second it can serve at its group's speed: workers / mean service time.
    pub fn capacity_rps(&self) -> f64 {
        self.workers as f64 * 1e9 / (self.base_ns * self.speed)
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Status {
    Up,
    /// Answers 503 at once.
    Failing,
    /// Refuses connections: new requests fail at once, queued ones are dropped.
    Stopped,
}

/// What a response's ORCA header says about the server: last full second's utilisation,
/// requests and errors per second.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Orca {
    pub utilization: f64,
    pub rps: f64,
    pub eps: f64,
}

#[derive(Debug, Clone)]
pub struct Server {
    pub spec: EndpointSpec,
    pub speed: f64,
    pub status: Status,
    pub busy: u32,
    pub queue: VecDeque<u32>,
    /// Integral of busy workers over time (worker-nanoseconds) up to `changed_ns`.
    busy_integral: f64,
    changed_ns: u64,
    pub served: u64,
    pub errors: u64,
    pub orca: Orca,
    /// Busy workers averaged over the last minute (cores, for a CPU-bound worker).
    pub cpu: f64,
    window: WindowMarks,
    cpu_marks: VecDeque<f64>,
}

#[derive(Debug, Clone, Copy, Default)]
struct WindowMarks {
    busy_integral: f64,
    served: u64,
    errors: u64,
}

impl Server {
    pub fn new(spec: EndpointSpec) -> Server {
        Server {
            speed: spec.speed,
            spec,
            status: Status::Up,
            busy: 0,
            queue: VecDeque::new(),
            busy_integral: 0.0,
            changed_ns: 0,
            served: 0,
            errors: 0,
            orca: Orca::default(),
            cpu: 0.0,
            window: WindowMarks::default(),
            cpu_marks: VecDeque::with_capacity(CPU_WINDOW_S + 1),
        }
    }

    /// Requests at the server: in service and queued (Prequal's requests-in-flight).
    pub fn in_flight(&self) -> u32 {
        self.busy + self.queue.len() as u32
    }

    pub fn has_idle_worker(&self) -> bool {
        self.busy < self.spec.workers
    }

    /// Mean service time at the current speed.
    pub fn mean_service_ns(&self) -> f64 {
        self.spec.base_ns * self.speed
    }

    pub fn add_busy(&mut self, now_ns: u64, delta: i32) {
        self.busy_integral += self.busy as f64 * now_ns.saturating_sub(self.changed_ns) as f64;
        self.changed_ns = now_ns;
        self.busy = self.busy.saturating_add_signed(delta);
    }

    /// Close the one-second window ending now: refresh the ORCA figures and the minute's CPU.
    pub fn close_window(&mut self, now_ns: u64, window_ns: u64) {
        self.add_busy(now_ns, 0);
        let secs = window_ns as f64 / 1e9;
        let busy = self.busy_integral - self.window.busy_integral;
        self.orca = Orca {
            utilization: busy / (self.spec.workers as f64 * window_ns as f64),
            rps: (self.served - self.window.served) as f64 / secs,
            eps: (self.errors - self.window.errors) as f64 / secs,
        };
        self.window = WindowMarks { busy_integral: self.busy_integral, served: self.served, errors: self.errors };
        self.cpu_marks.push_back(self.busy_integral);
        if self.cpu_marks.len() > CPU_WINDOW_S + 1 {
            self.cpu_marks.pop_front();
        }
        let spanned = (self.cpu_marks.len() - 1) as f64 * window_ns as f64;
        self.cpu = match self.cpu_marks.front() {
            Some(first) if spanned > 0.0 => (self.busy_integral - first) / spanned,
            _ => 0.0,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(workers: u32) -> Server {
        Server::new(EndpointSpec { origin: 0, group: 0, workers, base_ns: 1e6, speed: 2.0, jitter: 0.0 })
    }

    #[test]
    fn utilisation_is_busy_time_over_worker_time() {
        let mut s = server(2);
        s.close_window(0, 1_000_000_000);
        s.add_busy(0, 1); // one worker busy all second, the other half of it
        s.add_busy(500_000_000, 1);
        s.served = 30;
        s.close_window(1_000_000_000, 1_000_000_000);
        assert!((s.orca.utilization - 0.75).abs() < 1e-12, "{:?}", s.orca);
        assert_eq!(s.orca.rps, 30.0);
        assert!((s.cpu - 1.5).abs() < 1e-12, "1.5 workers busy on average");
    }

    #[test]
    fn cpu_averages_over_the_last_minute_only() {
        let mut s = server(1);
        s.close_window(0, 1_000_000_000);
        s.add_busy(0, 1);
        for t in 1..=60 {
            s.close_window(t * 1_000_000_000, 1_000_000_000);
        }
        assert!((s.cpu - 1.0).abs() < 1e-12);
        s.add_busy(60_000_000_000, -1);
        for t in 61..=90 {
            s.close_window(t * 1_000_000_000, 1_000_000_000);
        }
        assert!((s.cpu - 0.5).abs() < 1e-12, "half of the last minute busy: {}", s.cpu);
        assert_eq!(s.orca.utilization, 0.0);
    }

    #[test]
    fn in_flight_counts_queue_and_service() {
        let mut s = server(1);
        s.add_busy(0, 1);
        s.queue.extend([4, 5]);
        assert_eq!(s.in_flight(), 3);
        assert!(!s.has_idle_worker());
        assert_eq!(s.mean_service_ns(), 2e6);
    }
}
