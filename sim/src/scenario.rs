//! The scenario file (docs/scenario.md), shared with the benchmark harness, plus the `sim:` section
//! only the simulator reads. Parsing checks every field and reports a mistake in one line; then
//! `Setup::resolve` turns the file and the command-line overrides into the flat list of endpoints
//! and clients one run simulates.

use crate::variant::Variant;
use serde::Deserialize;
use std::path::Path;

/// Every policy the simulator knows, in the order tables list them.
pub const POLICIES: &[&str] = &[
    "round_robin",
    "least_request",
    "peak_ewma",
    "cswrr_orca",
    "operator",
    "prequal",
    "tailweight_local",
    "tailweight",
    "ideal",
];

/// Policies only the simulator has.
pub const SIM_ONLY: &[&str] = &["peak_ewma", "prequal", "ideal"];

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    pub name: String,
    pub seed: u64,
    pub warmup_s: f64,
    pub duration_s: f64,
    pub backends: Vec<BackendGroup>,
    pub clients: Clients,
    #[serde(default)]
    pub events: Vec<ScenarioEvent>,
    #[serde(default)]
    pub policies: Vec<String>,
    #[serde(default)]
    pub sim: SimSection,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackendGroup {
    pub count: u32,
    pub workers: u32,
    pub base_ms: f64,
    pub speed: f64,
    pub jitter: f64,
    #[serde(default)]
    pub payload_bytes: u64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Clients {
    pub count: u32,
    pub qps: f64,
    pub connections: u32,
    #[serde(default)]
    pub payload_bytes: u64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioEvent {
    pub at_s: f64,
    pub backends: Vec<usize>,
    pub action: EventAction,
    #[serde(default)]
    pub value: Option<f64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EventAction {
    Speed,
    Fail,
    Stop,
    Recover,
}

/// How a service time's random factor J (mean 1) is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Service {
    /// LogNormal(-sigma^2/2, sigma) with sigma = the group's jitter (the harness's emulator).
    #[default]
    Lognormal,
    /// Exp(1): M/M/k queues, for checks against the formulas.
    Exponential,
}

/// Fields only the simulator reads (the harness ignores the whole section).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SimSection {
    /// Overrides `clients.count`.
    pub clients: Option<u32>,
    /// Repeat the backend groups this many times.
    pub backend_scale: Option<u32>,
    /// Scale the groups proportionally to this many endpoints in total (instead of backend_scale).
    pub endpoints: Option<u32>,
    /// One-way delay of control messages: reports, replies, probes.
    #[serde(default = "default_network_delay_ms")]
    pub network_delay_ms: f64,
    /// Cap each client's requests in flight at `clients.connections`, as Fortio does; later arrivals
    /// wait in the client and their latency counts from when they are sent (Fortio's measure).
    #[serde(default)]
    pub connection_limit: bool,
    #[serde(default)]
    pub service: Service,
    /// Arrival times from a file instead of Poisson: one line per request, `seconds[,client]`,
    /// seconds from the start of the warm-up.
    pub trace: Option<String>,
    /// The tailweight filter's plugin configuration (the same JSON fields, here as YAML).
    pub filter_config: Option<serde_json::Value>,
    /// Envoy client-side WRR periods (Envoy's defaults 10 s and 1 s; the harness uses 1 s, 0.5 s).
    #[serde(default = "default_cswrr_blackout_s")]
    pub cswrr_blackout_s: f64,
    #[serde(default = "default_cswrr_update_s")]
    pub cswrr_update_s: f64,
    /// Research variant of the tailweight deployment (see `variant`), e.g. "mean_inflight,subset=100".
    pub variant: Option<String>,
}

fn default_cswrr_blackout_s() -> f64 {
    10.0
}

fn default_cswrr_update_s() -> f64 {
    1.0
}

fn default_network_delay_ms() -> f64 {
    0.5
}

impl Default for SimSection {
    fn default() -> Self {
        SimSection {
            clients: None,
            backend_scale: None,
            endpoints: None,
            network_delay_ms: default_network_delay_ms(),
            connection_limit: false,
            service: Service::Lognormal,
            trace: None,
            filter_config: None,
            cswrr_blackout_s: default_cswrr_blackout_s(),
            cswrr_update_s: default_cswrr_update_s(),
            variant: None,
        }
    }
}

impl Scenario {
    pub fn load(path: &Path) -> Result<Scenario, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut scenario = Scenario::parse(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        // A trace path is relative to the scenario file.
        if let (Some(trace), Some(dir)) = (&scenario.sim.trace, path.parent()) {
            scenario.sim.trace = Some(dir.join(trace).to_string_lossy().into_owned());
        }
        Ok(scenario)
    }

    pub fn parse(text: &str) -> Result<Scenario, String> {
        let scenario: Scenario = serde_yaml::from_str(text).map_err(|e| one_line(&e.to_string()))?;
        scenario.validate()?;
        Ok(scenario)
    }

    /// Backends in the file's flattened order (before any simulator scaling).
    pub fn backend_count(&self) -> usize {
        self.backends.iter().map(|g| g.count as usize).sum()
    }

    fn validate(&self) -> Result<(), String> {
        if self.name.is_empty() {
            return Err("name: must not be empty".into());
        }
        positive("warmup_s", self.warmup_s, true)?;
        positive("duration_s", self.duration_s, false)?;
        if self.backends.is_empty() {
            return Err("backends: at least one group is needed".into());
        }
        for (i, g) in self.backends.iter().enumerate() {
            let at = |f: &str| format!("backends[{i}].{f}");
            if g.count == 0 {
                return Err(format!("{}: must be at least 1", at("count")));
            }
            if g.workers == 0 {
                return Err(format!("{}: must be at least 1", at("workers")));
            }
            positive(&at("base_ms"), g.base_ms, false)?;
            positive(&at("speed"), g.speed, false)?;
            if !(0.0..=3.0).contains(&g.jitter) {
                return Err(format!("{}: {} is outside 0..=3", at("jitter"), g.jitter));
            }
        }
        if self.clients.count == 0 {
            return Err("clients.count: must be at least 1".into());
        }
        positive("clients.qps", self.clients.qps, false)?;
        if self.clients.connections == 0 {
            return Err("clients.connections: must be at least 1".into());
        }
        let n = self.backend_count();
        for (i, e) in self.events.iter().enumerate() {
            let at = |f: &str| format!("events[{i}].{f}");
            positive(&at("at_s"), e.at_s, true)?;
            if e.at_s >= self.duration_s {
                return Err(format!("{}: {} is not within duration_s ({})", at("at_s"), e.at_s, self.duration_s));
            }
            if e.backends.is_empty() {
                return Err(format!("{}: name at least one backend", at("backends")));
            }
            if let Some(b) = e.backends.iter().find(|b| **b >= n) {
                return Err(format!("{}: backend {b} does not exist (there are {n})", at("backends")));
            }
            match (e.action, e.value) {
                (EventAction::Speed, Some(v)) => positive(&at("value"), v, false)?,
                (EventAction::Speed, None) => return Err(format!("{}: required for action speed", at("value"))),
                (_, Some(_)) => return Err(format!("{}: only action speed takes a value", at("value"))),
                (_, None) => {}
            }
        }
        if self.events.windows(2).any(|w| w[1].at_s < w[0].at_s) {
            return Err("events: must be in time order".into());
        }
        for p in &self.policies {
            check_policy(p)?;
        }
        let s = &self.sim;
        if s.clients == Some(0) {
            return Err("sim.clients: must be at least 1".into());
        }
        if s.backend_scale == Some(0) {
            return Err("sim.backend_scale: must be at least 1".into());
        }
        if let Some(e) = s.endpoints {
            if (e as usize) < self.backends.len() {
                return Err(format!("sim.endpoints: {e} is fewer than the {} backend groups", self.backends.len()));
            }
            if s.backend_scale.is_some() {
                return Err("sim: give either endpoints or backend_scale, not both".into());
            }
        }
        positive("sim.network_delay_ms", s.network_delay_ms, true)?;
        positive("sim.cswrr_blackout_s", s.cswrr_blackout_s, true)?;
        positive("sim.cswrr_update_s", s.cswrr_update_s, false)?;
        Ok(())
    }
}

/// Policies the harness cannot run (so scenario files do not list them) are always simulated;
/// the rest as the file lists them (all when it lists none). Canonical order.
fn default_policies(listed: &[String]) -> Vec<String> {
    POLICIES
        .iter()
        .filter(|p| listed.is_empty() || SIM_ONLY.contains(p) || listed.iter().any(|l| l == *p))
        .map(|p| p.to_string())
        .collect()
}

pub fn check_policy(name: &str) -> Result<(), String> {
    if POLICIES.contains(&name) {
        Ok(())
    } else {
        Err(format!("policy {name:?} is unknown (known: {})", POLICIES.join(", ")))
    }
}

fn positive(field: &str, value: f64, zero_ok: bool) -> Result<(), String> {
    let ok = value.is_finite() && (value > 0.0 || (zero_ok && value == 0.0)) && value < 1e9;
    if ok {
        Ok(())
    } else {
        let expected = if zero_ok { "a finite number >= 0" } else { "a finite number > 0" };
        Err(format!("{field}: expected {expected}, got {value}"))
    }
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

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
}

/// One simulated endpoint.
#[derive(Debug, Clone, PartialEq)]
pub struct EndpointSpec {
    /// Index into the file's flattened backend list this endpoint copies (events name those).
    pub origin: usize,
    pub group: usize,
    pub workers: u32,
    /// Mean service time at speed 1, nanoseconds.
    pub base_ns: f64,
    pub speed: f64,
    pub jitter: f64,
}

impl EndpointSpec {
    /// Requests per second it can serve at its group's speed: workers / mean service time.
    pub fn capacity_rps(&self) -> f64 {
        self.workers as f64 * 1e9 / (self.base_ns * self.speed)
    }
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
    pub cswrr: crate::cswrr_periods::Periods,
    pub variant: Variant,
    pub events: Vec<TimedEvent>,
    pub policies: Vec<String>,
}

impl Setup {
    pub fn resolve(s: &Scenario, o: &Overrides) -> Result<Setup, String> {
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
        let events = s
            .events
            .iter()
            .filter(|e| e.at_s < duration_s)
            .map(|e| TimedEvent {
                at_ns: warmup_ns + secs_to_ns(e.at_s),
                endpoints: (0..endpoints.len() as u32)
                    .filter(|&i| e.backends.contains(&endpoints[i as usize].origin))
                    .collect(),
                action: e.action,
                value: e.value,
            })
            .collect();
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
                crate::cswrr_periods::Periods { blackout_ns: secs_to_ns(blackout), update_ns: secs_to_ns(update) }
            },
            variant: Variant::parse(o.variant.as_deref().or(s.sim.variant.as_deref()).unwrap_or(""))?,
            events,
            policies: default_policies(&s.policies),
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
        s.events.push(ScenarioEvent { at_s: 1.0, backends: vec![14], action: EventAction::Speed, value: Some(2.0) });
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
    fn every_mistake_is_one_line_naming_the_field() {
        let cases = [
            ("nmae: x", "unknown field `nmae`"),
            ("name: x\nseed: 1\nwarmup_s: 0\nduration_s: 1\nbackends: []\nclients: {count: 1, qps: 1, connections: 1}", "backends: at least one group"),
        ];
        for (text, want) in cases {
            let err = Scenario::parse(text).unwrap_err();
            assert!(err.contains(want), "{err}");
            assert!(!err.contains('\n'), "one line: {err}");
        }
        let mutations: [(&str, &str, &str); 9] = [
            (
                "workers: 2, base_ms: 10, speed: 1.0,",
                "workers: 0, base_ms: 10, speed: 1.0,",
                "backends[0].workers: must be at least 1",
            ),
            ("speed: 6.854", "speed: -1", "backends[3].speed: expected a finite number > 0, got -1"),
            ("qps: 600", "qps: 0", "clients.qps: expected a finite number > 0"),
            ("policies: [round_robin,", "policies: [round_robn,", "policy \"round_robn\" is unknown"),
            ("network_delay_ms: 0.5", "network_delay_ms: 0.5, colour: red", "unknown field `colour`"),
            ("clients: 1000,", "clients: 0,", "sim.clients: must be at least 1"),
            (
                "policies:",
                "events: [{at_s: 5, backends: [15], action: fail}]\npolicies:",
                "events[0].backends: backend 15 does not exist",
            ),
            (
                "policies:",
                "events: [{at_s: 5, backends: [1], action: speed}]\npolicies:",
                "events[0].value: required for action speed",
            ),
            (
                "policies:",
                "events: [{at_s: 5, backends: [1], action: explode}]\npolicies:",
                "unknown variant `explode`",
            ),
        ];
        for (from, to, want) in mutations {
            assert!(SEED.contains(from), "{from}");
            let err = Scenario::parse(&SEED.replacen(from, to, 1)).unwrap_err();
            assert!(err.contains(want), "{to}: {err}");
            assert!(!err.contains('\n'), "one line: {err}");
        }
    }
}
