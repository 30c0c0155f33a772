//! Prequal (Wydrowski et al., NSDI'24), per client proxy. Each query sends `PROBES_PER_QUERY`
//! probes to random servers; a probe returns the server's requests in flight (RIF) and its latency
//! estimate and joins the client's pool (at most `POOL` probes, the oldest leave first, none older
//! than `MAX_AGE_NS`; a probe arrives one round trip after it was sent). Hot/cold rule: a probe is
//! hot when its RIF is above the `Q_RIF` quantile of the pool's RIFs; pick the cold probe with the
//! lowest latency, else (all hot) the lowest RIF; with no usable probe, a random server. A used
//! probe counts the request it sent (RIF + 1) and is dropped after `MAX_USES`.

use super::{Choice, Ctx, Outcome, Policy};
use tailweight_math::rng::Rng;

pub const POOL: usize = 16;
pub const PROBES_PER_QUERY: usize = 2;
pub const MAX_AGE_NS: u64 = 1_000_000_000;
pub const Q_RIF: f64 = 0.84;
pub const MAX_USES: u8 = 2;

#[derive(Debug, Clone, Copy)]
struct Probe {
    endpoint: u32,
    rif: u32,
    latency_ns: f64,
    sent_ns: u64,
    ready_ns: u64,
    uses: u8,
}

pub struct Prequal {
    pools: Vec<Vec<Probe>>,
    endpoints: u32,
    rng: Rng,
}

impl Prequal {
    pub fn new(clients: u32, endpoints: u32, seed: u64) -> Prequal {
        Prequal {
            pools: (0..clients).map(|_| Vec::with_capacity(POOL + PROBES_PER_QUERY)).collect(),
            endpoints,
            rng: Rng::new(seed),
        }
    }
}

/// Index of the probe to use among the usable ones (hot/cold lexicographic rule).
fn choose(pool: &[Probe], usable: impl Fn(&Probe) -> bool) -> Option<usize> {
    let mut rifs: Vec<u32> = pool.iter().filter(|p| usable(p)).map(|p| p.rif).collect();
    if rifs.is_empty() {
        return None;
    }
    rifs.sort_unstable();
    let threshold = rifs[((rifs.len() - 1) as f64 * Q_RIF).floor() as usize];
    let candidates = || pool.iter().enumerate().filter(|(_, p)| usable(p));
    let cold =
        candidates().filter(|(_, p)| p.rif <= threshold).min_by(|a, b| a.1.latency_ns.total_cmp(&b.1.latency_ns));
    cold.or_else(|| candidates().min_by_key(|(_, p)| p.rif)).map(|(i, _)| i)
}

impl Policy for Prequal {
    fn pick(&mut self, client: u32, ctx: &mut Ctx) -> Choice {
        let now = ctx.now_ns;
        let pool = &mut self.pools[client as usize];
        pool.retain(|p| now.saturating_sub(p.sent_ns) < MAX_AGE_NS);
        let endpoint = match choose(pool, |p| p.ready_ns <= now) {
            Some(i) => {
                let p = &mut pool[i];
                p.rif += 1;
                p.uses += 1;
                let endpoint = p.endpoint;
                if p.uses >= MAX_USES {
                    pool.swap_remove(i);
                }
                endpoint
            }
            None => self.rng.below(self.endpoints as usize) as u32,
        };
        // Probes for later queries: the server answers at now + delay with what it has then,
        // approximated by its state now; the answer is usable a round trip after sending.
        for _ in 0..PROBES_PER_QUERY {
            let e = self.rng.below(self.endpoints as usize) as u32;
            let s = &ctx.servers[e as usize];
            if pool.len() >= POOL {
                let oldest = (0..pool.len()).min_by_key(|&i| pool[i].sent_ns).unwrap_or(0);
                pool.swap_remove(oldest);
            }
            pool.push(Probe {
                endpoint: e,
                rif: s.in_flight(),
                latency_ns: s.latency_ns,
                sent_ns: now,
                ready_ns: now + 2 * ctx.network_delay_ns,
                uses: 0,
            });
        }
        Choice { endpoint, token: 0 }
    }

    fn complete(&mut self, _client: u32, _choice: Choice, _outcome: &Outcome, _ctx: &mut Ctx) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probe(endpoint: u32, rif: u32, latency_ns: f64) -> Probe {
        Probe { endpoint, rif, latency_ns, sent_ns: 0, ready_ns: 0, uses: 0 }
    }

    #[test]
    fn coldest_latency_among_cold_probes_wins() {
        // RIFs 1..=10: the 0.84 quantile is the 8th smallest (index floor(9 x 0.84) = 7): rif 8.
        let mut pool: Vec<Probe> = (1..=10).map(|r| probe(r, r, 100.0)).collect();
        pool[9].latency_ns = 1.0; // rif 10: hot, however fast
        pool[3].latency_ns = 5.0; // rif 4: cold and fastest
        assert_eq!(choose(&pool, |_| true), Some(3));
    }

    #[test]
    fn unusable_probes_are_ignored_and_none_means_none() {
        let pool = vec![probe(0, 1, 1.0), probe(1, 5, 9.0)];
        assert_eq!(choose(&pool, |p| p.endpoint == 1), Some(1));
        assert_eq!(choose(&pool, |_| false), None);
    }
}
