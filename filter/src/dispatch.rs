//! The callbacks Envoy calls (the module's exports, proxy-wasm ABI 0.2.1), each routed to the
//! `Plugin` of its root context, or to a stream and its root's plugin (`contexts`), with the Wasm
//! host (`host`). Callbacks the filter does not implement are not exported: the host then skips the
//! call and takes the ABI's default (continue, done, start accepted).

use crate::contexts::Contexts;
use crate::host::{plugin_configuration, WasmAnswer, WasmExchange, WasmHost};
use std::cell::RefCell;
use tailweight_sidecar::host::{Host, LogLevel};
use tailweight_sidecar::{Plugin, Stream};

/// `proxy_action_t` Continue: the filter never pauses a stream.
const ACTION_CONTINUE: u32 = 0;

thread_local! {
    static CONTEXTS: RefCell<Contexts<Plugin, Stream>> = const { RefCell::new(Contexts::new()) };
}

/// Run `f` on the VM's contexts. A VM is single-threaded and no host call re-enters the module
/// with a callback, so the borrow is always free; were it not, the callback is skipped (the ABI
/// default) rather than trapping.
fn with_contexts<T: Default>(f: impl FnOnce(&mut Contexts<Plugin, Stream>) -> T) -> T {
    CONTEXTS.with(|c| c.try_borrow_mut().map(|mut c| f(&mut c)).unwrap_or_default())
}

extern "C" {
    fn __wasm_call_ctors();
}

/// The reactor's initializer (the host calls it once, before anything else). It also sends a
/// panic's place and message to Envoy's log at error level: on wasm32-unknown-unknown std's own
/// hook writes to a stderr that goes nowhere. The message only, not `PanicHookInfo`'s Display
/// (1.8 KB more module for the same line).
#[no_mangle]
pub extern "C" fn _initialize() {
    // SAFETY: the linker's constructor list, run once as the WASI reactor ABI requires.
    unsafe { __wasm_call_ctors() }
    std::panic::set_hook(Box::new(|panic| {
        let place = panic.location().map(|at| format!("{}:{}", at.file(), at.line())).unwrap_or_default();
        let payload = panic.payload();
        let message =
            payload.downcast_ref::<&str>().copied().or_else(|| payload.downcast_ref::<String>().map(String::as_str));
        let message = message.unwrap_or("");
        WasmHost.log(LogLevel::Error, &format!("tailweight panicked at {place}: {message}"));
    }));
}

#[no_mangle]
pub extern "C" fn proxy_abi_version_0_2_1() {}

/// Memory for data the host passes in (header values, buffers, properties, shared data). It is
/// a boxed slice of exactly `size` bytes, so `host` takes it back as a `Vec` of that capacity.
#[no_mangle]
pub extern "C" fn proxy_on_memory_allocate(size: usize) -> *mut u8 {
    Box::into_raw(Box::<[u8]>::new_uninit_slice(size)).cast()
}

/// A root context (`root_id` 0: one per plugin) or a request context of root `root_id`.
#[no_mangle]
pub extern "C" fn proxy_on_context_create(context_id: u32, root_id: u32) {
    with_contexts(|c| c.create(context_id, root_id, Plugin::default, Plugin::new_stream))
}

/// Always accepted (see `Plugin::configure`): an unknown root has nothing to configure.
#[no_mangle]
pub extern "C" fn proxy_on_configure(root_id: u32, configuration_size: usize) -> u32 {
    with_contexts(|c| {
        if let Some(plugin) = c.root(root_id) {
            plugin.configure(&WasmHost, &plugin_configuration(configuration_size));
        }
    });
    1
}

#[no_mangle]
pub extern "C" fn proxy_on_tick(root_id: u32) {
    with_contexts(|c| c.root(root_id).map(|plugin| plugin.tick(&WasmHost)));
}

/// Calls are dispatched from a root context (the tick), and their answers come back to it.
#[no_mangle]
pub extern "C" fn proxy_on_http_call_response(
    root_id: u32,
    token: u32,
    _headers: usize,
    body_size: usize,
    _trailers: usize,
) {
    let answer = WasmAnswer { body_size };
    with_contexts(|c| c.root(root_id).map(|plugin| plugin.on_call_answer(&WasmHost, token, &answer)));
}

#[no_mangle]
pub extern "C" fn proxy_on_request_headers(context_id: u32, _headers: usize, _end_of_stream: u32) -> u32 {
    with_contexts(|c| {
        c.stream(context_id).map(|(plugin, s)| plugin.on_request_headers(s, &WasmHost, &mut WasmExchange))
    });
    ACTION_CONTINUE
}

#[no_mangle]
pub extern "C" fn proxy_on_response_headers(context_id: u32, _headers: usize, _end_of_stream: u32) -> u32 {
    with_contexts(|c| {
        c.stream(context_id).map(|(plugin, s)| plugin.on_response_headers(s, &WasmHost, &mut WasmExchange))
    });
    ACTION_CONTINUE
}

/// Once per stream, after its last other callback (also on resets).
#[no_mangle]
pub extern "C" fn proxy_on_log(context_id: u32) {
    with_contexts(|c| c.stream(context_id).map(|(plugin, s)| plugin.on_stream_done(s, &WasmHost, &WasmExchange)));
}

#[no_mangle]
pub extern "C" fn proxy_on_delete(context_id: u32) {
    with_contexts(|c| c.delete(context_id))
}
