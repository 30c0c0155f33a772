//! The proxy-wasm ABI 0.2.1 as this filter uses it: the callbacks Envoy calls (exports), the host
//! functions the filter calls (imports), and the routing of each callback to the root or request
//! context it is for.
//!
//! Hand-written instead of the `proxy-wasm` crate: the SDK's dispatcher keeps every context as a
//! `Box<dyn RootContext/HttpContext/StreamContext>` in hashbrown maps (with foldhash seeding), and
//! the trait vtables pull in every default method (gRPC calls and streams, foreign functions,
//! queues, network filters, send_http_response...) whether the filter uses them or not. V8
//! compiles the whole module before Envoy's listener is ready, on every sidecar: those bytes cost
//! start-up time fleet-wide. Measured against the SDK build (Envoy 1.40, `bench.overhead --only
//! startup`, median of 5 starts): 178,748 -> 136,414 bytes; V8 compile 106 -> 87 ms; start to ready
//! over the empty filter +59 -> +40 ms at --concurrency 2 (+59 -> +41 at 1), CPU +120 -> +80 ms.
//!
//! Contexts: a VM holds one root context per plugin that shares it (Envoy gives plugins with the same
//! vm_config one VM per worker, e.g. a client and a server role) and one request context per HTTP
//! stream; their types are known, so they live in vectors keyed by context id (an enum per stream,
//! no boxes). Callbacks the filter does not implement are not exported: the host then skips the
//! call and takes the ABI's default (continue, done, start accepted).

use crate::root::{HttpStream, Root};
use std::cell::RefCell;

/// `proxy_result_t` success (for the other codes see `status_name`).
pub const STATUS_OK: u32 = 0;

/// `proxy_action_t` Continue: the filter never pauses a stream.
const ACTION_CONTINUE: u32 = 0;

#[derive(Clone, Copy)]
#[repr(u32)]
pub enum LogLevel {
    Warn = 3,
    Error = 4,
}

#[derive(Clone, Copy)]
#[repr(u32)]
pub enum MapType {
    RequestHeaders = 0,
    ResponseHeaders = 2,
    ResponseTrailers = 3,
    CallResponseHeaders = 6,
}

#[derive(Clone, Copy)]
#[repr(u32)]
pub enum BufferType {
    CallResponseBody = 4,
    PluginConfiguration = 7,
}

#[derive(Clone, Copy)]
#[repr(u32)]
pub enum MetricType {
    Counter = 0,
    Gauge = 1,
}

/// A host status as a word, for log lines.
pub fn status_name(status: u32) -> &'static str {
    match status {
        0 => "Ok",
        1 => "NotFound",
        2 => "BadArgument",
        3 => "SerializationFailure",
        4 => "ParseFailure",
        6 => "InvalidMemoryAccess",
        7 => "Empty",
        8 => "CasMismatch",
        10 => "InternalFailure",
        12 => "Unimplemented",
        _ => "another status",
    }
}

/// A header map as the host reads it: the pair count, each pair's name and value lengths (all
/// little-endian u32), then each name and value followed by a NUL.
pub fn serialize_pairs(pairs: &[(&str, &str)]) -> Vec<u8> {
    let size = 4 + pairs.iter().map(|(n, v)| 10 + n.len() + v.len()).sum::<usize>();
    let mut bytes = Vec::with_capacity(size);
    bytes.extend_from_slice(&(pairs.len() as u32).to_le_bytes());
    for (name, value) in pairs {
        bytes.extend_from_slice(&(name.len() as u32).to_le_bytes());
        bytes.extend_from_slice(&(value.len() as u32).to_le_bytes());
    }
    for (name, value) in pairs {
        for part in [name, value] {
            bytes.extend_from_slice(part.as_bytes());
            bytes.push(0);
        }
    }
    bytes
}

// Host functions (proxy-wasm spec, ABI 0.2.1). Every call returns a status; the callers in `host`
// check it and never trap on what the host returns.
#[link(wasm_import_module = "env")]
extern "C" {
    pub fn proxy_log(level: u32, message: *const u8, message_size: usize) -> u32;
    pub fn proxy_get_current_time_nanoseconds(time: *mut u64) -> u32;
    pub fn proxy_set_tick_period_milliseconds(period_ms: u32) -> u32;
    pub fn proxy_get_buffer_bytes(
        buffer: u32,
        start: usize,
        max_size: usize,
        data: *mut *mut u8,
        size: *mut usize,
    ) -> u32;
    pub fn proxy_get_property(path: *const u8, path_size: usize, value: *mut *mut u8, value_size: *mut usize) -> u32;
    pub fn proxy_get_header_map_value(
        map: u32,
        key: *const u8,
        key_size: usize,
        value: *mut *mut u8,
        value_size: *mut usize,
    ) -> u32;
    pub fn proxy_replace_header_map_value(
        map: u32,
        key: *const u8,
        key_size: usize,
        value: *const u8,
        value_size: usize,
    ) -> u32;
    pub fn proxy_remove_header_map_value(map: u32, key: *const u8, key_size: usize) -> u32;
    pub fn proxy_get_shared_data(
        key: *const u8,
        key_size: usize,
        value: *mut *mut u8,
        value_size: *mut usize,
        cas: *mut u32,
    ) -> u32;
    pub fn proxy_set_shared_data(key: *const u8, key_size: usize, value: *const u8, value_size: usize, cas: u32)
        -> u32;
    #[allow(clippy::too_many_arguments)]
    pub fn proxy_http_call(
        upstream: *const u8,
        upstream_size: usize,
        headers: *const u8,
        headers_size: usize,
        body: *const u8,
        body_size: usize,
        trailers: *const u8,
        trailers_size: usize,
        timeout_ms: u32,
        token: *mut u32,
    ) -> u32;
    pub fn proxy_define_metric(kind: u32, name: *const u8, name_size: usize, id: *mut u32) -> u32;
    pub fn proxy_increment_metric(id: u32, offset: i64) -> u32;
    pub fn proxy_record_metric(id: u32, value: u64) -> u32;
}

#[link(wasm_import_module = "wasi_snapshot_preview1")]
extern "C" {
    pub fn random_get(buf: *mut u8, buf_len: usize) -> u16;
}

/// The contexts of this VM (see the module comment), each beside its context id.
struct Contexts {
    roots: Vec<(u32, Root)>,
    streams: Vec<(u32, HttpStream)>,
}

/// Where context `id` is in `contexts`, newest first (a callback is most often for one of the
/// latest streams).
fn index_of<T>(contexts: &[(u32, T)], id: u32) -> Option<usize> {
    contexts.iter().rposition(|(c, _)| *c == id)
}

impl Contexts {
    fn root(&mut self, id: u32) -> Option<&mut Root> {
        index_of(&self.roots, id).map(|at| &mut self.roots[at].1)
    }

    fn stream(&mut self, id: u32) -> Option<&mut HttpStream> {
        index_of(&self.streams, id).map(|at| &mut self.streams[at].1)
    }
}

thread_local! {
    static CONTEXTS: RefCell<Contexts> =
        const { RefCell::new(Contexts { roots: Vec::new(), streams: Vec::new() }) };
}

/// Run `f` on the VM's contexts. A VM is single-threaded and no host call re-enters the module
/// with a callback, so the borrow is always free; were it not, the callback is skipped (the ABI
/// default) rather than trapping.
fn with_contexts<T: Default>(f: impl FnOnce(&mut Contexts) -> T) -> T {
    CONTEXTS.with(|c| c.try_borrow_mut().map(|mut c| f(&mut c)).unwrap_or_default())
}

extern "C" {
    fn __wasm_call_ctors();
}

/// The reactor's initializer (the host calls it once, before anything else).
#[no_mangle]
pub extern "C" fn _initialize() {
    // SAFETY: the linker's constructor list, run once as the WASI reactor ABI requires.
    unsafe { __wasm_call_ctors() }
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
    let _probe = crate::probe::span(crate::probe::Site::ContextCreate);
    with_contexts(|c| {
        if root_id == 0 {
            c.roots.push((context_id, Root::default()));
        } else if let Some(stream) = c.root(root_id).map(|root| root.new_stream()) {
            c.streams.push((context_id, stream));
        }
    })
}

/// Always accepted (see `Root::on_configure`): an unknown root has nothing to configure.
#[no_mangle]
pub extern "C" fn proxy_on_configure(root_id: u32, configuration_size: usize) -> u32 {
    let _probe = crate::probe::span(crate::probe::Site::Configure);
    with_contexts(|c| {
        if let Some(root) = c.root(root_id) {
            root.on_configure(configuration_size);
        }
    });
    1
}

#[no_mangle]
pub extern "C" fn proxy_on_tick(root_id: u32) {
    {
        let _probe = crate::probe::span(crate::probe::Site::Tick);
        with_contexts(|c| c.root(root_id).map(Root::on_tick));
    }
    crate::probe::flush();
}

/// Calls are dispatched from a root context (the tick), and their replies come back to it.
#[no_mangle]
pub extern "C" fn proxy_on_http_call_response(
    root_id: u32,
    token: u32,
    _headers: usize,
    body_size: usize,
    _trailers: usize,
) {
    let _probe = crate::probe::span(crate::probe::Site::HttpCallResponse);
    with_contexts(|c| c.root(root_id).map(|root| root.on_http_call_response(token, body_size)));
}

#[no_mangle]
pub extern "C" fn proxy_on_request_headers(context_id: u32, _headers: usize, _end_of_stream: u32) -> u32 {
    let _probe = crate::probe::span(crate::probe::Site::RequestHeaders);
    with_contexts(|c| c.stream(context_id).map(HttpStream::on_request_headers));
    ACTION_CONTINUE
}

#[no_mangle]
pub extern "C" fn proxy_on_response_headers(context_id: u32, _headers: usize, _end_of_stream: u32) -> u32 {
    let _probe = crate::probe::span(crate::probe::Site::ResponseHeaders);
    with_contexts(|c| c.stream(context_id).map(HttpStream::on_response_headers));
    ACTION_CONTINUE
}

/// Once per stream, after its last other callback (also on resets).
#[no_mangle]
pub extern "C" fn proxy_on_log(context_id: u32) {
    let _probe = crate::probe::span(crate::probe::Site::Log);
    with_contexts(|c| c.stream(context_id).map(HttpStream::on_log));
}

#[no_mangle]
pub extern "C" fn proxy_on_delete(context_id: u32) {
    let _probe = crate::probe::span(crate::probe::Site::Delete);
    with_contexts(|c| {
        if let Some(at) = index_of(&c.streams, context_id) {
            c.streams.swap_remove(at);
        } else if let Some(at) = index_of(&c.roots, context_id) {
            c.roots.swap_remove(at);
        }
    })
}
