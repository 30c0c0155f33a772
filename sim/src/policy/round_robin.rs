//! Envoy ROUND_ROBIN with equal weights: each client proxy walks the endpoint list from its own
//! random starting point.

use super::{Choice, Ctx, Outcome, Policy};
use tailweight_math::rng::Rng;

pub struct RoundRobin {
    next: Vec<u32>,
    endpoints: u32,
}

impl RoundRobin {
    pub fn new(clients: u32, endpoints: u32, seed: u64) -> RoundRobin {
        let mut rng = Rng::new(seed);
        RoundRobin { next: (0..clients).map(|_| rng.below(endpoints as usize) as u32).collect(), endpoints }
    }
}

impl Policy for RoundRobin {
    fn pick(&mut self, client: u32, _ctx: &mut Ctx) -> Choice {
        let next = &mut self.next[client as usize];
        let endpoint = *next;
        *next = if endpoint + 1 == self.endpoints { 0 } else { endpoint + 1 };
        Choice { endpoint, token: 0 }
    }

    fn complete(&mut self, _client: u32, _choice: Choice, _outcome: &Outcome, _ctx: &mut Ctx) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::Queue;

    #[test]
    fn each_client_cycles_through_all_endpoints() {
        let mut rr = RoundRobin::new(2, 3, 1);
        let mut queue = Queue::default();
        let mut ctx = Ctx { now_ns: 0, servers: &[], queue: &mut queue, network_delay_ns: 0 };
        for client in 0..2 {
            let mut seen: Vec<u32> = (0..6).map(|_| rr.pick(client, &mut ctx).endpoint).collect();
            assert_eq!(seen[..3], seen[3..], "period 3");
            seen.sort_unstable();
            assert_eq!(seen, vec![0, 0, 1, 1, 2, 2]);
        }
    }
}
