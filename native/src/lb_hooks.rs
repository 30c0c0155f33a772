//! The load-balancing policy's hooks (`envoy.load_balancing_policies.dynamic_modules`, any
//! `lb_policy_name`, no config): one instance per cluster per worker (and one on the main thread),
//! each choosing with `lb_choice` from Envoy's hosts (`EnvoyHosts`) and the calling worker's balancer
//! (`lb_feed`). While an instance lives its cluster is listed as balanced here, and the filter then
//! learns from the cluster's requests without steering them.

use crate::abi::EnvoyBuffer;
use crate::host::{next_random, wall_clock_us};
use crate::lb_abi::*;
use crate::lb_choice::{choose, HostLook, HostSet};
use crate::lb_feed;
use std::ffi::c_void;
use tailweight_picker::Balancer;

/// The policy's config: nothing to keep, but Envoy needs a non-null pointer.
static POLICY_CONFIG: u8 = 0;

/// One instance: the cluster it balances.
struct LbInstance {
    cluster: String,
}

/// One cluster's hosts through the ABI, with what the worker's balancer learned of them at `now_us`.
struct EnvoyHosts<'a> {
    lb: *mut c_void,
    balancer: Option<&'a Balancer>,
    cluster: &'a str,
    now_us: u64,
}

/// An address Envoy gave, if UTF-8.
///
/// # Safety
/// `buffer` is valid until the hook returns (the caller's lifetime is within it).
unsafe fn text<'a>(buffer: EnvoyBuffer) -> Option<&'a str> {
    std::str::from_utf8(buffer.bytes()).ok()
}

impl EnvoyHosts<'_> {
    /// Healthy host `index`'s position among all hosts of `priority` (the index `get_host_stat`
    /// takes): the same when every host is healthy (Envoy's healthy list keeps the hosts' order),
    /// else the host with the same address.
    fn position_of(&self, priority: u32, index: usize, address: &str) -> Option<usize> {
        let (all, healthy) = (self.hosts(priority as usize), self.healthy(priority as usize));
        if all == healthy {
            return Some(index);
        }
        (0..all).find(|&i| {
            let mut buffer = EnvoyBuffer::EMPTY;
            // SAFETY: `self.lb` is the instance's Envoy pointer, valid during `choose_host`.
            unsafe {
                envoy_dynamic_module_callback_lb_get_host_address(self.lb, priority, i, &mut buffer)
                    && text(buffer) == Some(address)
            }
        })
    }
}

impl HostSet for EnvoyHosts<'_> {
    fn priorities(&self) -> usize {
        // SAFETY: as in `position_of`.
        unsafe { envoy_dynamic_module_callback_lb_get_priority_set_size(self.lb) }
    }

    fn hosts(&self, priority: usize) -> usize {
        // SAFETY: as in `position_of`.
        unsafe { envoy_dynamic_module_callback_lb_get_hosts_count(self.lb, priority as u32) }
    }

    fn healthy(&self, priority: usize) -> usize {
        // SAFETY: as in `position_of`.
        unsafe { envoy_dynamic_module_callback_lb_get_healthy_hosts_count(self.lb, priority as u32) }
    }

    fn candidate(&self, priority: usize, index: usize) -> HostLook {
        let priority = priority as u32;
        let mut buffer = EnvoyBuffer::EMPTY;
        // SAFETY: as in `position_of`; the address is read before the hook returns.
        let address = unsafe {
            if envoy_dynamic_module_callback_lb_get_healthy_host_address(self.lb, priority, index, &mut buffer) {
                text(buffer)
            } else {
                None
            }
        };
        let Some(address) = address else { return HostLook { learned: None, in_flight: 0 } };
        let in_flight = self.position_of(priority, index, address).map_or(0, |at| {
            // SAFETY: as in `position_of`.
            unsafe { envoy_dynamic_module_callback_lb_get_host_stat(self.lb, priority, at, HOST_STAT_RQ_ACTIVE) }
        });
        let learned = self.balancer.and_then(|b| b.learned_endpoint(self.cluster, address, self.now_us));
        HostLook { learned, in_flight }
    }
}

/// # Safety
/// Envoy passes the config's pointer and two buffers valid during the call.
#[no_mangle]
pub unsafe extern "C" fn envoy_dynamic_module_on_lb_config_new(
    _config_envoy: *mut c_void,
    _name: EnvoyBuffer,
    _config: EnvoyBuffer,
) -> *const c_void {
    &POLICY_CONFIG as *const u8 as *const c_void
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_lb_config_destroy(_config: *const c_void) {}

/// # Safety
/// `lb_envoy` is the new instance's Envoy pointer.
#[no_mangle]
pub unsafe extern "C" fn envoy_dynamic_module_on_lb_new(
    _config: *const c_void,
    lb_envoy: *mut c_void,
) -> *const c_void {
    let mut name = EnvoyBuffer::EMPTY;
    envoy_dynamic_module_callback_lb_get_cluster_name(lb_envoy, &mut name);
    let cluster = String::from_utf8_lossy(name.bytes()).into_owned();
    lb_feed::balance(&cluster);
    Box::into_raw(Box::new(LbInstance { cluster })) as *const c_void
}

/// The host for one request (see `lb_choice::choose`); false: none (no healthy host, or a bug
/// caught here: Envoy then answers 503, and the proxy goes on). A choice made with the worker's
/// balancer counts in the filter config's `tailweight.picks`.
///
/// # Safety
/// `lb` is what `lb_new` returned; the out pointers are Envoy's, valid during the call.
#[no_mangle]
pub unsafe extern "C" fn envoy_dynamic_module_on_lb_choose_host(
    lb_envoy: *mut c_void,
    lb: *const c_void,
    _context: *mut c_void,
    priority_out: *mut u32,
    index_out: *mut u32,
) -> bool {
    let Some(instance) = (lb as *const LbInstance).as_ref() else { return false };
    if priority_out.is_null() || index_out.is_null() {
        return false;
    }
    let draws = [next_random(), next_random(), next_random()];
    let now_us = wall_clock_us();
    let cluster = instance.cluster.as_str();
    let chosen = std::panic::catch_unwind(|| {
        lb_feed::with_feed(cluster, |feed| {
            let balancer = feed.map(|f| f.balancer);
            let hosts = EnvoyHosts { lb: lb_envoy, balancer, cluster, now_us };
            let chosen = choose(&hosts, balancer.and_then(|b| b.learned_prior_us(cluster)), draws);
            if let (Some(feed), Some(_)) = (feed, chosen) {
                feed.count_pick();
            }
            chosen
        })
    });
    let Ok(Some((priority, index))) = chosen else { return false };
    *priority_out = priority;
    *index_out = index;
    true
}

/// Hosts come and go: nothing to do, every choice reads the hosts anew.
#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_lb_on_host_membership_update(
    _lb_envoy: *mut c_void,
    _lb: *const c_void,
    _added: usize,
    _removed: usize,
) {
}

/// # Safety
/// `lb` is what `lb_new` returned.
#[no_mangle]
pub unsafe extern "C" fn envoy_dynamic_module_on_lb_destroy(lb: *const c_void) {
    if !lb.is_null() {
        let instance = Box::from_raw(lb as *mut LbInstance);
        lb_feed::unbalance(&instance.cluster);
    }
}
