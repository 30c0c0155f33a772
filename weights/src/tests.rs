use crate::*;
use std::collections::BTreeMap;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use tailweight_math::ramp::Ramp;
use tailweight_wire::protocol::{self, VERSION};
use tailweight_wire::reply::write::write_reply;
use tailweight_wire::report::{ClusterReport, EndpointReport, Report};

const SEC: u64 = 1_000_000;
const CLUSTER: &str = "outbound|8080||svc.ns.svc.cluster.local";

/// What one endpoint does in the test world: per reporter per second.
#[derive(Clone, Copy, Debug)]
struct Traffic {
    requests: u64,
    errors: u64,
    latency_us: u64,
    inflight: u32,
    cpu: Option<f64>,
}

fn ok(requests: u64, latency_us: u64) -> Traffic {
    Traffic { requests, errors: 0, latency_us, inflight: 1, cpu: None }
}

/// Reporters with cumulative counters; each `step` adds one second of traffic, reports, recomputes.
struct World {
    book: WeightBook,
    now: u64,
    counters: HashMap<(String, String), (u64, u64, u64)>,
}

impl World {
    fn new(params: WeightParams) -> Self {
        World { book: WeightBook::new(params), now: 10 * SEC, counters: HashMap::new() }
    }

    fn report(&mut self, reporter: &str, endpoints: &[(&str, Traffic)]) -> Report {
        let eps = endpoints
            .iter()
            .map(|(address, t)| {
                let c = self.counters.entry((reporter.to_string(), address.to_string())).or_default();
                c.0 += t.requests;
                c.1 += t.errors;
                c.2 += (t.requests - t.errors) * t.latency_us;
                EndpointReport {
                    address: address.to_string(),
                    requests: c.0,
                    errors: c.1,
                    latency_sum_us: c.2,
                    inflight: t.inflight,
                    latency_ewma_us: t.latency_us,
                    latency_age_ms: 0,
                    cpu: t.cpu,
                    cpu_age_ms: t.cpu.map(|_| 0),
                    seen_age_ms: Some(0),
                    counted_ms: None,
                }
            })
            .collect();
        // "principal/name": a reporter of that principal (else of the trusted one).
        let reporter = principal_and_name(reporter).1;
        // "name#incarnation": several processes under one reporter name, each with its own counters.
        match reporter.split_once('#') {
            Some((name, incarnation)) => Report {
                incarnation: incarnation.parse().unwrap(),
                ..report_of(name, vec![ClusterReport { name: CLUSTER.into(), endpoints: eps }])
            },
            None => report_of(reporter, vec![ClusterReport { name: CLUSTER.into(), endpoints: eps }]),
        }
    }

    /// One second: every reporter reports `traffic(reporter index)`, then a recompute.
    fn step(&mut self, reporters: &[&str], traffic: impl Fn(usize) -> Vec<(&'static str, Traffic)>) {
        self.now += SEC;
        for (i, r) in reporters.iter().enumerate() {
            let report = self.report(r, &traffic(i));
            self.book.ingest_as(&report, principal_and_name(r).0, self.now).unwrap();
        }
        self.book.recompute(self.now);
    }

    /// `seconds` of `step`, each with the same `traffic`.
    fn steps(&mut self, seconds: u64, reporters: &[&str], traffic: impl Fn(usize) -> Vec<(&'static str, Traffic)>) {
        for _ in 0..seconds {
            self.step(reporters, &traffic);
        }
    }

    fn weights(&self) -> BTreeMap<String, f64> {
        self.book.decisions(Some(CLUSTER))[0].endpoints.iter().map(|e| (e.address.clone(), e.weight)).collect()
    }

    fn decision(&self, address: &str) -> EndpointDecision {
        self.book.decisions(Some(CLUSTER))[0].endpoints.iter().find(|e| e.address == address).unwrap().clone()
    }
}

/// "principal/name" -> (principal, name); a bare name is the trusted principal's.
fn principal_and_name(reporter: &str) -> (&str, &str) {
    reporter.split_once('/').unwrap_or((TRUSTED_PRINCIPAL, reporter))
}

fn report_of(reporter: &str, clusters: Vec<ClusterReport>) -> Report {
    Report { version: VERSION, reporter: reporter.into(), incarnation: 1, interval_ms: 1000, clusters }
}

const A: &str = "10.0.0.1:8080";
const B: &str = "10.0.0.2:8080";
const C: &str = "10.0.0.3:8080";
const D: &str = "10.0.0.4:8080";
const REPORTERS: [&str; 4] = ["r0", "r1", "r2", "r3"];

fn assert_mean_one(w: &BTreeMap<String, f64>) {
    let mean = w.values().sum::<f64>() / w.len() as f64;
    assert!((mean - 1.0).abs() < 1e-9, "mean {mean} of {w:?}");
}

#[test]
fn a_five_times_slower_endpoint_ends_with_a_fifth_of_the_weight_by_latency() {
    let mut w = World::new(WeightParams::default());
    w.steps(40, &REPORTERS, |_| vec![(A, ok(50, 10_000)), (B, ok(50, 10_000)), (C, ok(50, 50_000))]);
    let weights = w.weights();
    assert_mean_one(&weights);
    let ratio = weights[C] / weights[A];
    assert!((ratio - 0.2).abs() < 0.01, "C/A = {ratio}, {weights:?}");
    assert!((weights[A] - weights[B]).abs() < 1e-9);
    assert_eq!(w.decision(C).method, Method::Latency);
}

#[test]
fn a_five_times_slower_endpoint_ends_with_a_fifth_of_the_weight_by_cpu() {
    // Same request rates; C burns 5x the CPU per request. Latency says nothing (equal).
    let mut w = World::new(WeightParams::default());
    let t = |cpu| Traffic { cpu: Some(cpu), ..ok(50, 10_000) };
    w.steps(40, &REPORTERS, |_| vec![(A, t(0.1)), (B, t(0.1)), (C, t(0.5))]);
    let weights = w.weights();
    assert!((weights[C] / weights[A] - 0.2).abs() < 0.01, "{weights:?}");
    assert_eq!(w.decision(C).method, Method::Cpu);
    assert_eq!(w.decision(C).cpu_source, Some("orca"));
}

#[test]
fn a_standing_queue_lowers_the_weight_until_it_drains() {
    // Equal capacity by CPU (4 x 50 rps at 0.5); C then holds 100 requests for 20 s, of which it
    // serves one at a time (concurrency unknown: 1).
    let p = WeightParams::default();
    let mut w = World::new(p.clone());
    let t = |inflight| Traffic { cpu: Some(0.5), inflight, ..ok(50, 10_000) };
    w.steps(20, &REPORTERS, |_| vec![(A, t(0)), (B, t(0)), (C, t(0))]);
    assert!((w.weights()[C] - 1.0).abs() < 1e-6, "{:?}", w.weights());
    w.steps(20, &REPORTERS, |_| vec![(A, t(0)), (B, t(0)), (C, t(25))]);
    // Capacity 4 x 50 / 0.5 = 400 rps; the 99 waiting beyond one in service drain in 5 s at
    // 19.8 rps: the target is 380.2 / mean(400, 400, 380.2).
    let c = w.decision(C);
    assert_eq!((c.capacity, c.backlog), (Some(400.0), 99.0));
    let expected = 380.2 / ((400.0 + 400.0 + 380.2) / 3.0);
    assert!((c.target - expected).abs() < 1e-9, "{} vs {expected}", c.target);
    assert!((w.weights()[C] - expected).abs() < 1e-3, "{:?}", w.weights());
    w.steps(20, &REPORTERS, |_| vec![(A, t(0)), (B, t(0)), (C, t(0))]);
    assert!((w.weights()[C] - 1.0).abs() < 1e-3, "back once drained: {:?}", w.weights());
    // Off: capacity alone.
    let mut off = World::new(WeightParams { backlog_drain_us: 0.0, ..p });
    off.steps(20, &REPORTERS, |_| vec![(A, t(0)), (B, t(0)), (C, t(25))]);
    assert!((off.weights()[C] - 1.0).abs() < 1e-6, "{:?}", off.weights());
}

#[test]
fn external_cpu_applies_to_every_port_of_the_ip_and_the_fresher_source_wins() {
    let mut w = World::new(WeightParams::default());
    for _ in 0..40 {
        let now = w.now + SEC;
        w.book.set_external_cpu(A.parse::<SocketAddr>().unwrap().ip(), 0.1, now);
        w.book.set_external_cpu(B.parse::<SocketAddr>().unwrap().ip(), 0.4, now);
        w.step(&REPORTERS, |_| vec![(A, ok(50, 10_000)), (B, ok(50, 10_000))]);
    }
    let weights = w.weights();
    assert!((weights[B] / weights[A] - 0.25).abs() < 0.01, "{weights:?}");
    assert_eq!(w.decision(A).cpu_source, Some("metrics"));
    // An ORCA value newer than the metrics store's wins.
    w.step(&REPORTERS, |_| vec![(A, Traffic { cpu: Some(0.3), ..ok(50, 10_000) }), (B, ok(50, 10_000))]);
    assert_eq!((w.decision(A).cpu, w.decision(A).cpu_source), (Some(0.3), Some("orca")));
}

#[test]
fn orca_votes_older_than_orca_max_age_are_not_used() {
    // r0 and r1 reached A 10 s ago (their last ORCA value, 0.9); r2 a moment ago (0.3).
    let vote = |params: WeightParams| {
        let mut w = World::new(params);
        w.now += SEC;
        for (reporter, cpu, age_ms) in [("r0", 0.9, 10_000), ("r1", 0.9, 10_000), ("r2", 0.3, 100)] {
            let mut report = w.report(reporter, &[(A, Traffic { cpu: Some(cpu), ..ok(50, 10_000) })]);
            report.clusters[0].endpoints[0].cpu_age_ms = Some(age_ms);
            w.book.ingest(&report, w.now).unwrap();
        }
        w.book.recompute(w.now);
        w.decision(A).cpu
    };
    assert_eq!(vote(WeightParams::default()), Some(0.3), "10 s old votes do not count by default");
    let cpu_age_only = WeightParams { orca_max_age_us: 0, ..Default::default() };
    assert_eq!(vote(cpu_age_only.clone()), Some(0.9), "0 leaves it to cpu_max_age (60 s)");
    assert_eq!(vote(WeightParams { cpu_max_age_us: 3 * SEC, ..cpu_age_only }), Some(0.3));
}

#[test]
fn littles_law_learns_concurrency_of_saturated_endpoints() {
    // Same service time (10 ms); A serves 4 at a time, B one. Both saturated: queueing triples the
    // latency; throughput reveals the concurrency (A 400/s, B 100/s).
    let mut w = World::new(WeightParams::default());
    w.steps(5, &["r0"], |_| vec![(A, ok(10, 10_000)), (B, ok(10, 10_000))]);
    w.steps(60, &["r0"], |_| vec![(A, ok(400, 30_000)), (B, ok(100, 30_000))]);
    let (a, b) = (w.decision(A), w.decision(B));
    // Under sustained queueing the service-time estimate creeps up (it cannot tell a slower endpoint
    // from a queue forever), which scales both concurrencies alike: their ratio is what matters.
    let k_ratio = a.concurrency.unwrap() / b.concurrency.unwrap();
    assert!((k_ratio - 4.0).abs() < 0.1, "{a:?} {b:?}");
    assert!((a.weight / b.weight - 4.0).abs() < 0.2, "{a:?} {b:?}");
}

#[test]
fn errors_eject_and_recovery_readmits() {
    let mut w = World::new(WeightParams::default());
    let failing = Traffic { errors: 40, ..ok(50, 1_000) };
    w.steps(5, &REPORTERS, |_| vec![(A, ok(50, 10_000)), (B, failing)]);
    assert!(w.decision(B).ejected, "{:?}", w.decision(B));
    assert!(!w.decision(A).ejected);
    let reply = w.book.reply("r0", [CLUSTER], w.now);
    let b = reply.clusters[0].endpoints.iter().find(|e| e.address == B).unwrap();
    assert!(b.ejected);
    // Failing fast must not look like capacity: each failure costs failure_cost_us. (The weight
    // moves at most x1.5 per recompute, and the first window only had B's fast EWMA to go by.)
    w.steps(10, &REPORTERS, |_| vec![(A, ok(50, 10_000)), (B, failing)]);
    assert!(w.decision(B).weight < 0.1 * w.decision(A).weight, "{:?}", w.weights());
    w.steps(10, &REPORTERS, |_| vec![(A, ok(50, 10_000)), (B, ok(50, 10_000))]);
    assert!(!w.decision(B).ejected, "{:?}", w.decision(B));
}

#[test]
fn a_readmitted_endpoint_resumes_its_weight_instead_of_climbing_from_the_floor() {
    let mut w = World::new(WeightParams::default());
    w.steps(20, &REPORTERS, |_| vec![(A, ok(50, 10_000)), (B, ok(50, 10_000))]);
    let healthy = w.decision(B).weight;
    let down = Traffic { errors: 50, ..ok(50, 1_000) };
    w.steps(20, &REPORTERS, |_| vec![(A, ok(50, 10_000)), (B, down)]);
    assert!(w.decision(B).ejected);
    let mut steps = 0;
    while w.decision(B).ejected || w.decision(B).weight < 0.8 * healthy {
        w.step(&REPORTERS, |_| vec![(A, ok(50, 10_000)), (B, ok(50, 10_000))]);
        steps += 1;
        assert!(steps <= 6, "weight {} of {healthy} after {steps} s: {:?}", w.decision(B).weight, w.decision(B));
    }
}

#[test]
fn a_readmitted_endpoint_resumes_its_share_relative_to_the_others_whose_weights_rose_meanwhile() {
    let mut w = World::new(WeightParams::default());
    w.steps(20, &REPORTERS, |_| vec![(A, ok(50, 10_000)), (B, ok(50, 10_000))]);
    let healthy_ratio = w.decision(B).weight / w.decision(A).weight;
    let down = Traffic { errors: 50, ..ok(50, 1_000) };
    w.steps(20, &REPORTERS, |_| vec![(A, ok(50, 10_000)), (B, down)]);
    assert!(w.decision(B).ejected && w.decision(A).weight > 1.5, "A fills the mean: {:?}", w.weights());
    while w.decision(B).ejected {
        w.step(&REPORTERS, |_| vec![(A, ok(50, 10_000)), (B, ok(50, 10_000))]);
    }
    let ratio = w.decision(B).weight / w.decision(A).weight;
    assert!(ratio >= 0.8 * healthy_ratio, "B/A {ratio} at readmission, {healthy_ratio} while healthy");
    let mean = (w.decision(A).weight + w.decision(B).weight) / 2.0;
    assert!((mean - 1.0).abs() < 1e-9, "the published weights keep mean 1: {:?}", w.weights());
}

#[test]
fn an_ejected_endpoint_without_traffic_fades_back_to_probing() {
    let mut w = World::new(WeightParams::default());
    w.steps(5, &["r0"], |_| vec![(A, ok(50, 10_000)), (B, Traffic { errors: 50, ..ok(50, 1_000) })]);
    assert!(w.decision(B).ejected);
    let mut readmitted_after = None;
    for i in 0..60 {
        // The filter stops sending to B; its cumulative counters stand still.
        w.step(&["r0"], |_| vec![(A, ok(50, 10_000)), (B, Traffic { inflight: 0, ..ok(0, 1_000) })]);
        if !w.decision(B).ejected {
            readmitted_after = Some(i);
            break;
        }
    }
    let after = readmitted_after.expect("never readmitted");
    assert!(after > 3, "readmitted too soon: {after} s");
}

#[test]
fn a_few_requests_weigh_in_proportion_to_their_evidence() {
    let mut w = World::new(WeightParams::default());
    // Now and then one failure among a few requests: noise, never an ejection.
    for i in 0..30 {
        let b = if i % 3 == 0 { Traffic { errors: 1, ..ok(3, 1_000) } } else { ok(3, 1_000) };
        w.step(&["r0"], |_| vec![(A, ok(50, 10_000)), (B, b)]);
        assert!(!w.decision(B).ejected, "{:?}", w.decision(B));
    }
    // Two requests a second, every one failing, for long enough: that is evidence.
    let mut ejected_after = None;
    for i in 0..30 {
        w.step(&["r0"], |_| vec![(A, ok(50, 10_000)), (B, Traffic { errors: 2, ..ok(2, 1_000) })]);
        if w.decision(B).ejected {
            ejected_after = Some(i);
            break;
        }
    }
    let after = ejected_after.expect("never ejected");
    assert!(after >= 2, "a single thin window must not eject: {after}");
}

#[test]
fn smoothing_and_the_step_bound_hold_on_every_recompute() {
    let p = WeightParams::default();
    let mut w = World::new(p.clone());
    w.steps(20, &REPORTERS, |_| vec![(A, ok(50, 10_000)), (B, ok(50, 10_000)), (C, ok(50, 10_000))]);
    let mut prev = w.weights();
    assert!(prev.values().all(|x| (x - 1.0).abs() < 1e-9), "{prev:?}");
    // C becomes 20x slower at once: its target is ~0.14 of A's. The weight must get there gradually.
    let mut steps = 0;
    for i in 0..60 {
        w.step(&REPORTERS, |_| vec![(A, ok(50, 10_000)), (B, ok(50, 10_000)), (C, ok(50, 200_000))]);
        let now = w.weights();
        assert_mean_one(&now);
        for (k, v) in &now {
            let r = v / prev[k];
            assert!(r <= p.max_step + 1e-9 && r >= 1.0 / p.max_step - 1e-9, "step {i}: {k} moved x{r}");
        }
        if i == 0 {
            // Smoothing: one second of a 2 s time constant moves log w by 1 - e^-0.5 = 39% of the way.
            let target = w.decision(C).target;
            let expected_log = (target.ln()) * (1.0 - (-0.5f64).exp());
            assert!(now[C].ln() > expected_log - 0.2, "moved too far at once: {} vs target {target}", now[C]);
            assert!(now[C] < 1.0 / 1.05, "did not move: {}", now[C]);
        }
        if (now[C] - prev[C]).abs() > 1e-6 {
            steps = i + 1;
        }
        prev = now;
    }
    assert!(steps >= 3, "converged in {steps} recomputes: not smoothed");
    let ratio = prev[C] / prev[A];
    assert!((ratio - 0.05).abs() < 0.01, "20x slower -> 1/20: {ratio} {prev:?}");
}

#[test]
fn the_floor_keeps_a_very_slow_endpoint_probed() {
    let p = WeightParams::default();
    let mut w = World::new(p.clone());
    for _ in 0..60 {
        w.step(&REPORTERS, |_| vec![(A, ok(50, 1_000)), (B, ok(50, 1_000)), (C, ok(5, 1_000_000))]);
        assert!(w.weights()[C] >= p.floor - 1e-12, "{:?}", w.weights());
    }
    assert!((w.weights()[C] - p.floor).abs() < 1e-9, "{:?}", w.weights());
}

#[test]
fn an_endpoint_without_data_gets_the_median_weight() {
    let mut w = World::new(WeightParams::default());
    let idle = Traffic { inflight: 1, ..ok(0, 0) };
    for _ in 0..40 {
        w.step(&REPORTERS, |_| vec![(A, ok(50, 10_000)), (B, ok(50, 20_000)), (C, ok(50, 40_000)), (D, idle)]);
    }
    let weights = w.weights();
    assert_eq!(w.decision(D).method, Method::Median);
    assert!((weights[D] - weights[B]).abs() < 1e-6, "{weights:?}");
}

// ---- the lying reporter ----

fn honest_world(liar: Option<&'static str>, lie: Traffic, truth: impl Fn() -> Vec<(&'static str, Traffic)>) -> World {
    let mut w = World::new(WeightParams::default());
    let mut names: Vec<&str> = REPORTERS.to_vec();
    if let Some(l) = liar {
        names.push(l);
    }
    let honest = REPORTERS.len();
    for _ in 0..40 {
        w.step(&names, |i| {
            let mut t = truth();
            if i >= honest {
                t[0].1 = lie;
            }
            t
        });
    }
    w
}

#[test]
fn a_liar_cannot_move_latency_weights_when_the_honest_reporters_agree() {
    let truth = || vec![(A, ok(50, 10_000)), (B, ok(50, 10_000)), (C, ok(50, 50_000))];
    // The same reporter telling the truth about A (its requests in flight to B and C count too).
    let fair = honest_world(Some("liar"), ok(50, 10_000), truth);
    // Lies about A: absurd volume at tiny latency, then absurd latency (in-flight claims: below).
    for lie in [ok(1_000_000, 1), ok(1_000_000, 3_000_000_000)] {
        let lied = honest_world(Some("liar"), lie, truth);
        for (k, v) in fair.weights() {
            assert!((lied.weights()[&k] - v).abs() < 1e-9, "{lie:?}: {k} {v} -> {}", lied.weights()[&k]);
        }
    }
}

#[test]
fn a_liars_in_flight_claim_adds_at_most_the_clipped_backlog() {
    // Each honest reporter has 1 request in flight to A; the liar claims a million. Its share of
    // the sum is clipped to sum_clip x 1, so A's backlog grows by at most that, and the capacity
    // its weight comes from loses at most sum_clip / backlog_drain requests per second.
    let p = WeightParams::default();
    let truth = || vec![(A, ok(50, 10_000)), (B, ok(50, 10_000)), (C, ok(50, 50_000))];
    let fair = honest_world(Some("liar"), ok(50, 10_000), truth);
    let lied = honest_world(Some("liar"), Traffic { inflight: 1_000_000, ..ok(0, 1) }, truth);
    let (before, after) = (fair.decision(A), lied.decision(A));
    assert!(after.backlog - before.backlog <= p.sum_clip + 1e-9, "{} -> {}", before.backlog, after.backlog);
    let capacity = before.capacity.unwrap();
    let max_loss = p.sum_clip * 1e6 / p.backlog_drain_us / capacity;
    let (wa, wb) = (fair.weights()[A], lied.weights()[A]);
    assert!(wb <= wa && (wa - wb) / wa <= max_loss + 1e-9, "A {wa} -> {wb}, bound {max_loss}");
}

#[test]
fn a_liar_moves_cpu_capacity_at_most_by_the_documented_factor() {
    let p = WeightParams::default();
    let t = |cpu| Traffic { cpu: Some(cpu), ..ok(50, 10_000) };
    let truth = || vec![(A, t(0.2)), (B, t(0.2)), (C, t(0.2))];
    let fair = honest_world(None, t(0.2), truth);
    let honest = REPORTERS.len() as f64;
    for lie in [ok(u32::MAX as u64, 10_000), Traffic { cpu: Some(0.000_1), ..ok(u32::MAX as u64, 10_000) }] {
        let lied = honest_world(Some("liar"), lie, truth);
        let (a, fa) = (lied.decision(A), fair.decision(A));
        // Sum bound: with n equal honest reporters, qps rises at most by 1 + sum_clip / n.
        assert!(a.qps <= fa.qps * (1.0 + p.sum_clip / honest) + 1e-9, "{} vs {}", a.qps, fa.qps);
        // ORCA vote bound: the honest reporters agree on 0.2, so the CPU stays 0.2.
        assert_eq!(a.cpu, Some(0.2));
        let bound = 1.0 + p.sum_clip / honest;
        let ratio = a.capacity.unwrap() / fa.capacity.unwrap();
        assert!(ratio <= bound + 1e-9 && ratio >= 1.0 - 1e-9, "capacity x{ratio} > {bound}");
        let (wa, wb) = (lied.weights()[A], lied.weights()[B]);
        assert!(wa / wb <= bound + 1e-6, "weight ratio {}", wa / wb);
    }
}

#[test]
fn with_two_honest_reporters_a_liar_lowers_sums_only_by_withholding_its_own() {
    let mut w = World::new(WeightParams::default());
    for _ in 0..5 {
        w.step(&["h0", "h1", "liar"], |i| {
            let t = if i < 2 {
                Traffic { inflight: 3, ..ok(50, 10_000) }
            } else {
                Traffic { inflight: 1, ..ok(1, 10_000) }
            };
            vec![(A, t)]
        });
    }
    let a = w.decision(A);
    assert!(a.qps >= 100.0 && a.inflight >= 6.0, "{a:?}");
}

#[test]
fn a_liar_cannot_eject_a_healthy_endpoint_nor_inflate_inflight_beyond_the_clip() {
    let p = WeightParams::default();
    let truth = || vec![(A, ok(50, 10_000)), (B, ok(50, 10_000))];
    let lie = Traffic { requests: 1_000_000, errors: 1_000_000, latency_us: 1, inflight: 1_000_000, cpu: None };
    let lied = honest_world(Some("liar"), lie, truth);
    let a = lied.decision(A);
    assert!(!a.ejected && a.error_ratio == 0.0, "{a:?}");
    // Each honest reporter holds 1 in flight: the liar adds at most sum_clip x 1.
    assert!(a.inflight <= 4.0 + p.sum_clip, "{}", a.inflight);
    // A lone reporter, however, is all the evidence there is.
    let mut w = World::new(p);
    w.steps(5, &["only"], |_| vec![(A, Traffic { errors: 50, ..ok(50, 10_000) })]);
    assert!(w.decision(A).ejected);
}

// ---- principals: however many reporter ids a principal uses, it is one voice ----

/// A world of `honest` principals ("h{i}/r{i}", one reporter each, all telling `truth`) and the
/// `liars`: (principal, reporter ids), each id reporting `lie`. 40 recomputes.
fn world_of_principals(
    honest: usize,
    liars: &[(&str, usize)],
    lie: &[(&'static str, Traffic)],
    truth: &[(&'static str, Traffic)],
) -> World {
    let mut names: Vec<String> = (0..honest).map(|i| format!("h{i}/r{i}")).collect();
    for (principal, ids) in liars {
        names.extend((0..*ids).map(|k| format!("{principal}/id{k}")));
    }
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let mut w = World::new(WeightParams::default());
    w.steps(40, &names, |i| if i < honest { truth.to_vec() } else { lie.to_vec() });
    w
}

/// Traffic moved by the attackers, per endpoint the honest principals report: the relative change
/// of its share of those endpoints' weight, `(w_e / sum w)` in `lied` over the same in `fair` (the
/// world where the attacking principals report the truth, as the honest ones do), minus 1; an
/// endpoint ejected in one world and not the other moved all of its traffic (1). The largest over
/// the endpoints.
fn traffic_moved(fair: &World, lied: &World, endpoints: &[&str]) -> f64 {
    let share = |w: &World, e: &str| {
        let weights = w.weights();
        weights[e] / endpoints.iter().map(|x| weights[*x]).sum::<f64>()
    };
    endpoints
        .iter()
        .map(|e| {
            if fair.decision(e).ejected != lied.decision(e).ejected {
                1.0
            } else {
                (share(lied, e) / share(fair, e) - 1.0).abs()
            }
        })
        .fold(0.0, f64::max)
}

const BOUND: f64 = 0.05;

/// Lies about one endpoint (A) or all, each as every id of a lying principal reports it.
fn lies() -> Vec<(&'static str, Vec<(&'static str, Traffic)>)> {
    let huge = 1_000_000;
    let normal = |latency| ok(50, latency);
    vec![
        (
            "all of A's requests fail",
            vec![(A, Traffic { errors: huge, ..ok(huge, 10_000) }), (B, normal(10_000)), (C, normal(50_000))],
        ),
        ("all traffic goes to A", vec![(A, ok(huge, 10_000))]),
        ("A gets none", vec![(B, ok(huge, 10_000)), (C, ok(huge, 50_000))]),
        ("A is fast, B and C slow", vec![(A, ok(huge, 1)), (B, ok(huge, 3_000_000_000)), (C, ok(huge, 3_000_000_000))]),
        ("A is failing and slow", vec![(A, Traffic { errors: 40, ..ok(50, 3_000_000_000) }), (B, normal(10_000))]),
        (
            "fast made-up endpoints beside the real ones",
            vec![(A, normal(10_000)), (B, normal(10_000)), (C, normal(50_000))]
                .into_iter()
                .chain(FAKE.map(|f| (f, ok(huge, 1))))
                .collect(),
        ),
        (
            "made-up endpoints at no CPU",
            FAKE.map(|f| (f, Traffic { cpu: Some(0.000_1), ..ok(huge, 1) }))
                .into_iter()
                .chain([(A, ok(huge, 1))])
                .collect(),
        ),
    ]
}

/// Endpoints no honest reporter knows.
const FAKE: [&str; 6] = ["10.9.0.1:80", "10.9.0.2:80", "10.9.0.3:80", "10.9.0.4:80", "10.9.0.5:80", "10.9.0.6:80"];

const LATENCY_TRUTH: [(&str, Traffic); 3] = [
    (A, Traffic { requests: 50, errors: 0, latency_us: 10_000, inflight: 1, cpu: None }),
    (B, Traffic { requests: 50, errors: 0, latency_us: 10_000, inflight: 1, cpu: None }),
    (C, Traffic { requests: 50, errors: 0, latency_us: 50_000, inflight: 1, cpu: None }),
];

fn cpu_truth() -> Vec<(&'static str, Traffic)> {
    [(A, 0.2), (B, 0.2), (C, 0.4)].map(|(e, cpu)| (e, Traffic { cpu: Some(cpu), ..ok(50, 10_000) })).to_vec()
}

fn cpu_lies() -> Vec<(&'static str, Vec<(&'static str, Traffic)>)> {
    let t = |requests, cpu| Traffic { cpu: Some(cpu), ..ok(requests, 10_000) };
    vec![
        ("A is idle, C busy", vec![(A, t(1_000_000, 0.000_1)), (B, t(50, 0.2)), (C, t(50, 1_000.0))]),
        ("all traffic goes to A at no CPU", vec![(A, t(1_000_000, 0.01))]),
        ("C gets none", vec![(A, t(1_000_000, 0.2)), (B, t(1_000_000, 0.2))]),
        ("made-up endpoints at no CPU", FAKE.map(|f| (f, t(1_000_000, 0.000_1))).to_vec()),
    ]
}

#[test]
fn invented_reporter_ids_of_the_trusted_principal_can_eject_a_healthy_endpoint() {
    // Why identities matter: two made-up reporters claiming errors == requests clip nothing
    // between themselves, and out-vote four honest ones.
    let mut w = World::new(WeightParams::default());
    let names = ["r0", "r1", "r2", "r3", "fake0", "fake1"];
    let failing = Traffic { errors: 1_000_000, ..ok(1_000_000, 10_000) };
    w.steps(10, &names, |i| if i < 4 { LATENCY_TRUTH.to_vec() } else { vec![(A, failing)] });
    assert!(w.decision(A).ejected);
}

#[test]
fn one_principal_with_many_ids_moves_any_endpoints_traffic_by_at_most_5_percent() {
    for (truth, lies) in [(LATENCY_TRUTH.to_vec(), lies()), (cpu_truth(), cpu_lies())] {
        for ids in [1, 2, 7] {
            let fair = world_of_principals(4, &[("mallory", ids)], &truth, &truth);
            for (what, lie) in &lies {
                let lied = world_of_principals(4, &[("mallory", ids)], lie, &truth);
                let moved = traffic_moved(&fair, &lied, &[A, B, C]);
                assert!(
                    moved <= BOUND,
                    "{what}, {ids} ids: moved {moved:.4}, {:?} vs {:?}",
                    lied.weights(),
                    fair.weights()
                );
            }
        }
    }
}

#[test]
fn liars_in_two_principals_move_any_endpoints_traffic_by_at_most_5_percent() {
    let liars = [("mallory", 3), ("trudy", 2)];
    for (truth, lies) in [(LATENCY_TRUTH.to_vec(), lies()), (cpu_truth(), cpu_lies())] {
        let fair = world_of_principals(3, &liars, &truth, &truth);
        for (what, lie) in &lies {
            let lied = world_of_principals(3, &liars, lie, &truth);
            let moved = traffic_moved(&fair, &lied, &[A, B, C]);
            assert!(moved <= BOUND, "{what}: moved {moved:.4}, {:?} vs {:?}", lied.weights(), fair.weights());
        }
    }
}

#[test]
fn in_flight_claims_of_one_or_two_principals_move_traffic_by_at_most_5_percent() {
    // The honest principals hold different in-flight counts per endpoint (none on A).
    let at = |inflight, latency| Traffic { inflight, ..ok(50, latency) };
    let truth = [(A, at(0, 10_000)), (B, at(2, 10_000)), (C, at(4, 50_000))];
    for liars in [&[("mallory", 5)][..], &[("mallory", 3), ("trudy", 3)]] {
        let fair = world_of_principals(4, liars, &truth, &truth);
        for inflight in [3, 1_000_000] {
            let lie = [(C, at(inflight, 50_000)), (B, at(inflight, 10_000)), (A, ok(50, 10_000))];
            let lied = world_of_principals(4, liars, &lie, &truth);
            let moved = traffic_moved(&fair, &lied, &[A, B, C]);
            assert!(
                moved <= BOUND,
                "in flight {inflight}: moved {moved:.4}, {:?} vs {:?}",
                lied.weights(),
                fair.weights()
            );
        }
    }
}

#[test]
fn an_honest_majority_of_principals_still_ejects_a_failing_endpoint() {
    // The honest principals see A fail; two lying principals claim it is fine.
    let failing: Vec<(&str, Traffic)> = vec![(A, Traffic { errors: 50, ..ok(50, 10_000) }), (B, ok(50, 10_000))];
    let fine = vec![(A, ok(1_000_000, 10_000)), (B, ok(50, 10_000))];
    let lied = world_of_principals(3, &[("mallory", 4), ("trudy", 4)], &fine, &failing);
    assert!(lied.decision(A).ejected, "{:?}", lied.decision(A));
    assert!(!lied.decision(B).ejected);
}

#[test]
fn a_principal_holds_at_most_its_share_of_each_cap() {
    let p = WeightParams {
        max_reporters: 8,
        max_clusters: 8,
        max_endpoints_per_cluster: 4,
        max_observations: 40,
        principal_share: 0.25,
        ..Default::default()
    };
    let mut book = WeightBook::new(p);
    let endpoints = |from: usize, n: usize| -> Vec<EndpointReport> {
        (from..from + n)
            .map(|i| EndpointReport { address: format!("10.0.0.{}:80", i + 1), requests: 1, ..Default::default() })
            .collect()
    };
    let cluster = |name: &str, from, n| ClusterReport { name: name.into(), endpoints: endpoints(from, n) };
    let report = |name: &str, clusters| report_of(name, clusters);
    // Quotas: 2 reporters, 2 clusters, 4 endpoints of one cluster (whose room is 16).
    book.ingest_as(&report("a", vec![cluster("c0", 0, 4)]), "mallory", SEC).unwrap();
    book.ingest_as(&report("b", vec![cluster("c0", 0, 2)]), "mallory", SEC).unwrap();
    let before = book.counts();
    let cases = [
        (report("c", vec![cluster("c0", 0, 1)]), Rejection::PrincipalReporters),
        (report("b", vec![cluster("c0", 2, 3)]), Rejection::PrincipalEndpoints),
        (report("a", vec![cluster("c1", 0, 1), cluster("c2", 0, 1)]), Rejection::PrincipalClusters),
    ];
    for (r, why) in cases {
        assert_eq!(book.ingest_as(&r, "mallory", 2 * SEC), Err(why));
        assert_eq!(book.counts(), before, "{why:?} changed something");
    }
    // Others are not locked out of the cluster mallory filled its share of: each gets its own.
    for (i, other) in ["alice", "bob", "carol"].into_iter().enumerate() {
        book.ingest_as(&report("a", vec![cluster("c0", 4 * (i + 1), 4)]), other, 2 * SEC).unwrap();
    }
    assert_eq!(book.counts().endpoints, 16);
    assert_eq!(
        book.ingest_as(&report("a", vec![cluster("c0", 16, 1)]), "dave", 2 * SEC),
        Err(Rejection::TooManyEndpoints)
    );
    // A principal's quotas free up when what it said expires.
    book.expire(10 * SEC);
    assert_eq!(book.counts(), Counts::default());
    book.ingest_as(&report("c", vec![cluster("c0", 0, 2)]), "mallory", 11 * SEC).unwrap();
}

#[test]
fn principals_at_their_quotas_leave_room_for_a_newcomer_and_let_it_grow() {
    // Four principals of a quarter of the book each, one after another, report 10 endpoints at a
    // time (new clusters) until refused: the last one stops at its fair share (a fifth), so a
    // newcomer's report still fits (`fair_room.rs`).
    let report = |reporter: &str, cluster: String, n: usize| {
        let endpoints = (0..n).map(|i| EndpointReport { address: format!("10.1.0.{i}:80"), ..Default::default() });
        report_of(reporter, vec![ClusterReport { name: cluster, endpoints: endpoints.collect() }])
    };
    let params = WeightParams { principal_share: 0.25, max_bytes: 4_000_000, ..WeightParams::default() };
    let mut book = WeightBook::new(params);
    for p in 0..4 {
        for k in 0.. {
            let principal = format!("sa-{p}");
            if book.ingest_as(&report(&format!("r{p}"), format!("c{p}-{k}"), 10), &principal, SEC).is_err() {
                break;
            }
        }
    }
    let full = book.counts().bytes;
    assert!(full <= 4_000_000 - 150_000 && full > 3_000_000, "{full}");
    // A newcomer's report (about 37 KB) is taken; so are the heavy principals' renewals.
    book.ingest_as(&report("newbie", "c-new".into(), 10), "sa-new", SEC).unwrap();
    book.ingest_as(&report("r0", "c0-0".into(), 10), "sa-0", 2 * SEC).unwrap();
    // While the newcomer grows (below its share: waiting), a principal above its share may not
    // take the room it lacks; the newcomer may.
    assert_eq!(book.ingest_as(&report("r3", "c3-new".into(), 10), "sa-3", 2 * SEC), Err(Rejection::MemoryBudget));
    book.ingest_as(&report("newbie", "c-new-2".into(), 10), "sa-new", 2 * SEC).unwrap();
    assert!(book.counts().bytes > full);
}

#[test]
fn the_memory_budget_refuses_what_would_exceed_it_and_frees_what_expires() {
    let report = |reporter: &str, n: usize| {
        report_of(
            reporter,
            vec![ClusterReport {
                name: CLUSTER.into(),
                endpoints: (0..n)
                    .map(|i| EndpointReport {
                        address: format!("10.1.{}.{}:80", i / 250, i % 250),
                        requests: 1,
                        ..Default::default()
                    })
                    .collect(),
            }],
        )
    };
    let mut probe = WeightBook::new(WeightParams::default());
    probe.ingest(&report("r0", 100), SEC).unwrap();
    let one = probe.counts().bytes;
    // Room for the first report and not for a second reporter's observations of the same endpoints.
    let mut book = WeightBook::new(WeightParams { max_bytes: one, ..Default::default() });
    book.ingest(&report("r0", 100), SEC).unwrap();
    let before = book.counts();
    assert_eq!(book.ingest(&report("r1", 100), SEC), Err(Rejection::MemoryBudget));
    assert_eq!(book.counts(), before);
    // A full book still takes what those it holds report again.
    let mut again = report("r0", 100);
    again.clusters[0].endpoints[0].requests = 7;
    book.ingest(&again, 2 * SEC).unwrap();
    // A principal's share of the budget is bounded the same way, the endpoints and clusters its
    // reports entered included.
    let mut shared = WeightBook::new(WeightParams { max_bytes: 10 * one, principal_share: 0.15, ..Default::default() });
    shared.ingest_as(&report("r0", 100), "mallory", SEC).unwrap();
    let mut elsewhere = report("r0", 100);
    elsewhere.clusters[0].name = "another".into();
    assert_eq!(shared.ingest_as(&elsewhere, "mallory", SEC), Err(Rejection::PrincipalMemory));
    shared.ingest_as(&report("r1", 100), "alice", SEC).unwrap();
    // What expires is given back.
    book.expire(10 * SEC);
    assert_eq!(book.counts().bytes, 0);
    book.ingest(&report("r1", 100), 11 * SEC).unwrap();
}

#[test]
fn a_claimed_interval_beyond_the_server_bound_does_not_extend_the_ttl() {
    let mut book = WeightBook::new(WeightParams::default());
    let mut r = report_of("slow", vec![ClusterReport { name: CLUSTER.into(), endpoints: vec![] }]);
    r.interval_ms = protocol::INTERVAL_MS.end().to_owned();
    r.clusters[0].endpoints.push(EndpointReport { address: A.into(), requests: 1, ..Default::default() });
    book.ingest(&r, SEC).unwrap();
    // 3 x the 10 s bound, not 3 x 600 s.
    book.expire(SEC + 30 * SEC);
    assert_eq!(book.counts(), Counts::default());
}

#[test]
fn another_principal_reusing_a_reporter_name_leaves_it_alone() {
    let mut w = World::new(WeightParams::default());
    w.steps(3, &["alice/pod-1", "alice/pod-2"], |_| vec![(A, ok(50, 10_000))]);
    // Mallory reports as "pod-1" with another incarnation: alice's pod-1 keeps its ttl and window.
    w.now += SEC;
    let mut r = w.report("mallory/pod-1#99", &[(A, ok(1, 10_000))]);
    r.incarnation = 99;
    w.book.ingest_as(&r, "mallory", w.now).unwrap();
    // Superseded, alice's pod-1 would expire one interval after mallory's report.
    w.book.expire(w.now + SEC);
    assert_eq!(w.book.counts().reporters, 3, "alice's pod-1 was not superseded");
}

// ---- reply, expiry, resets, caps ----

#[test]
fn reply_excludes_the_askers_own_inflight_and_omits_unknown_clusters() {
    // The reporters' last counts (`ViewInflight::Last`): their sum, less the asker's own.
    let mut w = World::new(WeightParams { view_inflight: ViewInflight::Last, ..WeightParams::default() });
    w.step(&["r0", "r1"], |i| vec![(A, Traffic { inflight: if i == 0 { 3 } else { 5 }, ..ok(10, 1_000) })]);
    let reply = w.book.reply("r0", [CLUSTER, "unknown"], w.now);
    assert_eq!(reply.version, VERSION);
    assert_eq!(reply.clusters.len(), 1);
    let a = &reply.clusters[0].endpoints[0];
    assert_eq!((a.inflight, a.peer_inflight), (8.0, 5.0));
    assert_eq!(w.book.reply("r1", [CLUSTER], w.now).clusters[0].endpoints[0].peer_inflight, 3.0);
    assert_eq!(w.book.reply("stranger", [CLUSTER], w.now).clusters[0].endpoints[0].peer_inflight, 8.0);
    assert_eq!(reply.ttl_ms, 3_000, "three intervals of 1 s");
    assert!(reply.validate(&protocol::Limits::default()).is_ok());
}

#[test]
fn the_views_inflight_is_the_last_counts_or_the_windows_qps_times_latency() {
    // r0 sends 40 rps, r1 60 rps, both at 25 ms, and last had 3 and 5 in flight.
    let run = |view_inflight| {
        let mut w = World::new(WeightParams { view_inflight, ..WeightParams::default() });
        for _ in 0..3 {
            w.step(&["r0", "r1"], |i| {
                let (requests, inflight) = if i == 0 { (40, 3) } else { (60, 5) };
                vec![(A, Traffic { inflight, ..ok(requests, 25_000) }), (B, ok(50, 10_000))]
            });
        }
        w
    };
    let (last, mean) = (run(ViewInflight::Last), run(ViewInflight::Mean));
    let view = |w: &World, asker: &str| {
        let reply = w.book.reply(asker, [CLUSTER], w.now);
        let mut fast = Vec::new();
        w.book.reply_plan(TRUSTED_PRINCIPAL, asker, [CLUSTER], w.now, usize::MAX).render(&mut fast);
        assert_eq!(fast, write_reply(&reply), "the rendered reply carries the same numbers");
        let a = reply.clusters[0].endpoints.iter().find(|e| e.address == A).unwrap().clone();
        (a.inflight, a.peer_inflight)
    };
    // Last: the reporters' last counts, less the asker's own.
    assert_eq!(view(&last, "r0"), (8.0, 5.0));
    assert_eq!(view(&last, "stranger"), (8.0, 8.0));
    assert_eq!(last.decision(A).view_inflight, 8.0);
    // Mean: 100 rps x 0.025 s = 2.5 in flight on average; r0's own 3 leaves none to its peers.
    let d = mean.decision(A);
    assert_eq!((d.qps, d.latency_us), (100.0, 25_000));
    assert!((d.view_inflight - 2.5).abs() < 1e-9, "{d:?}");
    let (inflight, peers) = view(&mean, "r0");
    assert!((inflight - 2.5).abs() < 1e-9 && peers == 0.0, "{inflight} {peers}");
    assert!((view(&mean, "stranger").1 - 2.5).abs() < 1e-9);
    // B: 2 x 50 rps x 0.01 s = 1 on average, against the 2 last counted.
    assert!((mean.decision(B).view_inflight - 1.0).abs() < 1e-9);
    assert_eq!(last.decision(B).view_inflight, 2.0);
    // Only the view changes: the decision's merged count (and the backlog it feeds) and the weights stay.
    assert_eq!(
        (d.inflight, d.backlog, mean.decision(A).weight),
        (8.0, last.decision(A).backlog, last.decision(A).weight)
    );
    assert_eq!(mean.weights(), last.weights());
}

#[test]
fn reply_json_is_the_serialised_reply_byte_for_byte() {
    let mut w = World::new(WeightParams::default());
    for i in 0..8 {
        w.book.set_external_cpu("10.0.0.2".parse().unwrap(), 0.3, w.now);
        w.step(&REPORTERS, |r| {
            vec![
                (A, Traffic { inflight: r as u32, ..ok(50, 10_000 + i) }),
                (B, Traffic { errors: 45, ..ok(50, 1_000) }),
                (C, Traffic { cpu: Some(0.123_456_789), ..ok(50, 50_000) }),
            ]
        });
    }
    for asker in ["r0", "r3", "stranger"] {
        let names = [CLUSTER, "unknown", CLUSTER];
        let mut fast = Vec::new();
        w.book.reply_plan(TRUSTED_PRINCIPAL, asker, names, w.now, usize::MAX).render(&mut fast);
        let slow = write_reply(&w.book.reply(asker, names, w.now));
        assert_eq!(String::from_utf8(fast).unwrap(), String::from_utf8(slow).unwrap());
    }
    let mut empty = Vec::new();
    w.book.reply_plan(TRUSTED_PRINCIPAL, "r0", [], w.now, usize::MAX).render(&mut empty);
    assert_eq!(empty, write_reply(&w.book.reply("r0", [], w.now)));
}

#[test]
fn silent_reporters_expire_with_what_they_said() {
    let mut w = World::new(WeightParams::default());
    w.step(&["r0", "r1"], |i| vec![(if i == 0 { A } else { B }, ok(10, 1_000))]);
    assert_eq!(
        w.book.counts(),
        Counts {
            principals: 1,
            reporters: 2,
            clusters: 1,
            endpoints: 2,
            observations: 2,
            cpu_entries: 0,
            ..w.book.counts()
        }
    );
    // r1 falls silent; r0 keeps reporting. After r1's ttl (3 s) it and endpoint B are gone.
    for _ in 0..2 {
        w.step(&["r0"], |_| vec![(A, ok(10, 1_000))]);
        w.book.expire(w.now);
    }
    assert_eq!(w.book.counts().reporters, 2);
    for _ in 0..2 {
        w.step(&["r0"], |_| vec![(A, ok(10, 1_000))]);
        w.book.expire(w.now);
    }
    assert_eq!(
        w.book.counts(),
        Counts {
            principals: 1,
            reporters: 1,
            clusters: 1,
            endpoints: 1,
            observations: 1,
            cpu_entries: 0,
            ..w.book.counts()
        }
    );
    assert!(w.book.reply("r0", [CLUSTER], w.now).clusters[0].endpoints.iter().all(|e| e.address == A));
    // Everyone silent: nothing is left.
    w.book.expire(w.now + 10 * SEC);
    assert_eq!(w.book.counts(), Counts::default());
    assert!(w.book.reply("r0", [CLUSTER], w.now).clusters.is_empty());
}

#[test]
fn a_dead_reporters_inflight_stops_counting_before_expiry_runs() {
    let mut w = World::new(WeightParams::default());
    w.step(&["r0", "r1"], |_| vec![(A, Traffic { inflight: 4, ..ok(10, 1_000) })]);
    w.steps(4, &["r0"], |_| vec![(A, Traffic { inflight: 4, ..ok(10, 1_000) })]);
    assert_eq!(w.decision(A).inflight, 4.0);
}

#[test]
fn counters_are_differenced_and_a_reset_yields_no_delta() {
    let mut book = WeightBook::new(WeightParams::default());
    let ep = |requests, latency_sum_us| EndpointReport {
        address: A.into(),
        requests,
        latency_sum_us,
        inflight: 0,
        ..Default::default()
    };
    let mut r = report_of("r0", vec![ClusterReport { name: CLUSTER.into(), endpoints: vec![ep(1_000, 1_000_000)] }]);
    book.ingest(&r, SEC).unwrap();
    r.clusters[0].endpoints[0] = ep(1_100, 2_000_000);
    book.ingest(&r, 2 * SEC).unwrap();
    book.recompute(2 * SEC);
    let d = &book.decisions(None)[0].endpoints[0];
    assert_eq!((d.qps, d.latency_us), (100.0, 10_000), "100 requests, 1 s of latency sum over them");
    // A restart: new incarnation, counters from zero. No delta this time (qps stays the last window's).
    r.incarnation = 2;
    r.clusters[0].endpoints[0] = ep(5, 50_000);
    book.ingest(&r, 3 * SEC).unwrap();
    r.clusters[0].endpoints[0] = ep(55, 550_000);
    book.ingest(&r, 4 * SEC).unwrap();
    book.recompute(4 * SEC);
    assert_eq!(book.decisions(None)[0].endpoints[0].qps, 50.0);
    // A counter going down within the same incarnation is a reset too.
    r.clusters[0].endpoints[0] = ep(1, 1);
    book.ingest(&r, 5 * SEC).unwrap();
    r.clusters[0].endpoints[0] = ep(21, 200_001);
    book.ingest(&r, 6 * SEC).unwrap();
    book.recompute(6 * SEC);
    assert_eq!(book.decisions(None)[0].endpoints[0].qps, 20.0);
}

#[test]
fn a_report_soon_after_the_last_one_does_not_fake_a_zero_rate() {
    let mut w = World::new(WeightParams::default());
    w.step(&["r0"], |_| vec![(A, ok(100, 1_000))]);
    w.step(&["r0"], |_| vec![(A, ok(100, 1_000))]);
    // The same counters again 10 ms later.
    let r = w.report("r0", &[(A, ok(0, 1_000))]);
    w.book.ingest(&r, w.now + 10_000).unwrap();
    w.book.recompute(w.now + 10_000);
    assert_eq!(w.decision(A).qps, 100.0);
}

#[test]
fn caps_refuse_whole_reports_and_change_nothing() {
    let p = WeightParams {
        max_reporters: 2,
        max_clusters: 2,
        max_endpoints_per_cluster: 3,
        max_observations: 5,
        ..Default::default()
    };
    let mut book = WeightBook::new(p);
    let cluster = |name: &str, n: usize| ClusterReport {
        name: name.into(),
        endpoints: (0..n)
            .map(|i| EndpointReport { address: format!("10.0.0.{}:80", i + 1), requests: 1, ..Default::default() })
            .collect(),
    };
    book.ingest(&report_of("r0", vec![cluster("c0", 3)]), SEC).unwrap();
    book.recompute(SEC);
    let before = (book.counts(), book.decisions(None));
    let cases = [
        (report_of("r1", vec![cluster("c0", 4)]), Rejection::TooManyEndpoints),
        (report_of("r1", vec![cluster("c1", 1), cluster("c2", 1)]), Rejection::TooManyClusters),
        (report_of("r1", vec![cluster("c0", 3)]), Rejection::TooManyObservations),
    ];
    for (report, why) in cases {
        assert_eq!(book.ingest(&report, 2 * SEC), Err(why));
        assert_eq!((book.counts(), book.decisions(None)), before, "{why:?} changed something");
    }
    book.ingest(&report_of("r1", vec![cluster("c1", 2)]), 2 * SEC).unwrap();
    assert_eq!(book.ingest(&report_of("r2", vec![cluster("c1", 1)]), 2 * SEC), Err(Rejection::TooManyReporters));
    // Known reporters re-reporting what they hold are never refused.
    book.ingest(&report_of("r0", vec![cluster("c0", 3)]), 3 * SEC).unwrap();
    assert_eq!(book.counts().observations, 5);
    assert_eq!(Rejection::TooManyEndpoints.as_str(), "too_many_endpoints");
}

#[test]
fn memory_stays_bounded_under_reporter_churn() {
    let mut book = WeightBook::new(WeightParams::default());
    let mut peak = Counts::default();
    for round in 0..50u64 {
        let now = round * SEC;
        for i in 0..100 {
            let r = report_of(
                &format!("pod-{round}-{i}"),
                vec![ClusterReport {
                    name: format!("c{}", round % 7),
                    endpoints: vec![EndpointReport {
                        address: format!("10.1.{}.{}:80", round % 250, i),
                        requests: 1,
                        ..Default::default()
                    }],
                }],
            );
            book.ingest(&r, now).unwrap();
        }
        book.recompute(now);
        book.expire(now);
        let c = book.counts();
        peak.reporters = peak.reporters.max(c.reporters);
        peak.endpoints = peak.endpoints.max(c.endpoints);
    }
    // Reporters live 3 s: at most 4 rounds of 100 at once.
    assert!(peak.reporters <= 400 && peak.endpoints <= 400, "{peak:?}");
}

#[test]
fn params_are_validated() {
    assert!(WeightParams::default().validate().is_ok());
    let bad = [
        WeightParams { max_step: 1.0, ..Default::default() },
        WeightParams { floor: 0.5, ..Default::default() },
        WeightParams { vote_cap: 1.0, ..Default::default() },
        WeightParams { sum_clip: 0.5, ..Default::default() },
        WeightParams { smoothing_us: f64::NAN, ..Default::default() },
    ];
    for p in bad {
        let err = p.validate().unwrap_err().to_string();
        assert!(!err.contains('\n'), "{err}");
    }
}

#[test]
fn bad_external_cpu_is_ignored() {
    let mut book = WeightBook::new(WeightParams { max_cpu_entries: 1, ..Default::default() });
    let ip: IpAddr = "10.0.0.1".parse().unwrap();
    for bad in [f64::NAN, -1.0, f64::INFINITY, 1e9] {
        book.set_external_cpu(ip, bad, 0);
    }
    assert_eq!(book.external_cpu(ip), None);
    book.set_external_cpu(ip, 0.5, 7);
    book.set_external_cpu("10.0.0.2".parse().unwrap(), 0.5, 7);
    assert_eq!((book.external_cpu(ip), book.counts().cpu_entries), (Some((0.5, 7)), 1));
}

// ---- the slowdown benchmark in miniature ----

/// Ten backends of two workers, 10 ms per request; 800 rps offered, split by the book's weights (as
/// Envoy's WRR would); backend 3 becomes 5x slower at `SLOW_AT`. Each of `reporters` client sidecars
/// sends a quarter of the traffic and reports every second, like the filter: cumulative counters, its
/// in flight, and (with `orca`) the last ORCA utilisation seen (the backend's busy fraction over the
/// last second, as the emulator sends it). `prometheus`: instead, every 10 s the metrics store hands
/// the book the utilisation averaged over the last 60 s (`rate(...[1m])`), which lags the change.
struct Slowdown {
    w: World,
    names: Vec<String>,
    addresses: Vec<String>,
    speed: Vec<f64>,
    backlog: Vec<f64>,
    /// Utilisation per backend per second, newest last (for the lagging metrics store).
    utilisation: Vec<Vec<f64>>,
    orca: bool,
    prometheus: bool,
    t: u64,
    rng: tailweight_math::rng::Rng,
}

const SLOW: usize = 3;
const SLOW_AT: u64 = 30;
const WORKERS: f64 = 2.0;
const BASE_S: f64 = 0.010;

impl Slowdown {
    fn new(names: &[&str], orca: bool, prometheus: bool) -> Self {
        Slowdown {
            w: World::new(WeightParams::default()),
            names: names.iter().map(|n| n.to_string()).collect(),
            addresses: (0..10).map(|i| format!("10.0.1.{}:8080", i + 1)).collect(),
            speed: vec![1.0; 10],
            backlog: vec![0.0; 10],
            utilisation: vec![Vec::new(); 10],
            orca,
            prometheus,
            t: 0,
            rng: tailweight_math::rng::Rng::new(7),
        }
    }

    fn decision(&self, i: usize) -> Option<EndpointDecision> {
        self.w
            .book
            .decisions(Some(CLUSTER))
            .first()
            .and_then(|c| c.endpoints.iter().find(|e| e.address == self.addresses[i]).cloned())
    }

    fn weight(&self, i: usize) -> f64 {
        self.decision(i).map_or(1.0, |e| e.weight)
    }

    /// The slowed backend's weight relative to the mean of the fast ones.
    fn relative(&self) -> f64 {
        let fast: f64 = (0..10).filter(|i| *i != SLOW).map(|i| self.weight(i)).sum::<f64>() / 9.0;
        self.weight(SLOW) / fast
    }

    /// The same for the capacity estimate (before smoothing, bounds and the backlog's drain).
    fn relative_capacity(&self) -> f64 {
        let capacity = |i: usize| self.decision(i).and_then(|e| e.capacity).unwrap_or(f64::NAN);
        let fast: f64 = (0..10).filter(|i| *i != SLOW).map(capacity).sum::<f64>() / 9.0;
        capacity(SLOW) / fast
    }

    /// One second of traffic, the reports, a recompute.
    fn step(&mut self) {
        self.t += 1;
        if self.t == SLOW_AT {
            self.speed[SLOW] = 5.0;
        }
        let weights: Vec<f64> = (0..10).map(|i| self.weight(i)).collect();
        let total: f64 = weights.iter().sum();
        let mut per_backend = Vec::new();
        for (i, weight) in weights.iter().enumerate() {
            let service_s = BASE_S * self.speed[i];
            let capacity = WORKERS / service_s;
            let offered = 800.0 * weight / total;
            let served = (offered + self.backlog[i]).min(capacity);
            self.backlog[i] += offered - served;
            let rho = (offered / capacity).min(0.95);
            // M/M/2 response time, plus the wait behind a backlog.
            let latency_s = service_s / (1.0 - rho * rho) + self.backlog[i] / capacity;
            let utilisation = served * service_s / WORKERS;
            self.utilisation[i].push(utilisation);
            let inflight = served * latency_s + self.backlog[i];
            per_backend.push((served, latency_s, inflight, utilisation));
        }
        let now = self.w.now + SEC;
        if self.prometheus && self.t % 10 == 0 {
            for i in 0..10 {
                let last: Vec<f64> = self.utilisation[i].iter().rev().take(60).copied().collect();
                let ip = self.addresses[i].parse::<SocketAddr>().unwrap().ip();
                self.w.book.set_external_cpu(ip, last.iter().sum::<f64>() / last.len() as f64, now);
            }
        }
        let n = self.names.len() as f64;
        let traffic: Vec<Vec<(&'static str, Traffic)>> = (0..self.names.len())
            .map(|_| {
                per_backend
                    .iter()
                    .enumerate()
                    .map(|(i, (served, latency_s, inflight, utilisation))| {
                        let address: &'static str = Box::leak(self.addresses[i].clone().into_boxed_str());
                        let t = Traffic {
                            requests: (served / n).round() as u64,
                            errors: 0,
                            latency_us: (latency_s * 1e6) as u64,
                            inflight: (inflight / n).round() as u32,
                            cpu: self.orca.then_some(*utilisation),
                        };
                        (address, t)
                    })
                    .collect()
            })
            .collect();
        // The sidecars tick independently: their order changes from one second to the next.
        let mut names: Vec<&str> = self.names.iter().map(String::as_str).collect();
        let k = self.rng.below(names.len());
        names.rotate_left(k);
        if self.rng.below(2) == 1 {
            names.reverse();
        }
        self.w.step(&names, |r| traffic[r].clone());
    }
}

/// Runs the slowdown for `seconds` after the event; the slowed backend's weight relative to the
/// fast ones' mean at each second from the event on.
fn slowdown(names: &[&str], orca: bool, prometheus: bool, seconds: u64) -> Vec<f64> {
    let mut s = Slowdown::new(names, orca, prometheus);
    let mut after = Vec::new();
    while s.t < SLOW_AT + seconds {
        s.step();
        if s.t >= SLOW_AT {
            after.push(s.relative());
        }
    }
    after
}

/// 5x slower: a fifth of a fast backend's weight, give or take 30%.
fn assert_settled(after: &[f64], from: usize, what: &str) {
    let shown: Vec<String> = after.iter().map(|x| format!("{x:.2}")).collect();
    for (i, r) in after.iter().enumerate().skip(from) {
        assert!((0.14..=0.26).contains(r), "{what}: {r:.3} at {i} s after the slowdown: {}", shown.join(" "));
    }
}

#[test]
fn a_slowed_backend_gets_a_fifth_within_a_few_reports_by_orca() {
    let after = slowdown(&REPORTERS, true, false, 60);
    assert_settled(&after, 6, "orca");
}

#[test]
fn sidecars_sharing_a_reporter_name_are_counted_apart() {
    // Four processes reporting as "envoy", each with its own incarnation and counters (as a filter
    // without a usable node id does). Taking differences across them reset every window, kept the
    // last rate that happened to complete for many seconds and paired it with fresh ORCA CPU.
    let after = slowdown(&["envoy#11", "envoy#12", "envoy#13", "envoy#14"], true, false, 60);
    assert_settled(&after, 6, "shared name");
}

#[test]
fn a_lagging_metrics_store_cpu_is_divided_into_the_rate_over_its_own_window() {
    // rate(cpu[1m]) lags the change by up to a minute. Divided into the last second's request rate
    // (which falls as soon as the weight does) it drove the slowed backend to the floor and held it
    // there; over the same minute the two agree, and the estimate only ever moves toward a fifth.
    // (The weight itself may dip below the estimate while the queue built before it caught up
    // drains: see `drained`.)
    let mut s = Slowdown::new(&REPORTERS, false, true);
    let (mut after, mut estimate) = (Vec::new(), Vec::new());
    while s.t < SLOW_AT + 80 {
        s.step();
        if s.t >= SLOW_AT {
            after.push(s.relative());
            estimate.push(s.relative_capacity());
        }
    }
    let shown: Vec<String> = after.iter().map(|x| format!("{x:.2}")).collect();
    let estimated: Vec<String> = estimate.iter().map(|x| format!("{x:.2}")).collect();
    assert!(after.iter().all(|r| (0.14..=1.05).contains(r)), "overshoot: {}", shown.join(" "));
    assert!(estimate.windows(2).all(|w| w[1] <= w[0] + 0.02), "not monotone: {}", estimated.join(" "));
    assert_settled(&after, 70, "metrics store");
}

#[test]
fn a_slowed_backend_gets_a_fifth_within_a_few_reports_by_latency() {
    let after = slowdown(&REPORTERS, false, false, 60);
    assert_settled(&after, 8, "latency");
}

#[test]
fn a_restarted_reporters_old_incarnation_stops_counting_after_one_interval() {
    let mut w = World::new(WeightParams::default());
    w.steps(5, &["r0#1"], |_| vec![(A, ok(50, 10_000))]);
    w.steps(3, &["r0#2"], |_| vec![(A, ok(50, 10_000))]);
    // Not 100: the old incarnation no longer counts once the new one has a window.
    assert!((w.decision(A).qps - 50.0).abs() < 1e-9, "{:?}", w.decision(A));
    w.book.expire(w.now);
    assert_eq!(w.book.counts().reporters, 1);
}

#[test]
fn rates_without_a_recent_window_are_unknown_not_old() {
    let mut w = World::new(WeightParams::default());
    w.steps(5, &["r0"], |_| vec![(A, Traffic { cpu: Some(0.5), ..ok(50, 10_000) })]);
    assert_eq!(w.decision(A).method, Method::Cpu);
    // Every report from now on is a reset (a counter went down): no window completes.
    for _ in 0..3 {
        w.counters.clear();
        w.step(&["r0"], |_| vec![(A, Traffic { cpu: Some(0.5), ..ok(1, 10_000) })]);
    }
    let d = w.decision(A);
    // No rate to divide the CPU into: the latency path, which needs none.
    assert_eq!((d.qps, d.method), (0.0, Method::Latency), "{d:?}");
}

#[test]
fn an_endpoint_without_requests_for_a_moment_keeps_its_capacity_not_the_median() {
    let mut w = World::new(WeightParams::default());
    let t = |requests, cpu| Traffic { cpu: Some(cpu), ..ok(requests, 10_000) };
    w.steps(30, &REPORTERS, |_| vec![(A, t(50, 0.1)), (B, t(50, 0.1)), (C, t(10, 0.5))]);
    let before = w.weights()[C];
    assert!(before < 0.1, "{:?}", w.weights());
    // Two seconds in which no request reaches C (its ORCA value stays what it was).
    w.steps(2, &REPORTERS, |_| vec![(A, t(50, 0.1)), (B, t(50, 0.1)), (C, t(0, 0.5))]);
    assert_eq!(w.decision(C).method, Method::Cpu);
    assert!((w.weights()[C] - before).abs() < 0.01, "{before} -> {:?}", w.weights());
    // Longer silence: it last answered without errors, so that capacity stays until
    // `healthy_capacity_hold_us` runs out; then the median it is.
    w.steps(12, &REPORTERS, |_| vec![(A, t(50, 0.1)), (B, t(50, 0.1)), (C, t(0, 0.5))]);
    assert_eq!(w.decision(C).method, Method::Cpu);
    w.steps(50, &REPORTERS, |_| vec![(A, t(50, 0.1)), (B, t(50, 0.1)), (C, t(0, 0.5))]);
    assert_eq!(w.decision(C).method, Method::Median);
}

#[test]
fn an_endpoint_back_from_an_outage_gets_the_share_it_earned_not_the_median() {
    // C serves twice as much per unit of CPU; its connections are refused for a second, then its
    // proxies suspend it and nothing reaches it for 20 s (its ORCA value gets old meanwhile).
    let mut w = World::new(WeightParams::default());
    let t = |requests, cpu| Traffic { cpu: Some(cpu), ..ok(requests, 10_000) };
    let others = || vec![(A, t(50, 0.2)), (B, t(50, 0.2))];
    w.steps(30, &REPORTERS, |_| [others(), vec![(C, t(50, 0.1))]].concat());
    let earned = w.weights()[C] / w.weights()[A];
    assert!((earned - 2.0).abs() < 0.05, "{:?}", w.weights());
    let refused = Traffic { requests: 20, errors: 20, latency_us: 1_000, inflight: 0, cpu: None };
    w.step(&REPORTERS, |_| [others(), vec![(C, refused)]].concat());
    let away = Traffic { requests: 0, errors: 0, latency_us: 0, inflight: 0, cpu: None };
    w.steps(20, &REPORTERS, |_| [others(), vec![(C, away)]].concat());
    let d = w.decision(C);
    assert!(!d.ejected && d.error_ratio < 0.125, "{d:?}");
    // Back, before anything rated it again: the weight it earned, relative to the others'.
    let back = w.weights()[C] / w.weights()[A];
    assert!((back - earned).abs() < 0.1 * earned, "{back} against {earned}: {d:?}");
    // Its first window back is half quiet: half the requests, with the utilisation of the busy half.
    w.step(&REPORTERS, |_| [others(), vec![(C, t(25, 0.1))]].concat());
    let first = w.weights()[C] / w.weights()[A];
    assert!((first - earned).abs() < 0.1 * earned, "{first} against {earned}: {:?}", w.decision(C));
    w.steps(3, &REPORTERS, |_| [others(), vec![(C, t(50, 0.1))]].concat());
    assert_eq!(w.decision(C).capacity, Some(2_000.0), "rated again from its second window: 4 x 50 rps / 0.1");
}

#[test]
fn reports_land_on_their_endpoints_when_indices_move_and_orders_change() {
    let mut w = World::new(WeightParams::default());
    // r1 alone reports A (first in the list), then stops: A expires, B and C move up.
    for _ in 0..3 {
        w.step(&["r1", "r0"], |i| {
            if i == 1 {
                vec![(B, ok(20, 10_000)), (C, ok(30, 10_000))]
            } else {
                vec![(A, ok(10, 10_000))]
            }
        });
    }
    for _ in 0..6 {
        w.step(&["r0"], |_| vec![(B, ok(20, 10_000)), (C, ok(30, 10_000))]);
        w.book.expire(w.now);
    }
    assert!(w.book.decisions(Some(CLUSTER))[0].endpoints.iter().all(|e| e.address != A));
    assert_eq!((w.decision(B).qps, w.decision(C).qps), (20.0, 30.0));
    // Same endpoints, other order; then a new one in the middle.
    w.steps(2, &["r0"], |_| vec![(C, ok(30, 10_000)), (B, ok(20, 10_000))]);
    assert_eq!((w.decision(B).qps, w.decision(C).qps), (20.0, 30.0));
    w.steps(2, &["r0"], |_| vec![(C, ok(30, 10_000)), (A, ok(40, 10_000)), (B, ok(20, 10_000))]);
    assert_eq!((w.decision(A).qps, w.decision(B).qps, w.decision(C).qps), (40.0, 20.0, 30.0));
    assert_eq!(w.book.counts().observations, 3);
}

mod evidence;
mod first_window;
mod truncation;
mod voices;

#[test]
fn decided_counts_are_what_decisions_of_would_copy_in_name_order() {
    let mut book = WeightBook::new(WeightParams::default());
    let cluster = |name: &str, addresses: &[&str]| ClusterReport {
        name: name.into(),
        endpoints: addresses.iter().map(|a| EndpointReport { address: a.to_string(), ..Default::default() }).collect(),
    };
    book.ingest(&report_of("r0", vec![cluster("b", &[A, B]), cluster("a", &[C])]), SEC).unwrap();
    book.recompute(SEC);
    // Reported but not recomputed yet: a cluster without decided endpoints.
    book.ingest(&report_of("r1", vec![cluster("c", &[A])]), SEC).unwrap();
    assert_eq!(book.decided_counts(), vec![("a", 1), ("b", 2), ("c", 0)]);
    for (name, decided) in book.decided_counts() {
        assert_eq!(book.decisions_of([name])[0].endpoints.len(), decided, "{name}");
    }
    // Made-up clusters of one principal, named to sort first, come after a cluster two principals
    // report, and attested ones before both.
    book.ingest_as(&report_of("m0", vec![cluster("aaa", &[A]), cluster("aab", &[B])]), "mallory", SEC).unwrap();
    book.ingest_as(&report_of("f0", vec![cluster("c", &[A])]), "front", SEC).unwrap();
    let attested = tailweight_wire::attest::Attestation {
        version: VERSION,
        cluster: "b".into(),
        endpoint: A.into(),
        incarnation: 1,
        interval_ms: 1000,
        sources: vec![],
    };
    book.attest(&attested, SEC).unwrap();
    let order: Vec<&str> = book.decided_counts().into_iter().map(|(name, _)| name).collect();
    assert_eq!(order, ["b", "c", "a", "aaa", "aab"]);
}

#[test]
fn a_reporter_keeps_an_endpoint_in_the_book_only_while_it_hears_from_it_or_sends_to_it() {
    let mut book = WeightBook::new(WeightParams::default());
    let endpoint = |address: &str, requests: u64, errors: u64, seen_age_ms: Option<u64>| EndpointReport {
        address: address.into(),
        requests,
        errors,
        latency_ewma_us: 1_000,
        seen_age_ms,
        ..EndpointReport::default()
    };
    const E: &str = "10.0.0.5:8080";
    let listed = |book: &WeightBook| -> Vec<String> {
        book.decisions(Some(CLUSTER))[0].endpoints.iter().map(|e| e.address.clone()).collect()
    };
    for s in 0..20u64 {
        let now = 10 * SEC + s * SEC;
        let endpoints = vec![
            // Answers well: renewed.
            endpoint(A, 100 + 10 * s, 0, Some(0)),
            // Last good answer 59 s ago at the first report, nothing sent since: renewed until its
            // last good answer is 60 s old (at 1 s), gone a reporter ttl (3 s) later.
            endpoint(B, 100, 0, Some(59_000 + 1_000 * s)),
            // Failing for longer than that, but sent requests: its evidence stays.
            endpoint(C, 100 + 10 * s, 10 * s, Some(59_000 + 1_000 * s)),
            // The filter does not say (known only through failures): renewed.
            endpoint(D, 100, 0, None),
            // Never heard from within 60 s: never entered.
            endpoint(E, 100, 0, Some(61_000 + 1_000 * s)),
        ];
        let report = report_of("r0", vec![ClusterReport { name: CLUSTER.into(), endpoints }]);
        book.ingest_as(&report, TRUSTED_PRINCIPAL, now).unwrap();
        book.expire(now);
        book.recompute(now);
        let listed = listed(&book);
        assert_eq!(listed.contains(&B.to_string()), s < 4, "B at {s} s: {listed:?}");
        for always in [A, C, D] {
            assert!(listed.contains(&always.to_string()), "{always} at {s} s: {listed:?}");
        }
        assert!(!listed.contains(&E.to_string()), "E at {s} s: {listed:?}");
    }
}

#[test]
fn a_joining_endpoint_is_slow_started_only_until_its_own_capacity_is_measured() {
    // A, B and C have served 10 ms requests for 30 s. D joins: first listed with no requests (the
    // book cannot rate it: the median target, ramped), then it serves 30 ms requests (a cold pod):
    // its target is its measured capacity, a third of the others', not that again times the ramp.
    let p = WeightParams::default();
    let mut w = World::new(p.clone());
    // Nothing in flight: no backlog comes off any capacity.
    let ok = |requests, latency_us| Traffic { inflight: 0, ..ok(requests, latency_us) };
    w.steps(30, &REPORTERS, |_| vec![(A, ok(50, 10_000)), (B, ok(50, 10_000)), (C, ok(50, 10_000))]);
    let idle = Traffic { inflight: 0, ..ok(0, 0) };
    w.step(&REPORTERS, |_| vec![(A, ok(50, 10_000)), (B, ok(50, 10_000)), (C, ok(50, 10_000)), (D, idle)]);
    let unrated = w.decision(D);
    assert_eq!((unrated.method, unrated.capacity), (Method::Median, None));
    let ramp_at_join = Ramp { start_us: w.now, window_us: p.slow_start_us }.factor(w.now);
    assert!((unrated.target - ramp_at_join).abs() < 1e-9, "median target 1 x ramp {ramp_at_join}: {unrated:?}");
    w.step(&REPORTERS, |_| vec![(A, ok(50, 10_000)), (B, ok(50, 10_000)), (C, ok(50, 10_000)), (D, ok(10, 30_000))]);
    let rated = w.decision(D);
    let a = w.decision(A);
    let (a_raw, d_raw) = (a.capacity.unwrap(), rated.capacity.unwrap());
    assert!((d_raw / a_raw - 1.0 / 3.0).abs() < 1e-9, "a third of the capacity: {d_raw} vs {a_raw}");
    let expected = d_raw / ((3.0 * a_raw + d_raw) / 4.0);
    assert!((rated.target - expected).abs() < 1e-9, "no ramp on a measured capacity: {} vs {expected}", rated.target);
}

#[test]
fn endpoints_that_left_the_cluster_stop_counting_in_what_the_others_share() {
    // Five pods rated by the metrics store's CPU (0.5 at 50 rps: 100 rps each). C, D and E leave:
    // the proxies still list them, with no requests; their CPU stays (a process's baseline) while
    // their request rate over the CPU window decays, so their capacities fall toward 0. F joins,
    // unrated: it gets the median target of the endpoints that carry traffic (A's and B's, 1),
    // not the median over all, which the three leaving pods' falling targets would hold below 1.
    const E: &str = "10.0.0.5:8080";
    const F: &str = "10.0.0.6:8080";
    let p = WeightParams::default();
    let mut w = World::new(p.clone());
    let busy = |requests| Traffic { inflight: 0, ..ok(requests, 10_000) };
    let gone = Traffic { inflight: 0, ..ok(0, 0) };
    let all = [A, B, C, D, E, F];
    let set_cpu = |w: &mut World, at: &[&str]| {
        let now = w.now + SEC;
        for address in at {
            w.book.set_external_cpu(address.parse::<SocketAddr>().unwrap().ip(), 0.5, now);
        }
    };
    for _ in 0..70 {
        set_cpu(&mut w, &all[..5]);
        w.step(&REPORTERS, |_| vec![(A, busy(50)), (B, busy(50)), (C, busy(50)), (D, busy(50)), (E, busy(50))]);
    }
    for _ in 0..30 {
        set_cpu(&mut w, &all[..5]);
        w.step(&REPORTERS, |_| vec![(A, busy(50)), (B, busy(50)), (C, gone), (D, gone), (E, gone)]);
    }
    let left = w.decision(C);
    assert!(!left.counted && left.weight.is_finite() && left.weight >= p.floor, "{left:?}");
    assert!(left.capacity.unwrap() < 0.75 * w.decision(A).capacity.unwrap(), "{left:?}");
    assert!(w.decision(A).counted && w.decision(B).counted);
    let weights = w.weights();
    assert!((weights[A] + weights[B] - 2.0).abs() < 1e-6, "mean 1 over the two that carry traffic: {weights:?}");
    set_cpu(&mut w, &all[..5]);
    w.step(&REPORTERS, |_| vec![(A, busy(50)), (B, busy(50)), (C, gone), (D, gone), (E, gone), (F, gone)]);
    let joining = w.decision(F);
    assert_eq!((joining.method, joining.counted), (Method::Median, true), "{joining:?}");
    let ramp_at_join = Ramp { start_us: w.now, window_us: p.slow_start_us }.factor(w.now);
    assert!((joining.target - ramp_at_join).abs() < 1e-9, "the median target 1 x ramp {ramp_at_join}: {joining:?}");
}

#[test]
fn a_cluster_nobody_sends_to_keeps_every_endpoint_counted() {
    let mut w = World::new(WeightParams::default());
    w.steps(20, &REPORTERS, |_| vec![(A, ok(50, 10_000)), (B, ok(50, 20_000))]);
    let idle = Traffic { inflight: 0, ..ok(0, 0) };
    w.steps(20, &REPORTERS, |_| vec![(A, idle), (B, idle)]);
    assert!(w.decision(A).counted && w.decision(B).counted);
    let weights = w.weights();
    assert!((weights[A] + weights[B] - 2.0).abs() < 1e-6, "{weights:?}");
}

#[test]
fn endpoints_without_traffic_do_not_vote_the_cluster_off_the_cpu_method() {
    // Five endpoints report ORCA CPU; three stop getting requests (a rollout removed them, or the
    // proxies steer around them). They cannot be rated by CPU without traffic, but their learned
    // service times could rate them by latency: that is no vote for latency. The two busy ones
    // keep the cluster on CPU.
    const E: &str = "10.0.0.5:8080";
    let mut w = World::new(WeightParams::default());
    let busy = |cpu| Traffic { cpu: Some(cpu), ..ok(50, 10_000) };
    w.steps(20, &REPORTERS, |_| vec![(A, busy(0.5)), (B, busy(0.25)), (C, busy(0.5)), (D, busy(0.5)), (E, busy(0.5))]);
    assert_eq!(w.decision(A).method, Method::Cpu);
    let idle = Traffic { inflight: 0, ..ok(0, 0) };
    w.step(&REPORTERS, |_| vec![(A, busy(0.5)), (B, busy(0.25)), (C, idle), (D, idle), (E, idle)]);
    let (a, b) = (w.decision(A), w.decision(B));
    assert!(w.decision(C).counted, "idle for a second only: still counted");
    assert_eq!((a.method, b.method), (Method::Cpu, Method::Cpu), "{a:?} {b:?}");
    assert!((b.capacity.unwrap() / a.capacity.unwrap() - 2.0).abs() < 1e-6, "{a:?} {b:?}");
}

#[test]
fn the_view_says_how_long_ago_any_callers_users_were_answered_well_and_by_how_many_callers() {
    let mut w = World::new(WeightParams::default());
    let served_age = |w: &World| w.book.reply("r1", [CLUSTER], w.now).clusters[0].endpoints[1].served_age_ms;
    w.steps(5, &REPORTERS, |_| vec![(A, ok(50, 10_000)), (B, ok(50, 10_000))]);
    assert_eq!(served_age(&w), Some(0));
    // B fails everyone's users for 3 s, then gets no requests (every caller suspended it) for 5 s:
    // failures and silence are not good answers, the age grows.
    let failing = Traffic { errors: 20, ..ok(20, 10_000) };
    w.steps(3, &REPORTERS, |_| vec![(A, ok(50, 10_000)), (B, failing)]);
    assert_eq!(served_age(&w), Some(3_000));
    let quiet = Traffic { inflight: 0, ..ok(0, 10_000) };
    w.steps(5, &REPORTERS, |_| vec![(A, ok(50, 10_000)), (B, quiet)]);
    assert_eq!(served_age(&w), Some(8_000));
    // One caller's users are answered well again (its health check passed): every caller's view
    // says so, and says how many callers report the cluster.
    w.step(&REPORTERS, |i| vec![(A, ok(50, 10_000)), (B, if i == 0 { ok(10, 10_000) } else { quiet })]);
    let reply = w.book.reply("r1", [CLUSTER], w.now);
    assert_eq!((reply.clusters[0].reporters, reply.clusters[0].endpoints[1].served_age_ms), (Some(4), Some(0)));
    let mut rendered = Vec::new();
    w.book.reply_plan(TRUSTED_PRINCIPAL, "r1", [CLUSTER], w.now, usize::MAX).render(&mut rendered);
    assert_eq!(rendered, write_reply(&reply), "the rendered reply carries the same fields");
    // A reporter's latest good answer is placed within the window that showed successes.
    assert_eq!(observation::served_at(5 * SEC, Some(300), 6 * SEC), 5_700_000);
    assert_eq!(observation::served_at(5 * SEC, Some(3_000), 6 * SEC), 5 * SEC, "not before the window");
    assert_eq!(observation::served_at(5 * SEC, None, 6 * SEC), 5 * SEC);
}
