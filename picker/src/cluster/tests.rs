use super::*;
use tailweight_wire::reply::EndpointView;

fn view(entries: &[(&str, f64, bool)]) -> ClusterView {
    ClusterView {
        name: "c".into(),
        reporters: None,
        endpoints: entries
            .iter()
            .map(|(a, w, ejected)| EndpointView {
                address: a.to_string(),
                weight: *w,
                latency_us: 1_000,
                ejected: *ejected,
                ..Default::default()
            })
            .collect(),
    }
}

fn known(addresses: &[&str]) -> Cluster {
    let mut c = Cluster::new(0, 30_000.0);
    for a in addresses {
        c.learn(a, 0, 10, 0);
    }
    c
}

#[test]
fn learns_once_within_the_limit_and_only_addresses() {
    let mut c = Cluster::new(0, 30_000.0);
    assert_eq!(c.learn("10.0.0.1:80", 0, 2, 0), Some((0, true)));
    assert_eq!(c.learn("10.0.0.1:80", 0, 2, 0), Some((0, false)));
    assert_eq!(c.learn("not-an-address", 0, 2, 0), None);
    assert_eq!(c.learn("10.0.0.2:80", 0, 2, 0), Some((1, true)));
    assert_eq!(c.learn("10.0.0.3:80", 0, 2, 0), None, "full");
}

#[test]
fn expiry_forgets_endpoints_without_a_good_answer_but_not_busy_ones() {
    let mut c = known(&["10.0.0.1:80", "10.0.0.2:80"]);
    c.learn("10.0.0.3:80", 500, 10, 0);
    c.get_mut("10.0.0.2:80").unwrap().local.inflight.add(0);
    assert_eq!(c.expire(1_000, 1_000), 1);
    assert!(c.get("10.0.0.1:80").is_none());
    assert!(c.get("10.0.0.2:80").is_some(), "requests in flight keep it");
    assert_eq!(c.get("10.0.0.3:80").unwrap().address, "10.0.0.3:80", "index rebuilt");
}

#[test]
fn view_weights_known_endpoints_until_it_expires_and_never_teaches_nor_refreshes() {
    let mut c = known(&["10.0.0.1:80", "10.0.0.2:80"]);
    let listed = [("10.0.0.1:80", 3.0, false), ("10.0.0.2:80", 1.0, false), ("10.0.0.9:80", 5.0, false)];
    c.apply_view(&view(&listed), 1_000, 0);
    assert_eq!(c.len(), 2, "an endpoint only the view names is not learned");
    assert_eq!(c.get("10.0.0.1:80").unwrap().last_success_us, 0, "nor does the view refresh one");
    assert!(c.view_fresh(999) && !c.view_fresh(1_000));
    let mut rng = Rng::new(9);
    let mut hits = [0u32; 2];
    for _ in 0..40_000 {
        hits[c.sample(&mut rng, 0).unwrap()] += 1;
    }
    let share = hits[0] as f64 / 40_000.0;
    assert!((share - 0.75).abs() < 0.02, "weighted 3:1, got {share}");
    // Past expiry, sampling is uniform again.
    hits = [0; 2];
    for _ in 0..40_000 {
        hits[c.sample(&mut rng, 2_000).unwrap()] += 1;
    }
    let share = hits[0] as f64 / 40_000.0;
    assert!((share - 0.5).abs() < 0.02, "uniform, got {share}");
    // Expiry goes by this proxy's evidence, whatever the views say.
    c.apply_view(&view(&listed), 200_000, 0);
    assert_eq!(c.expire(100_000, 50_000), 2);
}

#[test]
fn ejected_endpoints_are_never_sampled() {
    let mut c = known(&["10.0.0.1:80", "10.0.0.2:80"]);
    // Their last answers here were failures: nothing of this worker's outweighs the view.
    for slot in 0..2 {
        c.endpoint_mut(slot).record(crate::outcome::ResponseClass::Overload, 0, None, 1, &PickParams::default());
    }
    c.apply_view(&view(&[("10.0.0.1:80", 1.0, true), ("10.0.0.2:80", 1.0, false)]), 1_000, 0);
    let mut rng = Rng::new(1);
    for _ in 0..1_000 {
        assert_eq!(c.sample(&mut rng, 0), Some(1));
    }
    // Known here but absent from the view: the mean weight (1), not excluded.
    c.apply_view(&view(&[("10.0.0.1:80", 1.0, true)]), 1_000, 0);
    assert_eq!(c.sample(&mut rng, 0), Some(1));
    c.apply_view(&view(&[("10.0.0.1:80", 1.0, true), ("10.0.0.2:80", 1.0, true)]), 1_000, 0);
    assert_eq!(c.sample(&mut rng, 0), None, "all ejected: nothing to sample");
}

#[test]
fn an_ejected_endpoint_that_answered_well_here_draws_as_an_average_live_one() {
    let mut c = known(&["10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80"]);
    let listed = [("10.0.0.1:80", 2.0, false), ("10.0.0.2:80", 1.0, false), ("10.0.0.3:80", 0.05, true)];
    c.apply_view(&view(&listed), 1_000, 0);
    assert_eq!(c.readmit_weight(), 1.5, "the mean of the live ones, not the view's 1");
    let mut rng = Rng::new(3);
    let hits = (0..40_000).filter(|_| c.sample(&mut rng, 0) == Some(2)).count();
    let share = hits as f64 / 40_000.0;
    assert!((share - 1.5 / 4.5).abs() < 0.02, "drawn at 1.5 of 4.5, got {share}");
    c.apply_view(&view(&[("10.0.0.3:80", 0.05, true)]), 1_000, 0);
    assert_eq!(c.readmit_weight(), 1.0, "none live: 1");
}

#[test]
fn a_new_view_clears_global_stats_of_endpoints_it_omits() {
    let mut c = known(&["10.0.0.1:80", "10.0.0.2:80"]);
    c.apply_view(&view(&[("10.0.0.1:80", 2.0, false), ("10.0.0.2:80", 1.0, false)]), 1_000, 0);
    c.apply_view(&view(&[("10.0.0.1:80", 2.0, false)]), 1_000, 0);
    assert!(c.get("10.0.0.2:80").unwrap().global.is_none());
}

#[test]
fn endpoints_joining_an_established_cluster_ramp_up_the_first_ones_do_not() {
    let p = PickParams::default();
    let slow = p.slow_start_us;
    let mut c = Cluster::new(0, 30_000.0);
    c.learn("10.0.0.1:80", slow / 2, 10, slow);
    assert!(c.get("10.0.0.1:80").unwrap().health.ramp().is_none(), "discovering an established set");
    let (late, _) = c.learn("10.0.0.2:80", slow, 10, slow).unwrap();
    let mut rng = Rng::new(3);
    let share_at = |c: &mut Cluster, rng: &mut Rng, now: u64| {
        c.tick(now, 0, 0);
        let hits = (0..20_000).filter(|_| c.sample(rng, now) == Some(late)).count();
        hits as f64 / 20_000.0
    };
    // Weight 0.1 against 1, then 0.55 against 1 half way, then even.
    assert!((share_at(&mut c, &mut rng, slow) - 0.1 / 1.1).abs() < 0.02);
    assert!((share_at(&mut c, &mut rng, slow + slow / 2) - 0.55 / 1.55).abs() < 0.02);
    assert!((share_at(&mut c, &mut rng, 2 * slow) - 0.5).abs() < 0.02);
    assert!(c.get("10.0.0.2:80").unwrap().health.ramp().is_none(), "the ramp ended");
}

#[test]
fn suspended_endpoints_are_not_drawn_and_are_probed_when_due() {
    use crate::outcome::ResponseClass;
    let p = PickParams::default();
    let mut c = known(&["10.0.0.1:80", "10.0.0.2:80"]);
    for t in [10, 20] {
        let change = c.endpoint_mut(0).record(ResponseClass::Failure, 0, None, t, &p);
        c.health_changed(change);
    }
    let mut rng = Rng::new(5);
    assert!((0..1_000).all(|_| c.sample(&mut rng, 30) == Some(1)));
    assert_eq!(c.take_due_probe(30, &p), None);
    let due = 20 + p.probe_interval_us;
    assert_eq!(c.take_due_probe(due, &p), Some(0));
    assert_eq!(c.take_due_probe(due, &p), None, "one probe at a time");
    let change = c.endpoint_mut(0).record(ResponseClass::Success, 1_000, None, due + 5, &p);
    c.health_changed(change);
    assert!((0..1_000).any(|_| c.sample(&mut rng, due + 5) == Some(0)), "back, ramping");
}

#[test]
fn an_absent_endpoint_is_not_drawn() {
    let mut c = known(&["10.0.0.1:80", "10.0.0.2:80"]);
    c.mark_absent(1);
    let mut rng = Rng::new(5);
    assert!((0..1_000).all(|_| c.sample(&mut rng, 0) == Some(0)));
    c.mark_absent(0);
    assert_eq!(c.sample(&mut rng, 0), None);
}

#[test]
fn tick_advances_in_flight_epochs() {
    let mut c = known(&["10.0.0.1:80"]);
    c.endpoint_mut(0).local.inflight.add(3);
    c.tick(0, 3, 4);
    assert_eq!(c.endpoints()[0].local.inflight.count(), 1);
    c.tick(0, 4, 5);
    assert_eq!(c.endpoints()[0].local.inflight.count(), 0);
}

#[test]
fn prior_is_the_median_of_fresh_estimates() {
    let p = PickParams::default();
    let mut c = Cluster::new(0, 30_000.0);
    for (i, lat) in [1_000u64, 2_000, 9_000].iter().enumerate() {
        let (slot, _) = c.learn(&format!("10.0.0.{}:80", i + 1), 0, 10, 0).unwrap();
        c.endpoint_mut(slot).record(crate::outcome::ResponseClass::Success, *lat, None, 0, &p);
    }
    c.learn("10.0.0.4:80", 0, 10, 0).unwrap();
    c.refresh_prior(0, &p);
    assert_eq!(c.prior_latency_us(), 2_000.0);
    assert_eq!(c.own_fresh_share(), 0.75, "3 of 4 known endpoints have an estimate");
    c.refresh_prior(p.stale_after_us + 1, &p);
    assert_eq!(c.prior_latency_us(), 30_000.0, "all stale, no view: the default");
    assert_eq!(c.own_fresh_share(), 0.0, "all stale");
}

#[test]
fn novelty_decays_when_exploration_finds_nothing_new() {
    let mut c = Cluster::new(0, 30_000.0);
    for _ in 0..10 {
        c.note_discovery(false);
    }
    assert!((c.novelty() - 0.8f64.powi(10)).abs() < 1e-12);
    c.note_discovery(true);
    assert!(c.novelty() > 0.2);
}

#[test]
fn only_endpoints_some_callers_users_were_answered_well_by_lately_are_suggested() {
    let mut c = known(&["10.0.0.1:80"]);
    let endpoint = |address: &str, served_age_ms| EndpointView {
        address: address.into(),
        weight: 1.0,
        served_age_ms,
        ..Default::default()
    };
    let listed = |served: [Option<u64>; 3]| ClusterView {
        name: "c".into(),
        reporters: Some(4),
        endpoints: vec![
            endpoint("10.0.0.1:80", Some(0)),
            endpoint("10.0.0.2:80", served[0]),
            endpoint("10.0.0.3:80", served[1]),
            endpoint("10.0.0.4:80", served[2]),
        ],
    };
    let suggested = |c: &Cluster| (0..c.suggestions.len()).map(|at| c.suggestion(at).to_string()).collect::<Vec<_>>();
    // A new pod nobody was served well by (failing from its start), one served long ago, one lately.
    c.apply_view(&listed([None, Some(SUGGEST_SERVED_WITHIN_MS + 1), Some(900)]), 10_000, 0);
    assert_eq!(suggested(&c), ["10.0.0.4:80"]);
    // Listed all the same: learned through Envoy's own pick, it does not slow-start here on top
    // of the aggregator's ramp; an endpoint the view does not list does.
    let slow = PickParams::default().slow_start_us;
    let mut late = Cluster::new(0, 30_000.0);
    late.apply_view(&listed([None, None, Some(0)]), 2 * slow, slow);
    late.learn("10.0.0.2:80", slow, 10, slow);
    late.learn("10.0.0.9:80", slow, 10, slow);
    assert!(late.get("10.0.0.2:80").unwrap().health.ramp().is_none(), "listed: the aggregator ramps it");
    assert!(late.get("10.0.0.9:80").unwrap().health.ramp().is_some(), "not listed: ramps here");
    // An aggregator that does not say: every listed one.
    let mut old = listed([None, None, None]);
    old.endpoints[0].served_age_ms = None;
    c.apply_view(&old, 10_000, 0);
    assert_eq!(suggested(&c), ["10.0.0.2:80", "10.0.0.3:80", "10.0.0.4:80"]);
}
