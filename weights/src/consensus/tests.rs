use super::*;

fn view(endpoint: usize, principal: u32, qps: f64, eps: f64, latency: f64) -> PrincipalView {
    PrincipalView {
        endpoint,
        principal,
        merged: Merged {
            qps,
            eps,
            inflight: qps / 50.0,
            latency_us: Some(latency),
            reporters: 1,
            latency_votes: qps,
            ..Merged::default()
        },
        inflight_factor: 1.0,
    }
}

fn combined(views: &mut [PrincipalView], endpoints: usize) -> Vec<Merged> {
    views.sort_by_key(|v| (v.endpoint, v.principal));
    let mut out = Vec::new();
    combine(views, endpoints, &WeightParams::default(), Some(1_000_000), &mut ConsensusScratch::default(), &mut out);
    out
}

/// Principals 0..honest split 100 rps evenly over `endpoints`; `liar` adds its own views.
fn world(honest: u32, endpoints: usize, liar: &[PrincipalView]) -> Vec<Merged> {
    let mut views: Vec<PrincipalView> = (0..honest)
        .flat_map(|p| (0..endpoints).map(move |e| view(e, p, 100.0 / endpoints as f64, 0.0, 10_000.0)))
        .collect();
    views.extend_from_slice(liar);
    combined(&mut views, endpoints)
}

#[test]
fn a_principal_cannot_concentrate_volume_on_one_endpoint_beyond_the_tolerance() {
    let fair = world(3, 4, &[]);
    // The liar claims all of 1,000 rps on endpoint 0 and reports only it.
    let lied = world(3, 4, &[view(0, 9, 1_000.0, 0.0, 10_000.0)]);
    let p = WeightParams::default();
    let share = |m: &[Merged]| m[0].qps / m.iter().map(|e| e.qps).sum::<f64>();
    let (before, after) = (share(&fair), share(&lied));
    let bound = (1.0 + p.split_tolerance) / (1.0 - p.split_tolerance);
    assert!(after / before <= bound + 1e-12, "{before} -> {after}");
    // Its volume is clipped at sum_clip x the largest other principal's (100 rps).
    let total: f64 = lied.iter().map(|e| e.qps).sum();
    assert!(total <= 300.0 + p.sum_clip * 100.0 * (1.0 + p.split_tolerance) + 1e-9, "{total}");
}

#[test]
fn withholding_an_endpoint_moves_its_share_at_most_the_tolerance() {
    let fair = world(3, 4, &[]);
    let liar: Vec<PrincipalView> = (1..4).map(|e| view(e, 9, 100.0, 0.0, 10_000.0)).collect();
    let lied = world(3, 4, &liar);
    let p = WeightParams::default();
    let share = |m: &[Merged]| m[0].qps / m.iter().map(|e| e.qps).sum::<f64>();
    let bound = (1.0 - p.split_tolerance) / (1.0 + p.split_tolerance);
    assert!(share(&lied) / share(&fair) >= bound - 1e-12, "{} -> {}", share(&fair), share(&lied));
}

#[test]
fn a_minority_of_principals_cannot_move_error_ratio_or_latency() {
    let liars = [view(0, 8, 100.0, 100.0, 1.0), view(0, 9, 1e6, 1e6, 3.6e9)];
    for n in [1, 2] {
        let m = world(3, 2, &liars[..n]);
        assert_eq!(m[0].eps, 0.0, "{n} liars");
        assert_eq!(m[0].latency_us, Some(10_000.0), "{n} liars");
    }
}

#[test]
fn two_principals_bound_each_other_as_two_reporters_do() {
    // Honest: 50 rps, no errors; the other claims 1,000 rps, all failing.
    let mut views = vec![view(0, 0, 50.0, 0.0, 10_000.0), view(0, 1, 1_000.0, 1_000.0, 10_000.0)];
    let m = combined(&mut views, 1);
    // Its volume is clipped at 2 x 50, then its errors at 2 x 0.
    assert_eq!((m[0].qps, m[0].eps), (150.0, 0.0));
}

#[test]
fn a_principal_on_its_own_is_taken_as_it_is() {
    let mut views = vec![view(0, 3, 70.0, 7.0, 2_000.0), view(1, 3, 30.0, 0.0, 4_000.0)];
    let m = combined(&mut views, 3);
    assert_eq!((m[0].qps, m[0].eps, m[1].latency_us), (70.0, 7.0, Some(4_000.0)));
    assert_eq!(m[2], Merged::default(), "an endpoint without a view");
}
