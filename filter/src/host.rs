//! The host calls the filter makes, over the raw ABI (`abi`): none traps, every failure the host
//! reports becomes `None`/`false`/an empty value.

use crate::abi::{self, BufferType, LogLevel, MapType, MetricType, STATUS_OK};
use crate::pairs::serialize_pairs;
use std::ptr::null_mut;

/// Wall-clock microseconds (the host's clock; 0 if unavailable).
pub fn now_us() -> u64 {
    let mut nanos = 0u64;
    // SAFETY: the host writes one u64 into `nanos`.
    if unsafe { abi::proxy_get_current_time_nanoseconds(&mut nanos) } != STATUS_OK {
        return 0;
    }
    nanos / 1_000
}

/// A property by its path parts (e.g. `["xds", "node", "id"]`), as text.
pub fn property(path: &[&str]) -> Option<String> {
    let bytes = property_at(path.join("\0").as_bytes())?;
    Some(text_lossy(bytes))
}

/// Bytes from the host as text: bytes that are not UTF-8 (HTTP allows them in values) read as
/// U+FFFD, so the value is present, and malformed wherever it is parsed.
fn text_lossy(bytes: Vec<u8>) -> String {
    String::from_utf8(bytes).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// A buffer the host allocated through proxy_on_memory_allocate (a boxed slice of exactly `size`
/// bytes, or null), taken after a call that returned `status`. None on any error.
///
/// SAFETY: `data` and `size` must be what the host wrote for that call.
unsafe fn host_buffer(status: u32, data: *mut u8, size: usize) -> Option<Vec<u8>> {
    if status != STATUS_OK || data.is_null() {
        return None;
    }
    Some(Vec::from_raw_parts(data, size, size))
}

/// A property by its serialized path (parts joined by NUL, e.g. `b"upstream\0address"`). None if
/// absent or on any error.
pub fn property_at(serialized_path: &[u8]) -> Option<Vec<u8>> {
    let (mut data, mut size) = (null_mut::<u8>(), 0usize);
    // SAFETY: `host_buffer` takes what the host wrote for this call.
    unsafe {
        let status = abi::proxy_get_property(serialized_path.as_ptr(), serialized_path.len(), &mut data, &mut size);
        host_buffer(status, data, size)
    }
}

/// A header (or trailer) value, read lossily (see `text_lossy`); None if absent or on any host error.
fn map_value(map: MapType, name: &str) -> Option<String> {
    let (mut data, mut size) = (null_mut::<u8>(), 0usize);
    // SAFETY: `host_buffer` takes what the host wrote for this call. A present but empty value may
    // come back as null: that is the empty string.
    let bytes = unsafe {
        let status = abi::proxy_get_header_map_value(map as u32, name.as_ptr(), name.len(), &mut data, &mut size);
        if status == STATUS_OK && data.is_null() {
            return Some(String::new());
        }
        host_buffer(status, data, size)?
    };
    Some(text_lossy(bytes))
}

/// A non-empty UTF-8 property (see `property_at`).
pub fn property_str(serialized_path: &'static [u8]) -> Option<String> {
    property_at(serialized_path).filter(|b| !b.is_empty()).and_then(|b| String::from_utf8(b).ok())
}

/// A property holding a little-endian integer (e.g. `response.code`).
pub fn property_u64(serialized_path: &'static [u8]) -> Option<u64> {
    let bytes = property_at(serialized_path)?;
    let raw: [u8; 8] = bytes.get(..8)?.try_into().ok()?;
    Some(u64::from_le_bytes(raw))
}

pub fn request_header(name: &str) -> Option<String> {
    map_value(MapType::RequestHeaders, name)
}

/// Replace every value of a header (a failure leaves the map as it was: nothing to do about it).
fn set_map_value(map: MapType, name: &str, value: &str) {
    // SAFETY: the host only reads the two buffers.
    unsafe {
        abi::proxy_replace_header_map_value(map as u32, name.as_ptr(), name.len(), value.as_ptr(), value.len());
    }
}

fn remove_map_value(map: MapType, name: &str) {
    // SAFETY: the host only reads the buffer.
    unsafe {
        abi::proxy_remove_header_map_value(map as u32, name.as_ptr(), name.len());
    }
}

pub fn set_request_header(name: &str, value: &str) {
    set_map_value(MapType::RequestHeaders, name, value);
}

pub fn remove_request_header(name: &str) {
    remove_map_value(MapType::RequestHeaders, name);
}

pub fn response_header(name: &str) -> Option<String> {
    map_value(MapType::ResponseHeaders, name)
}

pub fn set_response_header(name: &str, value: &str) {
    set_map_value(MapType::ResponseHeaders, name, value);
}

pub fn remove_response_header(name: &str) {
    remove_map_value(MapType::ResponseHeaders, name);
}

/// A response trailer (in `on_log`, Envoy serves the finished stream's trailers).
pub fn response_trailer(name: &str) -> Option<String> {
    map_value(MapType::ResponseTrailers, name)
}

/// A header of a call's response (in `on_http_call_response`).
pub fn call_response_header(name: &str) -> Option<String> {
    map_value(MapType::CallResponseHeaders, name)
}

/// A trailer of a call's response (in `on_http_call_response`).
pub fn call_response_trailer(name: &str) -> Option<String> {
    map_value(MapType::CallResponseTrailers, name)
}

/// A body-like buffer of the host, at most `max` bytes; empty if absent or on any error.
fn buffer(kind: BufferType, max: usize) -> Vec<u8> {
    let (mut data, mut size) = (null_mut::<u8>(), 0usize);
    // SAFETY: `host_buffer` takes what the host wrote for this call.
    unsafe {
        let status = abi::proxy_get_buffer_bytes(kind as u32, 0, max, &mut data, &mut size);
        host_buffer(status, data, size).unwrap_or_default()
    }
}

/// The plugin's configuration (`size` as the host announced it in `proxy_on_configure`).
pub fn plugin_configuration(size: usize) -> Vec<u8> {
    buffer(BufferType::PluginConfiguration, size)
}

/// The body of a call's response (in `on_http_call_response`), cut at `max` bytes.
pub fn call_response_body(max: usize) -> Vec<u8> {
    buffer(BufferType::CallResponseBody, max)
}

pub fn set_tick_period_ms(period_ms: u64) {
    // SAFETY: no memory is passed. A refusal keeps the period as it was.
    unsafe {
        abi::proxy_set_tick_period_milliseconds(u32::try_from(period_ms).unwrap_or(u32::MAX));
    }
}

/// A shared-data value and its CAS token (None: absent, or any error).
pub fn shared_get(key: &str) -> (Option<Vec<u8>>, Option<u32>) {
    let (mut data, mut size, mut cas) = (null_mut::<u8>(), 0usize, 0u32);
    // SAFETY: `host_buffer` takes what the host wrote for this call.
    unsafe {
        let status = abi::proxy_get_shared_data(key.as_ptr(), key.len(), &mut data, &mut size, &mut cas);
        if status != STATUS_OK {
            return (None, None);
        }
        (host_buffer(status, data, size), (cas != 0).then_some(cas))
    }
}

/// Write `value`; with `cas`, only if nobody wrote since that read. True on success.
pub fn shared_set(key: &str, value: &[u8], cas: Option<u32>) -> bool {
    // SAFETY: the host only reads the two buffers.
    let status =
        unsafe { abi::proxy_set_shared_data(key.as_ptr(), key.len(), value.as_ptr(), value.len(), cas.unwrap_or(0)) };
    status == STATUS_OK
}

/// An HTTP call to `cluster`; its token, or the host's refusal as a word (see `abi::status_name`).
/// The reply comes to the calling root context's `on_http_call_response`.
pub fn http_call(cluster: &str, headers: &[(&str, &str)], body: &[u8], timeout_ms: u64) -> Result<u32, &'static str> {
    let headers = serialize_pairs(headers);
    let trailers = serialize_pairs(&[]);
    let mut token = 0u32;
    // SAFETY: the host only reads the buffers, and writes one u32 into `token`.
    let status = unsafe {
        abi::proxy_http_call(
            cluster.as_ptr(),
            cluster.len(),
            headers.as_ptr(),
            headers.len(),
            body.as_ptr(),
            body.len(),
            trailers.as_ptr(),
            trailers.len(),
            u32::try_from(timeout_ms).unwrap_or(u32::MAX),
            &mut token,
        )
    };
    if status == STATUS_OK {
        Ok(token)
    } else {
        Err(abi::status_name(status))
    }
}

pub fn log(level: LogLevel, message: &str) {
    // SAFETY: the host only reads the buffer.
    unsafe {
        abi::proxy_log(level as u32, message.as_ptr(), message.len());
    }
}

fn define_metric(kind: MetricType, name: &str) -> Option<u32> {
    let mut id = 0u32;
    // SAFETY: the host only reads the name and writes one u32 into `id`.
    let status = unsafe { abi::proxy_define_metric(kind as u32, name.as_ptr(), name.len(), &mut id) };
    (status == STATUS_OK).then_some(id)
}

pub fn define_counter(name: &str) -> Option<u32> {
    define_metric(MetricType::Counter, name)
}

pub fn define_gauge(name: &str) -> Option<u32> {
    define_metric(MetricType::Gauge, name)
}

pub fn increment(metric: Option<u32>, by: i64) {
    if let Some(id) = metric {
        // SAFETY: no memory is passed. A refused update is lost (a metric is not worth a trap).
        unsafe {
            abi::proxy_increment_metric(id, by);
        }
    }
}

pub fn record(metric: Option<u32>, value: u64) {
    if let Some(id) = metric {
        // SAFETY: as for `increment`.
        unsafe {
            abi::proxy_record_metric(id, value);
        }
    }
}

/// Random bits from the host (WASI `random_get`), else the clock. Called directly: std's only way
/// there (a hasher's random keys) brings SipHash and the WASI error names into the module.
pub fn random_u64() -> u64 {
    let mut bytes = [0u8; 8];
    // SAFETY: the host writes at most `bytes.len()` bytes into the buffer.
    if unsafe { abi::random_get(bytes.as_mut_ptr(), bytes.len()) } != 0 {
        return now_us();
    }
    u64::from_le_bytes(bytes)
}

/// A VM environment variable (Istio: `vmConfig.env`), if the host passes it.
pub fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}
