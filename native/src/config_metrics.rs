//! The sidecar's metrics as the filter config's. Envoy lets a module define metrics only while it
//! creates the filter config (afterwards `define` answers Frozen), so every plugin is configured
//! there; a metric first defined later (with `per_endpoint_metrics`, one per endpoint seen) is not
//! recorded by this shell. Counters and gauges are Envoy's: atomic, so any thread updates them
//! through the config.
//!
//! Names are the sidecar's (`tailweight.<name>`). The Envoy configuration gives the module
//! `metrics_namespace: wasmcustom`, the namespace Envoy gives Wasm metrics, so `/stats` names them
//! exactly as the Wasm shell's (`wasmcustom.tailweight.<name>`): Istio's default stats inclusion
//! (prefix `wasm`) keeps them, and every reader of /stats (the CLI, the tests) reads one set of
//! names. Prometheus shows `envoy_wasmcustom_tailweight_<name>` where the Wasm shell's is
//! `tailweight_<name>` (Envoy strips the namespace only for Wasm); the chart's monitors rename it.

use crate::abi::{self, ModuleBuffer};
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::Mutex;
use tailweight_sidecar::host::{MetricId, MetricKind};

/// The top bit of a `MetricId` marks a gauge; the rest is Envoy's id.
const GAUGE: MetricId = 1 << 31;

pub struct ConfigMetrics {
    envoy: usize,
    defined: Mutex<Definitions>,
}

#[derive(Default)]
struct Definitions {
    by_name: HashMap<String, MetricId>,
    frozen: bool,
}

impl ConfigMetrics {
    pub fn new(config_envoy: *mut c_void) -> ConfigMetrics {
        ConfigMetrics { envoy: config_envoy as usize, defined: Mutex::default() }
    }

    fn envoy(&self) -> *mut c_void {
        self.envoy as *mut c_void
    }

    /// After the filter config is made: later definitions are refused (Envoy would refuse them).
    pub fn freeze(&self) {
        self.lock().frozen = true;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Definitions> {
        self.defined.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// One id per name and kind, however many workers define it.
    pub fn define(&self, kind: MetricKind, name: &str) -> Option<MetricId> {
        let mut defined = self.lock();
        if let Some(&id) = defined.by_name.get(name) {
            return Some(id);
        }
        if defined.frozen {
            return None;
        }
        let mut envoy_id = 0usize;
        let name_buffer = ModuleBuffer::of(name.as_bytes());
        // SAFETY: Envoy reads the name and writes one id; called while the config is being made.
        let result = unsafe {
            match kind {
                MetricKind::Counter => abi::envoy_dynamic_module_callback_http_filter_config_define_counter(
                    self.envoy(),
                    name_buffer,
                    std::ptr::null_mut(),
                    0,
                    &mut envoy_id,
                ),
                MetricKind::Gauge => abi::envoy_dynamic_module_callback_http_filter_config_define_gauge(
                    self.envoy(),
                    name_buffer,
                    std::ptr::null_mut(),
                    0,
                    &mut envoy_id,
                ),
            }
        };
        let envoy_id = MetricId::try_from(envoy_id).ok().filter(|id| id & GAUGE == 0)?;
        if result != abi::RESULT_SUCCESS {
            return None;
        }
        let id = match kind {
            MetricKind::Counter => envoy_id,
            MetricKind::Gauge => envoy_id | GAUGE,
        };
        defined.by_name.insert(name.to_string(), id);
        Some(id)
    }

    /// Add `by` (a gauge may go down).
    pub fn increment(&self, metric: MetricId, by: i64) {
        let update: abi::MetricUpdate = match (metric & GAUGE != 0, by >= 0) {
            (false, true) => abi::envoy_dynamic_module_callback_http_filter_config_increment_counter,
            (false, false) => return,
            (true, true) => abi::envoy_dynamic_module_callback_http_filter_config_increment_gauge,
            (true, false) => abi::envoy_dynamic_module_callback_http_filter_config_decrement_gauge,
        };
        self.update(update, metric, by.unsigned_abs());
    }

    /// Set a gauge (a counter is not set).
    pub fn record(&self, metric: MetricId, value: u64) {
        if metric & GAUGE != 0 {
            self.update(abi::envoy_dynamic_module_callback_http_filter_config_set_gauge, metric, value);
        }
    }

    /// One update of an unlabelled metric by Envoy's id.
    fn update(&self, update: abi::MetricUpdate, metric: MetricId, value: u64) {
        // SAFETY: no memory is passed but the config pointer, valid while the config lives.
        unsafe {
            update(self.envoy(), (metric & !GAUGE) as usize, std::ptr::null_mut(), 0, value);
        }
    }
}
