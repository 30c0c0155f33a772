//! The load-balancing-policy half of the probe (`envoy.load_balancing_policies.dynamic_modules`,
//! policy name `probe_lb`): picks from priority 0's healthy hosts, by the request header
//! `x-probe-pick: <index>` or round robin, and logs what the LB callbacks answer (host addresses,
//! health, the eight host stats, the override host the HTTP filter set, the worker thread).

use crate::{envoy_str, log, mb, EnvoyBuffer, ModuleBuffer, LOG_INFO};
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};

extern "C" {
    fn envoy_dynamic_module_callback_lb_get_cluster_name(lb: *mut c_void, result: *mut EnvoyBuffer);
    fn envoy_dynamic_module_callback_lb_get_hosts_count(lb: *mut c_void, priority: u32) -> usize;
    fn envoy_dynamic_module_callback_lb_get_healthy_hosts_count(lb: *mut c_void, priority: u32) -> usize;
    fn envoy_dynamic_module_callback_lb_get_priority_set_size(lb: *mut c_void) -> usize;
    fn envoy_dynamic_module_callback_lb_get_host_address(
        lb: *mut c_void,
        priority: u32,
        index: usize,
        result: *mut EnvoyBuffer,
    ) -> bool;
    fn envoy_dynamic_module_callback_lb_get_healthy_host_address(
        lb: *mut c_void,
        priority: u32,
        index: usize,
        result: *mut EnvoyBuffer,
    ) -> bool;
    fn envoy_dynamic_module_callback_lb_get_host_health(lb: *mut c_void, priority: u32, index: usize) -> u32;
    fn envoy_dynamic_module_callback_lb_get_host_stat(
        lb: *mut c_void,
        priority: u32,
        index: usize,
        stat: u32,
    ) -> u64;
    fn envoy_dynamic_module_callback_lb_context_get_downstream_header(
        context: *mut c_void,
        key: ModuleBuffer,
        result: *mut EnvoyBuffer,
        index: usize,
        optional_size: *mut usize,
    ) -> bool;
    fn envoy_dynamic_module_callback_lb_context_get_override_host(
        context: *mut c_void,
        address: *mut EnvoyBuffer,
        strict: *mut bool,
    ) -> bool;
    fn envoy_dynamic_module_callback_lb_config_define_counter(
        config: *mut c_void,
        name: ModuleBuffer,
        label_names: *mut ModuleBuffer,
        label_names_len: usize,
        id_out: *mut usize,
    ) -> u32;
    fn envoy_dynamic_module_callback_lb_config_increment_counter(
        config: *mut c_void,
        id: usize,
        label_values: *mut ModuleBuffer,
        label_values_len: usize,
        value: u64,
    ) -> u32;
}

struct LbConfig {
    envoy: *mut c_void,
    counter: usize,
}

struct Lb {
    config: *const LbConfig,
    next: AtomicU64,
}

fn empty() -> EnvoyBuffer {
    EnvoyBuffer { ptr: std::ptr::null(), len: 0 }
}

#[no_mangle]
pub unsafe extern "C" fn envoy_dynamic_module_on_lb_config_new(
    config_envoy: *mut c_void,
    name: EnvoyBuffer,
    config: EnvoyBuffer,
) -> *const c_void {
    let mut counter = usize::MAX;
    let rc = envoy_dynamic_module_callback_lb_config_define_counter(
        config_envoy,
        mb("probe_lb_picks"),
        std::ptr::null_mut(),
        0,
        &mut counter,
    );
    log(
        LOG_INFO,
        &format!(
            "probe-lb: config_new name={:?} config={:?} define_counter={rc} id={counter} thread={:?}",
            envoy_str(name),
            envoy_str(config),
            std::thread::current().id()
        ),
    );
    Box::into_raw(Box::new(LbConfig { envoy: config_envoy, counter })) as *const c_void
}

#[no_mangle]
pub unsafe extern "C" fn envoy_dynamic_module_on_lb_config_destroy(config: *const c_void) {
    drop(Box::from_raw(config as *mut LbConfig));
}

#[no_mangle]
pub unsafe extern "C" fn envoy_dynamic_module_on_lb_new(config: *const c_void, lb_envoy: *mut c_void) -> *const c_void {
    let mut name = empty();
    envoy_dynamic_module_callback_lb_get_cluster_name(lb_envoy, &mut name);
    log(
        LOG_INFO,
        &format!(
            "probe-lb: lb_new cluster={:?} priorities={} hosts={} healthy={} thread={:?}",
            envoy_str(name),
            envoy_dynamic_module_callback_lb_get_priority_set_size(lb_envoy),
            envoy_dynamic_module_callback_lb_get_hosts_count(lb_envoy, 0),
            envoy_dynamic_module_callback_lb_get_healthy_hosts_count(lb_envoy, 0),
            std::thread::current().id()
        ),
    );
    Box::into_raw(Box::new(Lb { config: config as *const LbConfig, next: AtomicU64::new(0) })) as *const c_void
}

#[no_mangle]
pub unsafe extern "C" fn envoy_dynamic_module_on_lb_choose_host(
    lb_envoy: *mut c_void,
    lb: *const c_void,
    context: *mut c_void,
    priority_out: *mut u32,
    index_out: *mut u32,
) -> bool {
    let lb = &*(lb as *const Lb);
    let healthy = envoy_dynamic_module_callback_lb_get_healthy_hosts_count(lb_envoy, 0);
    if healthy == 0 {
        return false;
    }
    let mut pick = empty();
    let mut count = 0usize;
    let picked = if !context.is_null()
        && envoy_dynamic_module_callback_lb_context_get_downstream_header(
            context,
            mb("x-probe-pick"),
            &mut pick,
            0,
            &mut count,
        ) {
        envoy_str(pick).parse::<usize>().ok()
    } else {
        None
    };
    let index = picked.unwrap_or_else(|| lb.next.fetch_add(1, Ordering::Relaxed) as usize) % healthy;
    let mut over = empty();
    let mut strict = false;
    let has_override = !context.is_null()
        && envoy_dynamic_module_callback_lb_context_get_override_host(context, &mut over, &mut strict);
    let mut chosen = empty();
    envoy_dynamic_module_callback_lb_get_healthy_host_address(lb_envoy, 0, index, &mut chosen);
    let mut hosts = String::new();
    for i in 0..envoy_dynamic_module_callback_lb_get_hosts_count(lb_envoy, 0) {
        let mut addr = empty();
        envoy_dynamic_module_callback_lb_get_host_address(lb_envoy, 0, i, &mut addr);
        let stats: Vec<u64> =
            (0..8).map(|s| envoy_dynamic_module_callback_lb_get_host_stat(lb_envoy, 0, i, s)).collect();
        hosts.push_str(&format!(
            " [{i} {} health={} stats0..7={stats:?}]",
            envoy_str(addr),
            envoy_dynamic_module_callback_lb_get_host_health(lb_envoy, 0, i)
        ));
    }
    let config = &*lb.config;
    let rc = envoy_dynamic_module_callback_lb_config_increment_counter(
        config.envoy,
        config.counter,
        std::ptr::null_mut(),
        0,
        1,
    );
    log(
        LOG_INFO,
        &format!(
            "probe-lb: choose_host healthy={healthy} x-probe-pick={picked:?} -> index={index} ({}) \
             override={:?} strict={strict} increment_counter={rc} thread={:?} hosts:{hosts}",
            envoy_str(chosen),
            has_override.then(|| envoy_str(over)),
            std::thread::current().id()
        ),
    );
    *priority_out = 0;
    *index_out = index as u32;
    true
}

#[no_mangle]
pub unsafe extern "C" fn envoy_dynamic_module_on_lb_on_host_membership_update(
    _lb_envoy: *mut c_void,
    _lb: *const c_void,
    added: usize,
    removed: usize,
) {
    log(
        LOG_INFO,
        &format!("probe-lb: membership_update added={added} removed={removed} thread={:?}", std::thread::current().id()),
    );
}

#[no_mangle]
pub unsafe extern "C" fn envoy_dynamic_module_on_lb_destroy(lb: *const c_void) {
    drop(Box::from_raw(lb as *mut Lb));
}
