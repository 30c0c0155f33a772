//! Envoy LEAST_REQUEST (choice_count 2) per client proxy: the better of two random endpoints by
//! the proxy's own active requests. It knows nothing of the other proxies.

use super::active::Active;
use super::{Choice, Ctx, Outcome, Policy};
use tailweight_math::rng::Rng;

pub struct LeastRequest {
    active: Active,
    rng: Rng,
}

impl LeastRequest {
    pub fn new(clients: u32, endpoints: u32, seed: u64) -> LeastRequest {
        LeastRequest { active: Active::new(clients, endpoints as usize), rng: Rng::new(seed) }
    }
}

impl Policy for LeastRequest {
    fn pick(&mut self, client: u32, _ctx: &mut Ctx) -> Choice {
        let endpoint = self.active.least_of_two(client, &mut self.rng);
        self.active.add(client, endpoint);
        Choice { endpoint, token: 0 }
    }

    fn complete(&mut self, client: u32, choice: Choice, _outcome: &Outcome, _ctx: &mut Ctx) {
        self.active.remove(client, choice.endpoint);
    }
}
