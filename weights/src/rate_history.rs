//! Merged request and error counts over time, so that a metrics-store CPU value (an average over
//! `cpu_window_us`, e.g. `rate(...[1m])`) is divided into the request rate over its own window,
//! not into the last second's: a 1 s rate against a 60 s CPU average is off by the whole change
//! in between.

/// Merged requests and errors counted up over recomputes, as (time, requests, errors), reaching
/// one window back. Each entry is at least `cpu_window_us / 32` after the one two before it (a
/// newer count replaces the last entry until then), so a window holds at most about 66.
#[derive(Debug, Clone, Default)]
pub(crate) struct RateHistory {
    entries: std::collections::VecDeque<(u64, f64, f64)>,
}

impl RateHistory {
    /// Count one recompute's merged rates (`qps`, `eps`, covering about the `elapsed_us` since the
    /// last one; a long gap counts as that gap) in at `now_us`. Without `keep` (no metrics-store
    /// CPU for the endpoint) the history is dropped instead.
    pub fn record(&mut self, keep: bool, qps: f64, eps: f64, elapsed_us: Option<u64>, window_us: u64, now_us: u64) {
        if !keep {
            if !self.entries.is_empty() {
                self.entries = std::collections::VecDeque::new();
            }
            return;
        }
        let (requests, errors) = match (self.entries.back(), elapsed_us) {
            (Some(&(_, r, e)), Some(dt_us)) => (r + qps * dt_us as f64 / 1e6, e + eps.min(qps) * dt_us as f64 / 1e6),
            (Some(&(_, r, e)), None) => (r, e),
            (None, _) => (0.0, 0.0),
        };
        let spacing = window_us / 32;
        let n = self.entries.len();
        if n >= 2 && now_us.saturating_sub(self.entries[n - 2].0) < spacing {
            self.entries[n - 1] = (now_us, requests, errors);
        } else {
            self.entries.push_back((now_us, requests, errors));
        }
        // Keep one entry at or before a window ago.
        let horizon = now_us.saturating_sub(window_us);
        while self.entries.len() > 2 && self.entries[1].0 <= horizon {
            self.entries.pop_front();
        }
    }

    /// Requests and errors per second over [from, to] (clipped to the history; None if it covers
    /// less than a second of it), interpolating linearly between entries.
    pub fn rates_over(&self, from_us: u64, to_us: u64) -> Option<(f64, f64)> {
        let (first, last) = (self.entries.front()?, self.entries.back()?);
        let (from, to) = (from_us.max(first.0), to_us.min(last.0));
        if to < from.saturating_add(1_000_000) {
            return None;
        }
        let at = |t: u64| -> (f64, f64) {
            let i = self.entries.partition_point(|h| h.0 < t);
            match (i.checked_sub(1).and_then(|j| self.entries.get(j)), self.entries.get(i)) {
                (Some(a), Some(b)) if b.0 > a.0 => {
                    let f = (t - a.0) as f64 / (b.0 - a.0) as f64;
                    (a.1 + (b.1 - a.1) * f, a.2 + (b.2 - a.2) * f)
                }
                (_, Some(b)) => (b.1, b.2),
                (Some(a), None) => (a.1, a.2),
                (None, None) => (0.0, 0.0),
            }
        };
        let ((r0, e0), (r1, e1)) = (at(from), at(to));
        let secs = (to - from) as f64 / 1e6;
        Some(((r1 - r0) / secs, (e1 - e0) / secs))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: u64 = 1_000_000;

    #[test]
    fn rates_over_a_window_are_its_count_differences() {
        let mut h = RateHistory::default();
        // 10 req/s for 30 s, then 40 req/s (a quarter failing) for 30 s.
        for t in 0..=60u64 {
            let (qps, eps) = if t <= 30 { (10.0, 0.0) } else { (40.0, 10.0) };
            h.record(true, qps, eps, (t > 0).then_some(SEC), 60 * SEC, t * SEC);
        }
        let (qps, eps) = h.rates_over(0, 60 * SEC).unwrap();
        assert!((qps - 25.0).abs() < 1e-9 && (eps - 5.0).abs() < 1e-9, "{qps} {eps}");
        let (recent, _) = h.rates_over(40 * SEC, 60 * SEC).unwrap();
        assert!((recent - 40.0).abs() < 1e-9, "{recent}");
        assert_eq!(h.rates_over(60 * SEC, 60 * SEC), None, "less than a second");
    }

    #[test]
    fn stays_short_and_is_dropped_without_a_cpu_value() {
        let mut h = RateHistory::default();
        // Ten minutes of recomputes every 100 ms.
        for t in 0..6_000u64 {
            h.record(true, 5.0, 0.0, Some(SEC / 10), 60 * SEC, t * SEC / 10);
        }
        assert!(h.entries.len() <= 67, "{}", h.entries.len());
        let (qps, _) = h.rates_over(0, 600 * SEC).unwrap();
        assert!((qps - 5.0).abs() < 1e-9, "{qps}");
        h.record(false, 5.0, 0.0, Some(SEC), 60 * SEC, 600 * SEC);
        assert_eq!(h.rates_over(0, 600 * SEC), None);
    }
}
