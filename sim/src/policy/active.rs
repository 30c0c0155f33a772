//! Each client proxy's own active requests per endpoint (Envoy's per-host `rq_active` as one
//! worker sees it), and Envoy's unweighted LEAST_REQUEST pick on them.

use tailweight_math::rng::Rng;

#[derive(Debug, Clone)]
pub struct Active {
    endpoints: usize,
    counts: Vec<u32>,
}

impl Active {
    pub fn new(clients: u32, endpoints: usize) -> Active {
        Active { endpoints, counts: vec![0; clients as usize * endpoints] }
    }

    pub fn endpoints(&self) -> usize {
        self.endpoints
    }

    pub fn get(&self, client: u32, endpoint: u32) -> u32 {
        self.counts[client as usize * self.endpoints + endpoint as usize]
    }

    pub fn add(&mut self, client: u32, endpoint: u32) {
        self.counts[client as usize * self.endpoints + endpoint as usize] += 1;
    }

    pub fn remove(&mut self, client: u32, endpoint: u32) {
        let c = &mut self.counts[client as usize * self.endpoints + endpoint as usize];
        *c = c.saturating_sub(1);
    }

    /// Envoy LEAST_REQUEST with equal weights: `choice_count` (2) hosts drawn uniformly with
    /// replacement; the first with the fewest active requests wins.
    pub fn least_of_two(&self, client: u32, rng: &mut Rng) -> u32 {
        let row = &self.counts[client as usize * self.endpoints..(client as usize + 1) * self.endpoints];
        let a = rng.below(self.endpoints);
        let b = rng.below(self.endpoints);
        if row[b] < row[a] {
            b as u32
        } else {
            a as u32
        }
    }

    /// The same pick among `endpoints` only (a subset of the cluster).
    pub fn least_of_two_among(&self, client: u32, endpoints: &[u32], rng: &mut Rng) -> u32 {
        let a = endpoints[rng.below(endpoints.len())];
        let b = endpoints[rng.below(endpoints.len())];
        if self.get(client, b) < self.get(client, a) {
            b
        } else {
            a
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_per_client_and_never_negative() {
        let mut a = Active::new(2, 3);
        a.add(1, 2);
        a.add(1, 2);
        a.remove(0, 2);
        assert_eq!((a.get(0, 2), a.get(1, 2)), (0, 2));
    }

    #[test]
    fn least_of_two_avoids_the_busy_endpoint() {
        let mut a = Active::new(1, 2);
        for _ in 0..5 {
            a.add(0, 0);
        }
        let mut rng = Rng::new(1);
        let picks_of_0 = (0..10_000).filter(|_| a.least_of_two(0, &mut rng) == 0).count();
        // Endpoint 0 wins only when both draws are 0: a quarter of the time.
        assert!((2_200..2_800).contains(&picks_of_0), "{picks_of_0}");
    }
}
