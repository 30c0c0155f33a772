//! The sidecar's host traits (`tailweight_sidecar::host`) over Envoy's dynamic-module ABI.
//!
//! - `NativeHost`: one worker's view of its filter config (`filter_state`): the clock and
//!   randomness are the module's own, shared state is the process's (`process_store`), metrics are
//!   the filter config's, calls out go through the filter config (main thread only: a call from a
//!   worker thread is refused), the tick period is recorded for the ticker.
//! - `NativeExchange`: one stream in one hook, through its `filter_envoy` pointer; its header
//!   lookups search a listing of the map (`header_snapshot`).
//! - `NativeAnswer`: a callout's answer, copied out of the hook's arguments (valid only during it).
//!
//! None panics on what Envoy hands over; a failed or refused call reads as absent.

use crate::abi::{self, attribute, EnvoyBuffer, ModuleBuffer};
use crate::callouts::Callouts;
use crate::config_metrics::ConfigMetrics;
use crate::header_snapshot::HeaderSnapshots;
use crate::process_store;
use crate::tick_schedule::Ticks;
use std::borrow::Cow;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};
use tailweight_sidecar::host::{
    Attribute, CallAnswer, CallToken, Exchange, HeaderMap, Host, LogLevel, MetricId, MetricKind, OutgoingCall,
};

pub struct NativeHost<'a> {
    pub config_envoy: *mut c_void,
    pub metrics: &'a ConfigMetrics,
    pub callouts: &'a Callouts,
    pub ticks: &'a Ticks,
    pub worker: usize,
    /// Whether the caller runs on Envoy's main thread (ticks, answers), where calls out may start.
    pub on_main: bool,
}

/// Bytes from Envoy as text, borrowed: bytes that are not UTF-8 read as U+FFFD (present, and
/// malformed wherever they are parsed), in a copy. Valid text (all Envoy hands over in practice)
/// takes the validator's fast path (`from_utf8`; `String::from_utf8_lossy` checks valid text
/// several times slower).
fn text_borrowed(bytes: &[u8]) -> Cow<'_, str> {
    match std::str::from_utf8(bytes) {
        Ok(text) => Cow::Borrowed(text),
        Err(_) => Cow::Owned(String::from_utf8_lossy(bytes).into_owned()),
    }
}

/// `text_borrowed`, owned.
fn text_lossy(bytes: &[u8]) -> String {
    text_borrowed(bytes).into_owned()
}

pub fn log(level: LogLevel, message: &str) {
    let level = match level {
        LogLevel::Warn => abi::LOG_WARN,
        LogLevel::Error => abi::LOG_ERROR,
    };
    // SAFETY: Envoy only reads the message during the call.
    unsafe { abi::envoy_dynamic_module_callback_log(level, ModuleBuffer::of(message.as_bytes())) }
}

/// A splitmix64 stream seeded from the clock at first use: the picker's randomness needs spread,
/// not secrecy.
pub(crate) fn next_random() -> u64 {
    static STATE: AtomicU64 = AtomicU64::new(0);
    let mut z = STATE.fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed);
    if z == 0 {
        let seed = wall_clock_us() | 1;
        let _ = STATE.compare_exchange(0x9e37_79b9_7f4a_7c15, seed, Ordering::Relaxed, Ordering::Relaxed);
        z = seed;
    }
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

pub fn wall_clock_us() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64)
}

impl Host for NativeHost<'_> {
    fn now_us(&self) -> u64 {
        wall_clock_us()
    }

    fn random_u64(&self) -> u64 {
        next_random()
    }

    fn log(&self, level: LogLevel, message: &str) {
        log(level, message);
    }

    fn define_metric(&self, kind: MetricKind, name: &str) -> Option<MetricId> {
        self.metrics.define(kind, name)
    }

    fn increment_metric(&self, metric: MetricId, by: i64) {
        self.metrics.increment(metric, by);
    }

    fn record_metric(&self, metric: MetricId, value: u64) {
        self.metrics.record(metric, value);
    }

    fn shared_get(&self, key: &str) -> (Option<Vec<u8>>, Option<u32>) {
        process_store::get(key)
    }

    fn shared_set(&self, key: &str, value: &[u8], cas: Option<u32>) -> bool {
        process_store::set(key, value, cas)
    }

    /// Envoy starts a filter config's callout on the main thread only.
    fn http_call(&self, call: &OutgoingCall) -> Result<CallToken, &'static str> {
        if !self.on_main {
            return Err("NotOnMainThread");
        }
        self.callouts.start(self.config_envoy, self.worker, call)
    }

    fn set_tick_period_ms(&self, period_ms: u64) {
        self.ticks.set_period(self.worker, period_ms);
    }

    /// The Envoy process's environment (in Istio, the proxy container's).
    fn env(&self, name: &str) -> Option<String> {
        std::env::var(name).ok().filter(|v| !v.is_empty())
    }

    /// No callback or attribute gives the node id; the configuration's `reporter_id` or the pod's
    /// environment names the reporter instead.
    fn node_id(&self) -> Option<String> {
        None
    }

    fn load_balancer_picks(&self, cluster: &str) -> bool {
        crate::lb_feed::balanced(cluster)
    }
}

/// Made for one hook and dropped when it returns (its header snapshots are valid only during it).
pub struct NativeExchange {
    filter: *mut c_void,
    headers: HeaderSnapshots,
}

fn header_type(map: HeaderMap) -> u32 {
    match map {
        HeaderMap::Request => abi::REQUEST_HEADER,
        HeaderMap::Response => abi::RESPONSE_HEADER,
        HeaderMap::ResponseTrailers => abi::RESPONSE_TRAILER,
    }
}

impl NativeExchange {
    pub fn new(filter: *mut c_void) -> NativeExchange {
        NativeExchange { filter, headers: HeaderSnapshots::default() }
    }

    fn string_attribute(&self, id: u32) -> Option<String> {
        let mut out = EnvoyBuffer::EMPTY;
        // SAFETY: Envoy writes one buffer, valid until this hook returns; copied at once.
        let found =
            unsafe { abi::envoy_dynamic_module_callback_http_filter_get_attribute_string(self.filter, id, &mut out) };
        found.then(|| text_lossy(unsafe { out.bytes() })).filter(|s| !s.is_empty())
    }

    fn int_attribute(&self, id: u32) -> Option<u64> {
        let mut out = 0u64;
        // SAFETY: Envoy writes one u64.
        unsafe { abi::envoy_dynamic_module_callback_http_filter_get_attribute_int(self.filter, id, &mut out) }
            .then_some(out)
    }

    /// `response.grpc_status` answers UNKNOWN (2) for a plain HTTP response without a gRPC status
    /// (seen on Envoy 1.40), so the status is read where gRPC puts it: the trailers, else the
    /// headers (a trailers-only answer).
    fn grpc_status(&self) -> Option<u64> {
        self.header(HeaderMap::ResponseTrailers, "grpc-status")
            .or_else(|| self.header(HeaderMap::Response, "grpc-status"))
            .and_then(|s| s.trim().parse().ok())
    }
}

impl Exchange for NativeExchange {
    /// Borrowed from the hook's listing of the map (copied only when not UTF-8).
    fn header(&self, map: HeaderMap, name: &str) -> Option<Cow<'_, str>> {
        // SAFETY: `filter` is this hook's stream; the value lives as long as the listing, which
        // the exchange drops before the hook returns or when the map changes (`&mut self`).
        unsafe { self.headers.first(self.filter, header_type(map), name) }.map(text_borrowed)
    }

    fn set_header(&mut self, map: HeaderMap, name: &str, value: &str) {
        // SAFETY: Envoy only reads the two buffers.
        unsafe {
            abi::envoy_dynamic_module_callback_http_set_header(
                self.filter,
                header_type(map),
                ModuleBuffer::of(name.as_bytes()),
                ModuleBuffer::of(value.as_bytes()),
            );
        }
        self.headers.forget(header_type(map));
    }

    /// A null value removes the header (the ABI's rule for `set_header`).
    fn remove_header(&mut self, map: HeaderMap, name: &str) {
        // SAFETY: Envoy only reads the key.
        unsafe {
            abi::envoy_dynamic_module_callback_http_set_header(
                self.filter,
                header_type(map),
                ModuleBuffer::of(name.as_bytes()),
                ModuleBuffer { ptr: std::ptr::null(), len: 0 },
            );
        }
        self.headers.forget(header_type(map));
    }

    /// The first choice as the stream's upstream override host, not strict: a host the cluster no
    /// longer has falls back to the cluster's own policy, as the override header does.
    fn steer(&mut self, _header: &str, hosts: &str) {
        // A byte scan: the first choice is a dozen bytes, short of `memchr`'s set-up cost.
        let end = hosts.bytes().position(|b| b == b',').unwrap_or(hosts.len());
        let first = hosts.get(..end).unwrap_or_default().trim_ascii();
        if first.is_empty() {
            return;
        }
        // SAFETY: Envoy only reads the buffer.
        unsafe {
            abi::envoy_dynamic_module_callback_http_set_upstream_override_host(
                self.filter,
                ModuleBuffer::of(first.as_bytes()),
                false,
            );
        }
    }

    fn text_attribute(&self, a: Attribute) -> Option<String> {
        match a {
            Attribute::ClusterName => self.string_attribute(attribute::XDS_CLUSTER_NAME),
            Attribute::UpstreamAddress => self.string_attribute(attribute::UPSTREAM_ADDRESS),
            Attribute::PeerPrincipal => self.string_attribute(attribute::PEER_URI_SAN),
            Attribute::LocalAddress => self.string_attribute(attribute::DESTINATION_ADDRESS),
            Attribute::ResponseCode
            | Attribute::GrpcStatus
            | Attribute::UpstreamAttempts
            | Attribute::ListenerDirection => None,
        }
    }

    fn number_attribute(&self, a: Attribute) -> Option<u64> {
        match a {
            Attribute::ResponseCode => self.int_attribute(attribute::RESPONSE_CODE),
            Attribute::GrpcStatus => self.grpc_status(),
            Attribute::UpstreamAttempts => self.int_attribute(attribute::UPSTREAM_REQUEST_ATTEMPT_COUNT),
            Attribute::ListenerDirection => self.int_attribute(attribute::XDS_LISTENER_DIRECTION),
            Attribute::ClusterName
            | Attribute::UpstreamAddress
            | Attribute::PeerPrincipal
            | Attribute::LocalAddress => None,
        }
    }
}

/// A callout's answer, copied out of `on_http_filter_config_http_callout_done`'s arguments.
#[derive(Debug, Default)]
pub struct NativeAnswer {
    /// Empty when the callout failed (reset, or the answer exceeded the buffer limit): no `:status`.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl NativeAnswer {
    /// # Safety
    /// The pointers and counts must be what Envoy passed to the hook that is running.
    pub unsafe fn copy(
        result: u32,
        headers: *const abi::HeaderPair,
        headers_len: usize,
        chunks: *const EnvoyBuffer,
        chunks_len: usize,
    ) -> NativeAnswer {
        if result != abi::RESULT_SUCCESS {
            return NativeAnswer::default();
        }
        let mut answer = NativeAnswer::default();
        if !headers.is_null() {
            for h in std::slice::from_raw_parts(headers, headers_len) {
                let key = EnvoyBuffer { ptr: h.key, len: h.key_len }.bytes();
                let value = EnvoyBuffer { ptr: h.value, len: h.value_len }.bytes();
                answer.headers.push((text_lossy(key), text_lossy(value)));
            }
        }
        if !chunks.is_null() {
            for chunk in std::slice::from_raw_parts(chunks, chunks_len) {
                answer.body.extend_from_slice(chunk.bytes());
            }
        }
        answer
    }
}

impl CallAnswer for NativeAnswer {
    fn header(&self, name: &str) -> Option<String> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.clone())
    }

    /// A one-shot callout has no trailers.
    fn trailer(&self, _name: &str) -> Option<String> {
        None
    }

    fn body_size(&self) -> usize {
        self.body.len()
    }

    fn body(&self, max: usize) -> Vec<u8> {
        self.body[..max.min(self.body.len())].to_vec()
    }
}
