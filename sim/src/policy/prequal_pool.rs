//! One client's Prequal probe pool (Wydrowski et al., NSDI'24): at most `capacity` answered
//! probes, each the server's RIF and its latency estimate at that RIF. Selection is the hot-cold
//! lexicographic rule: a probe is hot when its RIF is above the threshold (a quantile of the
//! client's RIF estimate); the cold probe with the lowest latency wins, else (all hot) the one
//! with the lowest RIF. Probes leave when they are too old, when they have routed their budget of
//! queries, when the pool is full and a newer one comes (the oldest leaves), and by the per-query
//! removals, alternately the oldest and the worst (the hot probe with the highest RIF, else the
//! probe with the highest latency): selection takes the best probes, so without removing the
//! worst the pool fills with busy servers.

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Probe {
    pub endpoint: u32,
    pub rif: u32,
    pub latency_ns: f64,
    /// When the answer reached the client.
    pub received_ns: u64,
    /// Queries it may still route.
    pub uses_left: u32,
}

#[derive(Debug, Clone)]
pub struct Pool {
    probes: Vec<Probe>,
    capacity: usize,
    /// A new probe of a server replaces the pooled probe of that server.
    one_per_server: bool,
}

impl Pool {
    pub fn new(capacity: usize, one_per_server: bool) -> Pool {
        Pool { probes: Vec::with_capacity(capacity + 1), capacity: capacity.max(1), one_per_server }
    }

    pub fn len(&self) -> usize {
        self.probes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.probes.is_empty()
    }

    pub fn probes(&self) -> &[Probe] {
        &self.probes
    }

    /// Pool an answered probe: it replaces the probe of the same server (when one per server),
    /// else the oldest leaves if the pool is full.
    pub fn insert(&mut self, probe: Probe) {
        if self.one_per_server {
            if let Some(old) = self.probes.iter_mut().find(|p| p.endpoint == probe.endpoint) {
                *old = probe;
                return;
            }
        }
        if self.probes.len() >= self.capacity {
            self.remove_oldest();
        }
        self.probes.push(probe);
    }

    /// Drop the probes answered `max_age_ns` or longer ago.
    pub fn expire(&mut self, now_ns: u64, max_age_ns: u64) {
        self.probes.retain(|p| now_ns.saturating_sub(p.received_ns) < max_age_ns);
    }

    /// The probe the hot-cold lexicographic rule picks (index), with whether it was hot; None for
    /// an empty pool. `threshold`: hot means RIF above it (None: nothing is hot). Ties: the lower
    /// RIF among equally fast cold probes, the lower latency among equally loaded hot ones.
    pub fn select(&self, threshold: Option<u32>) -> Option<(usize, bool)> {
        let hot = |p: &Probe| threshold.is_some_and(|t| p.rif > t);
        let indexed = || self.probes.iter().enumerate();
        let cold = indexed()
            .filter(|(_, p)| !hot(p))
            .min_by(|(_, a), (_, b)| a.latency_ns.total_cmp(&b.latency_ns).then(a.rif.cmp(&b.rif)));
        match cold {
            Some((i, _)) => Some((i, false)),
            None => indexed()
                .min_by(|(_, a), (_, b)| a.rif.cmp(&b.rif).then(a.latency_ns.total_cmp(&b.latency_ns)))
                .map(|(i, _)| (i, true)),
        }
    }

    /// Route one query with probe `i`: the server has one more request than it said (RIF + 1), and
    /// the probe leaves once its budget is spent. Returns the server.
    pub fn consume(&mut self, i: usize) -> u32 {
        let p = &mut self.probes[i];
        p.rif += 1;
        p.uses_left = p.uses_left.saturating_sub(1);
        let endpoint = p.endpoint;
        if p.uses_left == 0 {
            self.probes.swap_remove(i);
        }
        endpoint
    }

    pub fn remove_oldest(&mut self) {
        if let Some(i) = (0..self.probes.len()).min_by_key(|&i| self.probes[i].received_ns) {
            self.probes.swap_remove(i);
        }
    }

    /// Remove the worst probe: the hot one with the highest RIF, else the one with the highest
    /// latency.
    pub fn remove_worst(&mut self, threshold: Option<u32>) {
        let n = self.probes.len();
        let p = &self.probes;
        let hot = (0..n).filter(|&i| threshold.is_some_and(|t| p[i].rif > t)).max_by_key(|&i| p[i].rif);
        let worst = hot.or_else(|| (0..n).max_by(|&a, &b| p[a].latency_ns.total_cmp(&p[b].latency_ns)));
        if let Some(i) = worst {
            self.probes.swap_remove(i);
        }
    }
}

/// The `q` quantile of `values` (the element at rank floor((len - 1) q) in ascending order),
/// reordering them; None when empty.
pub fn quantile(values: &mut [u32], q: f64) -> Option<u32> {
    if values.is_empty() {
        return None;
    }
    let k = (((values.len() - 1) as f64) * q).floor() as usize;
    Some(*values.select_nth_unstable(k.min(values.len() - 1)).1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probe(endpoint: u32, rif: u32, latency_ms: f64, received_ns: u64) -> Probe {
        Probe { endpoint, rif, latency_ns: latency_ms * 1e6, received_ns, uses_left: 1 }
    }

    fn pool(probes: &[Probe]) -> Pool {
        let mut p = Pool::new(16, true);
        probes.iter().for_each(|&x| p.insert(x));
        p
    }

    fn endpoints(p: &Pool) -> Vec<u32> {
        let mut e: Vec<u32> = p.probes().iter().map(|x| x.endpoint).collect();
        e.sort_unstable();
        e
    }

    #[test]
    fn the_fastest_cold_probe_wins_however_fast_a_hot_one_is() {
        let p = pool(&[probe(0, 9, 1.0, 0), probe(1, 2, 50.0, 0), probe(2, 3, 20.0, 0), probe(3, 1, 20.0, 0)]);
        // Threshold 5: server 0 is hot; 2 and 3 are equally fast, 3 has the lower RIF.
        assert_eq!(p.select(Some(5)), Some((3, false)));
        // No threshold: nothing is hot, server 0's 1 ms wins.
        assert_eq!(p.select(None), Some((0, false)));
    }

    #[test]
    fn when_every_probe_is_hot_the_lowest_rif_wins_not_the_fastest() {
        let p = pool(&[probe(0, 10, 1.0, 0), probe(1, 8, 90.0, 0), probe(2, 9, 5.0, 0)]);
        assert_eq!(p.select(Some(5)), Some((1, true)));
        assert_eq!(Pool::new(4, true).select(Some(5)), None);
    }

    #[test]
    fn a_new_probe_of_a_pooled_server_replaces_it_and_a_full_pool_drops_its_oldest() {
        let mut p = Pool::new(3, true);
        p.insert(probe(7, 1, 10.0, 100));
        p.insert(probe(8, 1, 10.0, 200));
        p.insert(probe(7, 4, 30.0, 300));
        assert_eq!(endpoints(&p), [7, 8]);
        assert_eq!(p.probes().iter().find(|x| x.endpoint == 7).map(|x| x.rif), Some(4), "the newer answer");
        p.insert(probe(9, 1, 10.0, 400));
        p.insert(probe(10, 1, 10.0, 500));
        assert_eq!(endpoints(&p), [7, 9, 10], "server 8 (received at 200) was the oldest");
        // Without one probe per server the same server may be pooled twice.
        let mut q = Pool::new(3, false);
        q.insert(probe(7, 1, 10.0, 100));
        q.insert(probe(7, 4, 30.0, 300));
        assert_eq!(endpoints(&q), [7, 7]);
    }

    #[test]
    fn probes_age_out_and_leave_when_their_budget_is_spent() {
        let mut p = pool(&[probe(0, 1, 10.0, 0), probe(1, 1, 10.0, 600)]);
        p.expire(1_000, 1_000);
        assert_eq!(endpoints(&p), [1], "answered 1,000 ns ago: too old");
        p.probes[0].uses_left = 2;
        assert_eq!(p.consume(0), 1);
        assert_eq!((p.len(), p.probes()[0].rif), (1, 2), "one use left; the query it sent counts");
        assert_eq!(p.consume(0), 1);
        assert!(p.is_empty());
    }

    #[test]
    fn removal_takes_the_oldest_or_the_hottest_else_the_slowest() {
        let mut p = pool(&[probe(0, 9, 5.0, 30), probe(1, 7, 1.0, 10), probe(2, 1, 80.0, 20), probe(3, 2, 40.0, 40)]);
        p.remove_oldest();
        assert_eq!(endpoints(&p), [0, 2, 3], "server 1 was answered first");
        p.remove_worst(Some(5));
        assert_eq!(endpoints(&p), [2, 3], "server 0 is hot and the hottest");
        p.remove_worst(Some(5));
        assert_eq!(endpoints(&p), [3], "nothing hot: the slowest, server 2, leaves");
    }

    #[test]
    fn the_quantile_is_the_element_at_its_rank() {
        let mut rifs: Vec<u32> = (1..=10).rev().collect();
        assert_eq!(quantile(&mut rifs, 0.84), Some(8), "rank floor(9 x 0.84) = 7 of 1..=10");
        assert_eq!(quantile(&mut rifs, 0.0), Some(1));
        assert_eq!(quantile(&mut rifs, 1.0), Some(10));
        assert_eq!(quantile(&mut [], 0.5), None);
    }
}
