//! A fixed-size log-bucket histogram of non-negative integers (HdrHistogram-like): values below
//! 2^SUB_BITS are exact, larger ones fall in one of 2^SUB_BITS buckets per power of two, so a
//! quantile is off by at most 2^-SUB_BITS (0.8%) of its value. Recording is a few instructions and
//! never allocates.

const SUB_BITS: u32 = 7;
const SUB: u64 = 1 << SUB_BITS;
/// Exact values, then (64 - SUB_BITS) octaves of SUB buckets each.
const BUCKETS: usize = (SUB + (64 - SUB_BITS as u64) * SUB) as usize;

#[derive(Clone)]
pub struct Histogram {
    counts: Box<[u64]>,
    total: u64,
    sum: u128,
    max: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram { counts: vec![0; BUCKETS].into_boxed_slice(), total: 0, sum: 0, max: 0 }
    }
}

impl std::fmt::Debug for Histogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Histogram {{ total: {}, mean: {:.1}, max: {} }}", self.total, self.mean(), self.max)
    }
}

fn index(v: u64) -> usize {
    if v < SUB {
        return v as usize;
    }
    let octave = 63 - v.leading_zeros(); // >= SUB_BITS
    let shift = octave - SUB_BITS;
    let sub = (v >> shift) - SUB; // 0..SUB
    (SUB + (shift as u64) * SUB + sub) as usize
}

/// The smallest and largest value that land in bucket `i`.
fn bounds(i: usize) -> (u64, u64) {
    let i = i as u64;
    if i < SUB {
        return (i, i);
    }
    let shift = (i - SUB) / SUB;
    let sub = (i - SUB) % SUB;
    let low = (SUB + sub) << shift;
    (low, low + ((1u64 << shift) - 1))
}

impl Histogram {
    pub fn record(&mut self, v: u64) {
        self.counts[index(v)] += 1;
        self.total += 1;
        self.sum += v as u128;
        self.max = self.max.max(v);
    }

    pub fn count(&self) -> u64 {
        self.total
    }

    pub fn mean(&self) -> f64 {
        if self.total == 0 {
            0.0
        } else {
            self.sum as f64 / self.total as f64
        }
    }

    pub fn max(&self) -> u64 {
        self.max
    }

    /// The q-quantile (0..=1): the middle of the bucket holding the ceil(q n)-th smallest value,
    /// never above the largest value seen. 0 when empty.
    pub fn quantile(&self, q: f64) -> u64 {
        if self.total == 0 {
            return 0;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                let (low, high) = bounds(i);
                return (low + (high - low) / 2).min(self.max);
            }
        }
        self.max
    }

    pub fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(other.counts.iter()) {
            *a += b;
        }
        self.total += other.total;
        self.sum += other.sum;
        self.max = self.max.max(other.max);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tailweight_math::rng::Rng;

    #[test]
    fn buckets_tile_the_range_without_gaps() {
        let mut expected_low = 0;
        for i in 0..BUCKETS {
            let (low, high) = bounds(i);
            assert_eq!(low, expected_low, "bucket {i}");
            assert_eq!(index(low), i);
            assert_eq!(index(high), i);
            expected_low = high.wrapping_add(1);
        }
        assert_eq!(expected_low, 0, "the last bucket ends at u64::MAX");
    }

    #[test]
    fn quantiles_are_within_one_percent_of_the_exact_ones() {
        let mut rng = Rng::new(5);
        let mut h = Histogram::default();
        let mut values: Vec<u64> = (0..100_000)
            .map(|_| {
                // Spread over six orders of magnitude.
                let v = (10f64.powf(rng.next_f64() * 6.0) * 1_000.0) as u64;
                h.record(v);
                v
            })
            .collect();
        values.sort_unstable();
        for q in [0.0, 0.5, 0.9, 0.99, 0.999, 1.0] {
            let rank = ((q * values.len() as f64).ceil() as usize).max(1);
            let exact = values[rank - 1] as f64;
            let got = h.quantile(q) as f64;
            assert!((got - exact).abs() <= exact * 0.01, "q={q}: {got} vs {exact}");
        }
        let mean = values.iter().map(|&v| v as f64).sum::<f64>() / values.len() as f64;
        assert!((h.mean() - mean).abs() < 1e-6 * mean);
        assert_eq!(h.max(), *values.last().unwrap());
    }

    #[test]
    fn small_values_are_exact_and_empty_is_zero() {
        let mut h = Histogram::default();
        assert_eq!(h.quantile(0.99), 0);
        for v in [3, 3, 7, 100] {
            h.record(v);
        }
        assert_eq!((h.quantile(0.5), h.quantile(0.75), h.quantile(1.0)), (3, 7, 100));
    }

    #[test]
    fn merge_adds_counts() {
        let (mut a, mut b) = (Histogram::default(), Histogram::default());
        a.record(10);
        b.record(1_000_000);
        a.merge(&b);
        assert_eq!((a.count(), a.max(), a.quantile(0.4)), (2, 1_000_000, 10));
    }
}
