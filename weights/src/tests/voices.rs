//! One voice never decides for all (`consensus.rs`, issue 38): served evidence and reporter counts
//! weigh principals as errors and latency do. One principal's users' good answers neither readmit
//! an endpoint for every caller nor keep a made-up or dead one proven; two principals of any number
//! readmit a recovered endpoint; one principal's many reporter ids do not inflate `reporters`.

use super::*;

/// `n` principals with one reporter each: "p0/r" ...
fn principals(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("p{i}/r")).collect()
}

const MADE_UP: &str = "10.9.9.9:8080";

#[test]
fn one_principals_good_answers_do_not_readmit_for_all_and_a_minority_of_two_does() {
    let callers = principals(10);
    let callers: Vec<&str> = callers.iter().map(String::as_str).collect();
    let mut w = World::new(WeightParams::default());
    let quiet = Traffic { inflight: 0, ..ok(0, 10_000) };
    w.steps(5, &callers, |_| vec![(A, ok(50, 10_000)), (B, ok(50, 10_000))]);
    // B failed everyone's users; every caller suspended it.
    w.steps(4, &callers, |_| vec![(A, ok(50, 10_000)), (B, quiet)]);
    assert_eq!(w.decision(B).served_age_ms, Some(4_000));
    // One caller (the attacker, or the first to see it recover) says its users were answered well.
    w.step(&callers, |i| vec![(A, ok(50, 10_000)), (B, if i == 9 { ok(10, 10_000) } else { quiet })]);
    assert_eq!(w.decision(B).served_age_ms, Some(5_000), "one voice does not readmit it for all");
    // A second caller sees it recovered: 2 of 10, a minority, readmit it for everyone.
    w.step(&callers, |i| vec![(A, ok(50, 10_000)), (B, if i >= 8 { ok(10, 10_000) } else { quiet })]);
    assert_eq!(w.decision(B).served_age_ms, Some(0));
    // With one principal in the cluster its evidence is the cluster's (nobody else's to outvote).
    let mut alone = World::new(WeightParams::default());
    alone.steps(5, &["p0/a", "p0/b"], |_| vec![(A, ok(50, 10_000)), (B, ok(50, 10_000))]);
    alone.steps(4, &["p0/a", "p0/b"], |_| vec![(A, ok(50, 10_000)), (B, quiet)]);
    alone.step(&["p0/a", "p0/b"], |i| vec![(A, ok(50, 10_000)), (B, if i == 0 { ok(10, 10_000) } else { quiet })]);
    assert_eq!(alone.decision(B).served_age_ms, Some(0));
}

#[test]
fn one_principals_served_evidence_does_not_keep_a_made_up_or_dead_endpoint_proven() {
    let honest = principals(3);
    let mut reporters: Vec<&str> = honest.iter().map(String::as_str).collect();
    reporters.push("mallory/m0");
    let mut w = World::new(WeightParams::default());
    // Mallory claims its users are answered well by an endpoint nobody else reaches (made up, or
    // dead for everyone else), besides the real ones.
    w.steps(5, &reporters, |i| {
        let mut traffic = vec![(A, ok(50, 10_000)), (B, ok(50, 10_000))];
        if i == 3 {
            traffic.push((MADE_UP, ok(50, 10_000)));
        }
        traffic
    });
    assert_eq!(w.decision(MADE_UP).served_age_ms, None, "not proven for the other callers");
    assert_eq!(w.decision(A).served_age_ms, Some(0), "the real ones are");
    let reply = w.book.reply("r", [CLUSTER], w.now);
    let listed =
        |address: &str| reply.clusters[0].endpoints.iter().find(|e| e.address == address).unwrap().served_age_ms;
    assert_eq!((listed(MADE_UP), listed(B)), (None, Some(0)));
}

#[test]
fn one_principals_reporter_ids_do_not_inflate_the_reporter_count() {
    let params = WeightParams::default();
    for (honest, expected) in [(3usize, 3 * 2 + 2 * 2), (1, 2 + 2 * 2)] {
        let mut reporters: Vec<String> = (0..honest).flat_map(|p| [format!("p{p}/a"), format!("p{p}/b")]).collect();
        reporters.extend((0..50).map(|i| format!("mallory/m{i}")));
        let reporters: Vec<&str> = reporters.iter().map(String::as_str).collect();
        let mut w = World::new(params.clone());
        w.steps(3, &reporters, |_| vec![(A, ok(10, 10_000)), (B, ok(10, 10_000))]);
        // Each honest principal has 2 reporters; mallory's 50 count for at most sum_clip (2) x the
        // median principal's (with one other: that one's).
        assert_eq!(w.decision(A).reporters, expected, "{honest} honest principals");
        assert_eq!(w.book.reply("p0/a", [CLUSTER], w.now).clusters[0].reporters, Some(expected as u32));
    }
}
