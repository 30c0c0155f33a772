//! Caps truncate, they do not drop (`reply_plan.rs`): a view too large for a reply keeps the
//! endpoints that count and says how many it left out; one principal's made-up endpoints cannot
//! push a cluster's real ones out of an honest caller's reply.

use super::*;
use crate::reply_plan::fair_caps;
use tailweight_wire::reply::read::read_reply;

/// The cluster's real endpoints, reported by honest callers.
fn real() -> Vec<String> {
    (1..=10).map(|i| format!("10.0.0.{i}:8080")).collect()
}

/// Made-up endpoints (`count` of them) of one principal.
fn made_up(count: usize) -> Vec<String> {
    (0..count).map(|i| format!("10.9.{}.{}:8080", i / 250, i % 250)).collect()
}

/// A book with the aggregator's quota, where `honest` (principal/name) report the real endpoints
/// and "mallory/m0" reports `fake` made-up ones, for three seconds.
fn attacked_by(honest: &[&str], fake: usize) -> World {
    let mut w = World::new(WeightParams { principal_share: 0.25, ..WeightParams::default() });
    let (real, fake) = (real(), made_up(fake));
    for _ in 0..3 {
        w.now += SEC;
        for (who, endpoints) in honest.iter().map(|h| (*h, &real)).chain([("mallory/m0", &fake)]) {
            let traffic: Vec<(&str, Traffic)> = endpoints.iter().map(|e| (e.as_str(), ok(20, 10_000))).collect();
            let report = w.report(who, &traffic);
            w.book.ingest_as(&report, principal_and_name(who).0, w.now).unwrap();
        }
        w.book.recompute(w.now);
    }
    w
}

/// `attacked_by` 2,046 made-up endpoints: one report's worth (2,048 at most per cluster).
fn attacked(honest: &[&str]) -> World {
    attacked_by(honest, 2_046)
}

/// The reply `asker` (principal/name) gets about the cluster, capped at `max_endpoints`, as the
/// filter reads it, with the plan's count of omitted endpoints and the cluster's `omitted` field.
fn reply_to(w: &World, asker: &str, max_endpoints: usize) -> (Vec<String>, usize, Option<u64>) {
    let (principal, name) = principal_and_name(asker);
    let plan = w.book.reply_plan(principal, name, [CLUSTER], w.now, max_endpoints);
    let mut body = Vec::new();
    plan.render(&mut body);
    let reply = read_reply(&body, &protocol::Limits::default()).expect("the filter takes the reply");
    let text = String::from_utf8(body.clone()).unwrap();
    let omitted = text
        .split_once(r#""omitted":"#)
        .map(|(_, rest)| rest.split(|c: char| !c.is_ascii_digit()).next().unwrap().parse::<u64>().unwrap());
    assert_eq!(plan.endpoints(), reply.clusters.iter().map(|c| c.endpoints.len()).sum::<usize>());
    let addresses = reply.clusters.iter().flat_map(|c| c.endpoints.iter().map(|e| e.address.clone())).collect();
    (addresses, plan.omitted(), omitted)
}

#[test]
fn two_thousand_made_up_endpoints_of_one_principal_do_not_push_out_the_real_ones() {
    // One honest principal, asking itself: its own endpoints come first.
    let w = attacked(&["front/r0"]);
    assert_eq!(w.book.decisions(Some(CLUSTER))[0].endpoints.len(), 2_056);
    let (kept, omitted, said) = reply_to(&w, "front/r0", 2_048);
    assert!(real().iter().all(|e| kept.contains(e)), "every real endpoint is in the reply");
    assert_eq!((kept.len(), omitted, said), (2_048, 8, Some(8)));
    // Two honest principals: endpoints two principals report outrank one principal's, for any
    // asker, one that has never reported too.
    let w = attacked(&["front/r0", "back/r1"]);
    for asker in ["front/r0", "back/r1", "stranger/s0"] {
        let (kept, omitted, said) = reply_to(&w, asker, 2_048);
        assert!(real().iter().all(|e| kept.contains(e)), "{asker}");
        assert_eq!((kept.len(), omitted, said), (2_048, 8, Some(8)), "{asker}");
    }
    // A tighter cap keeps the real endpoints as long as they fit, and counts the rest.
    let (kept, omitted, said) = reply_to(&w, "stranger/s0", 10);
    assert_eq!((kept, omitted, said), (real(), 2_046, Some(2_046)));
    let (kept, omitted, _) = reply_to(&w, "stranger/s0", 4);
    assert_eq!((kept.len(), omitted), (4, 2_052));
    assert!(kept.iter().all(|e| real().contains(e)), "{kept:?}");
}

#[test]
fn a_view_within_the_cap_is_whole_and_says_nothing_of_omissions() {
    let w = attacked_by(&["front/r0"], 100);
    let (kept, omitted, said) = reply_to(&w, "front/r0", 2_048);
    assert_eq!((kept.len(), omitted, said), (110, 0, None));
}

#[test]
fn no_cluster_passes_the_filters_limit_whatever_the_reply_cap() {
    // The filter refuses a whole reply with a cluster of more than 2,048 endpoints
    // (`protocol::Limits`): a larger reply cap still truncates each view to that.
    let w = attacked(&["front/r0"]);
    let (kept, omitted, said) = reply_to(&w, "front/r0", 1 << 20);
    assert_eq!((kept.len(), omitted, said), (2_048, 8, Some(8)));
    assert!(real().iter().all(|e| kept.contains(e)));
}

#[test]
fn the_reply_budget_is_shared_by_water_filling() {
    assert_eq!(fair_caps(&[3, 100, 5], 20), [3, 12, 5]);
    assert_eq!(fair_caps(&[10, 10, 10], 20), [7, 7, 6]);
    assert_eq!(fair_caps(&[10, 10], 100), [10, 10]);
    assert_eq!(fair_caps(&[10, 10], 1), [1, 0]);
    assert_eq!(fair_caps(&[], 5), Vec::<usize>::new());
    // Every combination of small sizes and budgets: within the budget and each size, the whole
    // budget used when the sizes need it, and no cluster below min(size, budget / clusters).
    for budget in 0..24 {
        for a in 0..9 {
            for b in 0..9 {
                for c in 0..9 {
                    let sizes = [a, b, c];
                    let caps = fair_caps(&sizes, budget);
                    let total: usize = caps.iter().sum();
                    assert_eq!(total, budget.min(a + b + c), "{sizes:?} {budget}: {caps:?}");
                    for (cap, size) in caps.iter().zip(sizes) {
                        assert!(*cap <= size && *cap >= size.min(budget / 3), "{sizes:?} {budget}: {caps:?}");
                    }
                }
            }
        }
    }
}
