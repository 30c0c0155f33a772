//! Evidence from callers only (`callers.rs`): principals that do not call a service cannot move
//! its weights once its endpoints attest; real callers still eject a failing endpoint as fast.

use super::*;
use tailweight_wire::attest::{Attestation, SourceCount};

/// Honest callers "front{i}/r{i}" (each its own principal, telling `truth`) and attacking
/// principals "att{k}/a{k}" (never calling, reporting `lie`), for `seconds`; the endpoints in
/// `attesting` attest what they served each caller (the callers' `truth` there).
struct Mesh {
    w: World,
    served: HashMap<(&'static str, String), (u64, u64)>,
    callers: Vec<String>,
    attackers: Vec<String>,
}

impl Mesh {
    fn new(callers: usize, attackers: usize) -> Mesh {
        Mesh {
            w: World::new(WeightParams::default()),
            served: HashMap::new(),
            callers: (0..callers).map(|i| format!("front{i}/r{i}")).collect(),
            attackers: (0..attackers).map(|k| format!("att{k}/a{k}")).collect(),
        }
    }

    fn run(
        &mut self,
        seconds: u64,
        truth: &[(&'static str, Traffic)],
        lie: &[(&'static str, Traffic)],
        attesting: &[&'static str],
    ) {
        for _ in 0..seconds {
            self.w.now += SEC;
            for (who, traffic) in self.callers.iter().map(|c| (c, truth)).chain(self.attackers.iter().map(|a| (a, lie)))
            {
                let report = self.w.report(who, traffic);
                self.w.book.ingest_as(&report, principal_and_name(who).0, self.w.now).unwrap();
            }
            for endpoint in attesting {
                let sources = self
                    .callers
                    .iter()
                    .filter_map(|c| {
                        let t = truth.iter().find(|(e, _)| e == endpoint)?.1;
                        Some(serve(&mut self.served, endpoint, principal_and_name(c).0, t.requests, t.errors))
                    })
                    .collect();
                self.w.book.attest(&attestation(endpoint, 1, sources), self.w.now).unwrap();
            }
            self.w.book.recompute(self.w.now);
        }
    }
}

/// What `endpoint` served `principal` so far (cumulative, in `served`), after `requests` more of
/// which `errors` failed.
fn serve(
    served: &mut HashMap<(&'static str, String), (u64, u64)>,
    endpoint: &'static str,
    principal: &str,
    requests: u64,
    errors: u64,
) -> SourceCount {
    let n = served.entry((endpoint, principal.to_string())).or_default();
    (n.0, n.1) = (n.0 + requests, n.1 + errors);
    SourceCount { principal: principal.to_string(), requests: n.0, errors: n.1 }
}

/// `endpoint`'s attestation (as incarnation `incarnation`) of what it served `sources`.
fn attestation(endpoint: &str, incarnation: u64, sources: Vec<SourceCount>) -> Attestation {
    Attestation {
        version: VERSION,
        cluster: CLUSTER.into(),
        endpoint: endpoint.into(),
        incarnation,
        interval_ms: 1000,
        sources,
    }
}

/// One principal's `lie` (any number of reporter ids, no attestations) against 1, 2 or 20 honest
/// callers moves at most `BOUND` of any endpoint's traffic and ejects nothing.
fn assert_one_liar_moves_at_most_bound(lie: &[(&'static str, Traffic)]) {
    for callers in [1, 2, 20] {
        let fair = mesh(callers, 0, &[], &[]);
        let lied = mesh(callers, 1, lie, &[]);
        let moved = traffic_moved(&fair.w, &lied.w, &ALL);
        assert!(moved <= BOUND, "{callers} callers: moved {moved:.4}, {:?}", lied.w.weights());
        assert!(!lied.w.decision(A).ejected);
    }
}

/// 40 seconds of `callers` honest callers and `attackers` non-callers.
fn mesh(callers: usize, attackers: usize, lie: &[(&'static str, Traffic)], attesting: &[&'static str]) -> Mesh {
    let mut m = Mesh::new(callers, attackers);
    m.run(40, &LATENCY_TRUTH, lie, attesting);
    m
}

const ALL: [&str; 3] = [A, B, C];

#[test]
fn principals_that_do_not_call_the_service_move_no_share_and_eject_nothing() {
    // Every endpoint attests; or A is silent (its pod without the server role, or its sidecar gone).
    for (callers, attesting) in [1, 2, 20].into_iter().flat_map(|c| [(c, &ALL[..]), (c, &[B, C][..])]) {
        let fair = mesh(callers, 0, &[], attesting);
        for attackers in [1, 2, 8] {
            let mut most: f64 = 0.0;
            for (what, lie) in lies() {
                let lied = mesh(callers, attackers, &lie, attesting);
                let moved = traffic_moved(&fair.w, &lied.w, &ALL);
                most = most.max(moved);
                assert!(
                    moved <= BOUND,
                    "{callers} callers, {attackers} attackers, {what}, {attesting:?} attest: moved {moved:.4}, {:?} vs {:?}",
                    lied.w.weights(),
                    fair.w.weights()
                );
                assert!(ALL.iter().all(|e| !lied.w.decision(e).ejected), "{what}: {:?}", lied.w.weights());
            }
            eprintln!(
                "{callers} callers, {attackers} attackers, {} attest: largest share moved {most:.4}",
                attesting.len()
            );
        }
    }
}

#[test]
fn the_reported_attack_ejects_without_attestations_and_moves_nothing_with_them() {
    // Issue 24: one honest caller, 90% errors on A from two principals of another namespace.
    let lie = [(A, Traffic { errors: 45, ..ok(50, 10_000) })];
    let without = mesh(1, 2, &lie, &[]);
    assert!(without.w.decision(A).ejected, "the attack as reported: {:?}", without.w.decision(A));
    let with = mesh(1, 2, &lie, &ALL);
    assert!(!with.w.decision(A).ejected);
    assert!(traffic_moved(&mesh(1, 0, &[], &ALL).w, &with.w, &ALL) <= 1e-9, "{:?}", with.w.weights());
}

/// Seconds until A is ejected, at most `limit`, as `callers` see 80% of A's requests fail while
/// `attackers` claim A is fine (A attests the same failures when `a_attests`; B and C attest).
fn seconds_to_eject(callers: usize, attackers: usize, a_attests: bool, limit: u64) -> Option<u64> {
    let mut m = Mesh::new(callers, attackers);
    m.run(20, &LATENCY_TRUTH, &LATENCY_TRUTH, &ALL);
    let failing = [(A, Traffic { errors: 40, ..ok(50, 10_000) }), LATENCY_TRUTH[1], LATENCY_TRUTH[2]];
    let fine = [(A, ok(1_000_000, 10_000)), LATENCY_TRUTH[1], LATENCY_TRUTH[2]];
    let attesting: &[&str] = if a_attests { &ALL } else { &[B, C] };
    (1..=limit).find(|_| {
        m.run(1, &failing, &fine, attesting);
        m.w.decision(A).ejected
    })
}

#[test]
fn real_callers_who_see_an_endpoint_fail_eject_it_as_fast_as_without_attestations() {
    for callers in [1, 2, 20] {
        // Today: no attestation, nobody lying.
        let mut plain = Mesh::new(callers, 0);
        plain.run(20, &LATENCY_TRUTH, &[], &[]);
        let failing = [(A, Traffic { errors: 40, ..ok(50, 10_000) }), LATENCY_TRUTH[1], LATENCY_TRUTH[2]];
        let today = (1..=10).find(|_| {
            plain.run(1, &failing, &[], &[]);
            plain.w.decision(A).ejected
        });
        assert!(today.is_some(), "{callers} callers: today A is ejected");
        for attackers in [0, 2, 8] {
            // A attests its failures; or A is gone silent (a dead pod) and only B and C attest.
            for a_attests in [true, false] {
                let took = seconds_to_eject(callers, attackers, a_attests, 10);
                assert_eq!(took, today, "{callers} callers, {attackers} attackers, A attests: {a_attests}");
            }
        }
    }
}

#[test]
fn a_callers_claims_count_only_up_to_what_the_endpoint_attests() {
    // The caller really sends 50/s to each endpoint, claims 100,000/s on A, all failing, and
    // claims B (which it calls) fails too; A and B attest 50/s without errors.
    let mut m = Mesh::new(2, 0);
    let lie = [
        (A, Traffic { errors: 100_000, ..ok(100_000, 10_000) }),
        (B, Traffic { errors: 50, ..ok(50, 10_000) }),
        LATENCY_TRUTH[2],
    ];
    m.run(20, &LATENCY_TRUTH, &[], &ALL);
    // The second caller turns liar: its reports change, A's and B's attestations do not.
    for _ in 0..10 {
        m.w.now += SEC;
        let honest = m.w.report("front0/r0", &LATENCY_TRUTH);
        m.w.book.ingest_as(&honest, "front0", m.w.now).unwrap();
        let liar = m.w.report("front1/r1", &lie);
        m.w.book.ingest_as(&liar, "front1", m.w.now).unwrap();
        for endpoint in ALL {
            let served = ["front0", "front1"].map(|p| serve(&mut m.served, endpoint, p, 50, 0)).to_vec();
            m.w.book.attest(&attestation(endpoint, 1, served), m.w.now).unwrap();
        }
        m.w.book.recompute(m.w.now);
    }
    let a = m.w.decision(A);
    // Two principals: 50 + at most 1.5 x 50 on A.
    assert!(a.qps <= 50.0 + 75.0 + 1e-9, "{a:?}");
    // Both send to A and B; the honest one sees no errors: ejection needs both (consensus.rs).
    assert!(!a.ejected && !m.w.decision(B).ejected, "{:?}", m.w.weights());
    assert_eq!(a.eps, 0.0, "{a:?}");
}

#[test]
fn without_attestations_one_principal_alone_ejects_nothing_and_moves_at_most_5_percent() {
    // The documented weaker rule: one principal (any number of reporter ids) against 1, 2 or 20
    // honest ones, claiming every request to A fails.
    let lie = [(A, Traffic { errors: 1_000_000, ..ok(1_000_000, 10_000) }), LATENCY_TRUTH[1], LATENCY_TRUTH[2]];
    assert_one_liar_moves_at_most_bound(&lie);
}

#[test]
fn without_attestations_ejection_needs_both_of_two_principals() {
    // The honest caller sees 40% of A fail (below eject_ratio 0.5); the other claims 100%.
    let honest = [(A, Traffic { errors: 20, ..ok(50, 10_000) }), LATENCY_TRUTH[1]];
    let mut m = Mesh::new(1, 1);
    m.run(20, &honest, &[(A, Traffic { errors: 50, ..ok(50, 10_000) }), LATENCY_TRUTH[1]], &[]);
    assert!(!m.w.decision(A).ejected, "{:?}", m.w.decision(A));
    assert!(m.w.decision(A).error_ratio <= 0.4 + 1e-9, "{:?}", m.w.decision(A));
    // Both see 60%: ejected.
    let failing = [(A, Traffic { errors: 30, ..ok(50, 10_000) }), LATENCY_TRUTH[1]];
    let mut both = Mesh::new(2, 0);
    both.run(5, &failing, &[], &[]);
    assert!(both.w.decision(A).ejected, "{:?}", both.w.decision(A));
}

#[test]
fn without_attestations_a_majority_of_principals_decides() {
    // What the weaker rule does not guarantee: several principals (an attacker's several service
    // accounts) outvote one honest caller. Attestations are what stops it (the test above).
    let lie = [(A, Traffic { errors: 45, ..ok(50, 10_000) })];
    for attackers in [2, 8] {
        assert!(mesh(1, attackers, &lie, &[]).w.decision(A).ejected);
        assert!(!mesh(1, attackers, &lie, &ALL).w.decision(A).ejected);
    }
}

#[test]
fn attestations_expire_and_their_bytes_are_given_back() {
    let mut m = Mesh::new(2, 0);
    let before = m.w.book.counts().bytes;
    m.run(3, &LATENCY_TRUTH, &[], &ALL);
    let reports_only = {
        let mut r = Mesh::new(2, 0);
        r.run(3, &LATENCY_TRUTH, &[], &[]);
        r.w.book.counts().bytes
    };
    assert!(m.w.book.counts().bytes > reports_only, "attestations are counted");
    m.w.book.expire(m.w.now + 60 * SEC);
    assert_eq!(m.w.book.counts().bytes, before, "everything expired");
    // The budget refuses an attestation that would pass it, changing nothing.
    let mut tight = Mesh::new(1, 0);
    tight.w.book = WeightBook::new(WeightParams { max_bytes: 1_000, ..WeightParams::default() });
    let a = attestation(A, 1, source(1));
    assert_eq!(tight.w.book.attest(&a, SEC), Err(Rejection::MemoryBudget));
    assert_eq!(tight.w.book.counts().bytes, 0);
}

#[test]
fn the_vms_of_one_destination_attest_apart_and_count_together() {
    // One caller sends 100 requests a second to A; A's sidecar runs two VMs (incarnations), each
    // serving half, or only one of them attests.
    let qps_on_a = |incarnations: &[u64]| {
        let mut w = World::new(WeightParams::default());
        for second in 1..=10u64 {
            w.step(&["front0/r0"], |_| vec![(A, ok(100, 10_000)), (B, ok(100, 10_000))]);
            for (endpoint, vms) in [(A, incarnations), (B, &[1][..])] {
                for incarnation in vms {
                    let served = if endpoint == B { 100 } else { 50 };
                    let sources =
                        vec![SourceCount { principal: "front0".into(), requests: served * second, errors: 0 }];
                    w.book.attest(&attestation(endpoint, *incarnation, sources), w.now).unwrap();
                }
            }
        }
        w.book.recompute(w.now);
        w.decision(A).qps
    };
    assert_eq!(qps_on_a(&[1, 2]), 100.0);
    assert_eq!(qps_on_a(&[1]), 75.0, "50 attested x 1.5");
}

#[test]
fn without_attestations_one_principal_with_few_answers_cannot_outweigh_a_caller_with_many() {
    // bench-hostile's lie from one principal: A fails 90% of 5 answers, each 1 s; or A's 5 answers
    // are all good and 1 s. With two voters, capping each at vote_cap x the other made the lighter
    // one decide the latency (share moved 93-95% in the bench).
    let lies = [
        [(A, Traffic { errors: 4, ..ok(5, 1_000_000) }), LATENCY_TRUTH[1], LATENCY_TRUTH[2]],
        [(A, ok(5, 1_000_000)), LATENCY_TRUTH[1], LATENCY_TRUTH[2]],
    ];
    for lie in lies {
        assert_one_liar_moves_at_most_bound(&lie);
    }
}

/// One source of `requests`, all good, from principal front0.
fn source(requests: u64) -> Vec<SourceCount> {
    vec![SourceCount { principal: "front0".into(), requests, errors: 0 }]
}

/// A world whose book holds A's attestation (incarnation 1, 10 requests, entered at 1 s) with room
/// for little more (100 bytes), and the bytes that one attestation takes.
fn book_full_of_a_attestation() -> (World, usize) {
    let mut w = World::new(WeightParams::default());
    w.book.attest(&attestation(A, 1, source(10)), SEC).unwrap();
    let one = w.book.counts().bytes;
    let mut w = World::new(WeightParams { max_bytes: one + 100, ..WeightParams::default() });
    w.book.attest(&attestation(A, 1, source(10)), SEC).unwrap();
    (w, one)
}

#[test]
fn a_full_book_still_takes_renewals_of_the_attestations_it_holds() {
    // A book with room for one endpoint's attestation of one source and little more: A's is
    // entered, then B's (a new record) does not fit, while A's renewals (the same incarnation
    // and source, counts grown) need no headroom and are taken as long as it attests.
    let (mut w, one) = book_full_of_a_attestation();
    assert_eq!(w.book.attest(&attestation(B, 1, source(10)), SEC), Err(Rejection::MemoryBudget));
    for second in 2..=60 {
        w.book.attest(&attestation(A, 1, source(10 * second)), second * SEC).unwrap();
        assert_eq!(w.book.counts().bytes, one, "a renewal adds nothing");
    }
    // A new incarnation of A's sidecar adds a record: refused while the book has no room for it.
    assert_eq!(w.book.attest(&attestation(A, 2, source(10)), 60 * SEC), Err(Rejection::MemoryBudget));
}

#[test]
fn expired_attestations_give_their_room_to_the_request_that_needs_it_before_the_expiry_pass() {
    // A's attestation fills the book; once its ttl (3 s) passed, B's is taken at once, without
    // `expire`: the refused request gives the expired record back and is admitted.
    let (mut w, one) = book_full_of_a_attestation();
    assert_eq!(w.book.attest(&attestation(B, 1, source(10)), 3 * SEC), Err(Rejection::MemoryBudget));
    w.book.attest(&attestation(B, 1, source(10)), 4 * SEC).unwrap();
    assert_eq!(w.book.counts().bytes, one);
}

#[test]
fn each_attesting_principal_is_held_to_its_quota_and_others_still_attest() {
    // A quarter of a book of 64 KB each: one principal attests made-up endpoints of its namespace
    // until its quota refuses it, well before the book is full; its renewals are still taken, and
    // another principal's attestations are too.
    let params = WeightParams { principal_share: 0.25, max_bytes: 64_000, ..WeightParams::default() };
    let mut w = World::new(params);
    let made_up: Vec<String> = (0..200).map(|i| format!("10.9.0.{i}:8080")).collect();
    let mut taken = Vec::new();
    let refused = loop {
        let endpoint = &made_up[taken.len()];
        match w.book.attest_as("ns/mallory", &attestation(endpoint, 1, source(10)), SEC) {
            Ok(()) => taken.push(endpoint.clone()),
            Err(e) => break e,
        }
    };
    assert_eq!(refused, Rejection::PrincipalMemory);
    assert!(!taken.is_empty() && w.book.counts().bytes <= 16_000 + 1_000, "{}", w.book.counts().bytes);
    for endpoint in &taken {
        w.book.attest_as("ns/mallory", &attestation(endpoint, 1, source(20)), 2 * SEC).unwrap();
    }
    for endpoint in [A, B, C] {
        w.book.attest_as("ns/honest", &attestation(endpoint, 1, source(10)), 2 * SEC).unwrap();
    }
    // Everything expires, and every byte goes back (the principals' too).
    w.book.expire(60 * SEC);
    assert_eq!(w.book.counts().bytes, 0);
    assert_eq!(w.book.counts().principals, 0);
}
