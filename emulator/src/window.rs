//! Sliding-window meters over fixed-width time buckets. Time is an argument (microseconds since
//! the emulator started), so the arithmetic is tested exactly.

/// Sums of a quantity over the last `buckets` buckets of `bucket_us` each (the newest one partial).
#[derive(Debug, Clone)]
pub struct SlidingWindow {
    bucket_us: u64,
    sums: Vec<f64>,
    /// Absolute number (time / bucket_us) of the newest bucket.
    newest: u64,
}

impl SlidingWindow {
    /// `buckets` >= 1 and `bucket_us` >= 1 (checked by the callers' constants).
    pub fn new(bucket_us: u64, buckets: usize) -> Self {
        SlidingWindow { bucket_us: bucket_us.max(1), sums: vec![0.0; buckets.max(1)], newest: 0 }
    }

    fn advance(&mut self, now_us: u64) {
        let bucket = now_us / self.bucket_us;
        if bucket <= self.newest {
            return;
        }
        let n = self.sums.len() as u64;
        for b in (self.newest + 1)..=bucket.min(self.newest + n) {
            self.sums[(b % n) as usize] = 0.0;
        }
        self.newest = bucket;
    }

    /// Adds `amount` at `now_us` (a time older than the newest bucket counts into the newest).
    pub fn add(&mut self, now_us: u64, amount: f64) {
        self.advance(now_us);
        let n = self.sums.len() as u64;
        self.sums[(self.newest % n) as usize] += amount;
    }

    pub fn sum(&mut self, now_us: u64) -> f64 {
        self.advance(now_us);
        self.sums.iter().sum()
    }

    /// Time the window covers at `now_us`: the full buckets plus the elapsed part of the newest one
    /// (less at start-up).
    pub fn span_us(&self, now_us: u64) -> u64 {
        let full = (self.sums.len() as u64 - 1) * self.bucket_us;
        let partial = now_us.saturating_sub(self.newest * self.bucket_us).min(self.bucket_us);
        (full + partial).min(now_us).max(1)
    }

    /// Sum per second over the covered span.
    pub fn rate_per_s(&mut self, now_us: u64) -> f64 {
        self.sum(now_us) * 1e6 / self.span_us(now_us) as f64
    }
}

/// Busy worker time: the integral of `busy workers` over time, in total and over a sliding window.
/// utilisation = busy worker time / (workers x window).
#[derive(Debug, Clone)]
pub struct BusyMeter {
    busy: u32,
    since_us: u64,
    total_busy_us: f64,
    window: SlidingWindow,
    bucket_us: u64,
}

impl BusyMeter {
    pub fn new(bucket_us: u64, buckets: usize) -> Self {
        BusyMeter {
            busy: 0,
            since_us: 0,
            total_busy_us: 0.0,
            window: SlidingWindow::new(bucket_us, buckets),
            bucket_us: bucket_us.max(1),
        }
    }

    /// Credits busy x (now - since) to the buckets the interval spans.
    fn credit(&mut self, now_us: u64) {
        if now_us <= self.since_us {
            return;
        }
        if self.busy > 0 {
            let busy = f64::from(self.busy);
            self.total_busy_us += busy * (now_us - self.since_us) as f64;
            // Older than the window it cannot matter: start at most one window back.
            let window_us = self.bucket_us * self.window.sums.len() as u64;
            let mut t = self.since_us.max(now_us.saturating_sub(window_us));
            while t < now_us {
                let end = ((t / self.bucket_us + 1) * self.bucket_us).min(now_us);
                self.window.add(t, busy * (end - t) as f64);
                t = end;
            }
        }
        self.since_us = now_us;
    }

    pub fn start(&mut self, now_us: u64) {
        self.credit(now_us);
        self.busy += 1;
    }

    pub fn finish(&mut self, now_us: u64) {
        self.credit(now_us);
        self.busy = self.busy.saturating_sub(1);
    }

    pub fn busy(&self) -> u32 {
        self.busy
    }

    pub fn total_busy_seconds(&mut self, now_us: u64) -> f64 {
        self.credit(now_us);
        self.total_busy_us / 1e6
    }

    /// Busy worker time / (workers x covered span), in [0, 1] while busy <= workers.
    pub fn utilisation(&mut self, now_us: u64, workers: u32) -> f64 {
        self.credit(now_us);
        let busy_us = self.window.sum(now_us);
        busy_us / (self.window.span_us(now_us) as f64 * f64::from(workers.max(1)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000;

    #[test]
    fn window_forgets_old_buckets() {
        let mut w = SlidingWindow::new(100 * MS, 10);
        w.add(50 * MS, 1.0);
        w.add(950 * MS, 2.0);
        assert_eq!(w.sum(999 * MS), 3.0);
        assert_eq!(w.sum(1_050 * MS), 2.0, "bucket 0 left the window");
        assert_eq!(w.sum(1_950 * MS), 0.0);
        w.add(10_000 * MS, 5.0);
        assert_eq!(w.sum(10_000 * MS), 5.0, "a long gap clears everything");
    }

    #[test]
    fn rate_uses_the_covered_span() {
        let mut w = SlidingWindow::new(100 * MS, 10);
        for i in 0..200 {
            w.add(i * 10 * MS, 1.0); // 100 per second for 2 s
        }
        // At 2.0 s the window holds buckets 11..=20 (0.9 s full + 0 ms of bucket 20) = 90 adds.
        let rate = w.rate_per_s(1_999 * MS);
        assert!((rate - 100.0).abs() < 1.5, "{rate}");
    }

    #[test]
    fn rate_at_start_up_is_over_elapsed_time() {
        let mut w = SlidingWindow::new(100 * MS, 10);
        for i in 0..10 {
            w.add(i * 20 * MS, 1.0);
        }
        assert!((w.rate_per_s(200 * MS) - 50.0).abs() < 1e-9);
    }

    #[test]
    fn utilisation_of_one_busy_worker_of_two_is_half() {
        let mut m = BusyMeter::new(100 * MS, 10);
        m.start(0);
        assert!((m.utilisation(3_000 * MS, 2) - 0.5).abs() < 1e-9);
        m.start(3_000 * MS);
        // At 3.5 s the window is [2.6 s, 3.5 s]: 0.4 s at one busy worker, 0.5 s at two.
        assert!((m.utilisation(3_500 * MS, 2) - (0.4 + 2.0 * 0.5) / (2.0 * 0.9)).abs() < 1e-9);
        m.finish(3_500 * MS);
        m.finish(3_500 * MS);
        assert_eq!(m.utilisation(5_000 * MS, 2), 0.0);
        assert!((m.total_busy_seconds(5_000 * MS) - 4.0).abs() < 1e-9, "3.5 s + 0.5 s");
    }

    #[test]
    fn utilisation_counts_requests_still_running() {
        let mut m = BusyMeter::new(100 * MS, 10);
        m.start(1_000 * MS);
        // Window [0.6 s, 1.5 s]: busy for the last 0.5 s of 0.9 s.
        assert!((m.utilisation(1_500 * MS, 1) - 0.5 / 0.9).abs() < 1e-9);
    }

    #[test]
    fn short_requests_add_up() {
        let mut m = BusyMeter::new(100 * MS, 10);
        // 10 ms of work every 40 ms on one worker of four. The window at 4.0 s is [3.1 s, 4.0 s]:
        // the 22 requests started at 3.12 s .. 3.96 s.
        for i in 0..100u64 {
            m.start(i * 40 * MS);
            m.finish(i * 40 * MS + 10 * MS);
        }
        let u = m.utilisation(4_000 * MS, 4);
        assert!((u - 22.0 * 0.010 / (4.0 * 0.9)).abs() < 1e-9, "{u}");
    }
}
