use super::*;
use crate::policy::round_robin::RoundRobin;
use crate::scenario::Scenario;
use crate::setup::Overrides;

/// Six equal backends under round robin for 4 s, with `events` as a scenario file writes them.
fn run_six_backends(events: &str) -> (Setup, Vec<Server>) {
    let text = format!(
        "name: t\nseed: 3\nwarmup_s: 0\nduration_s: 4\n\
         backends: [{{count: 6, workers: 2, base_ms: 10, speed: 1.0, jitter: 0.0}}]\n\
         clients: {{count: 4, qps: 200, connections: 16}}\nevents: {events}\n"
    );
    let setup = Setup::resolve(&Scenario::parse(&text).unwrap(), &Overrides::default()).unwrap();
    let arrivals = Arrivals::poisson(setup.qps, setup.clients, setup.service, setup.end_ns(), setup.seed);
    let mut engine = Engine::new(&setup, RoundRobin::new(setup.clients, 6, 1), arrivals);
    engine.run();
    let servers = engine.servers;
    (setup, servers)
}

#[test]
fn an_event_naming_several_backends_applies_to_each_of_them() {
    let (setup, servers) = run_six_backends(
        "[{at_s: 1, backends: [2, 5], action: stop}, {at_s: 2, backends: [1, 4], action: speed, value: 3}]",
    );
    assert_eq!(setup.events[0].endpoints, vec![2, 5]);
    assert_eq!(setup.events[1].endpoints, vec![1, 4]);
    let status: Vec<Status> = servers.iter().map(|s| s.status).collect();
    use Status::{Stopped, Up};
    assert_eq!(status, [Up, Up, Stopped, Up, Up, Stopped]);
    let speed: Vec<f64> = servers.iter().map(|s| s.speed).collect();
    assert_eq!(speed, [1.0, 3.0, 1.0, 1.0, 3.0, 1.0]);
    // Round robin keeps sending to both stopped backends: each refuses its share (~100).
    let errors: Vec<u64> = servers.iter().map(|s| s.errors).collect();
    assert!(errors[2] > 20 && errors[5] > 20, "{errors:?}");
    assert_eq!([errors[0], errors[1], errors[3], errors[4]], [0; 4], "{errors:?}");
}

#[test]
fn a_recovery_naming_several_backends_brings_each_back() {
    let (_, servers) =
        run_six_backends("[{at_s: 1, backends: [0, 3], action: fail}, {at_s: 2, backends: [0, 3], action: recover}]");
    assert!(servers.iter().all(|s| s.status == Status::Up));
    assert!(servers[0].errors > 20 && servers[3].errors > 20, "both failed for a second");
    assert!(servers.iter().enumerate().all(|(i, s)| s.errors == 0 || i == 0 || i == 3));
}

#[test]
fn the_opening_counts_the_sends_of_the_first_seconds_per_endpoint() {
    // 4 s at 200 rps under round robin: the first 3 s hold ~600 of the ~800 sends, spread evenly.
    let text = "name: t\nseed: 3\nwarmup_s: 1\nduration_s: 3\n\
                backends: [{count: 6, workers: 2, base_ms: 10, speed: 1.0, jitter: 0.0}]\n\
                clients: {count: 4, qps: 200, connections: 16}\n";
    let setup = Setup::resolve(&Scenario::parse(text).unwrap(), &Overrides::default()).unwrap();
    let arrivals = Arrivals::poisson(setup.qps, setup.clients, setup.service, setup.end_ns(), setup.seed);
    let m = Engine::new(&setup, RoundRobin::new(setup.clients, 6, 1), arrivals).run();
    let opening: u64 = m.opening_per_endpoint.iter().sum();
    assert!((500..=700).contains(&opening), "{opening}");
    assert!(opening < m.arrivals, "the last second is not in the opening");
    assert!(m.opening_per_endpoint.iter().all(|&n| n * 6 > opening * 4 / 5), "{:?}", m.opening_per_endpoint);
}
