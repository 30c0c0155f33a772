//! The filter's plugin configuration (JSON), parsed and checked field by field so that a mistake is
//! reported as `field \`x\`: expected ..., got ...`. Every field is optional; see README for the list.

use tailweight_picker::{HealthCheckScope, PickParams, Settings};
use tailweight_wire::address::is_endpoint_address;
use tailweight_wire::fields::{FieldError, Fields};
use tailweight_wire::json::{self, Value};
use tailweight_wire::protocol::{REPORT_PATH, SHARD_HEADER};

#[derive(Debug, Clone, PartialEq)]
pub struct FilterConfig {
    /// Which side of a call this filter serves (see `FilterRole`).
    pub role: FilterRole,
    /// Request header the override_host LB policy reads.
    pub header: String,
    /// Keep an override header the request already carries (only for trusted callers, e.g. a gateway).
    pub trust_incoming_header: bool,
    /// Further addresses after the first choice in the header, used by Envoy for retries.
    pub retry_choices: usize,
    /// Clusters to steer; empty means every cluster.
    pub clusters: Vec<String>,
    /// With `load_stamp_max_age_ms` > 0: the clusters whose responses' load stamps are read, those
    /// whose destinations run the server role (a subset of `clusters`). Empty means none: a stamp
    /// from any other cluster is removed unread (see `reads_stamps_of`).
    pub load_stamp_clusters: Vec<String>,
    pub pick: PickParams,
    /// Endpoints not seen for this long are forgotten.
    pub endpoint_ttl_ms: u64,
    pub max_clusters: usize,
    pub max_endpoints_per_cluster: usize,
    /// Tick: workers publish their counts and read the shared view this often.
    pub sync_interval_ms: u64,
    pub aggregator: Option<AggregatorConfig>,
    /// Overrides the reporter id (default: POD_NAME.POD_NAMESPACE from the VM env, else the node id).
    pub reporter_id: Option<String>,
    /// gRPC statuses that count against the endpoint (see `outcome::classify`).
    pub grpc_failure_codes: Vec<u32>,
    /// A request without response headers stops counting as in flight after at most this long.
    pub inflight_bound_ms: u64,
    /// A pick counter and state, latency and in-flight gauges per cluster and endpoint (cardinality
    /// grows with endpoints; Envoy cannot delete metrics).
    pub per_endpoint_metrics: bool,
    /// Server role: the clusters (as clients name them) this endpoint serves; with `aggregator`,
    /// what it served each source principal is attested to the aggregator for each (`served`).
    pub attest_clusters: Vec<String>,
    /// Server role: the request header naming the source principal, instead of the verified peer
    /// certificate's URI SAN. INSECURE (any caller can write it): for meshless test setups only.
    pub attest_source_header: Option<String>,
    /// Suspended endpoints are checked out of band instead of being given a user's request when their
    /// probe is due (None: off, the default; see `health_check`).
    pub health_check: Option<HealthCheckConfig>,
}

/// The side of a call the filter sits on, chosen by the `role` key (default `client`). The same
/// module serves both so that one image is deployed; the role is explicit rather than taken from
/// Envoy's `listener_direction` because that property is unset outside Istio (a plain Envoy's
/// listeners have no direction) and is per request, while the role decides the VM's whole state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FilterRole {
    /// The caller's sidecar (outbound): picks each request's endpoint, reports to the aggregator,
    /// reads load stamps when `load_stamp_max_age_ms` is set.
    #[default]
    Client,
    /// The destination's own sidecar (inbound): never steers, never reports; writes the endpoint's
    /// requests in flight into each response (see `stamp` and `server_inflight`).
    Server,
}

impl FilterRole {
    pub fn name(self) -> &'static str {
        match self {
            FilterRole::Client => "client",
            FilterRole::Server => "server",
        }
    }

    /// Does Envoy's `listener_direction` (`TrafficDirection`: 0 unspecified, 1 inbound, 2
    /// outbound) contradict this role? A server-role filter on an outbound listener, or a
    /// client-role one on an inbound listener, is most likely a WasmPlugin with the wrong `match`.
    pub fn contradicted_by(self, listener_direction: u64) -> bool {
        matches!((self, listener_direction), (FilterRole::Server, 2) | (FilterRole::Client, 1))
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct AggregatorConfig {
    /// Envoy cluster of the aggregator, e.g. `outbound|8080||tailweight-aggregator.tailweight.svc.cluster.local`.
    pub cluster: String,
    pub authority: String,
    pub path: String,
    pub timeout_ms: u64,
    pub report_interval_ms: u64,
    pub shard_header: String,
}

/// The pick's defaults are the picker's (`Settings::default`); the rest are the sidecar's own.
impl Default for FilterConfig {
    fn default() -> Self {
        let s = Settings::default();
        FilterConfig {
            role: FilterRole::Client,
            header: "x-gateway-destination-endpoint".into(),
            trust_incoming_header: false,
            retry_choices: s.retry_choices,
            clusters: vec![],
            load_stamp_clusters: vec![],
            pick: s.pick,
            endpoint_ttl_ms: s.endpoint_ttl_us / 1_000,
            max_clusters: s.max_clusters,
            max_endpoints_per_cluster: s.max_endpoints_per_cluster,
            sync_interval_ms: 200,
            aggregator: None,
            reporter_id: None,
            per_endpoint_metrics: false,
            grpc_failure_codes: DEFAULT_GRPC_FAILURE_CODES.to_vec(),
            inflight_bound_ms: tailweight_picker::DEFAULT_INFLIGHT_BOUND_US / 1_000,
            attest_clusters: vec![],
            attest_source_header: None,
            health_check: None,
        }
    }
}

/// UNKNOWN (2), DEADLINE_EXCEEDED (4), RESOURCE_EXHAUSTED (8, overload), INTERNAL (13),
/// UNAVAILABLE (14): what a broken or overloaded server answers. Others (NOT_FOUND,
/// INVALID_ARGUMENT, PERMISSION_DENIED...) are the application's answers, not the endpoint's health.
pub const DEFAULT_GRPC_FAILURE_CODES: [u32; 5] = [2, 4, 8, 13, 14];

/// The part of the configuration the balancer's picks use.
impl From<&FilterConfig> for Settings {
    fn from(c: &FilterConfig) -> Self {
        Settings {
            pick: c.pick.clone(),
            retry_choices: c.retry_choices,
            endpoint_ttl_us: c.endpoint_ttl_ms * 1_000,
            max_clusters: c.max_clusters,
            max_endpoints_per_cluster: c.max_endpoints_per_cluster,
            inflight_epoch_us: Settings::inflight_epoch_us(c.inflight_bound_ms * 1_000),
            health_checks: c.health_check.as_ref().map(|h| HealthCheckScope {
                clusters: h.clusters.clone(),
                http: h.path.is_some(),
                grpc: h.grpc_service.is_some(),
                fleet_rate_per_s: h.fleet_rate_per_s as f64,
            }),
        }
    }
}

impl FilterConfig {
    /// Parse the plugin configuration. Empty input means all defaults (local-only).
    pub fn parse(bytes: &[u8]) -> Result<FilterConfig, ConfigError> {
        let text = std::str::from_utf8(bytes).map_err(|_| ConfigError::NotUtf8)?;
        if text.trim().is_empty() {
            return Ok(FilterConfig::default());
        }
        let value = json::parse(text).map_err(|e| ConfigError::NotJson(e.to_string()))?;
        let members = match &value {
            Value::Object(members) => members,
            Value::Null => return Ok(FilterConfig::default()),
            other => return Err(ConfigError::NotAnObject(other.kind())),
        };
        Ok(fields(members)?)
    }

    /// Should this cluster be steered at all?
    pub fn steers(&self, cluster: &str) -> bool {
        self.clusters.is_empty() || self.clusters.iter().any(|c| c == cluster)
    }

    /// Are the load stamps of this cluster's responses read? Only with `load_stamp_max_age_ms` > 0
    /// and only for a cluster `load_stamp_clusters` names: any destination can write the header,
    /// only the server role's is worth believing (one without it would claim an empty queue and
    /// attract traffic). Unlike `clusters`, an empty list means none.
    pub fn reads_stamps_of(&self, cluster: &str) -> bool {
        self.pick.load_stamp_max_age_us > 0 && self.load_stamp_clusters.iter().any(|c| c == cluster)
    }

    /// Are any cluster's load stamps read? Then the header is taken out of every steered
    /// cluster's responses (read or counted untrusted); otherwise it is not looked at and reaches
    /// the application, as with `load_stamp_max_age_ms` 0.
    pub fn reads_stamps(&self) -> bool {
        self.pick.load_stamp_max_age_us > 0 && !self.load_stamp_clusters.is_empty()
    }
}

/// The configuration object's fields (see `Fields` for how a bad one is reported). Errors stay
/// `FieldError` until `parse`: one conversion, not one per field. Longer than 80 lines: one
/// statement per configuration key, read in one place.
#[allow(clippy::too_many_lines)]
#[inline(never)] // out of line: V8's compile memory follows the largest function (Makefile, WASM_OPT)
fn fields(members: &[(String, Value)]) -> Result<FilterConfig, FieldError> {
    let mut f = Fields::new("", members);
    let d = FilterConfig::default();
    let p = PickParams::default();
    let config = FilterConfig {
        role: role(&mut f),
        header: header_name(&mut f, "header", &d.header),
        trust_incoming_header: f.boolean("trust_incoming_header", d.trust_incoming_header),
        retry_choices: f.integer("retry_choices", d.retry_choices as u64, 0..=4) as usize,
        clusters: f.string_list("clusters", 256),
        load_stamp_clusters: f.string_list("load_stamp_clusters", 256),
        pick: PickParams {
            explore_ratio: f.number("explore_ratio", p.explore_ratio, 0.0, 0.5),
            latency_decay_us: f.integer("latency_decay_ms", (p.latency_decay_us / 1e3) as u64, 10..=600_000) as f64
                * 1e3,
            default_latency_us: f.number("default_latency_ms", p.default_latency_us / 1e3, 0.01, 600_000.0) * 1e3,
            stale_after_us: f.integer("stale_after_ms", p.stale_after_us / 1_000, 100..=3_600_000) * 1_000,
            error_penalty: f.number("error_penalty", p.error_penalty, 0.0, 1_000.0),
            failure_latency_us: f.number("failure_latency_ms", p.failure_latency_us / 1e3, 0.0, 600_000.0) * 1e3,
            failure_decay_us: f.integer("failure_decay_ms", (p.failure_decay_us / 1e3) as u64, 10..=600_000) as f64
                * 1e3,
            probe_interval_us: f.integer("probe_interval_ms", p.probe_interval_us / 1_000, 10..=600_000) * 1_000,
            recovery_ramp_us: f.integer("recovery_ramp_ms", p.recovery_ramp_us / 1_000, 0..=600_000) * 1_000,
            recovery_evidence_answers: f.integer(
                "recovery_evidence_answers",
                p.recovery_evidence_answers.into(),
                0..=1_000,
            ) as u32,
            slow_start_us: f.integer("slow_start_ms", p.slow_start_us / 1_000, 0..=3_600_000) * 1_000,
            use_global_view: f.boolean("use_global_view", p.use_global_view),
            load_stamp_max_age_us: f.integer("load_stamp_max_age_ms", p.load_stamp_max_age_us / 1_000, 0..=10_000)
                * 1_000,
            load_stamp_pool: f.integer("load_stamp_pool", p.load_stamp_pool as u64, 1..=64) as usize,
            load_stamp_max_fresh_share: f.number("load_stamp_max_fresh_share", p.load_stamp_max_fresh_share, 0.0, 1.0),
        },
        endpoint_ttl_ms: f.integer("endpoint_ttl_ms", d.endpoint_ttl_ms, 1_000..=86_400_000),
        max_clusters: f.integer("max_clusters", d.max_clusters as u64, 1..=10_000) as usize,
        max_endpoints_per_cluster: f.integer(
            "max_endpoints_per_cluster",
            d.max_endpoints_per_cluster as u64,
            1..=100_000,
        ) as usize,
        sync_interval_ms: f.integer("sync_interval_ms", d.sync_interval_ms, 10..=10_000),
        aggregator: match f.object("aggregator") {
            None => None,
            Some(agg) => {
                let aggregator = parse_aggregator(agg);
                f.kept(aggregator)
            }
        },
        reporter_id: f.optional_string("reporter_id", 253),
        per_endpoint_metrics: f.boolean("per_endpoint_metrics", d.per_endpoint_metrics),
        grpc_failure_codes: code_list(&mut f, "grpc_failure_codes", &d.grpc_failure_codes),
        inflight_bound_ms: f.integer("inflight_bound_ms", d.inflight_bound_ms, 1_000..=86_400_000),
        attest_clusters: f.string_list("attest_clusters", 64),
        attest_source_header: f
            .get("attest_source_header")
            .is_some()
            .then(|| header_name(&mut f, "attest_source_header", "")),
        health_check: health_check(&mut f),
    };
    f.reject_unknown()?;
    // An endpoint this proxy's picker avoids (its latency estimate looks bad) is tried again once the
    // estimate is older than `stale_after_ms`; forgotten before that, it would drop out of this
    // proxy's reports and picks while it is still in the cluster.
    if config.endpoint_ttl_ms.saturating_mul(1_000) <= config.pick.stale_after_us {
        let stale_ms = config.pick.stale_after_us / 1_000;
        let problem = format!(
            "must be more than `stale_after_ms` ({stale_ms}): an endpoint the picker avoids is tried again only \
             once its latency estimate is that old, and would be forgotten first; got {}",
            config.endpoint_ttl_ms
        );
        return Err(f.error("endpoint_ttl_ms", problem));
    }
    check_load_stamp_clusters(&config, &f)?;
    let server = config.role == FilterRole::Server;
    if server && config.aggregator.is_some() && config.attest_clusters.is_empty() {
        return Err(f.error(
            "aggregator",
            "with role \"server\" only for attestations: name the clusters this endpoint serves in `attest_clusters`"
                .into(),
        ));
    }
    if let (true, Some(checks)) = (server, &config.health_check) {
        let key = if checks.path.is_some() { "health_check_path" } else { "health_check_grpc" };
        return Err(f.error(key, "needs role \"client\" (the server role never steers)".into()));
    }
    let can_attest = server && config.aggregator.is_some();
    if !config.attest_clusters.is_empty() && !can_attest {
        let problem = "needs role \"server\" and an `aggregator` to attest to".into();
        return Err(f.error("attest_clusters", problem));
    }
    Ok(config)
}

/// `load_stamp_clusters` names steered clusters only (when `clusters` lists them), and reads
/// something: it needs the client role and `load_stamp_max_age_ms` > 0.
fn check_load_stamp_clusters(config: &FilterConfig, f: &Fields) -> Result<(), FieldError> {
    const KEY: &str = "load_stamp_clusters";
    if config.load_stamp_clusters.is_empty() {
        return Ok(());
    }
    if config.role != FilterRole::Client || config.pick.load_stamp_max_age_us == 0 {
        let problem = "reads stamps only with role \"client\" and `load_stamp_max_age_ms` > 0".into();
        return Err(f.error(KEY, problem));
    }
    match config.load_stamp_clusters.iter().find(|c| !config.steers(c)) {
        Some(c) => Err(f.error(
            KEY,
            format!("{} is not in `clusters` (stamps are read only from steered clusters)", json::quoted(c)),
        )),
        None => Ok(()),
    }
}

#[inline(never)] // out of line: V8's compile memory follows the largest function (Makefile, WASM_OPT)
fn parse_aggregator(members: &[(String, Value)]) -> Result<AggregatorConfig, FieldError> {
    let mut f = Fields::new("aggregator.", members);
    let cluster = f.required_string("cluster", 512);
    let config = AggregatorConfig {
        authority: f.string("authority", "tailweight-aggregator", 253),
        path: f.string("path", REPORT_PATH, 256),
        timeout_ms: f.integer("timeout_ms", 500, 10..=60_000),
        report_interval_ms: f.integer("report_interval_ms", 1_000, 100..=10_000),
        shard_header: header_name(&mut f, "shard_header", SHARD_HEADER),
        cluster,
    };
    f.finish()?;
    if !config.path.starts_with('/') {
        return Err(f.error("path", format!("expected a path starting with '/', got {}", json::quoted(&config.path))));
    }
    f.reject_unknown()?;
    Ok(config)
}

/// Why a plugin configuration was refused; displays as one line naming the field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigError {
    NotUtf8,
    /// The JSON parser's reason.
    NotJson(String),
    /// What the configuration is instead ("an array", ...).
    NotAnObject(&'static str),
    /// A field (`aggregator.` before the aggregator's) and what is wrong with it.
    Field {
        field: String,
        problem: String,
    },
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConfigError::NotUtf8 => f.write_str("configuration is not UTF-8"),
            ConfigError::NotJson(reason) => write!(f, "configuration is not valid JSON: {reason}"),
            ConfigError::NotAnObject(got) => write!(f, "configuration: expected a JSON object, got {got}"),
            ConfigError::Field { field, problem } => write!(f, "field `{field}`: {problem}"),
        }
    }
}

impl std::error::Error for ConfigError {}

impl From<FieldError> for ConfigError {
    fn from(e: FieldError) -> Self {
        ConfigError::Field { field: e.field, problem: e.problem }
    }
}

/// `role`: "client" or "server" (a bad one is noted in `f` and reads as "client").
fn role(f: &mut Fields) -> FilterRole {
    match f.string("role", "client", 16).as_str() {
        "client" => FilterRole::Client,
        "server" => FilterRole::Server,
        other => {
            f.fail(f.unexpected("role", "\"client\" or \"server\"", &Value::String(other.to_string())));
            FilterRole::Client
        }
    }
}

/// An HTTP header name: lower case token characters (Envoy's header maps are lower case). A bad one
/// is noted in `f` and reads as `default`.
fn header_name(f: &mut Fields, key: &'static str, default: &str) -> String {
    let name = f.string(key, default, 128);
    let valid = name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
        && !name.starts_with(':');
    if valid {
        return name;
    }
    f.fail(f.unexpected(key, "a lower-case header name (a-z, 0-9, '-', '_')", &Value::String(name)));
    default.to_string()
}

/// A list of gRPC status codes (0..=16), each at most once. A bad one is noted in `f` and reads as
/// `default`.
fn code_list(f: &mut Fields, key: &'static str, default: &[u32]) -> Vec<u32> {
    let expected = "a list of distinct gRPC status codes (integers 0..=16)";
    let bad = match f.get(key) {
        None => return default.to_vec(),
        Some(Value::Array(items)) => {
            let mut codes = Vec::with_capacity(items.len());
            let mut bad = None;
            for item in items {
                match item.as_u64() {
                    Some(c) if c <= 16 && !codes.contains(&(c as u32)) => codes.push(c as u32),
                    _ => {
                        bad = Some(item);
                        break;
                    }
                }
            }
            match bad {
                None => return codes,
                Some(item) => item,
            }
        }
        Some(other) => other,
    };
    f.fail(f.unexpected(key, expected, bad));
    default.to_vec()
}

/// Is `s` acceptable as an override header value we did not write ourselves? (`ip:port[,ip:port...]`)
pub fn is_override_value(s: &str) -> bool {
    !s.is_empty() && s.len() <= 1024 && s.split(',').all(|a| is_endpoint_address(a.trim()))
}

mod health_checks;
#[cfg(test)]
mod tests;

use health_checks::health_check;
pub use health_checks::HealthCheckConfig;
