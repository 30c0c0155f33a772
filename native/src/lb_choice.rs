//! The load-balancing policy's choice, pure: a priority as Envoy's own policies split load across
//! priorities, then two of its healthy hosts drawn at random and the one with the lower expected
//! wait kept (the power of two choices, as Envoy's `least_request`), from Envoy's requests in flight
//! to each host and what this worker's balancer learned of it. The hosts are read through
//! `HostSet` (the ABI glue in `lb_hooks`; a list in the tests); randomness comes as arguments.

use tailweight_picker::LearnedEndpoint;

/// Envoy's default overprovisioning factor: a priority with at least 1 / 1.4 (71%) of its hosts
/// healthy takes all the load it is offered.
pub const OVERPROVISIONING: f64 = 1.4;

/// What `choose` reads of a cluster's hosts.
pub trait HostSet {
    /// How many priorities the cluster has.
    fn priorities(&self) -> usize;
    /// Hosts at `priority`, healthy or not.
    fn hosts(&self, priority: usize) -> usize;
    /// Healthy hosts at `priority` (the only ones a dynamic module may return).
    fn healthy(&self, priority: usize) -> usize;
    /// Healthy host `index` of `priority`.
    fn candidate(&self, priority: usize, index: usize) -> HostLook;
}

/// One healthy host as `choose` compares it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HostLook {
    /// What this worker learned of it (None: nothing yet).
    pub learned: Option<LearnedEndpoint>,
    /// Requests in flight to it from this Envoy, all workers (Envoy's `rq_active`).
    pub in_flight: u64,
}

/// The priority a draw `u` in [0, 1) lands in, by Envoy's priority load: each priority's health is
/// `min(1, OVERPROVISIONING x healthy / hosts)`; the priorities in order take what their health
/// covers of what the earlier ones left; when all of them cover less than the whole, each takes its
/// health's share of their sum. None when no priority has a healthy host.
pub fn priority_for(hosts: &impl HostSet, u: f64) -> Option<usize> {
    let health = |p: usize| match hosts.hosts(p) {
        0 => 0.0,
        n => (OVERPROVISIONING * hosts.healthy(p) as f64 / n as f64).min(1.0),
    };
    let total: f64 = (0..hosts.priorities()).map(health).sum();
    if total <= 0.0 {
        return None;
    }
    let scale = total.min(1.0);
    let (mut left, mut reached) = (1.0, 0.0);
    let mut last = None;
    for p in 0..hosts.priorities() {
        let load = health(p).min(left);
        left -= load;
        if load > 0.0 {
            reached += load / scale;
            last = Some(p);
            if u < reached {
                return last;
            }
        }
    }
    last
}

/// The expected wait of one more request to `host`, lower is better: `(in flight + 1) x cost /
/// weight` with the balancer's per-request cost and sampling weight (`LearnedEndpoint`); a host not
/// learned yet costs the cluster's prior (1 with no balancer: least request) at weight 1. A weight
/// of 0 (suspended or absent) is infinite.
pub fn expected_wait(host: &HostLook, prior_us: f64) -> f64 {
    let (cost, weight) = host.learned.map_or((prior_us, 1.0), |l| (l.cost_us, l.weight));
    if weight <= 0.0 {
        return f64::INFINITY;
    }
    (host.in_flight as f64 + 1.0) * cost.max(f64::MIN_POSITIVE) / weight
}

/// A suspended host whose probe is due and that has nothing in flight takes the request it is drawn
/// for: one request at a time sees whether it is back (its outcome ends or extends the suspension).
fn probe_taken(host: &HostLook) -> bool {
    host.learned.is_some_and(|l| l.probe_due) && host.in_flight == 0
}

/// The host for one request, as (priority, index among that priority's healthy hosts): the priority
/// `priority_for(draws[0])`, two distinct healthy hosts drawn from `draws[1]` and `draws[2]` (one
/// when it has one), the lower `expected_wait` kept (the first on ties; a probe first). `prior_us`:
/// the balancer's cost of an unknown host (None: no balancer for this cluster). None: no healthy host.
pub fn choose(hosts: &impl HostSet, prior_us: Option<f64>, draws: [u64; 3]) -> Option<(u32, u32)> {
    let priority = priority_for(hosts, unit(draws[0]))?;
    let n = hosts.healthy(priority);
    if n == 0 {
        return None;
    }
    let a = (draws[1] % n as u64) as usize;
    if n == 1 {
        return Some((priority as u32, a as u32));
    }
    // A second host distinct from the first: one of the other n - 1.
    let b = (a + 1 + (draws[2] % (n as u64 - 1)) as usize) % n;
    let (look_a, look_b) = (hosts.candidate(priority, a), hosts.candidate(priority, b));
    let prior = prior_us.unwrap_or(1.0);
    let pick = if probe_taken(&look_a) {
        a
    } else if probe_taken(&look_b) || expected_wait(&look_b, prior) < expected_wait(&look_a, prior) {
        b
    } else {
        a
    };
    Some((priority as u32, pick as u32))
}

/// A random `u64` as a fraction in [0, 1).
fn unit(draw: u64) -> f64 {
    (draw >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests;
