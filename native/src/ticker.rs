//! The module's own thread that wakes the main thread for ticks: Envoy runs a filter config's
//! scheduled events on the main thread, and a scheduler may be committed from any thread (seen on
//! Envoy 1.40, docs/native-abi.md). It sleeps the shortest period a worker asked for
//! (`TickSchedule::wake_period_ms`, published in `wake_ms`), and stops when dropped.

use crate::abi;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// With no worker ticking, the thread still looks again this often for a period.
const IDLE_WAKE_MS: u64 = 1_000;

pub struct Ticker {
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: Option<JoinHandle<()>>,
    scheduler: usize,
}

impl Ticker {
    /// Start committing events to a new scheduler of the filter config `config_envoy` (main
    /// thread), every `wake_ms` milliseconds (0: not now).
    pub fn start(config_envoy: *mut c_void, wake_ms: Arc<AtomicU64>) -> Option<Ticker> {
        // SAFETY: called on the main thread while the config is being made.
        let scheduler = unsafe { abi::envoy_dynamic_module_callback_http_filter_config_scheduler_new(config_envoy) };
        if scheduler.is_null() {
            return None;
        }
        let scheduler = scheduler as usize;
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let thread_stop = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("tailweight-tick".into())
            .spawn(move || run(scheduler, &thread_stop, &wake_ms))
            .ok()?;
        Some(Ticker { stop, thread: Some(thread), scheduler })
    }
}

fn run(scheduler: usize, stop: &(Mutex<bool>, Condvar), wake_ms: &AtomicU64) {
    let (stopped, wake) = stop;
    let mut guard = stopped.lock().unwrap_or_else(|p| p.into_inner());
    loop {
        let period = wake_ms.load(Ordering::Relaxed);
        let sleep = Duration::from_millis(if period == 0 { IDLE_WAKE_MS } else { period });
        guard = wake.wait_timeout(guard, sleep).unwrap_or_else(|p| p.into_inner()).0;
        if *guard {
            return;
        }
        if period > 0 {
            // SAFETY: the scheduler lives until this thread has stopped (`Drop` joins it first).
            unsafe {
                abi::envoy_dynamic_module_callback_http_filter_config_scheduler_commit(scheduler as *mut c_void, 0)
            }
        }
    }
}

impl Drop for Ticker {
    /// Stop the thread, then delete the scheduler it committed to.
    fn drop(&mut self) {
        *self.stop.0.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.stop.1.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        // SAFETY: no thread commits to it any more.
        unsafe { abi::envoy_dynamic_module_callback_http_filter_config_scheduler_delete(self.scheduler as *mut c_void) }
    }
}
