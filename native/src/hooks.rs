//! The HTTP filter's hooks Envoy calls (the module's exports), each routed to its filter config's
//! `FilterState` and, for a stream, to the plugin of the worker it runs on. Configs, ticks and
//! call answers run on the main thread; streams on their worker.

use crate::abi::{self, EnvoyBuffer, HeaderPair, CONTINUE};
use crate::filter_state::FilterState;
use crate::host::{wall_clock_us, NativeAnswer, NativeExchange};
use std::ffi::c_void;
use tailweight_sidecar::Stream;

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_program_init() -> *const u8 {
    abi::ABI_VERSION.as_ptr()
}

/// One `FilterState` per filter config, with a plugin per worker (`--concurrency`, at least one).
///
/// # Safety
/// Envoy passes the config's pointer and two buffers valid during the call.
#[no_mangle]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_config_new(
    config_envoy: *mut c_void,
    _name: EnvoyBuffer,
    config: EnvoyBuffer,
) -> *const c_void {
    let workers = (abi::envoy_dynamic_module_callback_get_concurrency() as usize).max(1);
    let configuration = config.bytes().to_vec();
    std::panic::catch_unwind(|| Box::into_raw(FilterState::new(config_envoy, workers, &configuration)))
        .map_or(std::ptr::null(), |state| state as *const c_void)
}

/// # Safety
/// `config` is what `config_new` returned.
#[no_mangle]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_config_destroy(config: *const c_void) {
    if !config.is_null() {
        drop(Box::from_raw(config as *mut FilterState));
    }
}

/// The ticker's wake-up (see `ticker`).
///
/// # Safety
/// `config` is what `config_new` returned.
#[no_mangle]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_config_scheduled(
    _config_envoy: *mut c_void,
    config: *const c_void,
    _event_id: u64,
) {
    if let Some(state) = (config as *const FilterState).as_ref() {
        state.tick_due(wall_clock_us());
    }
}

/// # Safety
/// `config` is what `config_new` returned; the rest is what Envoy passes, valid during the call.
#[no_mangle]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_config_http_callout_done(
    _config_envoy: *mut c_void,
    config: *const c_void,
    callout_id: u64,
    result: u32,
    headers: *const HeaderPair,
    headers_len: usize,
    body: *const EnvoyBuffer,
    body_chunks: usize,
) {
    let Some(state) = (config as *const FilterState).as_ref() else { return };
    let Some((worker, token)) = state.callouts.answered(callout_id) else { return };
    let answer = NativeAnswer::copy(result, headers, headers_len, body, body_chunks);
    state.with_plugin(worker, true, |plugin, host| plugin.on_call_answer(host, token, &answer));
}

/// One stream: the worker it runs on (None: more workers than plugins, passed through) and its
/// state in the sidecar.
struct FilterStream {
    state: *const FilterState,
    worker: Option<usize>,
    stream: Stream,
}

/// # Safety
/// `config` is what `config_new` returned; `filter_envoy` is the new stream's.
#[no_mangle]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_new(
    config: *const c_void,
    filter_envoy: *mut c_void,
) -> *const c_void {
    let Some(state) = (config as *const FilterState).as_ref() else { return std::ptr::null() };
    let index = abi::envoy_dynamic_module_callback_http_filter_get_worker_index(filter_envoy) as usize;
    crate::lb_feed::note_worker(index);
    let worker = (index < state.workers()).then_some(index);
    let stream = worker.and_then(|w| state.with_plugin(w, false, |plugin, _| plugin.new_stream()));
    let Some(stream) = stream else {
        return Box::into_raw(Box::new(FilterStream {
            state,
            worker: None,
            stream: tailweight_sidecar::Plugin::Disabled.new_stream(),
        })) as *const c_void;
    };
    Box::into_raw(Box::new(FilterStream { state, worker, stream })) as *const c_void
}

/// Run `f` on a stream's plugin (nothing for a stream passed through).
///
/// # Safety
/// `filter` is what `filter_new` returned, and its config is alive (Envoy destroys streams first).
unsafe fn on_stream(
    filter_envoy: *mut c_void,
    filter: *const c_void,
    f: impl FnOnce(&mut tailweight_sidecar::Plugin, &mut Stream, &crate::host::NativeHost, &mut NativeExchange),
) {
    let Some(s) = (filter as *mut FilterStream).as_mut() else { return };
    let (Some(worker), Some(state)) = (s.worker, s.state.as_ref()) else { return };
    let mut exchange = NativeExchange::new(filter_envoy);
    state.with_plugin(worker, false, |plugin, host| f(plugin, &mut s.stream, host, &mut exchange));
}

/// # Safety
/// As for `on_stream`.
#[no_mangle]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_request_headers(
    filter_envoy: *mut c_void,
    filter: *const c_void,
    _end_of_stream: bool,
) -> u32 {
    on_stream(filter_envoy, filter, |plugin, stream, host, exchange| plugin.on_request_headers(stream, host, exchange));
    CONTINUE
}

/// # Safety
/// As for `on_stream`.
#[no_mangle]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_response_headers(
    filter_envoy: *mut c_void,
    filter: *const c_void,
    _end_of_stream: bool,
) -> u32 {
    on_stream(filter_envoy, filter, |plugin, stream, host, exchange| {
        plugin.on_response_headers(stream, host, exchange)
    });
    CONTINUE
}

/// Once per stream, after its last other hook (also on resets), before access logs.
///
/// # Safety
/// As for `on_stream`.
#[no_mangle]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_stream_complete(
    filter_envoy: *mut c_void,
    filter: *const c_void,
) {
    on_stream(filter_envoy, filter, |plugin, stream, host, exchange| plugin.on_stream_done(stream, host, exchange));
}

/// # Safety
/// `filter` is what `filter_new` returned.
#[no_mangle]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_destroy(filter: *const c_void) {
    if !filter.is_null() {
        drop(Box::from_raw(filter as *mut FilterStream));
    }
}
