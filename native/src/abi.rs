//! The subset of Envoy's dynamic-module C ABI ("v0.2.0", Envoy 1.40) the native shell uses, bound
//! by hand: the official Rust SDK is a git dependency only, and the module must reference nothing
//! the target Envoy does not export (Envoy resolves every symbol at load). Each binding was checked
//! against the binary (`nm -D`) and by running it (docs/native-abi.md, "[E]" rows); a test
//! (e2e/tests/test_native.py) compares the module's undefined symbols with the binary's exports.
//!
//! C types map as: pointers to `*mut c_void`/`*const c_void`, C enums to `u32`, `size_t` to `usize`.

use std::ffi::c_void;

/// The ABI version this module was written against: the string Envoy 1.40.0 carries.
pub const ABI_VERSION: &[u8] = b"v0.2.0\0";

/// A buffer Envoy owns (`envoy_dynamic_module_type_envoy_buffer`): valid until the hook returns.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct EnvoyBuffer {
    pub ptr: *const u8,
    pub len: usize,
}

/// A buffer the module owns (`envoy_dynamic_module_type_module_buffer`): read during the call only.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ModuleBuffer {
    pub ptr: *const u8,
    pub len: usize,
}

/// A header, module-owned (`..._module_http_header`) or Envoy-owned (`..._envoy_http_header`):
/// one layout.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct HeaderPair {
    pub key: *const u8,
    pub key_len: usize,
    pub value: *const u8,
    pub value_len: usize,
}

impl HeaderPair {
    pub const EMPTY: HeaderPair =
        HeaderPair { key: std::ptr::null(), key_len: 0, value: std::ptr::null(), value_len: 0 };
}

impl EnvoyBuffer {
    pub const EMPTY: EnvoyBuffer = EnvoyBuffer { ptr: std::ptr::null(), len: 0 };

    /// The bytes (empty for a null buffer).
    ///
    /// # Safety
    /// `ptr` must point to `len` readable bytes for the lifetime the caller gives the slice.
    pub unsafe fn bytes<'a>(self) -> &'a [u8] {
        if self.ptr.is_null() || self.len == 0 {
            return &[];
        }
        std::slice::from_raw_parts(self.ptr, self.len)
    }
}

impl ModuleBuffer {
    pub fn of(bytes: &[u8]) -> ModuleBuffer {
        ModuleBuffer { ptr: bytes.as_ptr(), len: bytes.len() }
    }
}

/// Header maps (`envoy_dynamic_module_type_http_header_type`).
pub const REQUEST_HEADER: u32 = 0;
pub const RESPONSE_HEADER: u32 = 2;
pub const RESPONSE_TRAILER: u32 = 3;
/// Log levels (`envoy_dynamic_module_type_log_level`).
pub const LOG_WARN: u32 = 3;
pub const LOG_ERROR: u32 = 4;
/// `envoy_dynamic_module_type_metrics_result` Success; `..._http_callout_init_result` Success.
pub const RESULT_SUCCESS: u32 = 0;
/// Every `on_http_filter_*_status` Continue.
pub const CONTINUE: u32 = 0;

/// Attribute ids (`envoy_dynamic_module_type_attribute_id`) read by the shell, each seen answering
/// on Envoy 1.40 (docs/native-abi.md, "Attributes").
pub mod attribute {
    pub const RESPONSE_CODE: u32 = 15;
    pub const DESTINATION_ADDRESS: u32 = 26;
    pub const PEER_URI_SAN: u32 = 37;
    pub const UPSTREAM_ADDRESS: u32 = 41;
    pub const UPSTREAM_REQUEST_ATTEMPT_COUNT: u32 = 53;
    pub const XDS_CLUSTER_NAME: u32 = 57;
    pub const XDS_LISTENER_DIRECTION: u32 = 59;
}

/// The shape every config metric update shares (increment a counter, increment, decrement or set
/// a gauge): config, metric id, label values and their count, the value; returns a metrics result.
pub type MetricUpdate = unsafe extern "C" fn(*mut c_void, usize, *mut ModuleBuffer, usize, u64) -> u32;

extern "C" {
    pub fn envoy_dynamic_module_callback_log(level: u32, message: ModuleBuffer);
    pub fn envoy_dynamic_module_callback_get_concurrency() -> u32;
    /// The number of headers in a map (0 for a map the stream does not have).
    pub fn envoy_dynamic_module_callback_http_get_headers_size(filter: *mut c_void, header_type: u32) -> usize;
    /// Every header of a map, in its order, into `result` (room for `get_headers_size` entries).
    pub fn envoy_dynamic_module_callback_http_get_headers(
        filter: *mut c_void,
        header_type: u32,
        result: *mut HeaderPair,
    ) -> bool;
    pub fn envoy_dynamic_module_callback_http_set_header(
        filter: *mut c_void,
        header_type: u32,
        key: ModuleBuffer,
        value: ModuleBuffer,
    ) -> bool;
    pub fn envoy_dynamic_module_callback_http_filter_get_attribute_string(
        filter: *mut c_void,
        attribute_id: u32,
        result: *mut EnvoyBuffer,
    ) -> bool;
    pub fn envoy_dynamic_module_callback_http_filter_get_attribute_int(
        filter: *mut c_void,
        attribute_id: u32,
        result: *mut u64,
    ) -> bool;
    pub fn envoy_dynamic_module_callback_http_set_upstream_override_host(
        filter: *mut c_void,
        host: ModuleBuffer,
        strict: bool,
    ) -> bool;
    pub fn envoy_dynamic_module_callback_http_filter_get_worker_index(filter: *mut c_void) -> u32;
    pub fn envoy_dynamic_module_callback_http_filter_config_define_counter(
        config: *mut c_void,
        name: ModuleBuffer,
        label_names: *mut ModuleBuffer,
        label_names_len: usize,
        id_out: *mut usize,
    ) -> u32;
    pub fn envoy_dynamic_module_callback_http_filter_config_define_gauge(
        config: *mut c_void,
        name: ModuleBuffer,
        label_names: *mut ModuleBuffer,
        label_names_len: usize,
        id_out: *mut usize,
    ) -> u32;
    pub fn envoy_dynamic_module_callback_http_filter_config_increment_counter(
        config: *mut c_void,
        id: usize,
        label_values: *mut ModuleBuffer,
        label_values_len: usize,
        value: u64,
    ) -> u32;
    pub fn envoy_dynamic_module_callback_http_filter_config_increment_gauge(
        config: *mut c_void,
        id: usize,
        label_values: *mut ModuleBuffer,
        label_values_len: usize,
        value: u64,
    ) -> u32;
    pub fn envoy_dynamic_module_callback_http_filter_config_decrement_gauge(
        config: *mut c_void,
        id: usize,
        label_values: *mut ModuleBuffer,
        label_values_len: usize,
        value: u64,
    ) -> u32;
    pub fn envoy_dynamic_module_callback_http_filter_config_set_gauge(
        config: *mut c_void,
        id: usize,
        label_values: *mut ModuleBuffer,
        label_values_len: usize,
        value: u64,
    ) -> u32;
    pub fn envoy_dynamic_module_callback_http_filter_config_scheduler_new(config: *mut c_void) -> *mut c_void;
    pub fn envoy_dynamic_module_callback_http_filter_config_scheduler_commit(scheduler: *mut c_void, event_id: u64);
    pub fn envoy_dynamic_module_callback_http_filter_config_scheduler_delete(scheduler: *mut c_void);
    pub fn envoy_dynamic_module_callback_http_filter_config_http_callout(
        config: *mut c_void,
        callout_id_out: *mut u64,
        cluster: ModuleBuffer,
        headers: *mut HeaderPair,
        headers_len: usize,
        body: ModuleBuffer,
        timeout_ms: u64,
    ) -> u32;
}
