//! One filter config's state: a `Plugin` per Envoy worker (each configured while Envoy makes the
//! config, on the main thread, since that is when metrics may be defined), its metrics, its calls
//! out, and its ticks.
//!
//! A worker's plugin is used by that worker's streams and, for ticks and call answers, by the main
//! thread; a lock per plugin orders the two (uncontended but while a tick runs). A panic in the
//! sidecar's code (a bug) is caught at the hook (`hooks`) and turns that plugin off: its requests
//! then pass untouched, as with an invalid configuration, and Envoy goes on.

use crate::callouts::Callouts;
use crate::config_metrics::ConfigMetrics;
use crate::host::{self, NativeHost};
use crate::lb_feed::{self, WorkerPlugins};
use crate::tick_schedule::Ticks;
use crate::ticker::Ticker;
use std::ffi::c_void;
use std::sync::{Arc, Mutex, MutexGuard};
use tailweight_sidecar::host::{LogLevel, MetricKind};
use tailweight_sidecar::{Plugin, PICKS_COUNTER};

pub struct FilterState {
    envoy: usize,
    workers: Arc<WorkerPlugins>,
    pub metrics: ConfigMetrics,
    pub callouts: Callouts,
    pub ticks: Ticks,
    ticker: Mutex<Option<Ticker>>,
}

impl FilterState {
    /// Made on the main thread by `on_http_filter_config_new`: `workers` plugins, each configured
    /// with `configuration`; then metrics are frozen, the plugins are published to the load-balancing
    /// policy (`lb_feed`) and the ticker starts.
    pub fn new(config_envoy: *mut c_void, workers: usize, configuration: &[u8]) -> Box<FilterState> {
        let state = Box::new(FilterState {
            envoy: config_envoy as usize,
            workers: (0..workers).map(|_| Mutex::new(Plugin::default())).collect(),
            metrics: ConfigMetrics::new(config_envoy),
            callouts: Callouts::default(),
            ticks: Ticks::new(workers),
            ticker: Mutex::new(None),
        });
        for worker in 0..workers {
            state.with_plugin(worker, true, |plugin, host| plugin.configure(host, configuration));
        }
        state.metrics.freeze();
        lb_feed::publish(&state.workers, state.picks_counter());
        let ticker = Ticker::start(config_envoy, state.ticks.wake_ms());
        if ticker.is_none() {
            host::log(LogLevel::Error, "tailweight: no scheduler for ticks; views, reports and checks are off");
        }
        *state.ticker.lock().unwrap_or_else(|p| p.into_inner()) = ticker;
        state
    }

    /// The config's `tailweight.picks` (defined by client-role plugins), for the load-balancing
    /// policy's picks (`lb_feed`).
    fn picks_counter(&self) -> Option<lb_feed::PickCounter> {
        let id = self.metrics.define(MetricKind::Counter, PICKS_COUNTER)?;
        let update = crate::abi::envoy_dynamic_module_callback_http_filter_config_increment_counter;
        Some(lb_feed::PickCounter { config_envoy: self.envoy, id: id as usize, update })
    }

    pub fn envoy(&self) -> *mut c_void {
        self.envoy as *mut c_void
    }

    pub fn workers(&self) -> usize {
        self.workers.len()
    }

    /// Run `f` on worker `worker`'s plugin with a host for the calling thread (`on_main`). None:
    /// no such worker, or `f` panicked (the plugin is then off for good).
    pub fn with_plugin<T>(
        &self,
        worker: usize,
        on_main: bool,
        f: impl FnOnce(&mut Plugin, &NativeHost) -> T,
    ) -> Option<T> {
        let slot = self.workers.get(worker)?;
        let mut plugin = lock_plugin(slot);
        let host = NativeHost {
            config_envoy: self.envoy(),
            metrics: &self.metrics,
            callouts: &self.callouts,
            ticks: &self.ticks,
            worker,
            on_main,
        };
        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&mut plugin, &host)));
        match run {
            Ok(value) => Some(value),
            Err(_) => {
                *plugin = Plugin::Disabled;
                host::log(LogLevel::Error, &format!("tailweight: worker {worker} failed; its requests pass untouched"));
                None
            }
        }
    }

    /// The main thread's tick: every worker whose tick is due at `now_us`.
    pub fn tick_due(&self, now_us: u64) {
        for worker in self.ticks.take_due(now_us) {
            self.with_plugin(worker, true, |plugin, host| plugin.tick(host));
        }
    }
}

/// A plugin's lock; one poisoned by a panic holds a plugin already turned off (`with_plugin`).
fn lock_plugin(slot: &Mutex<Plugin>) -> MutexGuard<'_, Plugin> {
    slot.lock().unwrap_or_else(|poisoned| {
        slot.clear_poison();
        poisoned.into_inner()
    })
}

impl Drop for FilterState {
    /// The ticker stops and the load-balancing policy lets go of the plugins and the counter before
    /// they (and Envoy's config) go.
    fn drop(&mut self) {
        drop(self.ticker.lock().unwrap_or_else(|p| p.into_inner()).take());
        lb_feed::withdraw(&self.workers);
    }
}
