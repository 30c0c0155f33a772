//! The proxy-wasm host: the sidecar's host traits (`tailweight_sidecar::host`) over the raw ABI
//! (`abi`). None traps; every failure the host reports becomes `None`/`false`/an empty value.
//! `WasmHost` is a worker VM's, `WasmExchange` the current stream's (a VM runs one callback at a
//! time, so the current stream is the one whose callback runs), `WasmAnswer` the call answer of the
//! running `proxy_on_http_call_response`.

use crate::abi::{self, BufferType, MapType, MetricType, STATUS_OK};
use crate::environ::environ_value;
use crate::pairs::serialize_pairs;
use std::borrow::Cow;
use std::ptr::null_mut;
use tailweight_sidecar::host::{
    Attribute, CallAnswer, CallToken, Exchange, HeaderMap, Host, LogLevel, MetricId, MetricKind, OutgoingCall,
};

pub struct WasmHost;
pub struct WasmExchange;
/// The running call answer, with its body's size as the host announced it.
pub struct WasmAnswer {
    pub body_size: usize,
}

/// Wall-clock microseconds (the host's clock; 0 if unavailable).
pub fn now_us() -> u64 {
    let mut nanos = 0u64;
    // SAFETY: the host writes one u64 into `nanos`.
    if unsafe { abi::proxy_get_current_time_nanoseconds(&mut nanos) } != STATUS_OK {
        return 0;
    }
    nanos / 1_000
}

/// Bytes from the host as text: bytes that are not UTF-8 (HTTP allows them in values) read as
/// U+FFFD, so the value is present, and malformed wherever it is parsed.
fn text_lossy(bytes: Vec<u8>) -> String {
    String::from_utf8(bytes).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// What a host call that hands back a buffer wrote: `call` gets the two out-parameters (data and
/// size), and its status. The buffer is one the host allocated through proxy_on_memory_allocate
/// (a boxed slice of exactly `size` bytes), taken back as a `Vec`. `Err(status)` on any error;
/// `Ok(None)` for a present value the host gave as null (an empty one).
///
/// SAFETY: `call` is one host call that, when it returns `STATUS_OK`, has written into the
/// out-parameters null or a buffer of `proxy_on_memory_allocate` and its size.
unsafe fn host_bytes(call: impl FnOnce(*mut *mut u8, *mut usize) -> u32) -> Result<Option<Vec<u8>>, u32> {
    let (mut data, mut size) = (null_mut::<u8>(), 0usize);
    let status = call(&mut data, &mut size);
    if status != STATUS_OK {
        return Err(status);
    }
    Ok((!data.is_null()).then(|| Vec::from_raw_parts(data, size, size)))
}

/// A property by its serialized path (parts joined by NUL, e.g. `b"upstream\0address"`). None if
/// absent or on any error.
fn property_at(serialized_path: &[u8]) -> Option<Vec<u8>> {
    // SAFETY: one host call, reading the path and writing the out-parameters as `host_bytes` needs.
    unsafe {
        host_bytes(|data, size| abi::proxy_get_property(serialized_path.as_ptr(), serialized_path.len(), data, size))
    }
    .ok()?
}

/// A non-empty UTF-8 property.
fn property_text(serialized_path: &[u8]) -> Option<String> {
    property_at(serialized_path).filter(|b| !b.is_empty()).and_then(|b| String::from_utf8(b).ok())
}

/// A property holding a little-endian integer (e.g. `response.code`).
fn property_u64(serialized_path: &[u8]) -> Option<u64> {
    let bytes = property_at(serialized_path)?;
    let raw: [u8; 8] = bytes.get(..8)?.try_into().ok()?;
    Some(u64::from_le_bytes(raw))
}

/// A header (or trailer) value, read lossily (see `text_lossy`); None if absent or on any host error.
fn map_value(map: MapType, name: &str) -> Option<String> {
    // SAFETY: one host call, reading the name and writing the out-parameters as `host_bytes` needs.
    // A present but empty value may come back as null: that is the empty string.
    let bytes = unsafe {
        host_bytes(|data, size| abi::proxy_get_header_map_value(map as u32, name.as_ptr(), name.len(), data, size))
    }
    .ok()?;
    Some(text_lossy(bytes.unwrap_or_default()))
}

/// A body-like buffer of the host, at most `max` bytes; empty if absent or on any error.
fn buffer(kind: BufferType, max: usize) -> Vec<u8> {
    // SAFETY: one host call, writing the out-parameters as `host_bytes` needs.
    unsafe { host_bytes(|data, size| abi::proxy_get_buffer_bytes(kind as u32, 0, max, data, size)) }
        .ok()
        .flatten()
        .unwrap_or_default()
}

/// The plugin's configuration (`size` as the host announced it in `proxy_on_configure`).
pub fn plugin_configuration(size: usize) -> Vec<u8> {
    buffer(BufferType::PluginConfiguration, size)
}

fn map_type(map: HeaderMap) -> MapType {
    match map {
        HeaderMap::Request => MapType::RequestHeaders,
        HeaderMap::Response => MapType::ResponseHeaders,
        HeaderMap::ResponseTrailers => MapType::ResponseTrailers,
    }
}

/// The property path of an attribute, and the one older hosts serve it under.
fn attribute_paths(attribute: Attribute) -> (&'static [u8], Option<&'static [u8]>) {
    match attribute {
        // Envoy 1.40 serves the xDS attributes under `xds.`; older hosts without it.
        Attribute::ClusterName => (b"xds\0cluster_name", Some(b"cluster_name")),
        Attribute::ListenerDirection => (b"xds\0listener_direction", Some(b"listener_direction")),
        Attribute::UpstreamAddress => (b"upstream\0address", None),
        Attribute::ResponseCode => (b"response\0code", None),
        Attribute::GrpcStatus => (b"response\0grpc_status", None),
        Attribute::UpstreamAttempts => (b"upstream\0request_attempt_count", None),
        Attribute::PeerPrincipal => (b"connection\0uri_san_peer_certificate", None),
        Attribute::LocalAddress => (b"destination\0address", None),
    }
}

impl Host for WasmHost {
    fn now_us(&self) -> u64 {
        now_us()
    }

    /// Random bits from the host (WASI `random_get`), else the clock. Called directly: std's only
    /// way there (a hasher's random keys) brings SipHash and the WASI error names into the module.
    fn random_u64(&self) -> u64 {
        let mut bytes = [0u8; 8];
        // SAFETY: the host writes at most `bytes.len()` bytes into the buffer.
        if unsafe { abi::random_get(bytes.as_mut_ptr(), bytes.len()) } != 0 {
            return now_us();
        }
        u64::from_le_bytes(bytes)
    }

    fn log(&self, level: LogLevel, message: &str) {
        let level = match level {
            LogLevel::Warn => abi::LogLevel::Warn,
            LogLevel::Error => abi::LogLevel::Error,
        };
        // SAFETY: the host only reads the buffer.
        unsafe {
            abi::proxy_log(level as u32, message.as_ptr(), message.len());
        }
    }

    fn define_metric(&self, kind: MetricKind, name: &str) -> Option<MetricId> {
        let kind = match kind {
            MetricKind::Counter => MetricType::Counter,
            MetricKind::Gauge => MetricType::Gauge,
        };
        let mut id = 0u32;
        // SAFETY: the host only reads the name and writes one u32 into `id`.
        let status = unsafe { abi::proxy_define_metric(kind as u32, name.as_ptr(), name.len(), &mut id) };
        (status == STATUS_OK).then_some(id)
    }

    fn increment_metric(&self, metric: MetricId, by: i64) {
        // SAFETY: no memory is passed. A refused update is lost (a metric is not worth a trap).
        unsafe {
            abi::proxy_increment_metric(metric, by);
        }
    }

    fn record_metric(&self, metric: MetricId, value: u64) {
        // SAFETY: as for `increment_metric`.
        unsafe {
            abi::proxy_record_metric(metric, value);
        }
    }

    fn shared_get(&self, key: &str) -> (Option<Vec<u8>>, Option<u32>) {
        let mut cas = 0u32;
        // SAFETY: one host call, reading the key and writing the out-parameters as `host_bytes`
        // needs, and one u32 into `cas`.
        let value = unsafe {
            host_bytes(|data, size| abi::proxy_get_shared_data(key.as_ptr(), key.len(), data, size, &mut cas))
        };
        match value {
            Ok(value) => (value, (cas != 0).then_some(cas)),
            Err(_) => (None, None),
        }
    }

    fn shared_set(&self, key: &str, value: &[u8], cas: Option<u32>) -> bool {
        // SAFETY: the host only reads the two buffers.
        let status = unsafe {
            abi::proxy_set_shared_data(key.as_ptr(), key.len(), value.as_ptr(), value.len(), cas.unwrap_or(0))
        };
        status == STATUS_OK
    }

    /// The answer comes to the calling root context's `proxy_on_http_call_response`.
    fn http_call(&self, call: &OutgoingCall) -> Result<CallToken, &'static str> {
        let headers = serialize_pairs(call.headers);
        let trailers = serialize_pairs(&[]);
        let mut token = 0u32;
        // SAFETY: the host only reads the buffers, and writes one u32 into `token`.
        let status = unsafe {
            abi::proxy_http_call(
                call.cluster.as_ptr(),
                call.cluster.len(),
                headers.as_ptr(),
                headers.len(),
                call.body.as_ptr(),
                call.body.len(),
                trailers.as_ptr(),
                trailers.len(),
                u32::try_from(call.timeout_ms).unwrap_or(u32::MAX),
                &mut token,
            )
        };
        if status == STATUS_OK {
            Ok(token)
        } else {
            Err(abi::status_name(status))
        }
    }

    fn set_tick_period_ms(&self, period_ms: u64) {
        // SAFETY: no memory is passed. A refusal keeps the period as it was.
        unsafe {
            abi::proxy_set_tick_period_milliseconds(u32::try_from(period_ms).unwrap_or(u32::MAX));
        }
    }

    fn env(&self, name: &str) -> Option<String> {
        environ_value(&environ_buffer()?, name)
    }

    /// Envoy 1.40 serves the node as `xds.node`; older hosts as `node`.
    fn node_id(&self) -> Option<String> {
        property_at(b"xds\0node\0id").or_else(|| property_at(b"node\0id")).map(text_lossy)
    }
}

impl Exchange for WasmExchange {
    /// The host copies the value out: owned.
    fn header(&self, map: HeaderMap, name: &str) -> Option<Cow<'_, str>> {
        map_value(map_type(map), name).map(Cow::Owned)
    }

    /// Replace every value (a failure leaves the map as it was: nothing to do about it).
    fn set_header(&mut self, map: HeaderMap, name: &str, value: &str) {
        // SAFETY: the host only reads the two buffers.
        unsafe {
            abi::proxy_replace_header_map_value(
                map_type(map) as u32,
                name.as_ptr(),
                name.len(),
                value.as_ptr(),
                value.len(),
            );
        }
    }

    fn remove_header(&mut self, map: HeaderMap, name: &str) {
        // SAFETY: the host only reads the buffer.
        unsafe {
            abi::proxy_remove_header_map_value(map_type(map) as u32, name.as_ptr(), name.len());
        }
    }

    /// The override header, which Envoy's `override_host` policy reads.
    fn steer(&mut self, header: &str, hosts: &str) {
        self.set_header(HeaderMap::Request, header, hosts);
    }

    fn text_attribute(&self, attribute: Attribute) -> Option<String> {
        let (path, older) = attribute_paths(attribute);
        property_text(path).or_else(|| older.and_then(property_text))
    }

    fn number_attribute(&self, attribute: Attribute) -> Option<u64> {
        let (path, older) = attribute_paths(attribute);
        property_u64(path).or_else(|| older.and_then(property_u64))
    }
}

impl CallAnswer for WasmAnswer {
    fn header(&self, name: &str) -> Option<String> {
        map_value(MapType::CallResponseHeaders, name)
    }

    fn trailer(&self, name: &str) -> Option<String> {
        map_value(MapType::CallResponseTrailers, name)
    }

    fn body_size(&self) -> usize {
        self.body_size
    }

    /// Copied into the VM only up to `max` bytes.
    fn body(&self, max: usize) -> Vec<u8> {
        buffer(BufferType::CallResponseBody, max.min(self.body_size))
    }
}

/// The VM's whole environment (`environ_get`'s buffer: `KEY=VALUE` strings, each NUL-ended), or
/// None where the host has none or refuses the call.
fn environ_buffer() -> Option<Vec<u8>> {
    let (mut count, mut size) = (0usize, 0usize);
    // SAFETY: the host writes one usize to each pointer.
    if unsafe { abi::environ_sizes_get(&mut count, &mut size) } != 0 || size == 0 {
        return None;
    }
    let mut entries = vec![null_mut::<u8>(); count];
    let mut buffer = vec![0u8; size];
    // SAFETY: the host writes `count` pointers and `size` bytes, the sizes it just gave.
    (unsafe { abi::environ_get(entries.as_mut_ptr(), buffer.as_mut_ptr()) } == 0).then_some(buffer)
}
