//! The load-balancing-policy callbacks of Envoy's dynamic-module ABI the native shell uses, bound by
//! hand as `abi` binds the HTTP filter's (same conventions). Signatures from Envoy's
//! `load_balancing_policies/dynamic_modules/abi_impl.cc`; each one exported by Envoy 1.40 (the e2e
//! compares the module's undefined symbols with the binary's exports).

use crate::abi::EnvoyBuffer;
use std::ffi::c_void;

/// `envoy_dynamic_module_type_host_stat` RqActive: requests in flight to a host, every worker's.
pub const HOST_STAT_RQ_ACTIVE: u32 = 7;

extern "C" {
    pub fn envoy_dynamic_module_callback_lb_get_cluster_name(lb: *mut c_void, result: *mut EnvoyBuffer);
    pub fn envoy_dynamic_module_callback_lb_get_priority_set_size(lb: *mut c_void) -> usize;
    /// Hosts at `priority`, healthy or not (what `get_host_address` and `get_host_stat` index).
    pub fn envoy_dynamic_module_callback_lb_get_hosts_count(lb: *mut c_void, priority: u32) -> usize;
    /// Healthy hosts at `priority` (what `choose_host`'s answer and `get_healthy_host_address` index).
    pub fn envoy_dynamic_module_callback_lb_get_healthy_hosts_count(lb: *mut c_void, priority: u32) -> usize;
    pub fn envoy_dynamic_module_callback_lb_get_host_address(
        lb: *mut c_void,
        priority: u32,
        index: usize,
        result: *mut EnvoyBuffer,
    ) -> bool;
    pub fn envoy_dynamic_module_callback_lb_get_healthy_host_address(
        lb: *mut c_void,
        priority: u32,
        index: usize,
        result: *mut EnvoyBuffer,
    ) -> bool;
    /// A counter or gauge of host `index` among all hosts of `priority` (0 out of range).
    pub fn envoy_dynamic_module_callback_lb_get_host_stat(
        lb: *mut c_void,
        priority: u32,
        index: usize,
        stat: u32,
    ) -> u64;
}
