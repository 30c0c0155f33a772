//! Host calls that never trap: the proxy-wasm trait helpers `unwrap()` host results, so the filter
//! calls `hostcalls` directly and turns every failure into `None`/`false`.

use proxy_wasm::hostcalls;
use proxy_wasm::types::{LogLevel, MapType, MetricType};
use std::time::UNIX_EPOCH;

/// Wall-clock microseconds (the host's clock; 0 if unavailable).
pub fn now_us() -> u64 {
    hostcalls::get_current_time()
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_micros() as u64)
}

pub fn property(path: &[&str]) -> Option<String> {
    let bytes = hostcalls::get_property(path.to_vec()).ok()??;
    Some(text_lossy(bytes))
}

/// Bytes from the host as text: bytes that are not UTF-8 (HTTP allows them in values) read as
/// U+FFFD, so the value is present, and malformed wherever it is parsed.
fn text_lossy(bytes: Vec<u8>) -> String {
    String::from_utf8(bytes).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

#[link(wasm_import_module = "env")]
extern "C" {
    fn proxy_get_property(path: *const u8, path_size: usize, value: *mut *mut u8, value_size: *mut usize) -> u32;
    fn proxy_get_header_map_value(
        map: u32,
        key: *const u8,
        key_size: usize,
        value: *mut *mut u8,
        value_size: *mut usize,
    ) -> u32;
}

#[link(wasm_import_module = "wasi_snapshot_preview1")]
extern "C" {
    fn random_get(buf: *mut u8, buf_len: usize) -> u16;
}

/// A buffer the host allocated through proxy_on_memory_allocate (a boxed slice of exactly `size`
/// bytes, or null), taken after a call that returned `status`. None on any error.
///
/// SAFETY: `data` and `size` must be what the host wrote for that call.
unsafe fn host_buffer(status: u32, data: *mut u8, size: usize) -> Option<Vec<u8>> {
    if status != 0 || data.is_null() {
        return None;
    }
    Some(Vec::from_raw_parts(data, size, size))
}

/// A property by its serialized path (parts joined by NUL, e.g. `b"upstream\0address"`): the
/// per-request reads skip the SDK's path vector and serialization. None if absent or on any error.
pub fn property_at(serialized_path: &'static [u8]) -> Option<Vec<u8>> {
    let (mut data, mut size) = (std::ptr::null_mut::<u8>(), 0usize);
    // SAFETY: `host_buffer` takes what the host wrote for this call.
    unsafe {
        let status = proxy_get_property(serialized_path.as_ptr(), serialized_path.len(), &mut data, &mut size);
        host_buffer(status, data, size)
    }
}

/// A header (or trailer) value; None if absent or on any host error. Read through the raw call:
/// the SDK's `get_map_value` panics on values that are not UTF-8 (see `text_lossy`).
fn map_value(map: MapType, name: &str) -> Option<String> {
    let (mut data, mut size) = (std::ptr::null_mut::<u8>(), 0usize);
    // SAFETY: `host_buffer` takes what the host wrote for this call. A present but empty value may
    // come back as null: that is the empty string.
    let bytes = unsafe {
        let status = proxy_get_header_map_value(map as u32, name.as_ptr(), name.len(), &mut data, &mut size);
        if status == 0 && data.is_null() {
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
    map_value(MapType::HttpRequestHeaders, name)
}

pub fn set_request_header(name: &str, value: &str) {
    let _ = hostcalls::set_map_value(MapType::HttpRequestHeaders, name, Some(value));
}

pub fn remove_request_header(name: &str) {
    let _ = hostcalls::remove_map_value(MapType::HttpRequestHeaders, name);
}

pub fn response_header(name: &str) -> Option<String> {
    map_value(MapType::HttpResponseHeaders, name)
}

pub fn set_response_header(name: &str, value: &str) {
    let _ = hostcalls::set_map_value(MapType::HttpResponseHeaders, name, Some(value));
}

pub fn remove_response_header(name: &str) {
    let _ = hostcalls::remove_map_value(MapType::HttpResponseHeaders, name);
}

/// A response trailer (in `on_log`, Envoy serves the finished stream's trailers).
pub fn response_trailer(name: &str) -> Option<String> {
    map_value(MapType::HttpResponseTrailers, name)
}

/// A header of an aggregator call's response (in `on_http_call_response`).
pub fn call_response_header(name: &str) -> Option<String> {
    map_value(MapType::HttpCallResponseHeaders, name)
}

pub fn shared_get(key: &str) -> (Option<Vec<u8>>, Option<u32>) {
    hostcalls::get_shared_data(key).unwrap_or((None, None))
}

/// Write `value`; with `cas`, only if nobody wrote since that read. True on success.
pub fn shared_set(key: &str, value: &[u8], cas: Option<u32>) -> bool {
    hostcalls::set_shared_data(key, Some(value), cas).is_ok()
}

pub fn log(level: LogLevel, message: &str) {
    let _ = hostcalls::log(level, message);
}

pub fn define_counter(name: &str) -> Option<u32> {
    hostcalls::define_metric(MetricType::Counter, name).ok()
}

pub fn define_gauge(name: &str) -> Option<u32> {
    hostcalls::define_metric(MetricType::Gauge, name).ok()
}

pub fn increment(metric: Option<u32>, by: i64) {
    if let Some(id) = metric {
        let _ = hostcalls::increment_metric(id, by);
    }
}

pub fn record(metric: Option<u32>, value: u64) {
    if let Some(id) = metric {
        let _ = hostcalls::record_metric(id, value);
    }
}

/// Random bits from the host (WASI `random_get`), else the clock. Called directly: std's only way
/// there (a hasher's random keys) brings SipHash and the WASI error names into the module.
pub fn random_u64() -> u64 {
    let mut bytes = [0u8; 8];
    // SAFETY: the host writes at most `bytes.len()` bytes into the buffer.
    if unsafe { random_get(bytes.as_mut_ptr(), bytes.len()) } != 0 {
        return now_us();
    }
    u64::from_le_bytes(bytes)
}

/// A VM environment variable (Istio: `vmConfig.env`), if the host passes it.
pub fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}
