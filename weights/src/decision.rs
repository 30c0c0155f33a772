//! What a recompute decided for each endpoint, with every input behind it (`GET /v1/weights`).

use serde::Serialize;

/// How an endpoint's capacity was estimated in the last recompute.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Method {
    Cpu,
    Latency,
    /// No usable data: the median target.
    #[default]
    Median,
}

/// Everything behind one endpoint's weight, for `GET /v1/weights`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EndpointDecision {
    pub address: String,
    pub weight: f64,
    pub method: Method,
    /// Raw capacity (requests per second) and the target it gave before smoothing and bounds.
    pub capacity: Option<f64>,
    /// Requests in flight beyond the endpoint's concurrency (a standing queue; see `drained`).
    pub backlog: f64,
    pub target: f64,
    pub qps: f64,
    pub eps: f64,
    /// The sum of the live reporters' last in-flight counts.
    pub inflight: f64,
    /// What the reply view gives as the endpoint's in-flight count (`WeightParams::view_inflight`).
    pub view_inflight: f64,
    pub latency_us: u64,
    pub service_time_us: Option<f64>,
    pub concurrency: Option<f64>,
    pub cpu: Option<f64>,
    /// `orca` or `metrics`: where `cpu` came from.
    pub cpu_source: Option<&'static str>,
    pub error_ratio: f64,
    pub ejected: bool,
    /// Time since some reporter's users were last answered well there, as of the recompute.
    pub served_age_ms: Option<u64>,
    pub reporters: usize,
    /// Counts in the cluster's normalisation: reported by at least half of the cluster's
    /// principals (see `consensus::supported`); the cluster's counted weights have mean 1.
    pub counted: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClusterDecision {
    pub name: String,
    /// Recomputes of this cluster so far (the view's version).
    pub generation: u64,
    pub computed_at_us: u64,
    pub endpoints: Vec<EndpointDecision>,
}
