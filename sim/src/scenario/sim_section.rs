//! The `sim:` section of a scenario file: settings only the simulator reads (the harness ignores
//! the whole section).

use super::range::positive;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// How a service time's random factor J (mean 1) is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Service {
    /// LogNormal(-sigma^2/2, sigma) with sigma = the group's jitter (the harness's emulator).
    #[default]
    Lognormal,
    /// Exp(1): M/M/k queues, for checks against the formulas.
    Exponential,
}

/// Fields only the simulator reads (the harness ignores the whole section).
#[derive(Debug, Clone, Deserialize, Serialize)]
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
    pub filter_config: Option<Value>,
    /// Envoy client-side WRR periods (Envoy's defaults 10 s and 1 s; the harness uses 1 s, 0.5 s).
    #[serde(default = "default_cswrr_blackout_s")]
    pub cswrr_blackout_s: f64,
    #[serde(default = "default_cswrr_update_s")]
    pub cswrr_update_s: f64,
    /// Research variant of the tailweight deployment (see `variant`), e.g. "view_inflight=last,subset=100".
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

impl SimSection {
    /// Each setting in range; `groups`: the file's backend groups.
    pub fn check(&self, groups: usize) -> Result<(), String> {
        if self.clients == Some(0) {
            return Err("sim.clients: must be at least 1".into());
        }
        if self.backend_scale == Some(0) {
            return Err("sim.backend_scale: must be at least 1".into());
        }
        if let Some(e) = self.endpoints {
            if (e as usize) < groups {
                return Err(format!("sim.endpoints: {e} is fewer than the {groups} backend groups"));
            }
            if self.backend_scale.is_some() {
                return Err("sim: give either endpoints or backend_scale, not both".into());
            }
        }
        positive("sim.network_delay_ms", self.network_delay_ms, true)?;
        positive("sim.cswrr_blackout_s", self.cswrr_blackout_s, true)?;
        positive("sim.cswrr_update_s", self.cswrr_update_s, false)
    }
}
