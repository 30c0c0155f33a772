use super::*;

/// Priorities of (hosts, healthy looks).
struct Listed(Vec<(usize, Vec<HostLook>)>);

impl HostSet for Listed {
    fn priorities(&self) -> usize {
        self.0.len()
    }
    fn hosts(&self, priority: usize) -> usize {
        self.0[priority].0
    }
    fn healthy(&self, priority: usize) -> usize {
        self.0[priority].1.len()
    }
    fn candidate(&self, priority: usize, index: usize) -> HostLook {
        self.0[priority].1[index]
    }
}

fn learned(cost_us: f64, in_flight: u64) -> HostLook {
    HostLook { learned: Some(LearnedEndpoint { cost_us, weight: 1.0, probe_due: false }), in_flight }
}

fn unknown(in_flight: u64) -> HostLook {
    HostLook { learned: None, in_flight }
}

fn suspended(probe_due: bool, in_flight: u64) -> HostLook {
    HostLook { learned: Some(LearnedEndpoint { cost_us: 90_000.0, weight: 0.0, probe_due }), in_flight }
}

/// Draws that make the two candidates hosts `a` and `b` of `n` (b != a), in priority 0.
fn draws(n: u64, a: u64, b: u64) -> [u64; 3] {
    [0, a, (b + n - a - 1) % n]
}

#[test]
fn the_lower_expected_wait_wins_both_ways_round() {
    let hosts = Listed(vec![(2, vec![learned(2_000.0, 0), learned(40_000.0, 0)])]);
    assert_eq!(choose(&hosts, Some(5_000.0), draws(2, 0, 1)), Some((0, 0)));
    assert_eq!(choose(&hosts, Some(5_000.0), draws(2, 1, 0)), Some((0, 0)));
    // Enough in flight to the fast one: (30 + 1) x 2 ms > 1 x 40 ms.
    let busy = Listed(vec![(2, vec![learned(2_000.0, 30), learned(40_000.0, 0)])]);
    assert_eq!(choose(&busy, Some(5_000.0), draws(2, 0, 1)), Some((0, 1)));
}

#[test]
fn without_a_balancer_it_is_least_request() {
    let hosts = Listed(vec![(3, vec![unknown(4), unknown(1), unknown(2)])]);
    assert_eq!(choose(&hosts, None, draws(3, 0, 1)), Some((0, 1)));
    assert_eq!(choose(&hosts, None, draws(3, 2, 0)), Some((0, 2)));
    assert_eq!(choose(&hosts, None, draws(3, 0, 2)), Some((0, 2)));
}

#[test]
fn a_suspended_host_loses_unless_its_probe_is_due_and_nothing_is_in_flight() {
    let hosts = Listed(vec![(2, vec![suspended(false, 0), learned(50_000.0, 9)])]);
    assert_eq!(choose(&hosts, Some(1.0), draws(2, 0, 1)), Some((0, 1)));
    let due = Listed(vec![(2, vec![learned(1_000.0, 0), suspended(true, 0)])]);
    assert_eq!(choose(&due, Some(1.0), draws(2, 0, 1)), Some((0, 1)), "the probe");
    let probing = Listed(vec![(2, vec![learned(1_000.0, 0), suspended(true, 1)])]);
    assert_eq!(choose(&probing, Some(1.0), draws(2, 0, 1)), Some((0, 0)), "one probe at a time");
}

#[test]
fn two_candidates_are_always_distinct_and_in_range() {
    for n in 2..6u64 {
        let hosts = Listed(vec![(n as usize, (0..n).map(unknown).collect())]);
        for a in 0..n {
            for b in (0..n).filter(|b| *b != a) {
                // The lower in flight (the lower index) wins: both were compared.
                assert_eq!(choose(&hosts, None, draws(n, a, b)), Some((0, a.min(b) as u32)));
            }
        }
    }
}

#[test]
fn one_healthy_host_is_chosen_and_none_is_none() {
    assert_eq!(choose(&Listed(vec![(3, vec![unknown(7)])]), None, [9, 9, 9]), Some((0, 0)));
    assert_eq!(choose(&Listed(vec![(3, vec![])]), None, [0, 0, 0]), None);
    assert_eq!(choose(&Listed(vec![]), None, [0, 0, 0]), None);
}

#[test]
fn priorities_split_load_as_envoy_does() {
    let u = |x: f64| x;
    // 4 of 4 healthy at P0: all load there.
    let full = Listed(vec![(4, vec![unknown(0); 4]), (2, vec![unknown(0); 2])]);
    assert_eq!(priority_for(&full, u(0.999)), Some(0));
    // 2 of 4 healthy at P0: 1.4 x 50% = 70% stays, 30% spills to P1.
    let half = Listed(vec![(4, vec![unknown(0); 2]), (2, vec![unknown(0); 2])]);
    assert_eq!(priority_for(&half, u(0.69)), Some(0));
    assert_eq!(priority_for(&half, u(0.71)), Some(1));
    // 1 of 4 at P0 and 1 of 4 at P1: 35% each, together 70%: normalized to half each.
    let thin = Listed(vec![(4, vec![unknown(0)]), (4, vec![unknown(0)])]);
    assert_eq!(priority_for(&thin, u(0.49)), Some(0));
    assert_eq!(priority_for(&thin, u(0.51)), Some(1));
    // No healthy host anywhere.
    assert_eq!(priority_for(&Listed(vec![(4, vec![])]), 0.1), None);
    // An empty P0 is skipped.
    assert_eq!(priority_for(&Listed(vec![(0, vec![]), (2, vec![unknown(0); 2])]), 0.0), Some(1));
}
