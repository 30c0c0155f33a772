//! Shared state: the weight book behind one mutex (held for microseconds: parsing and serialising
//! happen outside it), metrics, and the monotonic clock every time argument comes from.

use crate::metrics::AggregatorMetrics;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;
use tailweight_core::weights::{WeightBook, WeightParams};
use tailweight_core::wire::Limits;

pub struct AppState {
    book: Mutex<WeightBook>,
    pub metrics: AggregatorMetrics,
    pub limits: Limits,
    pub max_body_bytes: usize,
    started: Instant,
    /// First recompute done and not shutting down.
    ready: AtomicBool,
    draining: AtomicBool,
}

impl AppState {
    pub fn new(params: WeightParams, limits: Limits, max_body_bytes: usize) -> AppState {
        AppState {
            book: Mutex::new(WeightBook::new(params)),
            metrics: AggregatorMetrics::new(),
            limits,
            max_body_bytes,
            started: Instant::now(),
            ready: AtomicBool::new(false),
            draining: AtomicBool::new(false),
        }
    }

    /// Microseconds since start (monotonic).
    pub fn now_us(&self) -> u64 {
        self.started.elapsed().as_micros().min(u128::from(u64::MAX)) as u64
    }

    /// The book. A handler that panicked while holding it leaves it usable: the book's methods keep
    /// it consistent at every step a panic could interrupt, so the poison flag is ignored.
    pub fn book(&self) -> MutexGuard<'_, WeightBook> {
        self.book.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub fn set_ready(&self) {
        self.ready.store(true, Ordering::Relaxed);
    }

    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed) && !self.draining.load(Ordering::Relaxed)
    }

    pub fn start_draining(&self) {
        self.draining.store(true, Ordering::Relaxed);
    }
}
