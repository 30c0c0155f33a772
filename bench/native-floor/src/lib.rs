//! The native shell's floor: the same ABI bindings and do-nothing hooks as native/ (included from
//! there, not copied), and a filter that at most steers every stream to one configured endpoint.
//! No allocation, lock, clock or attribute read per request.

#[allow(dead_code)]
#[path = "../../../native/src/abi.rs"]
mod abi;
#[path = "../../../native/src/unused_hooks.rs"]
mod unused_hooks;

use abi::{EnvoyBuffer, ModuleBuffer, CONTINUE};
use std::ffi::c_void;

/// The endpoint every stream is steered to (empty: none, the filter only runs its hooks).
struct FloorConfig {
    endpoint: Vec<u8>,
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_program_init() -> *const u8 {
    abi::ABI_VERSION.as_ptr()
}

/// # Safety
/// Envoy passes buffers valid during the call.
#[no_mangle]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_config_new(
    _config_envoy: *mut c_void,
    _name: EnvoyBuffer,
    config: EnvoyBuffer,
) -> *const c_void {
    let endpoint = config.bytes().iter().copied().filter(|b| !b" \"{}".contains(b)).collect();
    Box::into_raw(Box::new(FloorConfig { endpoint })) as *const c_void
}

/// # Safety
/// `config` is what `config_new` returned.
#[no_mangle]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_config_destroy(config: *const c_void) {
    if !config.is_null() {
        drop(Box::from_raw(config as *mut FloorConfig));
    }
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_config_scheduled(
    _config_envoy: *mut c_void,
    _config: *const c_void,
    _event_id: u64,
) {
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_config_http_callout_done(
    _config_envoy: *mut c_void,
    _config: *const c_void,
    _callout_id: u64,
    _result: u32,
    _headers: *const abi::HeaderPair,
    _headers_len: usize,
    _body: *const EnvoyBuffer,
    _body_chunks: usize,
) {
}

/// The stream's state is its config (nothing per stream).
#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_new(
    config: *const c_void,
    _filter_envoy: *mut c_void,
) -> *const c_void {
    config
}

/// # Safety
/// `filter` is the config `config_new` returned.
#[no_mangle]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_request_headers(
    filter_envoy: *mut c_void,
    filter: *const c_void,
    _end_of_stream: bool,
) -> u32 {
    if let Some(config) = (filter as *const FloorConfig).as_ref() {
        if !config.endpoint.is_empty() {
            abi::envoy_dynamic_module_callback_http_set_upstream_override_host(
                filter_envoy,
                ModuleBuffer::of(&config.endpoint),
                false,
            );
        }
    }
    CONTINUE
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_response_headers(
    _filter_envoy: *mut c_void,
    _filter: *const c_void,
    _end_of_stream: bool,
) -> u32 {
    CONTINUE
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_stream_complete(
    _filter_envoy: *mut c_void,
    _filter: *const c_void,
) {
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_destroy(_filter: *const c_void) {}
