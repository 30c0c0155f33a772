//! One simulated run, resolved: `Setup::resolve` turns a checked scenario file and the command-line
//! overrides into the flat list of endpoints and clients the run simulates, and refuses in one line
//! what the file asks for that the simulator does not model (the mesh keys: docs/scenario.md).

use crate::cswrr_periods::Periods;
use crate::policy::prequal_config::PrequalConfig;
use crate::scenario::{
    action_name, positive, Action, BackendGroup, Protocol, Retries, Scenario, Service, HARNESS_ONLY, NATIVE_SHELL,
    POLICIES, SIM_ONLY,
};
use crate::server::EndpointSpec;
use crate::variant::Variant;

/// Command-line overrides of a scenario; None keeps the file's value.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    pub clients: Option<u32>,
    pub endpoints: Option<u32>,
    pub backend_scale: Option<u32>,
    /// Offered load as a share of total capacity (replaces clients.qps).
    pub load_factor: Option<f64>,
    pub warmup_s: Option<f64>,
    pub duration_s: Option<f64>,
    pub seed: Option<u64>,
    pub connection_limit: Option<bool>,
    /// Envoy client-side WRR blackout and update periods, seconds.
    pub cswrr_periods_s: Option<(f64, f64)>,
    /// Research variant of the tailweight deployment (see `variant`).
    pub variant: Option<String>,
    /// Prequal's parameters (see `PrequalConfig::parse`).
    pub prequal: Option<String>,
}

/// What an event does to the simulated endpoints (the file's actions but join and leave: the
/// simulated endpoint set never changes).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum EventAction {
    Speed,
    Fail,
    Stop,
    Recover,
}

/// A scenario event resolved to endpoint indices and simulation time.
#[derive(Debug, Clone, PartialEq)]
pub struct TimedEvent {
    pub at_ns: u64,
    pub endpoints: Vec<u32>,
    pub action: EventAction,
    pub value: Option<f64>,
}

/// Everything one run needs, resolved.
#[derive(Debug, Clone)]
pub struct Setup {
    pub name: String,
    pub seed: u64,
    pub warmup_ns: u64,
    pub duration_ns: u64,
    pub endpoints: Vec<EndpointSpec>,
    pub clients: u32,
    pub qps: f64,
    pub connections: u32,
    pub connection_limit: bool,
    pub network_delay_ns: u64,
    pub service: Service,
    pub trace: Option<String>,
    /// The filter's plugin configuration as JSON ("" = defaults).
    pub filter_config: String,
    pub cswrr: Periods,
    pub variant: Variant,
    pub prequal: PrequalConfig,
    pub events: Vec<TimedEvent>,
    pub policies: Vec<String>,
}

impl Setup {
    pub fn resolve(s: &Scenario, o: &Overrides) -> Result<Setup, String> {
        refuse_mesh_keys(s)?;
        // The command line wins over the file; a total wins over a repeat count.
        let (total, scale) = match (o.endpoints, o.backend_scale) {
            (None, None) => (s.sim.endpoints, s.sim.backend_scale),
            given => given,
        };
        let endpoints = match (total, scale) {
            (Some(n), _) if (n as usize) < s.backends.len() => {
                return Err(format!("endpoints: {n} is fewer than the {} backend groups", s.backends.len()))
            }
            (Some(n), _) => scale_to(&s.backends, n)?,
            (None, Some(0)) => return Err("backend scale: must be at least 1".into()),
            (None, scale) => repeat(&s.backends, scale.unwrap_or(1)),
        };
        let capacity: f64 = endpoints.iter().map(EndpointSpec::capacity_rps).sum();
        let qps = match o.load_factor {
            Some(f) if f.is_finite() && f > 0.0 && f < 100.0 => f * capacity,
            Some(f) => return Err(format!("load factor: expected a number in (0, 100), got {f}")),
            None => s.clients.qps,
        };
        let warmup_s = o.warmup_s.unwrap_or(s.warmup_s);
        let duration_s = o.duration_s.unwrap_or(s.duration_s);
        positive("warmup", warmup_s, true)?;
        positive("duration", duration_s, false)?;
        let warmup_ns = secs_to_ns(warmup_s);
        let mut events = Vec::new();
        for (i, e) in s.events.iter().enumerate().filter(|(_, e)| e.at_s < duration_s) {
            let action = match e.action {
                Action::Speed => EventAction::Speed,
                Action::Fail => EventAction::Fail,
                Action::Stop => EventAction::Stop,
                Action::Recover => EventAction::Recover,
                Action::Join | Action::Leave => {
                    let what = format!("events[{i}].action {} (the endpoint set changing)", action_name(e.action));
                    return harness_only(what);
                }
            };
            let origin = |i: u32| endpoints[i as usize].origin;
            events.push(TimedEvent {
                at_ns: warmup_ns + secs_to_ns(e.at_s),
                endpoints: (0..endpoints.len() as u32).filter(|&i| e.backends.contains(&origin(i))).collect(),
                action,
                value: e.value,
            });
        }
        let clients = o.clients.or(s.sim.clients).unwrap_or(s.clients.count);
        if clients == 0 {
            return Err("clients: must be at least 1".into());
        }
        if endpoints.len() > 1 << 24 {
            return Err(format!("{} endpoints is more than the simulator addresses (2^24)", endpoints.len()));
        }
        Ok(Setup {
            name: s.name.clone(),
            seed: o.seed.unwrap_or(s.seed),
            warmup_ns,
            duration_ns: secs_to_ns(duration_s),
            endpoints,
            clients,
            qps,
            connections: s.clients.connections,
            connection_limit: o.connection_limit.unwrap_or(s.sim.connection_limit),
            network_delay_ns: (s.sim.network_delay_ms * 1e6) as u64,
            service: s.sim.service,
            trace: s.sim.trace.clone(),
            filter_config: s.sim.filter_config.as_ref().map_or(String::new(), |v| v.to_string()),
            cswrr: {
                let (blackout, update) = o.cswrr_periods_s.unwrap_or((s.sim.cswrr_blackout_s, s.sim.cswrr_update_s));
                positive("cswrr blackout", blackout, true)?;
                positive("cswrr update period", update, false)?;
                Periods { blackout_ns: secs_to_ns(blackout), update_ns: secs_to_ns(update) }
            },
            variant: Variant::parse(o.variant.as_deref().or(s.sim.variant.as_deref()).unwrap_or(""))?,
            prequal: PrequalConfig::parse(o.prequal.as_deref().unwrap_or(""))?,
            events,
            policies: default_policies(s.policies.as_deref()),
        })
    }

    /// Total capacity in requests per second (each endpoint at its group's speed).
    pub fn capacity_rps(&self) -> f64 {
        self.endpoints.iter().map(EndpointSpec::capacity_rps).sum()
    }

    pub fn load_factor(&self) -> f64 {
        self.qps / self.capacity_rps()
    }

    pub fn end_ns(&self) -> u64 {
        self.warmup_ns + self.duration_ns
    }
}

/// A mistake naming what the simulator does not model.
fn harness_only<T>(what: String) -> Result<T, String> {
    Err(format!("{what}: the simulator does not model it (harness only)"))
}

/// The keys the harness honours and the simulator does not model, when they ask for more than the
/// default: cold starts, gRPC, Istio's retries, sidecars in front of the backends, stamps,
/// segments (a changing endpoint set: `resolve`, with the events).
fn refuse_mesh_keys(s: &Scenario) -> Result<(), String> {
    for (i, g) in s.backends.iter().enumerate() {
        if g.absent {
            return harness_only(format!("backends[{i}].absent"));
        }
        if g.cold_factor != 1.0 || g.cold_s != 0.0 {
            return harness_only(format!("backends[{i}].cold_factor/cold_s (a cold start)"));
        }
        if g.protocol != Protocol::Http {
            return harness_only(format!("backends[{i}].protocol"));
        }
    }
    if s.clients.retries != Retries::On {
        return harness_only("clients.retries".into());
    }
    if s.server_sidecars || s.stamping_backends {
        return harness_only("server_sidecars/stamping_backends".into());
    }
    if s.segments.is_some() {
        return harness_only("segments".into());
    }
    for p in s.policies.iter().flatten().filter(|p| !NATIVE_SHELL.contains(&p.as_str())) {
        check_policy(p)?;
    }
    Ok(())
}

/// Policies the harness cannot run (so scenario files do not list them) are always simulated;
/// the rest as the file lists them (all when it lists none). Canonical order.
fn default_policies(listed: Option<&[String]>) -> Vec<String> {
    POLICIES
        .iter()
        .filter(|p| listed.is_none_or(|l| SIM_ONLY.contains(p) || l.iter().any(|x| x == *p)))
        .map(|p| p.to_string())
        .collect()
}

/// A policy the simulator runs.
pub fn check_policy(name: &str) -> Result<(), String> {
    if POLICIES.contains(&name) {
        Ok(())
    } else if HARNESS_ONLY.contains(&name) {
        Err(format!(
            "policy {name:?} is the harness's only (the simulator runs tailweight with its configuration instead: \
             sim/README.md)"
        ))
    } else {
        Err(format!("policy {name:?} is unknown (known: {})", POLICIES.join(", ")))
    }
}

pub fn secs_to_ns(s: f64) -> u64 {
    (s * 1e9).round() as u64
}

fn spec(group: usize, origin: usize, g: &BackendGroup) -> EndpointSpec {
    EndpointSpec { origin, group, workers: g.workers, base_ns: g.base_ms * 1e6, speed: g.speed, jitter: g.jitter }
}

/// The groups in file order, the whole list repeated `scale` times.
fn repeat(groups: &[BackendGroup], scale: u32) -> Vec<EndpointSpec> {
    let mut out = Vec::new();
    for _ in 0..scale {
        let mut origin = 0;
        for (gi, g) in groups.iter().enumerate() {
            for _ in 0..g.count {
                out.push(spec(gi, origin, g));
                origin += 1;
            }
        }
    }
    out
}

/// Each group scaled to its share of `total` endpoints (largest remainder, at least one each).
/// Scaled endpoint q of a group of n (now m) copies backend floor(q n / m) of the group.
fn scale_to(groups: &[BackendGroup], total: u32) -> Result<Vec<EndpointSpec>, String> {
    let n: u64 = groups.iter().map(|g| g.count as u64).sum();
    let exact: Vec<f64> = groups.iter().map(|g| g.count as f64 * total as f64 / n as f64).collect();
    let mut counts: Vec<u64> = exact.iter().map(|x| (x.floor() as u64).max(1)).collect();
    let mut order: Vec<usize> = (0..groups.len()).collect();
    order.sort_by(|&a, &b| (exact[b] - exact[b].floor()).total_cmp(&(exact[a] - exact[a].floor())).then(a.cmp(&b)));
    let mut assigned: u64 = counts.iter().sum();
    for &i in order.iter().cycle().take(groups.len() * 2) {
        if assigned >= total as u64 {
            break;
        }
        counts[i] += 1;
        assigned += 1;
    }
    if assigned != total as u64 {
        return Err(format!("sim.endpoints: cannot split {total} endpoints over {} groups", groups.len()));
    }
    let mut out = Vec::with_capacity(total as usize);
    let mut first_origin = 0usize;
    for (gi, g) in groups.iter().enumerate() {
        for q in 0..counts[gi] {
            let origin = first_origin + (q * g.count as u64 / counts[gi]) as usize;
            out.push(spec(gi, origin, g));
        }
        first_origin += g.count as usize;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::ScenarioEvent;
    use std::path::Path;

    const SEED: &str = include_str!("../../e2e/scenarios/seed-fib.yaml");

    #[test]
    fn the_seed_scenario_parses_and_resolves() {
        let s = Scenario::parse(SEED).unwrap();
        assert_eq!(s.backend_count(), 15);
        let setup = Setup::resolve(&s, &Overrides::default()).unwrap();
        assert_eq!(setup.endpoints.len(), 15);
        assert_eq!(setup.clients, 1000, "sim.clients overrides clients.count");
        assert!((setup.capacity_rps() - 1_564.0).abs() < 2.0, "{}", setup.capacity_rps());
        let small = Setup::resolve(&s, &Overrides { clients: Some(4), ..Default::default() }).unwrap();
        assert_eq!(small.clients, 4);
        assert_eq!(setup.policies, POLICIES, "the file's six plus the simulator-only ones");
    }

    #[test]
    fn scaling_to_a_total_keeps_the_mix_and_maps_events_to_every_copy() {
        let mut s = Scenario::parse(SEED).unwrap();
        s.events.push(ScenarioEvent { at_s: 1.0, backends: vec![14], action: Action::Speed, value: Some(2.0) });
        let setup = Setup::resolve(&s, &Overrides { endpoints: Some(1000), ..Default::default() }).unwrap();
        assert_eq!(setup.endpoints.len(), 1000);
        let per_group: Vec<usize> = (0..4).map(|g| setup.endpoints.iter().filter(|e| e.group == g).count()).collect();
        assert_eq!(per_group, vec![200, 133, 600, 67]);
        assert_eq!(setup.events[0].endpoints.len(), 67, "backend 14 is the only fib29: all its copies");
        let repeated = Setup::resolve(&s, &Overrides { backend_scale: Some(3), ..Default::default() }).unwrap();
        assert_eq!(repeated.endpoints.len(), 45);
        assert_eq!(repeated.events[0].endpoints, vec![14, 29, 44]);
    }

    #[test]
    fn load_factor_sets_qps_from_capacity() {
        let s = Scenario::parse(SEED).unwrap();
        let setup = Setup::resolve(&s, &Overrides { load_factor: Some(0.5), ..Default::default() }).unwrap();
        assert!((setup.load_factor() - 0.5).abs() < 1e-9);
    }

    #[test]
    fn the_mesh_keys_pass_the_schema_and_the_simulator_refuses_them_in_one_line() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../e2e/scenarios");
        for (file, want) in [
            ("rollout.yaml", "backends[1].absent: the simulator does not model it"),
            ("grpc-seed.yaml", "backends[0].protocol"),
            ("seed-sidecars.yaml", "server_sidecars/stamping_backends"),
            ("thin-wide.yaml", "server_sidecars/stamping_backends"),
        ] {
            let s = Scenario::load(&dir.join(file)).unwrap();
            let err = Setup::resolve(&s, &Overrides::default()).unwrap_err();
            assert!(err.contains(want), "{file}: {err}");
        }
        let stamps =
            Scenario::parse(&SEED.replace("policies: [", "stamping_backends: true\npolicies: [tailweight_stamps, "));
        let err = Setup::resolve(&stamps.unwrap(), &Overrides::default()).unwrap_err();
        assert!(err.contains("server_sidecars/stamping_backends"), "{err}");
        assert!(check_policy("tailweight_stamps").unwrap_err().contains("the harness's only"));
        // The native shell's policies listed in a file are left to the harness; asked for by name, refused.
        let native =
            Scenario::parse(&SEED.replace("policies: [", "policies: [tailweight_native, tailweight_native_local, "));
        let setup = Setup::resolve(&native.unwrap(), &Overrides::default()).unwrap();
        assert!(setup.policies.contains(&"tailweight".to_string()));
        assert!(setup.policies.iter().all(|p| !NATIVE_SHELL.contains(&p.as_str())), "{:?}", setup.policies);
        assert!(check_policy("tailweight_native").unwrap_err().contains("the harness's only"));
        let leave = SEED.replace("policies:", "events: [{at_s: 2, backends: [3], action: leave}]\npolicies:");
        let err = Setup::resolve(&Scenario::parse(&leave).unwrap(), &Overrides::default()).unwrap_err();
        assert!(err.contains("events[0].action leave (the endpoint set changing): the simulator does not"), "{err}");
    }
}
