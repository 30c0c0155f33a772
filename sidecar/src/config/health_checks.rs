//! The health-check settings of the filter configuration (see `crate::health_check`).

use tailweight_wire::fields::Fields;
use tailweight_wire::grpc_health::MAX_SERVICE_BYTES;
use tailweight_wire::json::Value;

/// `health_check_path`, `health_check_grpc`, `health_check_grpc_service`, `health_check_timeout_ms`,
/// `health_check_clusters`, `health_check_fleet_rate` (see `FilterConfig::health_check`); at least one of `path` and
/// `grpc_service` is set.
#[derive(Debug, Clone, PartialEq)]
pub struct HealthCheckConfig {
    /// HTTP clusters are checked with a GET of this path (None: they probe with users' requests).
    pub path: Option<String>,
    /// gRPC clusters are checked with `grpc.health.v1.Health/Check` naming this service ("": the
    /// server as a whole; None: they probe with users' requests).
    pub grpc_service: Option<String>,
    /// A check not answered with response headers within this long failed.
    pub timeout_ms: u64,
    /// The clusters checked (empty: every steered one); the others keep probing with users' requests.
    pub clusters: Vec<String>,
    /// Checks per second a suspended endpoint gets from each worker thread's share of all its
    /// callers together, while the aggregator's view says how many callers there are (see
    /// `health_check::check_share`).
    pub fleet_rate_per_s: u64,
}

/// `health_check_path` (absent or "": HTTP clusters unchecked), `health_check_grpc` (false: gRPC
/// clusters unchecked) with `health_check_grpc_service` (default ""), `health_check_timeout_ms` and
/// `health_check_clusters` and `health_check_fleet_rate`. With neither check configured, the others are errors (they would do
/// nothing). The path must start with '/' and be visible ASCII (it is sent as `:path` as is); the
/// service name is at most `MAX_SERVICE_BYTES` of visible ASCII. A bad value is noted in `f` and reads
/// as off.
pub(super) fn health_check(f: &mut Fields) -> Option<HealthCheckConfig> {
    const PATH: &str = "health_check_path";
    const SERVICE: &str = "health_check_grpc_service";
    let timeout_ms = f.integer("health_check_timeout_ms", 1_000, 10..=60_000);
    let clusters = f.string_list("health_check_clusters", 256);
    let fleet_rate_per_s = f.integer("health_check_fleet_rate", 20, 1..=1_000);
    let path = match f.get(PATH) {
        None => None,
        Some(Value::String(s)) if s.is_empty() => None,
        Some(_) => match f.optional_string(PATH, 256) {
            Some(path) if path.starts_with('/') && path.bytes().all(|b| b.is_ascii_graphic()) => Some(path),
            Some(path) => {
                f.fail(f.unexpected(PATH, "a path starting with '/' (visible ASCII, no spaces)", &Value::String(path)));
                return None;
            }
            None => return None,
        },
    };
    let grpc = f.boolean("health_check_grpc", false);
    let grpc_service = match (grpc, f.get(SERVICE).is_some()) {
        (false, true) => {
            f.fail(f.error(SERVICE, "needs `health_check_grpc: true`".into()));
            return None;
        }
        (false, false) => None,
        (true, _) => {
            let service = match f.get(SERVICE) {
                Some(Value::String(s)) if s.is_empty() => String::new(),
                _ => f.string(SERVICE, "", MAX_SERVICE_BYTES),
            };
            if !service.bytes().all(|b| b.is_ascii_graphic()) {
                f.fail(f.unexpected(SERVICE, "a gRPC service name (visible ASCII)", &Value::String(service)));
                return None;
            }
            Some(service)
        }
    };
    if path.is_none() && grpc_service.is_none() {
        for key in ["health_check_clusters", "health_check_timeout_ms", "health_check_fleet_rate"] {
            if f.get(key).is_some() {
                f.fail(f.error(key, "needs `health_check_path` or `health_check_grpc` (health checks are off)".into()));
            }
        }
        return None;
    }
    Some(HealthCheckConfig { path, grpc_service, timeout_ms, clusters, fleet_rate_per_s })
}
