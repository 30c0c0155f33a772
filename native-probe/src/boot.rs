//! The bootstrap-extension half of the probe (`envoy.bootstrap.dynamic_modules`, extension name
//! `probe_boot`): outside any stream, a main-thread timer fires every 300 ms (five times), counts
//! itself in a counter and sends an HTTP callout to the cluster named in its config; the hooks log
//! the thread they run on. Envoy 1.40 resolves all seventeen bootstrap hooks and holds the server's
//! init until the module signals it is ready, so the config signals at once.

use crate::{envoy_str, get_headers, log, mb, EnvoyBuffer, EnvoyHeader, ModuleBuffer, ModuleHeader, LOG_INFO, STREAMS};
use std::ffi::c_void;
use std::sync::atomic::Ordering;

extern "C" {
    fn envoy_dynamic_module_callback_bootstrap_extension_config_signal_init_complete(config: *mut c_void);
    fn envoy_dynamic_module_callback_bootstrap_extension_timer_new(config: *mut c_void) -> *mut c_void;
    fn envoy_dynamic_module_callback_bootstrap_extension_timer_enable(timer: *mut c_void, delay_ms: u64);
    fn envoy_dynamic_module_callback_bootstrap_extension_http_callout(
        config: *mut c_void,
        callout_id_out: *mut u64,
        cluster: ModuleBuffer,
        headers: *mut ModuleHeader,
        headers_len: usize,
        body: ModuleBuffer,
        timeout_ms: u64,
    ) -> u32;
    fn envoy_dynamic_module_callback_bootstrap_extension_config_define_counter(
        config: *mut c_void,
        name: ModuleBuffer,
        label_names: *mut ModuleBuffer,
        label_names_len: usize,
        id_out: *mut usize,
    ) -> u32;
    fn envoy_dynamic_module_callback_bootstrap_extension_config_increment_counter(
        config: *mut c_void,
        id: usize,
        label_values: *mut ModuleBuffer,
        label_values_len: usize,
        value: u64,
    ) -> u32;
}

struct BootConfig {
    cluster: String,
    counter: usize,
    timer: *mut c_void,
    fired: u32,
}

fn thread() -> String {
    format!("{:?}", std::thread::current().id())
}

#[no_mangle]
pub unsafe extern "C" fn envoy_dynamic_module_on_bootstrap_extension_config_new(
    config_envoy: *mut c_void,
    name: EnvoyBuffer,
    config: EnvoyBuffer,
) -> *const c_void {
    let cluster = envoy_str(config);
    let mut counter = usize::MAX;
    let rc = envoy_dynamic_module_callback_bootstrap_extension_config_define_counter(
        config_envoy,
        mb("probe_boot_ticks"),
        std::ptr::null_mut(),
        0,
        &mut counter,
    );
    let timer = envoy_dynamic_module_callback_bootstrap_extension_timer_new(config_envoy);
    envoy_dynamic_module_callback_bootstrap_extension_timer_enable(timer, 300);
    envoy_dynamic_module_callback_bootstrap_extension_config_signal_init_complete(config_envoy);
    log(
        LOG_INFO,
        &format!(
            "probe-boot: config_new name={:?} config={cluster:?} define_counter={rc} id={counter} timer_null={} thread={}",
            envoy_str(name),
            timer.is_null(),
            thread()
        ),
    );
    Box::into_raw(Box::new(BootConfig { cluster, counter, timer, fired: 0 })) as *const c_void
}

#[no_mangle]
pub unsafe extern "C" fn envoy_dynamic_module_on_bootstrap_extension_config_destroy(config: *const c_void) {
    drop(Box::from_raw(config as *mut BootConfig));
}

#[no_mangle]
pub unsafe extern "C" fn envoy_dynamic_module_on_bootstrap_extension_new(
    _config: *const c_void,
    extension_envoy: *mut c_void,
) -> *const c_void {
    log(LOG_INFO, &format!("probe-boot: extension_new thread={}", thread()));
    extension_envoy as *const c_void // any non-null pointer
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_bootstrap_extension_server_initialized(_e: *mut c_void, _m: *const c_void) {
    log(LOG_INFO, &format!("probe-boot: server_initialized thread={}", thread()));
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_bootstrap_extension_worker_thread_initialized(
    _e: *mut c_void,
    _m: *const c_void,
) {
    log(LOG_INFO, &format!("probe-boot: worker_thread_initialized thread={}", thread()));
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_bootstrap_extension_destroy(_m: *const c_void) {}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_bootstrap_extension_drain_started(_e: *mut c_void, _m: *const c_void) {
    log(LOG_INFO, &format!("probe-boot: drain_started thread={}", thread()));
}

/// Envoy waits at shutdown until the module calls `completion(context)`.
#[no_mangle]
pub unsafe extern "C" fn envoy_dynamic_module_on_bootstrap_extension_shutdown(
    _e: *mut c_void,
    _m: *const c_void,
    completion: Option<unsafe extern "C" fn(*mut c_void)>,
    context: *mut c_void,
) {
    log(LOG_INFO, &format!("probe-boot: shutdown thread={}", thread()));
    if let Some(done) = completion {
        done(context);
    }
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_bootstrap_extension_config_scheduled(
    _config_envoy: *mut c_void,
    _config: *const c_void,
    _event_id: u64,
) {
}

#[no_mangle]
pub unsafe extern "C" fn envoy_dynamic_module_on_bootstrap_extension_timer_fired(
    config_envoy: *mut c_void,
    config: *const c_void,
    timer: *mut c_void,
) {
    let config = &mut *(config as *mut BootConfig);
    config.fired += 1;
    let rc = envoy_dynamic_module_callback_bootstrap_extension_config_increment_counter(
        config_envoy,
        config.counter,
        std::ptr::null_mut(),
        0,
        1,
    );
    let path = "/who";
    let mut headers = get_headers(path);
    let mut id = 0u64;
    let init = envoy_dynamic_module_callback_bootstrap_extension_http_callout(
        config_envoy,
        &mut id,
        mb(&config.cluster),
        headers.as_mut_ptr(),
        headers.len(),
        mb(""),
        1000,
    );
    log(
        LOG_INFO,
        &format!(
            "probe-boot: timer_fired n={} same_timer={} increment_counter={rc} callout_init={init} id={id} \
             streams_seen_by_filter={} thread={}",
            config.fired,
            timer == config.timer,
            STREAMS.load(Ordering::Relaxed),
            thread()
        ),
    );
    if config.fired < 5 {
        envoy_dynamic_module_callback_bootstrap_extension_timer_enable(timer, 300);
    }
}

#[no_mangle]
pub unsafe extern "C" fn envoy_dynamic_module_on_bootstrap_extension_http_callout_done(
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
        if envoy_str(EnvoyBuffer { ptr: h.key, len: h.key_len }) == ":status" {
            status = envoy_str(EnvoyBuffer { ptr: h.value, len: h.value_len });
        }
    }
    let mut text = String::new();
    for i in 0..body_chunks {
        text.push_str(&envoy_str(*body.add(i)));
    }
    log(
        LOG_INFO,
        &format!(
            "probe-boot: callout_done id={callout_id} result={result} status={status:?} body={:?} thread={}",
            text.trim(),
            thread()
        ),
    );
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_bootstrap_extension_file_changed(
    _config_envoy: *mut c_void,
    _config: *const c_void,
    _path: EnvoyBuffer,
    _events: u32,
) {
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_bootstrap_extension_admin_request(
    _config_envoy: *mut c_void,
    _config: *const c_void,
    _method: EnvoyBuffer,
    _path: EnvoyBuffer,
    _body: EnvoyBuffer,
) -> u32 {
    404
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_bootstrap_extension_cluster_add_or_update(
    _config_envoy: *mut c_void,
    _config: *const c_void,
    _name: EnvoyBuffer,
) {
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_bootstrap_extension_cluster_removal(
    _config_envoy: *mut c_void,
    _config: *const c_void,
    _name: EnvoyBuffer,
) {
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_bootstrap_extension_listener_add_or_update(
    _config_envoy: *mut c_void,
    _config: *const c_void,
    _name: EnvoyBuffer,
) {
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_bootstrap_extension_listener_removal(
    _config_envoy: *mut c_void,
    _config: *const c_void,
    _name: EnvoyBuffer,
) {
}
