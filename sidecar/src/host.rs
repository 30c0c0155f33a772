//! The seam between the sidecar's logic and the proxy that runs it: everything the sidecar asks of
//! its host, as three traits. The proxy-wasm shell (tailweight-filter) implements them over the
//! proxy-wasm ABI, the test host (`test_host`, feature `test-host`) in memory; a native shell
//! (Envoy dynamic modules) implements them over Envoy's C ABI.
//!
//! - `Host`: what a worker uses outside any one request: the clock, randomness, the state the
//!   workers of one proxy share (get and compare-and-swap by key), metrics, logging, calls out and
//!   their tick period. Proxy-wasm: one root context per worker VM; shared data; `dispatch_http_call`;
//!   `proxy_set_tick_period_milliseconds`. Dynamic modules: process memory shared by the workers;
//!   calls and timers from the module's own thread or a bootstrap extension.
//! - `Exchange`: the request being served: its headers, its response's headers and trailers, and
//!   its attributes (Envoy's attribute names are given beside each `Attribute`).
//! - `CallAnswer`: the answer to one call out, read lazily (the body only as far as asked).
//!
//! Every method answers; none fails loudly: a host failure reads as absent (`None`, `false`, empty).

use std::borrow::Cow;

/// A metric as the host defined it.
pub type MetricId = u32;
/// A call out, as the host numbered it; its answer comes back with the same token.
pub type CallToken = u32;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogLevel {
    Warn,
    Error,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricKind {
    Counter,
    Gauge,
}

/// The request's attributes the sidecar reads (Envoy's attribute names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attribute {
    /// `xds.cluster_name`: the route's upstream cluster (text).
    ClusterName,
    /// `upstream.address`: the endpoint that served, `ip:port` (text).
    UpstreamAddress,
    /// `response.code` (number).
    ResponseCode,
    /// `response.grpc_status` (number).
    GrpcStatus,
    /// `upstream.request_attempt_count` (number).
    UpstreamAttempts,
    /// `xds.listener_direction`: 0 unspecified, 1 inbound, 2 outbound (number).
    ListenerDirection,
    /// `connection.uri_san_peer_certificate`: the verified peer's principal (text).
    PeerPrincipal,
    /// `destination.address`: this endpoint as its client addressed it, `ip:port` (text).
    LocalAddress,
}

/// Which of the request's header maps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeaderMap {
    Request,
    Response,
    ResponseTrailers,
}

/// A call out: to a cluster of the proxy, with pseudo-headers among the headers.
#[derive(Debug, Clone, Copy)]
pub struct OutgoingCall<'a> {
    pub cluster: &'a str,
    pub headers: &'a [(&'a str, &'a str)],
    pub body: &'a [u8],
    pub timeout_ms: u64,
}

/// What a worker asks of its host outside any one request (see the module docs).
pub trait Host {
    /// Wall-clock microseconds.
    fn now_us(&self) -> u64;
    fn random_u64(&self) -> u64;
    fn log(&self, level: LogLevel, message: &str);
    fn define_metric(&self, kind: MetricKind, name: &str) -> Option<MetricId>;
    /// Add `by` to a counter or a gauge.
    fn increment_metric(&self, metric: MetricId, by: i64);
    fn record_metric(&self, metric: MetricId, value: u64);
    /// The value under `key` and its compare-and-swap token (None: absent).
    fn shared_get(&self, key: &str) -> (Option<Vec<u8>>, Option<u32>);
    /// Write `value`; with `cas`, only if nobody wrote since the read that gave it. True if written.
    fn shared_set(&self, key: &str, value: &[u8], cas: Option<u32>) -> bool;
    /// Start a call; its answer comes to this worker's `Plugin::on_call_answer` with the token.
    /// Err: the host refused it (its reason as a word).
    fn http_call(&self, call: &OutgoingCall) -> Result<CallToken, &'static str>;
    fn set_tick_period_ms(&self, period_ms: u64);
    /// An environment variable of the worker (Istio: the WasmPlugin's `vmConfig.env`).
    fn env(&self, name: &str) -> Option<String>;
    /// The proxy's node id.
    fn node_id(&self) -> Option<String>;
    /// Does the cluster's own load balancer pick from this worker's balancer (the native shell's
    /// load-balancing policy)? Then requests to it are not steered, only learned from.
    fn load_balancer_picks(&self, _cluster: &str) -> bool {
        false
    }
}

/// The request being served (see the module docs).
pub trait Exchange {
    /// A header's value (a value that is not UTF-8 reads lossily), borrowed from the host's map
    /// where the shell can: a request pays for no copy of the headers it only looks at.
    fn header(&self, map: HeaderMap, name: &str) -> Option<Cow<'_, str>>;
    /// Replace every value of a header.
    fn set_header(&mut self, map: HeaderMap, name: &str, value: &str);
    fn remove_header(&mut self, map: HeaderMap, name: &str);
    /// Send the request to `hosts`: `ip:port` choices, comma-separated, the first choice first and
    /// the later ones for retries. The proxy-wasm shell writes them into the request header
    /// `header`, which Envoy's `override_host` policy reads (retries included); the native shell
    /// sets the stream's upstream override host to the first (its retries go where Envoy's policy
    /// sends them).
    fn steer(&mut self, header: &str, hosts: &str);
    /// A non-empty UTF-8 attribute.
    fn text_attribute(&self, attribute: Attribute) -> Option<String>;
    fn number_attribute(&self, attribute: Attribute) -> Option<u64>;
}

/// The answer to a call out (see the module docs).
pub trait CallAnswer {
    /// A header of the answer; no `:status` means the call failed or timed out.
    fn header(&self, name: &str) -> Option<String>;
    fn trailer(&self, name: &str) -> Option<String>;
    fn body_size(&self) -> usize;
    /// The body's first `max` bytes at most.
    fn body(&self, max: usize) -> Vec<u8>;
}
