//! The scenario file (docs/scenario.md): the one schema the benchmark harness and the simulator both
//! check. `Scenario::parse` checks every field and reports a mistake in one line naming it; the
//! harness reads the checked file through `tailweight-sim check` (e2e/harness/scenario.py), the
//! simulator through `Setup::resolve` (setup.rs). Each then refuses, in one line, what it cannot run
//! (the simulator the mesh keys, the harness the simulator-only policies and more client Envoys
//! than fit on one machine).

mod range;
mod sim_section;
mod timeline;

pub use range::positive;
pub use sim_section::{Service, SimSection};
pub use timeline::{action_name, Action, ScenarioEvent, Segment, LEAVE_STOP_S};

use range::{integer, number, one_line};
use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;
use std::fmt;
use std::path::Path;

/// Every policy the simulator runs, in the order tables list them (a policy's random stream
/// derives from its place here).
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

/// Policies only the benchmark harness has (it lists its own in e2e/tailweight_e2e/envoy_configs.py).
/// Policies only the harness runs: stamps read from the destinations' sidecars, and the native
/// shell (its filter makes the same decisions as tailweight's, which the simulator runs; what
/// differs is Envoy's CPU; `tailweight_native_lb` decides in Envoy's load balancer instead).
pub const HARNESS_ONLY: &[&str] =
    &["tailweight_stamps", "tailweight_native_local", "tailweight_native", "tailweight_native_lb"];

/// The native shell's policies: a scenario may list them (the harness runs them beside the Wasm
/// shell's); the simulator leaves them out of a scenario's list, as it runs their decisions as
/// `tailweight`'s and `tailweight_local`'s, and refuses them only when asked for by name.
pub const NATIVE_SHELL: &[&str] = &["tailweight_native_local", "tailweight_native", "tailweight_native_lb"];

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    pub name: String,
    #[serde(default = "default_seed")]
    pub seed: u64,
    #[serde(default)]
    pub warmup_s: f64,
    pub duration_s: f64,
    pub backends: Vec<BackendGroup>,
    pub clients: Clients,
    /// In time order once checked (file order among equal times).
    #[serde(default, deserialize_with = "null_as_default")]
    pub events: Vec<ScenarioEvent>,
    /// None: every policy the tool runs.
    #[serde(default)]
    pub policies: Option<Vec<String>>,
    /// The recorded part as named parts (the harness measures each with its own Fortio run).
    #[serde(default)]
    pub segments: Option<Vec<Segment>>,
    /// Each backend behind its own sidecar Envoy (harness only).
    #[serde(default)]
    pub server_sidecars: bool,
    /// The backends write the load stamps under `tailweight_stamps` (harness only).
    #[serde(default)]
    pub stamping_backends: bool,
    #[serde(default, deserialize_with = "null_as_default")]
    pub sim: SimSection,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct BackendGroup {
    pub count: u32,
    pub workers: u32,
    pub base_ms: f64,
    #[serde(default = "one")]
    pub speed: f64,
    #[serde(default)]
    pub jitter: f64,
    #[serde(default)]
    pub payload_bytes: u64,
    #[serde(default)]
    pub protocol: Protocol,
    /// Service times start this many times slower and warm linearly over `cold_s`.
    #[serde(default = "one")]
    pub cold_factor: f64,
    #[serde(default)]
    pub cold_s: f64,
    /// Not in the endpoint set (and not listening) until a `join` event.
    #[serde(default)]
    pub absent: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// HTTP/1.1.
    #[default]
    Http,
    /// gRPC over HTTP/2 cleartext.
    Grpc,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Clients {
    pub count: u32,
    pub qps: f64,
    pub connections: u32,
    #[serde(default)]
    pub payload_bytes: u64,
    /// gRPC streams per connection (Fortio -s); gRPC backends only.
    #[serde(default)]
    pub streams: Option<u32>,
    #[serde(default)]
    pub retries: Retries,
}

/// Istio's default retry policy in the client Envoys: `true`, `false`, or `both` (each policy runs
/// with and without).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum Retries {
    #[default]
    On,
    Off,
    Both,
}

impl<'de> Deserialize<'de> for Retries {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Retries, D::Error> {
        struct Expected;
        impl Visitor<'_> for Expected {
            type Value = Retries;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("true, false or both")
            }

            fn visit_bool<E: de::Error>(self, on: bool) -> Result<Retries, E> {
                Ok(if on { Retries::On } else { Retries::Off })
            }

            fn visit_str<E: de::Error>(self, s: &str) -> Result<Retries, E> {
                match s {
                    "both" => Ok(Retries::Both),
                    _ => Err(E::invalid_value(de::Unexpected::Str(s), &self)),
                }
            }
        }
        d.deserialize_any(Expected)
    }
}

impl Serialize for Retries {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Retries::On => s.serialize_bool(true),
            Retries::Off => s.serialize_bool(false),
            Retries::Both => s.serialize_str("both"),
        }
    }
}

fn default_seed() -> u64 {
    1
}

fn one() -> f64 {
    1.0
}

/// A key written with no value (`events:`) means what leaving it out means.
fn null_as_default<'de, D: Deserializer<'de>, T: Default + Deserialize<'de>>(d: D) -> Result<T, D::Error> {
    Option::<T>::deserialize(d).map(Option::unwrap_or_default)
}

impl Scenario {
    /// The file at `path`, checked; mistakes start with the path.
    pub fn load(path: &Path) -> Result<Scenario, String> {
        let text =
            std::fs::read_to_string(path).map_err(|e| format!("{}: cannot read: {}", path.display(), e.kind()))?;
        let mut scenario = Scenario::parse(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        // A trace path is relative to the scenario file.
        if let (Some(trace), Some(dir)) = (&scenario.sim.trace, path.parent()) {
            scenario.sim.trace = Some(dir.join(trace).to_string_lossy().into_owned());
        }
        Ok(scenario)
    }

    /// A scenario from YAML (or JSON) text, checked, its events in time order.
    pub fn parse(text: &str) -> Result<Scenario, String> {
        let scenario: Scenario = serde_yaml::from_str(text).map_err(|e| match serde_yaml::from_str::<Value>(text) {
            Err(syntax) => format!("not valid YAML: {}", one_line(&syntax.to_string())),
            Ok(_) => one_line(&e.to_string()),
        })?;
        scenario.checked()
    }

    /// Backends in the file's flattened order (before any simulator scaling).
    pub fn backend_count(&self) -> usize {
        self.backends.iter().map(|g| g.count as usize).sum()
    }

    /// Every field in range and the fields consistent with each other; events sorted by time.
    fn checked(mut self) -> Result<Scenario, String> {
        if self.name.is_empty() || self.name.contains(['/', '\\', ' ']) {
            return Err(format!("name: expected a non-empty word usable in file names, got {:?}", self.name));
        }
        integer("seed", self.seed, 0, i64::MAX as u64)?;
        number("warmup_s", self.warmup_s, 0.0, 3600.0)?;
        number("duration_s", self.duration_s, 1.0, 86400.0)?;
        self.check_backends()?;
        let c = &self.clients;
        integer("clients.count", c.count.into(), 1, 1_000_000)?;
        number("clients.qps", c.qps, 0.1, 1e6)?;
        integer("clients.connections", c.connections.into(), 1, 10_000)?;
        integer("clients.payload_bytes", c.payload_bytes, 0, 16 << 20)?;
        if let Some(streams) = c.streams {
            if self.backends[0].protocol != Protocol::Grpc {
                return Err("clients.streams: only for gRPC backends (Fortio's -s, streams per connection)".into());
            }
            integer("clients.streams", streams.into(), 1, 1000)?;
        }
        let absent: Vec<bool> = self.backends.iter().flat_map(|g| (0..g.count).map(move |_| g.absent)).collect();
        self.events = timeline::in_time_order(std::mem::take(&mut self.events), &absent, self.duration_s)?;
        if self.server_sidecars && self.stamping_backends {
            return Err("stamping_backends: true cannot go with server_sidecars: true (the sidecars write the \
                        stamps there)"
                .into());
        }
        if self.stamping_backends && self.backends[0].protocol != Protocol::Http {
            return Err("stamping_backends: true needs HTTP backends (the emulator stamps HTTP responses only)".into());
        }
        if let Some(policies) = &self.policies {
            check_policies(policies, self.server_sidecars, self.stamping_backends)?;
        }
        if let Some(segments) = &self.segments {
            timeline::check_segments(segments, self.duration_s)?;
        }
        self.sim.check(self.backends.len())?;
        Ok(self)
    }

    fn check_backends(&self) -> Result<(), String> {
        if self.backends.is_empty() {
            return Err("backends: expected a non-empty list of groups".into());
        }
        let first = self.backends[0].protocol;
        for (i, g) in self.backends.iter().enumerate() {
            let at = |f: &str| format!("backends[{i}].{f}");
            integer(&at("count"), g.count.into(), 1, 1000)?;
            integer(&at("workers"), g.workers.into(), 1, 10_000)?;
            number(&at("base_ms"), g.base_ms, 0.001, 600_000.0)?;
            number(&at("speed"), g.speed, 0.001, 1000.0)?;
            number(&at("jitter"), g.jitter, 0.0, 3.0)?;
            integer(&at("payload_bytes"), g.payload_bytes, 0, 16 << 20)?;
            number(&at("cold_factor"), g.cold_factor, 1.0, 1000.0)?;
            number(&at("cold_s"), g.cold_s, 0.0, 3600.0)?;
            if g.protocol != first {
                return Err(format!(
                    "{}: {} differs from backends[0]'s {} (the client Envoys speak one protocol to the backends)",
                    at("protocol"),
                    protocol_name(g.protocol),
                    protocol_name(first)
                ));
            }
        }
        if self.backends.iter().all(|g| g.absent) {
            return Err("backends: every group is absent: true; the endpoint set must start with one backend".into());
        }
        Ok(())
    }
}

/// A non-empty list of known policies (either tool's) that can run with the file's destinations:
/// `tailweight_stamps` needs stamps written (server_sidecars or stamping_backends), `operator`
/// weighs the backends' own addresses (not sidecars').
pub fn check_policies(policies: &[String], server_sidecars: bool, stamping_backends: bool) -> Result<(), String> {
    if policies.is_empty() {
        return Err("policies: expected a non-empty list".into());
    }
    for p in policies {
        if !POLICIES.contains(&p.as_str()) && !HARNESS_ONLY.contains(&p.as_str()) {
            let known: Vec<&str> = POLICIES.iter().chain(HARNESS_ONLY).copied().collect();
            // Escaped: a YAML scalar can hold line breaks, and the message is one line.
            let p = p.escape_debug();
            return Err(format!("policies: unknown policy '{p}' (known: {})", known.join(", ")));
        }
    }
    if policies.iter().any(|p| p == "tailweight_stamps") && !(server_sidecars || stamping_backends) {
        return Err("policies: tailweight_stamps needs server_sidecars: true (the destinations' sidecars write the \
                    load stamps) or stamping_backends: true (the backends write them)"
            .into());
    }
    if policies.iter().any(|p| p == "operator") && server_sidecars {
        return Err("policies: operator cannot run with server_sidecars: true (its weights are keyed by the \
                    backends' own addresses)"
            .into());
    }
    Ok(())
}

fn protocol_name(p: Protocol) -> &'static str {
    match p {
        Protocol::Http => "http",
        Protocol::Grpc => "grpc",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEED: &str = include_str!("../../../e2e/scenarios/seed-fib.yaml");

    /// Every scenario file in the repository (the harness's and the simulator's).
    fn shipped() -> Vec<std::path::PathBuf> {
        let repo = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf();
        let mut files: Vec<_> = ["e2e/scenarios", "sim/scenarios"]
            .iter()
            .flat_map(|d| std::fs::read_dir(repo.join(d)).unwrap().map(|f| f.unwrap().path()))
            .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
            .collect();
        files.sort();
        files
    }

    #[test]
    fn every_shipped_scenario_passes_the_schema() {
        let files = shipped();
        assert!(files.len() >= 12, "{files:?}");
        for f in files {
            let s = Scenario::load(&f).unwrap_or_else(|e| panic!("{e}"));
            assert!(s.backend_count() > 0);
        }
    }

    #[test]
    fn defaults_fill_in_and_events_come_in_time_order() {
        let s = Scenario::parse(
            "name: t\nduration_s: 10\nbackends: [{count: 2, workers: 1, base_ms: 5}]\n\
             clients: {count: 1, qps: 10, connections: 1}\nevents:\n\
             - {at_s: 4, backends: [1], action: leave}\n- {at_s: 2, backends: [0], action: speed, value: 2}\n",
        )
        .unwrap();
        assert_eq!((s.seed, s.warmup_s, s.backends[0].speed, s.backends[0].jitter), (1, 0.0, 1.0, 0.0));
        assert_eq!((s.clients.retries, s.clients.streams, s.policies), (Retries::On, None, None));
        let order: Vec<(f64, Action, Option<f64>)> = s.events.iter().map(|e| (e.at_s, e.action, e.value)).collect();
        assert_eq!(order, vec![(2.0, Action::Speed, Some(2.0)), (4.0, Action::Leave, Some(LEAVE_STOP_S))]);
    }

    #[test]
    fn the_checked_file_reads_back_as_itself() {
        let s = Scenario::parse(include_str!("../../../e2e/scenarios/rollout.yaml")).unwrap();
        let json = serde_json::to_string(&s).unwrap();
        let again = Scenario::parse(&json).unwrap();
        assert_eq!(serde_json::to_string(&again).unwrap(), json);
        let v: Value = serde_json::from_str(&json).unwrap();
        assert_eq!(v["clients"]["retries"], Value::Bool(true));
        assert_eq!(v["backends"][1]["absent"], Value::Bool(true));
    }

    #[test]
    fn every_mistake_is_one_line_naming_the_field() {
        let cases = [
            ("nmae: x", "unknown field `nmae`"),
            (
                "name: x\nseed: 1\nwarmup_s: 0\nduration_s: 1\nbackends: []\nclients: {count: 1, qps: 1, connections: 1}",
                "backends: expected a non-empty list of groups",
            ),
            ("name: [unclosed\n", "not valid YAML: did not find expected ',' or ']'"),
            ("name: [x]\nseed: 1", "name: invalid type: sequence, expected a string"),
        ];
        for (text, want) in cases {
            let err = Scenario::parse(text).unwrap_err();
            assert!(err.contains(want), "{err}");
            assert!(!err.contains('\n'), "one line: {err}");
        }
        let mutations: [(&str, &str, &str); 14] = [
            (
                "workers: 2, base_ms: 10, speed: 1.0,",
                "workers: 0, base_ms: 10, speed: 1.0,",
                "backends[0].workers: expected an integer in 1..10000, got 0",
            ),
            (
                "workers: 2, base_ms: 10, speed: 1.0,",
                "wrokers: 2, base_ms: 10, speed: 1.0,",
                "backends[0]: unknown field `wrokers`",
            ),
            ("speed: 6.854", "speed: -1", "backends[3].speed: expected a number in 0.001..1000, got -1"),
            ("qps: 600", "qps: 0", "clients.qps: expected a number in 0.1..1000000, got 0"),
            ("policies: [round_robin,", "policies: [round_robn,", "policies: unknown policy 'round_robn'"),
            // Found by fuzz/findings/scenario: a name with a line break is quoted on one line.
            ("policies: [round_robin,", "policies: [\"round\\nrobin\",", "unknown policy 'round\\nrobin'"),
            ("network_delay_ms: 0.5", "network_delay_ms: 0.5, colour: red", "unknown field `colour`"),
            ("clients: 1000,", "clients: 0,", "sim.clients: must be at least 1"),
            (
                "policies:",
                "events: [{at_s: 5, backends: [15], action: fail}]\npolicies:",
                "events[0].backends: expected an integer in 0..14, got 15",
            ),
            (
                "policies:",
                "events: [{at_s: 5, backends: [1], action: speed}]\npolicies:",
                "events[0]: action speed needs value",
            ),
            (
                "policies:",
                "events: [{at_s: 5, backends: [1], action: explode}]\npolicies:",
                "events[0].action: unknown variant `explode`",
            ),
            (
                "policies:",
                "events: [{at_s: 5, backends: [1], action: leave}, {at_s: 6, backends: [1], action: join}]\npolicies:",
                "events[1] (join at 6 s): backend 1 left and stops listening at 8 s",
            ),
            (
                "connections: 16",
                "connections: 16, retries: sometimes",
                "clients.retries: invalid value: string \"sometimes\", expected true, false or both",
            ),
            (
                "policies:",
                "segments: [{name: a, from_s: 1}]\npolicies:",
                "segments[0].from_s: the first segment starts at 0",
            ),
        ];
        for (from, to, want) in mutations {
            assert!(SEED.contains(from), "{from}");
            let err = Scenario::parse(&SEED.replacen(from, to, 1)).unwrap_err();
            assert!(err.contains(want), "{to}: {err}");
            assert!(!err.contains('\n'), "one line: {err}");
        }
    }

    #[test]
    fn policies_must_suit_the_destinations() {
        let with = |extra: &str| Scenario::parse(&SEED.replacen("policies:", &format!("{extra}\npolicies:"), 1));
        let stamps = SEED.replace("tailweight_native]", "tailweight_stamps]");
        assert!(Scenario::parse(&stamps).unwrap_err().contains("tailweight_stamps needs server_sidecars: true"));
        let err = with("server_sidecars: true").unwrap_err();
        assert!(err.contains("operator cannot run with server_sidecars"), "{err}");
        let err = with("server_sidecars: true\nstamping_backends: true").unwrap_err();
        assert!(err.contains("stamping_backends: true cannot go with server_sidecars"), "{err}");
    }
}
