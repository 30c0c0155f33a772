use super::*;
use crate::health::Availability;
use crate::health_check::{CheckProtocol, CheckRound, CheckVerdict, DueHealthCheck, UNANSWERABLE_PAUSE_US};
use crate::outcome::{RequestOutcome, ResponseClass};
use crate::params::PickParams;
use tailweight_wire::reply::EndpointView;
use tailweight_wire::report::EndpointReport;

const C: &str = "outbound|80||svc";
const A: &str = "10.0.0.1:80";
const B: &str = "10.0.0.2:80";
const MS: u64 = 1_000;

fn balancer() -> Balancer {
    Balancer::new(Settings::default(), 7)
}

fn ok(served: &str, latency_us: u64) -> RequestOutcome<'_> {
    RequestOutcome { served: Some(served), attempts: 1, latency_us, class: ResponseClass::Success, load: None }
}

fn failed(served: &str, latency_us: u64) -> RequestOutcome<'_> {
    RequestOutcome { class: ResponseClass::Failure, ..ok(served, latency_us) }
}

/// A steered request answered by `outcome`: released at its response, then completed.
fn answer(b: &mut Balancer, pick: &Pick, outcome: &RequestOutcome, now: u64) -> Completion {
    if let Pick::Steer { header, first_len, epoch } = pick {
        b.release(C, &header[..*first_len], *epoch);
    }
    b.complete(C, pick.first_choice(), outcome, now)
}

/// Teach the balancer `addresses` through fallback responses, as Envoy would.
fn learn(b: &mut Balancer, addresses: &[&str], now: u64) {
    for a in addresses {
        b.complete(C, None, &ok(a, 5 * MS), now);
    }
}

/// Sequential requests (one at a time): the chosen endpoint answers after its latency; a
/// fallback (no steering) is served by a uniformly drawn endpoint, like an LB with no signal.
/// Returns the share of requests each endpoint served.
fn run(b: &mut Balancer, backends: &[(&'static str, u64, bool)], n: usize, start: u64) -> Vec<f64> {
    let mut now = start;
    run_until(b, n, &mut now, |_| backends.to_vec())
}

/// `run` with backends that may change with time (`at(now)`); advances `now`.
fn run_until(
    b: &mut Balancer,
    n: usize,
    now: &mut u64,
    at: impl Fn(u64) -> Vec<(&'static str, u64, bool)>,
) -> Vec<f64> {
    let mut rng = Rng::new(99);
    let mut served = vec![0usize; at(*now).len()];
    for _ in 0..n {
        let backends = at(*now);
        let pick = b.pick(C, *now);
        let i = match pick.first_choice() {
            Some(first) => backends.iter().position(|(a, _, _)| *a == first).unwrap(),
            None => rng.below(backends.len()),
        };
        let (address, latency, fails) = backends[i];
        let before = *now;
        *now += latency;
        let outcome = if fails { failed(address, latency) } else { ok(address, latency) };
        answer(b, &pick, &outcome, *now);
        served[i] += 1;
        if *now / (200 * MS) != before / (200 * MS) {
            b.tick(*now);
        }
    }
    served.iter().map(|&s| s as f64 / n as f64).collect()
}

#[test]
fn unknown_cluster_is_left_to_the_fallback_until_an_endpoint_is_seen() {
    let mut b = balancer();
    assert_eq!(b.pick(C, 0), Pick::NoCandidate);
    let done = b.complete(C, None, &ok(A, 5 * MS), 1);
    assert_eq!(done, Completion { learned: true, ..Default::default() });
    assert_eq!(b.endpoints_tracked(), 1);
}

#[test]
fn steering_raises_inflight_until_the_first_response_headers() {
    let mut b = Balancer::new(
        Settings { pick: PickParams { explore_ratio: 0.0, ..Default::default() }, ..Default::default() },
        1,
    );
    learn(&mut b, &[A, B], 0);
    let pick = loop {
        // Novelty keeps exploring at first; steered picks come once it fades.
        if let p @ Pick::Steer { .. } = b.pick(C, 1) {
            break p;
        }
        b.complete(C, None, &ok(A, 5 * MS), 1);
    };
    let Pick::Steer { header, first_len, epoch } = &pick else { unreachable!() };
    let first = &header[..*first_len];
    assert!(header == &format!("{A},{B}") || header == &format!("{B},{A}"), "{header}");
    let inflight = |b: &Balancer| b.cluster(C).unwrap().get(first).unwrap().local.inflight.count();
    assert_eq!(inflight(&b), 1);
    // Response headers: no longer in flight, though the stream may go on.
    b.release(C, first, *epoch);
    assert_eq!(inflight(&b), 0);
    let done = b.complete(C, Some(first), &ok(first, 5 * MS), 2);
    assert_eq!(done.honoured, Some(true));
    assert_eq!(inflight(&b), 0);
}

#[test]
fn a_request_without_response_headers_stops_counting_after_the_inflight_bound() {
    let settings = Settings {
        pick: PickParams { explore_ratio: 0.0, ..Default::default() },
        inflight_epoch_us: 10_000 * MS,
        ..Default::default()
    };
    let mut b = Balancer::new(settings, 1);
    learn(&mut b, &[A, B], 0);
    b.tick(0);
    let steered: Vec<Pick> = (0..200).map(|_| b.pick(C, 1)).filter(|p| p.first_choice().is_some()).collect();
    let waiting =
        |b: &Balancer| b.cluster(C).unwrap().endpoints().iter().map(|e| e.local.inflight.count()).sum::<u32>();
    assert_eq!(waiting(&b) as usize, steered.len());
    b.tick(19_999 * MS);
    assert_eq!(waiting(&b) as usize, steered.len(), "within the bound they count");
    let revision = b.revision();
    b.tick(20_000 * MS);
    assert_eq!(waiting(&b), 0, "a stream that never answered no longer looks busy");
    assert!(b.revision() > revision, "dropping in-flight requests changes the snapshot");
    for pick in &steered {
        answer(&mut b, pick, &ok(A, 5 * MS), 20_001 * MS);
    }
    assert_eq!(waiting(&b), 0);
    let revision = b.revision();
    b.tick(30_000 * MS);
    b.tick(50_000 * MS);
    assert_eq!(b.revision(), revision, "epochs that drop nothing leave an idle worker unchanged");
}

#[test]
fn retry_choices_bound_the_header() {
    for (retry_choices, expected) in [(0, 1), (1, 2), (3, 3)] {
        let settings = Settings {
            retry_choices,
            pick: PickParams { explore_ratio: 0.0, ..Default::default() },
            ..Default::default()
        };
        let mut b = Balancer::new(settings, 3);
        learn(&mut b, &[A, B, "10.0.0.3:80"], 0);
        for _ in 0..50 {
            b.complete(C, None, &ok(A, 5 * MS), 0);
        }
        let pick = (0..100).map(|_| b.pick(C, 0)).find(|p| matches!(p, Pick::Steer { .. })).unwrap();
        let Pick::Steer { header, .. } = pick else { unreachable!() };
        assert_eq!(header.split(',').count(), expected, "retry_choices={retry_choices}: {header}");
    }
}

#[test]
fn five_times_slower_endpoint_gets_a_small_but_nonzero_share() {
    let mut b = balancer();
    let backends = [(A, 5 * MS, false), (B, 25 * MS, false), ("10.0.0.3:80", 5 * MS, false)];
    let shares = run(&mut b, &backends, 20_000, 0);
    assert!(shares[1] < 0.05, "slow share {shares:?}");
    assert!(shares[1] > 0.0, "the slow endpoint still gets probes: {shares:?}");
    assert!((shares[0] - shares[2]).abs() < 0.1, "fast ones share evenly: {shares:?}");
}

#[test]
fn fast_failing_endpoint_is_never_preferred() {
    let mut b = balancer();
    // B answers 503 in 0.1 ms; A succeeds in 10 ms.
    let backends = [(A, 10 * MS, false), (B, 100, true), ("10.0.0.3:80", 10 * MS, false)];
    let shares = run(&mut b, &backends, 20_000, 0);
    assert!(shares[1] < 0.05, "failing share {shares:?}");
}

#[test]
fn a_refused_pick_is_not_a_failure_and_the_endpoint_is_absent_until_it_serves_again() {
    let mut b = Balancer::new(
        Settings { pick: PickParams { explore_ratio: 0.0, ..Default::default() }, ..Default::default() },
        5,
    );
    learn(&mut b, &[A, B], 0);
    // Envoy never tried A (one attempt, served by B): A is not in the cluster now.
    let done = b.complete(C, Some(A), &ok(B, 5 * MS), 1);
    assert_eq!((done.honoured, done.refused), (Some(false), true));
    let a = b.cluster(C).unwrap().get(A).unwrap();
    assert_eq!(a.local.errors, 0, "not counted against the endpoint");
    assert_eq!(a.health.availability(), Availability::Absent);
    assert!((0..500).filter_map(|_| b.pick(C, 2).first_choice().map(str::to_string)).all(|f| f == B));
    // The fallback load balancer finds it in the cluster again: pickable.
    b.complete(C, None, &ok(A, 5 * MS), 3);
    assert!((0..500).filter_map(|_| b.pick(C, 4).first_choice().map(str::to_string)).any(|f| f == A));
}

#[test]
fn a_pick_envoy_tried_and_retried_elsewhere_is_a_failure_of_the_choice() {
    let mut b = Balancer::new(
        Settings { pick: PickParams { explore_ratio: 0.0, ..Default::default() }, ..Default::default() },
        5,
    );
    learn(&mut b, &[A, B], 0);
    let done = b.complete(C, Some(A), &RequestOutcome { attempts: 2, ..ok(B, 5 * MS) }, 1);
    assert_eq!((done.honoured, done.refused), (Some(false), false));
    let a = b.cluster(C).unwrap().get(A).unwrap();
    assert_eq!(a.local.errors, 1);
    assert!(a.health.failure_ratio(1, &PickParams::default().health_times()) > 0.0);
}

#[test]
fn steering_pauses_when_most_picks_are_refused_and_comes_back() {
    let mut b = Balancer::new(
        Settings { pick: PickParams { explore_ratio: 0.0, ..Default::default() }, ..Default::default() },
        5,
    );
    learn(&mut b, &[A, B, "10.0.0.3:80"], 0);
    // A cluster that does not read the header: Envoy's own LB serves every request.
    let mut now = MS;
    let mut paused = None;
    for i in 0..200 {
        let pick = b.pick(C, now);
        let served = [A, B, "10.0.0.3:80"][i % 3];
        if let Some(pause) = answer(&mut b, &pick, &ok(served, 5 * MS), now).paused_for_us {
            paused = Some(pause);
            break;
        }
        now += MS;
    }
    let pause = paused.expect("steering paused");
    assert_eq!(pause, crate::steering::FIRST_PAUSE_US);
    assert_eq!(b.clusters_paused(now), 1);
    assert_eq!(b.pick(C, now + pause - 1), Pick::Paused);
    assert_ne!(b.pick(C, now + pause), Pick::Paused, "tried again after the pause");
}

#[test]
fn no_upstream_reached_is_neither_honoured_nor_a_failure() {
    let mut b = balancer();
    learn(&mut b, &[A], 0);
    let done = b.complete(C, Some(A), &RequestOutcome { served: None, ..failed(A, 0) }, 1);
    assert_eq!(done.honoured, None);
    assert_eq!(b.cluster(C).unwrap().get(A).unwrap().local.errors, 0);
}

#[test]
fn an_endpoint_failing_from_its_first_request_is_tracked_and_suspended() {
    let mut b = balancer();
    learn(&mut b, &[A], 0);
    // B fails the fallback's requests from the start: it is charged, not forgotten.
    let done = b.complete(C, None, &failed(B, 1), 1);
    assert!(!done.learned, "a failure is no discovery for exploration");
    assert_eq!(b.endpoints_tracked(), 2);
    assert_eq!(b.cluster(C).unwrap().get(B).unwrap().local.errors, 1);
    let done = b.complete(C, None, &failed(B, 1), 2);
    assert!(done.suspended);
    assert_eq!(b.cluster(C).unwrap().get(B).unwrap().health.probe_due_us(), Some(2 + 250 * MS));
    // Its report carries the failures, for the aggregator's ejection, and is no sighting for the
    // sibling workers (it never answered well).
    let report = b.snapshot(3);
    let e = report[0].endpoints.iter().find(|e| e.address == B).expect("B reported");
    assert_eq!((e.requests, e.errors, e.seen_age_ms), (2, 2, None));
    let a = report[0].endpoints.iter().find(|e| e.address == A).expect("A reported");
    assert!(a.seen_age_ms.is_some());
}

#[test]
fn a_report_says_since_when_each_endpoints_counters_count() {
    let mut b = balancer();
    learn(&mut b, &[A], 200 * MS);
    learn(&mut b, &[B], 900 * MS);
    b.complete(C, None, &ok(A, 5 * MS), 1_000 * MS);
    let report = b.snapshot(1_500 * MS);
    let counted = |address| report[0].endpoints.iter().find(|e| e.address == address).unwrap().counted_ms;
    // From each one's first contact here, whatever came after.
    assert_eq!((counted(A), counted(B)), (Some(1_300), Some(600)));
}

/// A balancer with `explore_ratio` that knows A, and a fresh view suggesting B (weight 3 to A's 1).
fn knowing_a_with_b_suggested(explore_ratio: f64) -> Balancer {
    let mut b =
        Balancer::new(Settings { pick: PickParams { explore_ratio, ..Default::default() }, ..Default::default() }, 8);
    learn(&mut b, &[A], 0);
    let view = ClusterView {
        name: C.into(),
        reporters: None,
        endpoints: vec![
            EndpointView { address: A.into(), weight: 1.0, ..Default::default() },
            EndpointView { address: B.into(), weight: 3.0, ..Default::default() },
        ],
    };
    b.apply_view(&view, 0, 10_000 * MS);
    b
}

#[test]
fn a_suggestion_that_fails_when_tried_is_tracked_and_no_longer_suggested() {
    let mut b = knowing_a_with_b_suggested(0.0);
    // Tried, answered with an error (served by B, one attempt), then tried and retried elsewhere.
    let pick = (0..100).map(|_| b.pick(C, 1)).find(|p| p.first_choice() == Some(B)).expect("B tried");
    let done = answer(&mut b, &pick, &failed(B, MS), 2);
    assert_eq!(done.honoured, Some(true));
    assert_eq!(b.cluster(C).unwrap().get(B).unwrap().local.errors, 1, "charged, and now tracked");
    let done = b.complete(C, Some(B), &RequestOutcome { attempts: 2, ..ok(A, 5 * MS) }, 3);
    assert!(done.suspended && !done.refused);
    // Known and suspended: no pick, nor a suggestion, until its probe is due.
    assert!((0..500).filter_map(|_| b.pick(C, 4).first_choice().map(str::to_string)).all(|f| f == A));
}

#[test]
fn a_suggestion_retried_elsewhere_is_not_learned_and_no_longer_suggested() {
    let mut b = knowing_a_with_b_suggested(0.5);
    assert!((0..200).any(|_| b.pick(C, 1).first_choice() == Some(B)), "B is suggested");
    // Served by A after two attempts: B failed and was retried, or Envoy does not have B (a left
    // pod the view still lists) and A's first attempt failed. Tracking B would keep a left pod in
    // this proxy's reports for a ttl.
    let done = b.complete(C, Some(B), &RequestOutcome { attempts: 2, ..ok(A, 5 * MS) }, 2);
    assert_eq!((done.honoured, done.refused), (Some(false), false));
    assert!(b.cluster(C).unwrap().get(B).is_none());
    assert_eq!(b.endpoints_tracked(), 1);
    assert!((0..500).all(|_| b.pick(C, 3).first_choice() != Some(B)), "no longer suggested");
}

#[test]
fn stopped_endpoints_get_their_share_back_within_two_seconds_of_answering_again() {
    let mut b = balancer();
    const D: &str = "10.0.0.3:80";
    let fast_then_down = |down: (u64, u64)| {
        move |now: u64| {
            let dead = now >= down.0 && now < down.1;
            vec![(A, 5 * MS, dead), (B, 10 * MS, false), (D, 10 * MS, false)]
        }
    };
    let window = (20_000 * MS, 30_000 * MS);
    let mut now = 0;
    // Warm up, then A (twice as fast) fails for 10 s, then answers again.
    run_until(&mut b, 1_000, &mut now, fast_then_down(window));
    assert!(now < window.0);
    let healthy = run_until(&mut b, 300, &mut now, fast_then_down(window))[0];
    now = now.max(window.0);
    let during = run_until(&mut b, 300, &mut now, fast_then_down(window))[0];
    assert!(during < 0.1, "A is avoided while it fails: {during}");
    now = now.max(window.1);
    // Within 2 s of answering well it is back at its share.
    let back_by = now + 2_000 * MS;
    while now < back_by {
        run_until(&mut b, 1, &mut now, fast_then_down(window));
    }
    let after = run_until(&mut b, 300, &mut now, fast_then_down(window))[0];
    assert!(after > 0.8 * healthy, "share {after} vs {healthy} before the outage");
}

#[test]
fn cluster_limit_leaves_further_clusters_untracked() {
    let mut b = Balancer::new(Settings { max_clusters: 1, ..Default::default() }, 1);
    assert_eq!(b.pick("one", 0), Pick::NoCandidate);
    assert_eq!(b.pick("two", 0), Pick::Untracked);
    assert_eq!(b.complete("two", None, &ok(A, 1), 0), Completion::default());
}

#[test]
fn exploration_settles_at_explore_ratio_once_nothing_new_turns_up() {
    let mut b = Balancer::new(
        Settings { pick: PickParams { explore_ratio: 0.05, ..Default::default() }, ..Default::default() },
        11,
    );
    let backends = [(A, 5 * MS, false), (B, 5 * MS, false)];
    run(&mut b, &backends, 2_000, 0); // all discovered, novelty faded
    let explored = (0..20_000).filter(|_| b.pick(C, 10_000 * MS) == Pick::Explore).count();
    let rate = explored as f64 / 20_000.0;
    assert!((rate - 0.05).abs() < 0.01, "rate {rate}");
}

#[test]
fn aggregator_weights_bias_sampling_and_ejection_excludes() {
    let settings = Settings { pick: PickParams { explore_ratio: 0.0, ..Default::default() }, ..Default::default() };
    let mut b = Balancer::new(settings, 13);
    let view = |wa: f64, ejected_b: bool| ClusterView {
        name: C.into(),
        reporters: None,
        endpoints: vec![
            EndpointView { address: A.into(), weight: wa, latency_us: 5_000, ..Default::default() },
            EndpointView {
                address: B.into(),
                weight: 1.0,
                latency_us: 5_000,
                ejected: ejected_b,
                ..Default::default()
            },
            EndpointView { address: "10.0.0.3:80".into(), weight: 1.0, latency_us: 5_000, ..Default::default() },
        ],
    };
    b.apply_view(&view(1.0, true), 0, 10_000 * MS);
    for _ in 0..40 {
        b.complete(C, None, &ok(A, 5 * MS), 0); // fade novelty
    }
    for _ in 0..2_000 {
        if let Some(first) = b.pick(C, 1).first_choice().map(str::to_string) {
            assert_ne!(first, B, "ejected endpoint chosen");
            b.complete(C, Some(&first), &ok(&first, 5 * MS), 1);
        }
    }
}

#[test]
fn views_never_teach_endpoints_nor_clusters() {
    let mut b = balancer();
    let view = ClusterView {
        name: C.into(),
        reporters: None,
        endpoints: vec![EndpointView { address: A.into(), weight: 1.0, ..Default::default() }],
    };
    b.apply_view(&view, 0, 10_000 * MS);
    assert_eq!((b.endpoints_tracked(), b.cluster_names().count()), (0, 0));
    learn(&mut b, &[B], 0);
    b.apply_view(&view, 0, 10_000 * MS);
    assert_eq!(b.endpoints_tracked(), 1, "only B, which answered here");
}

#[test]
fn a_views_suggestions_are_tried_and_only_envoys_answer_decides() {
    let mut b = Balancer::new(
        Settings { pick: PickParams { explore_ratio: 0.0, ..Default::default() }, ..Default::default() },
        21,
    );
    const D: &str = "10.0.0.4:80";
    learn(&mut b, &[A], 0);
    let view = |listed: &[(&str, f64)]| ClusterView {
        name: C.into(),
        reporters: None,
        endpoints: listed
            .iter()
            .map(|(a, w)| EndpointView { address: a.to_string(), weight: *w, latency_us: 5_000, ..Default::default() })
            .collect(),
    };
    b.apply_view(&view(&[(A, 1.0), (B, 3.0)]), 0, 10_000 * MS);
    assert_eq!(b.endpoints_tracked(), 1, "a suggestion is not tracked");
    // B is drawn as a candidate by its view weight (three times A's) and tried.
    let pick = (0..100).map(|_| b.pick(C, 1)).find(|p| p.first_choice() == Some(B)).expect("B tried");
    assert_eq!(pick.first_choice(), Some(B));
    assert!(matches!(&pick, Pick::Steer { header, .. } if header == &format!("{B},{A}")), "{pick:?}");
    answer(&mut b, &pick, &ok(B, 5 * MS), 2);
    assert!(b.cluster(C).unwrap().get(B).is_some(), "Envoy's good answer teaches it");
    // D is suggested but Envoy does not have it (it served A on the one attempt): refused, not
    // suggested again within the ttl, never learned.
    b.apply_view(&view(&[(A, 1.0), (B, 1.0), (D, 10.0)]), 3, 10_000 * MS);
    let pick = (0..100).map(|_| b.pick(C, 4)).find(|p| p.first_choice() == Some(D)).expect("D tried");
    let done = answer(&mut b, &pick, &ok(A, 5 * MS), 5);
    assert_eq!((done.honoured, done.refused), (Some(false), true));
    assert!(b.cluster(C).unwrap().get(D).is_none());
    b.apply_view(&view(&[(A, 1.0), (B, 1.0), (D, 10.0)]), 6, 10_000 * MS);
    assert!((0..1_000).all(|_| b.pick(C, 7).first_choice() != Some(D)), "refused suggestions wait");
}

#[test]
fn with_the_global_view_off_views_are_ignored() {
    let pick = PickParams { explore_ratio: 0.0, use_global_view: false, ..Default::default() };
    let mut b = Balancer::new(Settings { pick, ..Default::default() }, 13);
    learn(&mut b, &[A, B], 0);
    let view = ClusterView {
        name: C.into(),
        reporters: None,
        endpoints: vec![
            EndpointView { address: A.into(), weight: 1.0, ejected: true, ..Default::default() },
            EndpointView { address: "10.0.0.3:80".into(), weight: 1.0, ..Default::default() },
        ],
    };
    b.apply_view(&view, 0, 10_000 * MS);
    let cluster = b.cluster(C).unwrap();
    assert_eq!(cluster.len(), 2, "the view taught nothing");
    assert!(!cluster.view_fresh(1) && cluster.get(A).unwrap().global.is_none());
    let chose_a = (0..200).filter_map(|_| b.pick(C, 1).first_choice().map(str::to_string)).any(|f| f == A);
    assert!(chose_a, "A is not ejected here");
}

#[test]
fn sibling_inflight_counts_and_dead_siblings_do_not() {
    let settings = Settings { pick: PickParams { explore_ratio: 0.0, ..Default::default() }, ..Default::default() };
    let mut b = Balancer::new(settings, 17);
    learn(&mut b, &[A, B], 0);
    let busy_a = vec![ClusterReport {
        name: C.into(),
        endpoints: vec![EndpointReport {
            address: A.into(),
            requests: 1,
            inflight: 50,
            seen_age_ms: Some(0),
            counted_ms: None,
            ..Default::default()
        }],
    }];
    b.apply_siblings(&[Part { written_us: 0, live: true, clusters: &busy_a }], 0);
    assert_eq!(b.cluster(C).unwrap().get(A).unwrap().siblings.inflight, 50);
    for _ in 0..40 {
        b.complete(C, None, &ok(B, 5 * MS), 0);
    }
    let mut picks = Vec::new();
    for _ in 0..200 {
        let pick = b.pick(C, 0);
        if let Some(first) = pick.first_choice().map(str::to_string) {
            answer(&mut b, &pick, &ok(&first, 5 * MS), 0);
            picks.push(first);
        }
    }
    let to_a = picks.iter().filter(|p| *p == A).count();
    assert!(to_a * 20 < picks.len(), "A is busy through its siblings: {to_a}/{}", picks.len());
    b.apply_siblings(&[Part { written_us: 0, live: false, clusters: &busy_a }], 0);
    assert_eq!(b.cluster(C).unwrap().get(A).unwrap().siblings.inflight, 0);
}

#[test]
fn siblings_share_discoveries_and_latency() {
    let mut b = balancer();
    let seen = vec![ClusterReport {
        name: C.into(),
        endpoints: vec![EndpointReport {
            address: A.into(),
            requests: 3,
            latency_ewma_us: 4_000,
            latency_age_ms: 10,
            seen_age_ms: Some(20),
            counted_ms: None,
            ..Default::default()
        }],
    }];
    b.apply_siblings(&[Part { written_us: 100 * MS, live: true, clusters: &seen }], 100 * MS);
    let a = b.cluster(C).unwrap().get(A).unwrap();
    assert_eq!(a.siblings.latency, Some((4_000.0, 90 * MS)));
    assert_eq!(a.last_success_us, 80 * MS, "seen when the sibling got its good answer, not now");
    // Knowledge older than the ttl teaches nothing.
    let ttl_ms = b.settings().endpoint_ttl_us / MS;
    let old = vec![ClusterReport {
        name: C.into(),
        endpoints: vec![EndpointReport {
            address: B.into(),
            requests: 3,
            latency_ewma_us: 4_000,
            latency_age_ms: 1,
            seen_age_ms: Some(ttl_ms),
            counted_ms: None,
            ..Default::default()
        }],
    }];
    let later = 2 * ttl_ms * MS;
    b.apply_siblings(&[Part { written_us: later, live: true, clusters: &old }], later);
    assert!(b.cluster(C).unwrap().get(B).is_none());
    // Nor does a sibling's failures-only report (no good answer to go by).
    let failing = vec![ClusterReport {
        name: C.into(),
        endpoints: vec![EndpointReport { address: B.into(), requests: 3, errors: 3, ..Default::default() }],
    }];
    b.apply_siblings(&[Part { written_us: later, live: true, clusters: &failing }], later);
    assert!(b.cluster(C).unwrap().get(B).is_none());
}

#[test]
fn tick_forgets_unseen_endpoints_and_idle_clusters() {
    let mut b = balancer();
    learn(&mut b, &[A], 0);
    let ttl = b.settings().endpoint_ttl_us;
    assert_eq!(b.tick(ttl - 1), 0);
    assert_eq!(b.tick(ttl), 1);
    assert_eq!(b.endpoints_tracked(), 0);
    b.tick(2 * ttl);
    assert_eq!(b.cluster_names().count(), 0);
}

#[test]
fn clusters_left_after_one_is_forgotten_keep_their_endpoints() {
    let mut b = balancer();
    const D: &str = "outbound|80||other";
    const E: &str = "outbound|80||third";
    learn(&mut b, &[A], 0);
    let ttl = b.settings().endpoint_ttl_us;
    for (cluster, address) in [(D, B), (E, A)] {
        b.complete(cluster, None, &ok(address, 5 * MS), ttl);
    }
    b.tick(ttl + 1);
    assert!(b.cluster(C).is_none(), "the idle first cluster is forgotten");
    assert_eq!(b.cluster(D).and_then(|c| c.get(B)).map(|e| e.address.as_str()), Some(B));
    assert_eq!(b.cluster(E).and_then(|c| c.get(A)).map(|e| e.address.as_str()), Some(A));
    let done = b.complete(D, None, &ok(B, 5 * MS), ttl + 2);
    assert!(!done.learned, "B is still known in D");
    assert_eq!(b.cluster_names().count(), 2);
}

#[test]
fn snapshot_reports_cumulative_counts() {
    let mut b = balancer();
    b.complete(C, None, &ok(A, 2 * MS), 0);
    b.complete(C, None, &failed(A, 50), 0);
    let snap = b.snapshot(5 * MS);
    let e = &snap[0].endpoints[0];
    assert_eq!((e.requests, e.errors, e.latency_sum_us), (2, 1, 2 * MS));
    assert_eq!(e.latency_age_ms, 5);
}

#[test]
fn same_seed_same_decisions() {
    let decisions = |seed| {
        let mut b = Balancer::new(Settings::default(), seed);
        learn(&mut b, &[A, B, "10.0.0.3:80"], 0);
        (0..200).map(|i| b.pick(C, i)).collect::<Vec<_>>()
    };
    assert_eq!(decisions(5), decisions(5));
}

/// The first choices of the next `n` steered picks at `now` (nothing answers in between).
fn steered_firsts(b: &mut Balancer, n: usize, now: u64) -> Vec<String> {
    let mut firsts = Vec::new();
    for _ in 0..n * 10 {
        if let Some(first) = b.pick(C, now).first_choice() {
            firsts.push(first.to_string());
            if firsts.len() == n {
                break;
            }
        }
    }
    firsts
}

#[test]
fn fresh_load_stamps_steer_to_the_shortest_queue_counting_own_sends() {
    const X: &str = "10.0.0.3:80";
    let mut settings = Settings::default();
    settings.pick.load_stamp_max_age_us = 50 * MS;
    let mut b = Balancer::new(settings, 7);
    learn(&mut b, &[A, B, X], 0);
    b.note_stamp(C, A, LoadStamp { rif: 9 }, MS);
    b.note_stamp(C, B, LoadStamp { rif: 0 }, MS);
    b.note_stamp(C, X, LoadStamp { rif: 5 }, MS);
    // B's queue as this worker knows it: 0, 1, .. 4 after each send, below X's 5 and A's 9.
    assert_eq!(steered_firsts(&mut b, 5, 2 * MS), vec![B; 5]);
    // A newer stamp of B says its queue grew: X has the shortest now.
    b.note_stamp(C, B, LoadStamp { rif: 20 }, 3 * MS);
    assert_eq!(steered_firsts(&mut b, 3, 4 * MS), vec![X; 3]);
    // Once every stamp is older than the maximum age, the picks spread again.
    let later = steered_firsts(&mut b, 60, 60 * MS);
    assert!([A, B, X].iter().all(|e| later.iter().any(|f| f == e)), "{later:?}");
}

#[test]
fn stamps_decide_only_while_own_fresh_estimates_are_thin() {
    const X: &str = "10.0.0.3:80";
    let mut settings = Settings::default();
    settings.pick.load_stamp_max_age_us = 50 * MS;
    settings.pick.load_stamp_max_fresh_share = 0.5;
    let stamp_all = |b: &mut Balancer, at: u64| {
        for (e, rif) in [(A, 9), (B, 0), (X, 5)] {
            b.note_stamp(C, e, LoadStamp { rif }, at);
        }
    };
    let mut b = Balancer::new(settings, 7);
    learn(&mut b, &[A, B, X], 0);
    // Every endpoint has a fresh sample of this proxy's own (share 1 > 0.5): the two-choice pick on
    // its own counts spreads the picks, A included, though its stamp says 9 queued. (Stamps would
    // send the first 15 to B and X: B's queue reaches A's 9 after ten sends, X's after four.)
    b.tick(MS);
    assert_eq!(b.cluster(C).unwrap().own_fresh_share(), 1.0);
    stamp_all(&mut b, MS);
    let rich = steered_firsts(&mut b, 12, 2 * MS);
    assert!(rich.iter().filter(|f| *f == A).count() >= 2, "{rich:?}");
    // Once its own samples are stale (share 0), fresh stamps decide: B's is the shortest queue.
    // (Later than the in-flight bound: the first picks, never answered, no longer count as this
    // proxy's own in flight, which a stamp's queue never goes below.)
    let later = 40_000 * MS;
    b.tick(later);
    assert_eq!(b.cluster(C).unwrap().own_fresh_share(), 0.0);
    stamp_all(&mut b, later);
    assert_eq!(steered_firsts(&mut b, 5, later + MS), vec![B; 5]);
}

#[test]
fn stamps_are_ignored_when_off() {
    let mut settings = Settings::default();
    settings.pick.load_stamp_max_age_us = 0;
    let mut b = Balancer::new(settings, 7);
    learn(&mut b, &[A, B], 0);
    b.note_stamp(C, A, LoadStamp { rif: 50 }, MS);
    b.note_stamp(C, B, LoadStamp { rif: 0 }, MS);
    let firsts = steered_firsts(&mut b, 40, 2 * MS);
    assert!(firsts.iter().filter(|f| *f == A).count() >= 10, "{firsts:?}");
}

#[test]
fn a_stamp_claiming_an_empty_queue_is_charged_for_this_proxys_own_requests_there() {
    const X: &str = "10.0.0.3:80";
    let mut settings = Settings::default();
    settings.pick.load_stamp_max_age_us = 50 * MS;
    let mut b = Balancer::new(settings, 7);
    learn(&mut b, &[A, B, X], 0);
    // X answers every request of this proxy with `rif=0` while holding all of them (none of the 30
    // is answered here); A and B stamp nothing and are as fast.
    let mut firsts = Vec::new();
    for i in 0..300 {
        let now = MS + i;
        if let Some(first) = b.pick(C, now).first_choice() {
            firsts.push(first.to_string());
        }
        b.note_stamp(C, X, LoadStamp { rif: 0 }, now);
        if firsts.len() == 30 {
            break;
        }
    }
    let share = |e: &str| firsts.iter().filter(|f| *f == e).count();
    // Believed, the lie would take all but the first few picks (its queue reset to 0 by each stamp:
    // 28 of 30 with this seed); charged for what this proxy holds there, X wins a pick only while
    // it holds fewer of this proxy's requests than the endpoint it is compared with: it never holds
    // more than one above the busier of A and B, about its third.
    assert!(share(X) <= share(A).max(share(B)) + 1, "{firsts:?}");
    assert!(share(X) <= 12, "{firsts:?}");
}

#[test]
fn a_trusted_liar_can_hide_only_the_other_proxies_load_at_it() {
    // A and B stamp honestly: this proxy's requests there plus `OTHERS` of other proxies; X, alike,
    // holds as many of the others' but answers `rif=0`. None of the 30 requests is answered here.
    const X: &str = "10.0.0.3:80";
    const OTHERS: u32 = 3;
    let mut settings = Settings::default();
    settings.pick.load_stamp_max_age_us = 50 * MS;
    let mut b = Balancer::new(settings, 7);
    learn(&mut b, &[A, B, X], 0);
    let own = |b: &Balancer, e: &str| {
        let c = b.cluster(C).unwrap();
        c.endpoints()[c.slot_of(e).unwrap()].load() as u32
    };
    let mut picks = 0;
    for i in 0..300 {
        let now = MS + i;
        for e in [A, B] {
            let rif = own(&b, e) + OTHERS;
            b.note_stamp(C, e, LoadStamp { rif }, now);
        }
        b.note_stamp(C, X, LoadStamp { rif: 0 }, now);
        if b.pick(C, now).first_choice().is_some() {
            picks += 1;
            // X is charged for what it holds of this proxy's: it never holds more than the busier
            // honest endpoint's whole queue, plus the one pick that took it there.
            assert!(own(&b, X) <= own(&b, A).max(own(&b, B)) + OTHERS + 1, "{i}");
        }
        if picks == 30 {
            break;
        }
    }
    // What it can still do: hide the others' load, so it holds up to OTHERS more than a fair third.
    assert!(own(&b, X) > own(&b, A).max(own(&b, B)), "{}", own(&b, X));
    assert!(own(&b, X) <= 30 / 3 + OTHERS + 1, "{}", own(&b, X));
}

/// A balancer with HTTP health checks on for every cluster or off (explore_ratio 0) that knows A and
/// B, B suspended at 2 (two failures in a row) after an HTTP user request to C carried `svc.example:80`.
fn with_b_suspended(health_checks: bool) -> Balancer {
    suspended_with(health_checks.then(Vec::new))
}

fn suspended_with(clusters: Option<Vec<String>>) -> Balancer {
    suspended_speaking(
        clusters.map(|clusters| HealthCheckScope { clusters, http: true, grpc: false, fleet_rate_per_s: 20.0 }),
        CheckProtocol::Http,
    )
}

fn suspended_speaking(health_checks: Option<HealthCheckScope>, protocol: CheckProtocol) -> Balancer {
    let pick = PickParams { explore_ratio: 0.0, ..Default::default() };
    let mut b = Balancer::new(Settings { pick, health_checks, ..Default::default() }, 9);
    learn(&mut b, &[A, B], 0);
    b.note_user_request(C, protocol, 0, || Some("svc.example:80".into()));
    b.complete(C, None, &failed(B, MS), 1);
    assert!(b.complete(C, None, &failed(B, MS), 2).suspended);
    b
}

fn due(b: &mut Balancer, now: u64) -> Vec<DueHealthCheck> {
    let mut due = Vec::new();
    b.due_health_checks(now, 16, &mut due);
    due
}

#[test]
fn with_health_checks_no_user_request_goes_to_a_suspended_endpoint() {
    let mut b = with_b_suspended(true);
    // Through many probe waits: every steered pick is A's, first choice and retry choice alike
    // (exploration, left to the fallback LB while novelty is high, is the fallback's choice).
    let mut steered = 0;
    for now in (3..5_000).map(|i| i * 2 * MS) {
        let pick = b.pick(C, now);
        if let Pick::Steer { header, .. } = &pick {
            assert!(!header.contains(B), "at {now}: {header}");
            steered += 1;
        }
        answer(&mut b, &pick, &ok(A, MS), now);
    }
    assert!(steered > 4_900, "{steered}");
    // Today's behaviour with them off, or on for other clusters only: the probe is a user's request.
    for mut off in [with_b_suspended(false), suspended_with(Some(vec!["other".into()]))] {
        assert!(due(&mut off, 10_000 * MS).is_empty(), "off: no checks");
        assert_eq!(off.pick(C, 2 + 250 * MS).first_choice(), Some(B), "off: the due probe takes a user request");
    }
    let mut named = suspended_with(Some(vec![C.into()]));
    assert_eq!(due(&mut named, 2 + 250 * MS).len(), 1, "on for the cluster named");
}

#[test]
fn a_cluster_is_checked_in_its_users_protocol_if_that_check_is_configured() {
    let scope = |http, grpc| Some(HealthCheckScope { clusters: vec![], http, grpc, fleet_rate_per_s: 20.0 });
    let mut grpc = suspended_speaking(scope(false, true), CheckProtocol::Grpc);
    let checks = due(&mut grpc, 2 + 250 * MS);
    assert_eq!(checks.iter().map(|c| (c.address.as_str(), c.protocol)).collect::<Vec<_>>(), [(B, CheckProtocol::Grpc)]);
    // Only HTTP checks configured and a gRPC cluster (or the reverse): users' requests probe it.
    for (mut b, protocol) in [
        (suspended_speaking(scope(true, false), CheckProtocol::Grpc), CheckProtocol::Grpc),
        (suspended_speaking(scope(false, true), CheckProtocol::Http), CheckProtocol::Http),
    ] {
        assert!(due(&mut b, 10_000 * MS).is_empty(), "{protocol:?}: no check");
        assert_eq!(b.pick(C, 2 + 250 * MS).first_choice(), Some(B), "{protocol:?}: a user request probes");
    }
    // A check the destination does not serve us (no health service, a policy denying it) pauses the
    // cluster's checks: the endpoint's next probe is a user's request, and checks resume later.
    let mut b = suspended_speaking(scope(false, true), CheckProtocol::Grpc);
    let check = due(&mut b, 2 + 250 * MS).remove(0);
    assert_eq!(b.health_check_answered(&check, CheckVerdict::Unanswerable, 260 * MS), HealthChange::None);
    assert!(due(&mut b, 10_000 * MS).is_empty(), "paused");
    assert_eq!(b.pick(C, 2 + 500 * MS).first_choice(), Some(B), "a user request probes meanwhile");
    assert_eq!(due(&mut b, 260 * MS + UNANSWERABLE_PAUSE_US).len(), 1, "checks resume after the pause");
    // A cluster whose users switch protocol is checked in the latest one.
    let mut switched = suspended_speaking(scope(true, true), CheckProtocol::Http);
    switched.note_user_request(C, CheckProtocol::Grpc, 3, || None);
    assert_eq!(due(&mut switched, 2 + 250 * MS)[0].protocol, CheckProtocol::Grpc);
}

#[test]
fn a_health_check_is_due_once_per_wait() {
    let mut b = with_b_suspended(true);
    assert!(due(&mut b, 2 + 250 * MS - 1).is_empty(), "not before its probe time");
    let first = due(&mut b, 2 + 250 * MS);
    let expected = DueHealthCheck {
        cluster: C.into(),
        address: B.into(),
        authority: "svc.example:80".into(),
        protocol: CheckProtocol::Http,
        sent_us: 2 + 250 * MS,
        back_off: true,
    };
    assert_eq!(first, [expected]);
    // No answer yet: the next is due a wait after this one was sent, not before.
    assert!(due(&mut b, 2 + 499 * MS).is_empty());
    assert_eq!(due(&mut b, 2 + 500 * MS).len(), 1);
    // `max` bounds a tick's checks; the rest stay due for the next tick.
    let mut none = Vec::new();
    b.due_health_checks(2 + 900 * MS, 0, &mut none);
    assert!(none.is_empty());
    assert_eq!(due(&mut b, 2 + 900 * MS).len(), 1);
}

#[test]
fn a_passed_health_check_readmits_and_a_failed_one_doubles_the_wait() {
    let mut b = with_b_suspended(true);
    let check = due(&mut b, 250 * MS + 2).remove(0);
    // Failed (a 503, a timeout): the wait doubles from the answer.
    assert_eq!(b.health_check_answered(&check, CheckVerdict::Failed, 260 * MS), HealthChange::None);
    let health = |b: &Balancer| b.cluster(C).unwrap().get(B).unwrap().health.clone();
    assert_eq!(health(&b).probe_due_us(), Some(260 * MS + 500 * MS));
    assert!(due(&mut b, 759 * MS).is_empty());
    let check = due(&mut b, 760 * MS).remove(0);
    // Passed: suspension over, ramping back from the floor like after a good probe.
    assert_eq!(b.health_check_answered(&check, CheckVerdict::Passed, 765 * MS), HealthChange::Recovered);
    assert!(health(&b).pickable());
    assert!(health(&b).ramp().is_some(), "the recovery ramp runs");
    let e = b.cluster(C).unwrap().get(B).unwrap();
    assert_eq!((e.local.requests, e.local.errors), (3, 2), "checks are not users' requests in the counts");
    assert!((0..400).any(|_| b.pick(C, 800 * MS).first_choice() == Some(B)), "picked again");
    // A late answer to a check of an endpoint no longer suspended changes nothing.
    assert_eq!(b.health_check_answered(&check, CheckVerdict::Failed, 900 * MS), HealthChange::None);
    assert!(health(&b).pickable());
}

#[test]
fn a_destination_whose_health_checks_pass_while_users_fail_costs_ever_fewer_user_requests() {
    // B's health path answers 2xx, its users' requests fail. Each pass readmits it, each readmission
    // costs the users' requests that suspend it again; the waits after such unconfirmed passes grow
    // to 8 s, so late in the run B costs less than the one failure per second users' probes cost.
    let mut b = with_b_suspended(true);
    let mut failures = [0u32; 2];
    let (step, end) = (5 * MS, 40_000 * MS);
    for now in (1..end / step).map(|i| i * step) {
        for check in due(&mut b, now) {
            b.health_check_answered(&check, CheckVerdict::Passed, now);
        }
        let pick = b.pick(C, now);
        if pick.first_choice() == Some(B) {
            failures[usize::from(now >= end / 2)] += 1;
            answer(&mut b, &pick, &failed(B, MS), now);
        } else {
            // Ten times as slow as B was when it answered well: B is worth trying whenever it may be.
            answer(&mut b, &pick, &ok(A, 50 * MS), now);
        }
    }
    // Measured: 8 in the first 20 s, 4 in the second (9 and 10 when every pass restarted at 250 ms).
    assert!(failures[1] <= 6, "the last 20 s, at waits of 4-8 s: {failures:?}");
    assert!(failures[0] + failures[1] >= 4, "it is tried again: {failures:?}");
    // B is back: a good user answer confirms the check, and the next suspension waits 250 ms again.
    let health = |b: &Balancer| b.cluster(C).unwrap().get(B).unwrap().health.clone();
    let mut now = end;
    while !health(&b).pickable() {
        now += step;
        for check in due(&mut b, now) {
            b.health_check_answered(&check, CheckVerdict::Passed, now);
        }
    }
    b.complete(C, None, &ok(B, MS), now + 1);
    b.complete(C, None, &failed(B, MS), now + 2);
    b.complete(C, None, &failed(B, MS), now + 3);
    assert_eq!(health(&b).probe_due_us(), Some(now + 3 + 250 * MS));
}

/// A view of C from the aggregator saying `reporters` callers report it, and B last answered some
/// caller's users well `b_served_age_ms` before it was written.
fn fleet_view(reporters: u32, b_served_age_ms: Option<u64>) -> ClusterView {
    let endpoint = |address: &str, served_age_ms| EndpointView {
        address: address.into(),
        weight: 1.0,
        served_age_ms,
        ..Default::default()
    };
    ClusterView {
        name: C.into(),
        reporters: Some(reporters),
        endpoints: vec![endpoint(A, Some(0)), endpoint(B, b_served_age_ms)],
    }
}

/// Checks of B sent between 250 ms and `end` (due times every 5 ms), each failing at once, with the
/// view `view` applied every second (None: no aggregator).
fn failed_checks_until(b: &mut Balancer, end: u64, view: Option<&ClusterView>) -> usize {
    let mut sent = 0;
    for now in (50..end / (5 * MS)).map(|i| i * 5 * MS) {
        if let Some(view) = view.filter(|_| now % (1_000 * MS) == 0) {
            b.apply_view(view, now, 3_000 * MS);
        }
        for check in due(b, now) {
            sent += 1;
            assert_eq!(b.health_check_answered(&check, CheckVerdict::Failed, now), HealthChange::None);
        }
    }
    sent
}

#[test]
fn with_many_callers_a_worker_sends_its_share_of_the_checks_and_never_backs_off() {
    let end = 100_000 * MS;
    // Alone (no view): every probe wait, backing off to 1 s: ~100 checks in 100 s.
    let alone = failed_checks_until(&mut with_b_suspended(true), end, None);
    assert!((99..=102).contains(&alone), "{alone}");
    // Two callers: each checks at every probe interval (250 ms) without backing off once the first
    // view came (at 1 s), the pair at the fleet rate of 20/s at most: ~400 checks.
    let pair = failed_checks_until(&mut with_b_suspended(true), end, Some(&fleet_view(2, None)));
    assert!((388..=400).contains(&pair), "{pair}");
    // A hundred callers: each sends 20 x 0.25 / 100 = 5% of its due checks, ~20 in 100 s, so the
    // hundred send ~20 a second together, where each would send ~100 alone.
    let mut b = with_b_suspended(true);
    b.apply_view(&fleet_view(100, None), 0, end);
    let mut due_checks = Vec::new();
    let mut round = CheckRound::default();
    let mut sent = 0;
    for now in (50..end / (5 * MS)).map(|i| i * 5 * MS) {
        let r = b.due_health_checks(now, 16, &mut due_checks);
        round.left_to_others += r.left_to_others;
        round.readmitted_on_evidence += r.readmitted_on_evidence;
        for check in due_checks.drain(..) {
            sent += 1;
            b.health_check_answered(&check, CheckVerdict::Failed, now);
        }
    }
    assert!((8..=40).contains(&sent), "{sent}");
    assert_eq!(round.readmitted_on_evidence, 0, "nobody was served");
    assert!((390..=400).contains(&(sent + round.left_to_others as usize)), "{sent} + {round:?}: due every 250 ms");
    // When the view runs out, the worker checks alone again.
    assert_eq!(due(&mut b, end + 250 * MS).len(), 1);
}

#[test]
fn another_callers_good_answers_readmit_a_suspended_endpoint_at_its_next_due_check() {
    let health = |b: &Balancer| b.cluster(C).unwrap().get(B).unwrap().health.clone();
    // B was suspended at 2 us. A view written 50 ms after some caller's user was answered well at
    // 0.95 s: not after the suspension by the margin (the view may be a report interval old).
    let mut b = with_b_suspended(true);
    b.apply_view(&fleet_view(1_000, Some(50)), 1_000 * MS, 10_000 * MS);
    let mut checks = Vec::new();
    for now in (1..=40).map(|i| i * 250 * MS) {
        let round = b.due_health_checks(now, 16, &mut checks);
        assert_eq!(round.readmitted_on_evidence, 0, "at {now}");
    }
    assert!(!health(&b).pickable());
    // A view saying a user was answered well at 1.5 s: at B's next due time it is readmitted, with
    // no check sent, on the recovery ramp.
    b.apply_view(&fleet_view(1_000, Some(500)), 2_000 * MS, 10_000 * MS);
    checks.clear();
    let round = b.due_health_checks(10_250 * MS, 16, &mut checks);
    assert_eq!(round, CheckRound { readmitted_on_evidence: 1, left_to_others: 0 });
    assert!(checks.is_empty());
    assert!(health(&b).pickable() && health(&b).ramp().is_some());
    assert!((0..400).any(|_| b.pick(C, 10_300 * MS).first_choice() == Some(B)), "picked again");
    // Failing here all the same: suspended again, and the unconfirmed readmission doubles the wait
    // before the next (a view that keeps readmitting an endpoint failing here costs ever less).
    b.complete(C, None, &failed(B, MS), 10_400 * MS);
    assert!(b.complete(C, None, &failed(B, MS), 10_401 * MS).suspended);
    assert_eq!(health(&b).probe_due_us(), Some(10_401 * MS + 500 * MS));
    // The same evidence (before this suspension) readmits nothing more.
    checks.clear();
    assert_eq!(b.due_health_checks(10_901 * MS, 16, &mut checks).readmitted_on_evidence, 0);
    assert!(!health(&b).pickable());
    // Without a fresh view no evidence counts: the worker checks itself.
    let mut b = with_b_suspended(true);
    b.apply_view(&fleet_view(1_000, Some(0)), 2_000 * MS, 1_000 * MS);
    assert_eq!(due(&mut b, 3_250 * MS).len(), 1, "view expired at 3 s");
}
