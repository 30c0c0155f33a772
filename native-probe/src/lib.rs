//! An experimental Envoy dynamic module: just enough of the C ABI, bound by hand, to establish on
//! the Envoy the project installs (1.40.0, ABI "v0.2.0") how the native shell must bind it. What it
//! showed is written down in docs/native-abi.md; how to rerun it is in native-probe/README.md.
//!
//! It is an HTTP filter that
//! - steers: on the request headers it asks Envoy to send the request to the upstream named by the
//!   request header `x-probe-target` (or the filter config's default, if any) with
//!   `set_upstream_override_host`;
//! - reads and writes headers, and reads the route's cluster name, the upstream address and the
//!   response code, and echoes them in response headers (`x-probe-*`);
//! - defines a counter on the filter config and increments it once per request (from the stream)
//!   and once at config time (from the config, outside any stream);
//! - from a thread of its own, schedules an event on the filter config (main thread), which sends an
//!   HTTP callout to the cluster named by `callout=<cluster>` in the config and logs the answer;
//! - with `x-probe-dump: 1`, logs every string and integer attribute id that answers at stream end.
//!
//! Every `extern "C"` signature below was written from the header's declarations and checked against
//! the binary (nm) and by running it; the header types map as: pointers to `*mut c_void`/`*const
//! c_void`, C enums to `u32`, `size_t` to `usize`, `bool` to `bool`.

#![allow(clippy::missing_safety_doc)]

mod boot;
mod lb;
mod unused_hooks;

use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};

// ------------------------------------------------------------------------------------------------
// The ABI's types (the subset used).

/// A buffer Envoy owns (`envoy_dynamic_module_type_envoy_buffer`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct EnvoyBuffer {
    ptr: *const u8,
    len: usize,
}

/// A buffer the module owns (`envoy_dynamic_module_type_module_buffer`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ModuleBuffer {
    ptr: *const u8,
    len: usize,
}

/// A header the module owns (`envoy_dynamic_module_type_module_http_header`).
#[repr(C)]
pub struct ModuleHeader {
    key: *const u8,
    key_len: usize,
    value: *const u8,
    value_len: usize,
}

/// A header Envoy owns (`envoy_dynamic_module_type_envoy_http_header`).
#[repr(C)]
pub struct EnvoyHeader {
    key: *const u8,
    key_len: usize,
    value: *const u8,
    value_len: usize,
}

fn mb(s: &str) -> ModuleBuffer {
    ModuleBuffer { ptr: s.as_ptr(), len: s.len() }
}

unsafe fn envoy_str(b: EnvoyBuffer) -> String {
    if b.ptr.is_null() {
        return String::new();
    }
    String::from_utf8_lossy(std::slice::from_raw_parts(b.ptr, b.len)).into_owned()
}

// Header maps (`envoy_dynamic_module_type_http_header_type`).
const REQUEST_HEADER: u32 = 0;
const RESPONSE_HEADER: u32 = 2;
// Log levels (`envoy_dynamic_module_type_log_level`).
const LOG_INFO: u32 = 2;
const LOG_WARN: u32 = 3;
// Attribute ids (`envoy_dynamic_module_type_attribute_id`), as counted in the header; the dump
// mode checks them against what the binary answers.
const ATTR_RESPONSE_CODE: u32 = 15;
const ATTR_UPSTREAM_ADDRESS: u32 = 41;
const ATTR_XDS_CLUSTER_NAME: u32 = 57;
// Filter statuses: Continue is 0 in every `on_http_filter_*_status` enum.
const CONTINUE: u32 = 0;

// ------------------------------------------------------------------------------------------------
// Callbacks (exported by Envoy; every one is in `nm -D --defined-only envoy`).

extern "C" {
    fn envoy_dynamic_module_callback_log(level: u32, message: ModuleBuffer);
    fn envoy_dynamic_module_callback_http_get_header(
        filter: *mut c_void,
        header_type: u32,
        key: ModuleBuffer,
        result: *mut EnvoyBuffer,
        index: usize,
        optional_size: *mut usize,
    ) -> bool;
    fn envoy_dynamic_module_callback_http_set_header(
        filter: *mut c_void,
        header_type: u32,
        key: ModuleBuffer,
        value: ModuleBuffer,
    ) -> bool;
    fn envoy_dynamic_module_callback_http_filter_get_attribute_string(
        filter: *mut c_void,
        attribute_id: u32,
        result: *mut EnvoyBuffer,
    ) -> bool;
    fn envoy_dynamic_module_callback_http_filter_get_attribute_int(
        filter: *mut c_void,
        attribute_id: u32,
        result: *mut u64,
    ) -> bool;
    fn envoy_dynamic_module_callback_http_get_cluster_name(
        filter: *mut c_void,
        result: *mut EnvoyBuffer,
    ) -> bool;
    fn envoy_dynamic_module_callback_http_set_upstream_override_host(
        filter: *mut c_void,
        host: ModuleBuffer,
        strict: bool,
    ) -> bool;
    fn envoy_dynamic_module_callback_http_filter_get_worker_index(filter: *mut c_void) -> u32;
    fn envoy_dynamic_module_callback_http_filter_config_define_counter(
        config: *mut c_void,
        name: ModuleBuffer,
        label_names: *mut ModuleBuffer,
        label_names_len: usize,
        id_out: *mut usize,
    ) -> u32;
    fn envoy_dynamic_module_callback_http_filter_increment_counter(
        filter: *mut c_void,
        id: usize,
        label_values: *mut ModuleBuffer,
        label_values_len: usize,
        value: u64,
    ) -> u32;
    fn envoy_dynamic_module_callback_http_filter_config_increment_counter(
        config: *mut c_void,
        id: usize,
        label_values: *mut ModuleBuffer,
        label_values_len: usize,
        value: u64,
    ) -> u32;
    fn envoy_dynamic_module_callback_http_filter_config_scheduler_new(
        config: *mut c_void,
    ) -> *mut c_void;
    fn envoy_dynamic_module_callback_http_filter_config_scheduler_commit(
        scheduler: *mut c_void,
        event_id: u64,
    );
    fn envoy_dynamic_module_callback_http_filter_config_http_callout(
        config: *mut c_void,
        callout_id_out: *mut u64,
        cluster: ModuleBuffer,
        headers: *mut ModuleHeader,
        headers_len: usize,
        body: ModuleBuffer,
        timeout_ms: u64,
    ) -> u32;
}

/// The headers of a callout: `GET path`, host `probe` (`path` must outlive the call).
fn get_headers(path: &str) -> [ModuleHeader; 3] {
    [
        ModuleHeader { key: ":method".as_ptr(), key_len: 7, value: "GET".as_ptr(), value_len: 3 },
        ModuleHeader { key: ":path".as_ptr(), key_len: 5, value: path.as_ptr(), value_len: path.len() },
        ModuleHeader { key: "host".as_ptr(), key_len: 4, value: "probe".as_ptr(), value_len: 5 },
    ]
}

fn log(level: u32, message: &str) {
    unsafe { envoy_dynamic_module_callback_log(level, mb(message)) }
}

// ------------------------------------------------------------------------------------------------
// Hooks (exported by the module).

/// The ABI version this module was written against: the string 1.40.0 carries.
static ABI_VERSION: &[u8] = b"v0.2.0\0";

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_program_init() -> *const u8 {
    ABI_VERSION.as_ptr()
}

struct Config {
    envoy: *mut c_void,
    default_target: String,
    callout_cluster: String,
    counter: usize,
}

struct SendPtr(*mut c_void);
unsafe impl Send for SendPtr {}

static STREAMS: AtomicUsize = AtomicUsize::new(0);

#[no_mangle]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_config_new(
    config_envoy: *mut c_void,
    name: EnvoyBuffer,
    config: EnvoyBuffer,
) -> *const c_void {
    let name = envoy_str(name);
    let config = envoy_str(config);
    // The config: whitespace-separated `target=<ip:port>` and `callout=<cluster>`.
    let mut default_target = String::new();
    let mut callout_cluster = String::new();
    for word in config.split_whitespace() {
        if let Some(v) = word.strip_prefix("target=") {
            default_target = v.to_string();
        } else if let Some(v) = word.strip_prefix("callout=") {
            callout_cluster = v.to_string();
        }
    }
    let mut counter = usize::MAX;
    let rc = envoy_dynamic_module_callback_http_filter_config_define_counter(
        config_envoy,
        mb("probe_requests"),
        std::ptr::null_mut(),
        0,
        &mut counter,
    );
    let rc_cfg = envoy_dynamic_module_callback_http_filter_config_increment_counter(
        config_envoy,
        counter,
        std::ptr::null_mut(),
        0,
        1,
    );
    log(
        LOG_INFO,
        &format!(
            "probe: config_new name={name:?} config={config:?} define_counter={rc} id={counter} \
             config_increment_counter={rc_cfg} thread={:?}",
            std::thread::current().id()
        ),
    );
    if !callout_cluster.is_empty() {
        // A thread of the module's own schedules an event on the config (Envoy runs it on the
        // main thread), which sends the callout.
        let scheduler = SendPtr(envoy_dynamic_module_callback_http_filter_config_scheduler_new(
            config_envoy,
        ));
        std::thread::spawn(move || {
            let scheduler = scheduler;
            std::thread::sleep(std::time::Duration::from_millis(500));
            envoy_dynamic_module_callback_http_filter_config_scheduler_commit(scheduler.0, 7);
            // The scheduler is kept (never deleted): the probe only schedules once.
        });
    }
    Box::into_raw(Box::new(Config { envoy: config_envoy, default_target, callout_cluster, counter }))
        as *const c_void
}

#[no_mangle]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_config_destroy(config: *const c_void) {
    drop(Box::from_raw(config as *mut Config));
}

#[no_mangle]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_config_scheduled(
    config_envoy: *mut c_void,
    config: *const c_void,
    event_id: u64,
) {
    let config = &*(config as *const Config);
    let path = "/";
    let mut headers = get_headers(path);
    let mut id = 0u64;
    let rc = envoy_dynamic_module_callback_http_filter_config_http_callout(
        config_envoy,
        &mut id,
        mb(&config.callout_cluster),
        headers.as_mut_ptr(),
        headers.len(),
        mb(""),
        2000,
    );
    log(
        LOG_INFO,
        &format!(
            "probe: config_scheduled event={event_id} same_envoy_ptr={} callout_init={rc} callout_id={id} thread={:?}",
            config_envoy == config.envoy,
            std::thread::current().id()
        ),
    );
}

#[no_mangle]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_config_http_callout_done(
    _config_envoy: *mut c_void,
    _config: *const c_void,
    callout_id: u64,
    result: u32,
    headers: *const EnvoyHeader,
    headers_len: usize,
    body: *const EnvoyBuffer,
    body_chunks: usize,
) {
    let mut status = String::new();
    for i in 0..headers_len {
        let h = &*headers.add(i);
        let k = envoy_str(EnvoyBuffer { ptr: h.key, len: h.key_len });
        if k == ":status" {
            status = envoy_str(EnvoyBuffer { ptr: h.value, len: h.value_len });
        }
    }
    let mut body_len = 0;
    for i in 0..body_chunks {
        body_len += (*body.add(i)).len;
    }
    log(
        LOG_INFO,
        &format!(
            "probe: config_callout_done id={callout_id} result={result} headers={headers_len} \
             status={status:?} body_bytes={body_len} thread={:?}",
            std::thread::current().id()
        ),
    );
}

struct Filter {
    config: *const Config,
    target: String,
    dump: bool,
}

#[no_mangle]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_new(
    config: *const c_void,
    _filter_envoy: *mut c_void,
) -> *const c_void {
    STREAMS.fetch_add(1, Ordering::Relaxed);
    Box::into_raw(Box::new(Filter { config: config as *const Config, target: String::new(), dump: false }))
        as *const c_void
}

unsafe fn header(filter: *mut c_void, map: u32, name: &str) -> Option<String> {
    let mut out = EnvoyBuffer { ptr: std::ptr::null(), len: 0 };
    let mut count = 0usize;
    let ok = envoy_dynamic_module_callback_http_get_header(filter, map, mb(name), &mut out, 0, &mut count);
    (ok && !out.ptr.is_null()).then(|| envoy_str(out))
}

unsafe fn set_header(filter: *mut c_void, map: u32, name: &str, value: &str) -> bool {
    envoy_dynamic_module_callback_http_set_header(filter, map, mb(name), mb(value))
}

unsafe fn attr_string(filter: *mut c_void, id: u32) -> Option<String> {
    let mut out = EnvoyBuffer { ptr: std::ptr::null(), len: 0 };
    envoy_dynamic_module_callback_http_filter_get_attribute_string(filter, id, &mut out)
        .then(|| envoy_str(out))
}

unsafe fn attr_int(filter: *mut c_void, id: u32) -> Option<u64> {
    let mut out = 0u64;
    envoy_dynamic_module_callback_http_filter_get_attribute_int(filter, id, &mut out).then_some(out)
}

unsafe fn cluster_name(filter: *mut c_void) -> Option<String> {
    let mut out = EnvoyBuffer { ptr: std::ptr::null(), len: 0 };
    envoy_dynamic_module_callback_http_get_cluster_name(filter, &mut out).then(|| envoy_str(out))
}

#[no_mangle]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_request_headers(
    filter_envoy: *mut c_void,
    filter: *const c_void,
    _end_of_stream: bool,
) -> u32 {
    let filter = &mut *(filter as *mut Filter);
    let config = &*filter.config;
    filter.dump = header(filter_envoy, REQUEST_HEADER, "x-probe-dump").is_some();
    let target = header(filter_envoy, REQUEST_HEADER, "x-probe-target")
        .unwrap_or_else(|| config.default_target.clone());
    let strict = header(filter_envoy, REQUEST_HEADER, "x-probe-strict").is_some();
    let set_ok = set_header(filter_envoy, REQUEST_HEADER, "x-probe-seen", "1");
    let mut override_ok = None;
    if !target.is_empty() {
        override_ok = Some(envoy_dynamic_module_callback_http_set_upstream_override_host(
            filter_envoy,
            mb(&target),
            strict,
        ));
    }
    filter.target = target;
    let rc = envoy_dynamic_module_callback_http_filter_increment_counter(
        filter_envoy,
        config.counter,
        std::ptr::null_mut(),
        0,
        1,
    );
    let worker = envoy_dynamic_module_callback_http_filter_get_worker_index(filter_envoy);
    log(
        LOG_INFO,
        &format!(
            "probe: request_headers target={:?} strict={strict} override={override_ok:?} set_header={set_ok} \
             cluster_cb={:?} cluster_attr={:?} upstream_attr={:?} increment_counter={rc} worker={worker} thread={:?}",
            filter.target,
            cluster_name(filter_envoy),
            attr_string(filter_envoy, ATTR_XDS_CLUSTER_NAME),
            attr_string(filter_envoy, ATTR_UPSTREAM_ADDRESS),
            std::thread::current().id()
        ),
    );
    CONTINUE
}

#[no_mangle]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_response_headers(
    filter_envoy: *mut c_void,
    filter: *const c_void,
    _end_of_stream: bool,
) -> u32 {
    let filter = &*(filter as *const Filter);
    let upstream = attr_string(filter_envoy, ATTR_UPSTREAM_ADDRESS).unwrap_or_default();
    let code = attr_int(filter_envoy, ATTR_RESPONSE_CODE).map(|c| c.to_string()).unwrap_or_default();
    let cluster = cluster_name(filter_envoy).unwrap_or_default();
    let cluster_attr = attr_string(filter_envoy, ATTR_XDS_CLUSTER_NAME).unwrap_or_default();
    let seen = header(filter_envoy, REQUEST_HEADER, "x-probe-seen").unwrap_or_default();
    let status = header(filter_envoy, RESPONSE_HEADER, ":status").unwrap_or_default();
    set_header(filter_envoy, RESPONSE_HEADER, "x-probe-upstream", &upstream);
    set_header(filter_envoy, RESPONSE_HEADER, "x-probe-code", &code);
    set_header(filter_envoy, RESPONSE_HEADER, "x-probe-status", &status);
    set_header(filter_envoy, RESPONSE_HEADER, "x-probe-cluster", &cluster);
    set_header(filter_envoy, RESPONSE_HEADER, "x-probe-cluster-attr", &cluster_attr);
    set_header(filter_envoy, RESPONSE_HEADER, "x-probe-seen", &seen);
    set_header(filter_envoy, RESPONSE_HEADER, "x-probe-target", &filter.target);
    CONTINUE
}

#[no_mangle]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_stream_complete(
    filter_envoy: *mut c_void,
    filter: *const c_void,
) {
    let filter = &*(filter as *const Filter);
    log(
        LOG_INFO,
        &format!(
            "probe: stream_complete upstream_attr={:?} code_attr={:?} cluster_cb={:?}",
            attr_string(filter_envoy, ATTR_UPSTREAM_ADDRESS),
            attr_int(filter_envoy, ATTR_RESPONSE_CODE),
            cluster_name(filter_envoy),
        ),
    );
    if filter.dump {
        for id in 0..72u32 {
            let s = attr_string(filter_envoy, id);
            let i = attr_int(filter_envoy, id);
            if s.is_some() || i.is_some() {
                log(LOG_WARN, &format!("probe: attr {id} string={s:?} int={i:?}"));
            }
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_destroy(filter: *const c_void) {
    drop(Box::from_raw(filter as *mut Filter));
}
