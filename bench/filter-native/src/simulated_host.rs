//! The simulated host: Envoy's side of the proxy-wasm ABI, just enough for the filter (headers,
//! properties, shared data with CAS, metrics, a clock the driver moves, ticks, HTTP calls), with a
//! count of host calls by function.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use crate::filter_exports::proxy_on_memory_allocate;

pub(crate) const OK: u32 = 0;
pub(crate) const NOT_FOUND: u32 = 1;
pub(crate) const CAS_MISMATCH: u32 = 8;
pub(crate) const ROOT: u32 = 1;
pub(crate) const OVERRIDE: &str = "x-gateway-destination-endpoint";

#[derive(Default)]
pub(crate) struct Vm {
    pub(crate) now_ns: u64,
    pub(crate) tick_ms: u64,
    pub(crate) config: Vec<u8>,
    pub(crate) request: Vec<(String, String)>,
    pub(crate) response: Vec<(String, String)>,
    pub(crate) upstream: String,
    /// The aggregator reply given to the next call_response_* reads.
    pub(crate) call_body: Vec<u8>,
    pub(crate) calls: Vec<u32>,
    pub(crate) next_token: u32,
    pub(crate) metrics: Vec<(String, i64)>,
    /// Host calls by function name, in the current phase ("request" or "tick"): a short list
    /// searched by pointer, so that counting costs little next to the filter's own work.
    pub(crate) host_calls: Vec<(&'static str, u64)>,
}

thread_local! {
    pub(crate) static VM: RefCell<Vm> = RefCell::new(Vm::default());
}

pub(crate) fn shared() -> &'static Mutex<HashMap<String, (Vec<u8>, u32)>> {
    static SHARED: OnceLock<Mutex<HashMap<String, (Vec<u8>, u32)>>> = OnceLock::new();
    SHARED.get_or_init(|| Mutex::new(HashMap::new()))
}

pub(crate) fn count(name: &'static str) {
    VM.with(|vm| {
        let mut vm = vm.borrow_mut();
        match vm.host_calls.iter_mut().find(|(n, _)| std::ptr::eq(n.as_ptr(), name.as_ptr())) {
            Some(entry) => entry.1 += 1,
            None => vm.host_calls.push((name, 1)),
        }
    });
}

pub(crate) unsafe fn text<'a>(ptr: *const u8, len: usize) -> &'a str {
    std::str::from_utf8(std::slice::from_raw_parts(ptr, len)).unwrap_or("")
}

/// Hand `bytes` to the filter in memory it allocates (as Envoy does).
pub(crate) unsafe fn give(bytes: &[u8], data: *mut *mut u8, size: *mut usize) -> u32 {
    let at = proxy_on_memory_allocate(bytes.len());
    std::ptr::copy_nonoverlapping(bytes.as_ptr(), at, bytes.len());
    *data = at;
    *size = bytes.len();
    OK
}

#[no_mangle]
pub extern "C" fn __wasm_call_ctors() {}

#[no_mangle]
pub unsafe extern "C" fn proxy_log(_level: u32, message: *const u8, size: usize) -> u32 {
    count("log");
    eprintln!("filter log: {}", text(message, size));
    OK
}

#[no_mangle]
pub unsafe extern "C" fn proxy_get_current_time_nanoseconds(time: *mut u64) -> u32 {
    count("get_current_time");
    *time = VM.with(|vm| vm.borrow().now_ns);
    OK
}

#[no_mangle]
pub extern "C" fn proxy_set_tick_period_milliseconds(period_ms: u32) -> u32 {
    count("set_tick_period");
    VM.with(|vm| vm.borrow_mut().tick_ms = u64::from(period_ms));
    OK
}

#[no_mangle]
pub unsafe extern "C" fn proxy_get_buffer_bytes(
    buffer: u32,
    start: usize,
    max: usize,
    data: *mut *mut u8,
    size: *mut usize,
) -> u32 {
    count("get_buffer_bytes");
    let bytes = VM.with(|vm| {
        let vm = vm.borrow();
        match buffer {
            7 => vm.config.clone(),
            4 => vm.call_body.clone(),
            _ => Vec::new(),
        }
    });
    let end = bytes.len().min(start.saturating_add(max));
    give(&bytes[start.min(end)..end], data, size)
}

#[no_mangle]
pub unsafe extern "C" fn proxy_get_property(path: *const u8, len: usize, data: *mut *mut u8, size: *mut usize) -> u32 {
    count("get_property");
    let path = std::slice::from_raw_parts(path, len);
    let value: Option<Vec<u8>> = match path {
        b"xds\0cluster_name" => Some(b"backends".to_vec()),
        b"upstream\0address" => Some(VM.with(|vm| vm.borrow().upstream.clone().into_bytes())),
        b"response\0code" => Some(200u64.to_le_bytes().to_vec()),
        b"xds\0listener_direction" => Some(2u64.to_le_bytes().to_vec()),
        _ => None,
    };
    match value {
        Some(v) => give(&v, data, size),
        None => NOT_FOUND,
    }
}

#[no_mangle]
pub unsafe extern "C" fn proxy_get_header_map_value(
    map: u32,
    key: *const u8,
    key_size: usize,
    data: *mut *mut u8,
    size: *mut usize,
) -> u32 {
    count("get_header_map_value");
    let key = text(key, key_size);
    let value = VM.with(|vm| {
        let vm = vm.borrow();
        let headers = if map == 0 { &vm.request } else { &vm.response };
        headers.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone())
    });
    match value {
        Some(v) => give(v.as_bytes(), data, size),
        None => NOT_FOUND,
    }
}

#[no_mangle]
pub unsafe extern "C" fn proxy_replace_header_map_value(
    map: u32,
    key: *const u8,
    key_size: usize,
    value: *const u8,
    value_size: usize,
) -> u32 {
    count("replace_header_map_value");
    let (key, value) = (text(key, key_size).to_string(), text(value, value_size).to_string());
    VM.with(|vm| {
        let mut vm = vm.borrow_mut();
        let headers = if map == 0 { &mut vm.request } else { &mut vm.response };
        headers.retain(|(k, _)| *k != key);
        headers.push((key, value));
    });
    OK
}

#[no_mangle]
pub unsafe extern "C" fn proxy_remove_header_map_value(map: u32, key: *const u8, key_size: usize) -> u32 {
    count("remove_header_map_value");
    let key = text(key, key_size);
    VM.with(|vm| {
        let mut vm = vm.borrow_mut();
        let headers = if map == 0 { &mut vm.request } else { &mut vm.response };
        headers.retain(|(k, _)| k != key);
    });
    OK
}

#[no_mangle]
pub unsafe extern "C" fn proxy_get_shared_data(
    key: *const u8,
    key_size: usize,
    data: *mut *mut u8,
    size: *mut usize,
    cas: *mut u32,
) -> u32 {
    count("get_shared_data");
    let found = shared().lock().unwrap().get(text(key, key_size)).cloned();
    match found {
        Some((bytes, c)) => {
            *cas = c;
            give(&bytes, data, size)
        }
        None => NOT_FOUND,
    }
}

#[no_mangle]
pub unsafe extern "C" fn proxy_set_shared_data(
    key: *const u8,
    key_size: usize,
    value: *const u8,
    value_size: usize,
    cas: u32,
) -> u32 {
    count("set_shared_data");
    let mut map = shared().lock().unwrap();
    let key = text(key, key_size).to_string();
    let current = map.get(&key).map(|(_, c)| *c);
    if cas != 0 && current.is_some_and(|c| c != cas) {
        return CAS_MISMATCH;
    }
    let next = current.unwrap_or(0) + 1;
    map.insert(key, (std::slice::from_raw_parts(value, value_size).to_vec(), next));
    OK
}

#[no_mangle]
pub unsafe extern "C" fn proxy_http_call(
    _upstream: *const u8,
    _upstream_size: usize,
    _headers: *const u8,
    _headers_size: usize,
    _body: *const u8,
    _body_size: usize,
    _trailers: *const u8,
    _trailers_size: usize,
    _timeout_ms: u32,
    token: *mut u32,
) -> u32 {
    count("http_call");
    VM.with(|vm| {
        let mut vm = vm.borrow_mut();
        vm.next_token += 1;
        *token = vm.next_token;
        let t = vm.next_token;
        vm.calls.push(t);
    });
    OK
}

#[no_mangle]
pub unsafe extern "C" fn proxy_define_metric(_kind: u32, name: *const u8, name_size: usize, id: *mut u32) -> u32 {
    count("define_metric");
    let name = text(name, name_size).to_string();
    *id = VM.with(|vm| {
        let mut vm = vm.borrow_mut();
        vm.metrics.push((name, 0));
        vm.metrics.len() as u32 - 1
    });
    OK
}

#[no_mangle]
pub extern "C" fn proxy_increment_metric(id: u32, offset: i64) -> u32 {
    count("increment_metric");
    VM.with(|vm| {
        if let Some(m) = vm.borrow_mut().metrics.get_mut(id as usize) {
            m.1 += offset;
        }
    });
    OK
}

#[no_mangle]
pub extern "C" fn proxy_record_metric(id: u32, value: u64) -> u32 {
    count("record_metric");
    VM.with(|vm| {
        if let Some(m) = vm.borrow_mut().metrics.get_mut(id as usize) {
            m.1 = value as i64;
        }
    });
    OK
}

#[no_mangle]
pub unsafe extern "C" fn random_get(buf: *mut u8, len: usize) -> u16 {
    for i in 0..len {
        *buf.add(i) = (i as u8).wrapping_mul(77).wrapping_add(13);
    }
    0
}
