//! Envoy's earliest-deadline-first scheduler for weighted picks: each host waits in a queue with
//! deadline = time of its last pick + 1 / weight; a pick takes the earliest deadline and puts the
//! host back with the weight it has at that moment (static for client-side WRR;
//! weight / (active + 1) for weighted LEAST_REQUEST). A new scheduler starts each host at a random phase of its
//! period, as Envoy seeds its schedulers so that proxies do not pick in lockstep.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use tailweight_math::rng::Rng;

#[derive(Debug, Clone, Copy)]
struct Entry {
    deadline: f64,
    host: u32,
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Entry {
    /// Reversed: the max-heap pops the earliest deadline (then the lowest host).
    fn cmp(&self, other: &Self) -> Ordering {
        other.deadline.total_cmp(&self.deadline).then(other.host.cmp(&self.host))
    }
}

#[derive(Debug, Clone, Default)]
pub struct Edf {
    heap: BinaryHeap<Entry>,
}

impl Edf {
    /// Hosts with a weight <= 0 (or not finite) are left out.
    pub fn new(weights: impl Iterator<Item = f64>, rng: &mut Rng) -> Edf {
        let entries: Vec<Entry> = weights
            .enumerate()
            .filter(|(_, w)| w.is_finite() && *w > 0.0)
            .map(|(host, w)| Entry { deadline: rng.next_f64() / w, host: host as u32 })
            .collect();
        Edf { heap: BinaryHeap::from(entries) }
    }

    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// The host with the earliest deadline; it is queued again with `weight_now(host)`.
    pub fn pick(&mut self, weight_now: impl FnOnce(u32) -> f64) -> Option<u32> {
        let mut top = self.heap.peek_mut()?;
        let host = top.host;
        let w = weight_now(host);
        // A weight that fell to zero parks the host far behind the others.
        top.deadline += if w > 0.0 && w.is_finite() { 1.0 / w } else { 1e12 };
        Some(host)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn static_weights_give_proportional_shares() {
        let weights = [1.0, 2.0, 5.0, 0.0];
        let mut edf = Edf::new(weights.iter().copied(), &mut Rng::new(1));
        let mut counts = [0u32; 4];
        for _ in 0..8_000 {
            counts[edf.pick(|h| weights[h as usize]).unwrap() as usize] += 1;
        }
        // EDF is exact up to one pick per host per round.
        assert!((999..=1001).contains(&counts[0]), "{counts:?}");
        assert!((1999..=2001).contains(&counts[1]), "{counts:?}");
        assert!((4999..=5001).contains(&counts[2]), "{counts:?}");
        assert_eq!(counts[3], 0, "zero weight is never picked");
    }

    #[test]
    fn a_dynamic_weight_is_read_at_each_pick() {
        // Host 0's weight halves with each pick: it ends up picked less than host 1.
        let mut picks = [0u32; 2];
        let mut edf = Edf::new([1.0, 1.0].into_iter(), &mut Rng::new(2));
        for _ in 0..100 {
            let h = edf.pick(|h| if h == 0 { 1.0 / (picks[0] as f64 + 1.0) } else { 1.0 }).unwrap();
            picks[h as usize] += 1;
        }
        assert!(picks[0] < 20 && picks[1] > 80, "{picks:?}");
        assert!(Edf::new(std::iter::empty(), &mut Rng::new(1)).pick(|_| 1.0).is_none());
    }
}
