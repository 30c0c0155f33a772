//! The server half of Prequal (Wydrowski et al., NSDI'24): a server tags each query with its
//! requests in flight (RIF) when the query arrived and, when the query finishes, files its latency
//! under that RIF. A probe is answered with the current RIF and the median of the recent latencies
//! filed under it: the latency a query arriving now should expect, not the server's average.
//!
//! Only Prequal's servers run this module, so the policy keeps it for every server (the engine's
//! servers stay policy-free); the policy feeds it every finished query of every client, which is
//! what the server itself sees.

/// Recent latencies kept per RIF value (a ring: the newest replace the oldest).
pub const SAMPLES_PER_RIF: usize = 8;
/// RIF values with a ring of their own; higher RIFs share the last ring.
pub const RIF_BUCKETS: usize = 64;

/// Latency samples by RIF at arrival, for every server.
#[derive(Debug, Clone)]
pub struct RifLatency {
    /// Per server x bucket: the ring of latencies, microseconds.
    rings: Vec<[u32; SAMPLES_PER_RIF]>,
    /// Per server x bucket: (the ring's next slot, samples in it).
    fill: Vec<(u8, u8)>,
}

impl RifLatency {
    pub fn new(servers: usize) -> RifLatency {
        RifLatency {
            rings: vec![[0; SAMPLES_PER_RIF]; servers * RIF_BUCKETS],
            fill: vec![(0, 0); servers * RIF_BUCKETS],
        }
    }

    fn slot(server: u32, rif: u32) -> usize {
        server as usize * RIF_BUCKETS + (rif as usize).min(RIF_BUCKETS - 1)
    }

    /// A query that arrived at `server` when it had `rif_at_arrival` requests in flight finished
    /// after `latency_ns`.
    pub fn record(&mut self, server: u32, rif_at_arrival: u32, latency_ns: u64) {
        let i = Self::slot(server, rif_at_arrival);
        let us = (latency_ns / 1_000).min(u32::MAX as u64) as u32;
        let (next, filled) = self.fill[i];
        self.rings[i][next as usize] = us;
        self.fill[i] = ((next + 1) % SAMPLES_PER_RIF as u8, (filled + 1).min(SAMPLES_PER_RIF as u8));
    }

    /// The server's latency estimate at `rif`, nanoseconds: the median of the samples filed under
    /// `rif` (the mean of the middle two for an even count); if there are none, those of the
    /// nearest RIF that has samples (the lower one on a tie). None before its first finished query.
    pub fn estimate_ns(&self, server: u32, rif: u32) -> Option<f64> {
        let base = server as usize * RIF_BUCKETS;
        let want = (rif as usize).min(RIF_BUCKETS - 1);
        let has = |b: usize| self.fill[base + b].1 > 0;
        let bucket = (0..RIF_BUCKETS).find_map(|d| {
            let lower = want.checked_sub(d).filter(|&b| has(b));
            lower.or_else(|| Some(want + d).filter(|&b| b < RIF_BUCKETS && has(b)))
        })?;
        let i = base + bucket;
        let n = self.fill[i].1 as usize;
        let mut s = self.rings[i];
        let s = &mut s[..n];
        s.sort_unstable();
        let median_us = if n % 2 == 1 { s[n / 2] as f64 } else { (s[n / 2 - 1] as f64 + s[n / 2] as f64) / 2.0 };
        Some(median_us * 1_000.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn the_estimate_is_the_median_of_the_latencies_filed_under_the_current_rif() {
        let mut t = RifLatency::new(2);
        for ms in [10, 12, 11] {
            t.record(1, 0, ms * MS);
        }
        for ms in [50, 40, 45, 1_000] {
            t.record(1, 4, ms * MS);
        }
        assert_eq!(t.estimate_ns(1, 0), Some(11e6), "median of 10, 11, 12");
        assert_eq!(t.estimate_ns(1, 4), Some(47.5e6), "mean of the middle two of 40, 45, 50, 1000");
        assert_eq!(t.estimate_ns(0, 4), None, "server 0 has finished nothing");
    }

    #[test]
    fn without_samples_at_the_rif_the_nearest_rif_answers_the_lower_on_a_tie() {
        let mut t = RifLatency::new(1);
        t.record(0, 1, 10 * MS);
        t.record(0, 5, 50 * MS);
        assert_eq!(t.estimate_ns(0, 2), Some(10e6), "1 is nearer to 2 than 5");
        assert_eq!(t.estimate_ns(0, 3), Some(10e6), "1 and 5 are both 2 away: the lower");
        assert_eq!(t.estimate_ns(0, 4), Some(50e6));
        assert_eq!(t.estimate_ns(0, 0), Some(10e6));
        assert_eq!(t.estimate_ns(0, 500), Some(50e6), "beyond the buckets: the last one with samples");
    }

    #[test]
    fn the_ring_keeps_only_the_most_recent_samples() {
        let mut t = RifLatency::new(1);
        for _ in 0..SAMPLES_PER_RIF {
            t.record(0, 2, 100 * MS);
        }
        for _ in 0..SAMPLES_PER_RIF / 2 + 1 {
            t.record(0, 2, 20 * MS);
        }
        assert_eq!(t.estimate_ns(0, 2), Some(20e6), "the newer samples are the majority now");
        for _ in 0..10 * SAMPLES_PER_RIF {
            t.record(0, 2, 7 * MS);
        }
        assert_eq!(t.estimate_ns(0, 2), Some(7e6));
    }
}
