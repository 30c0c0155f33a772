//! Shared state: the weight book behind one mutex (held for microseconds: parsing, rendering and
//! serialising happen outside it), metrics, the identity source, the requests each principal has in
//! progress, and the monotonic clock every time argument comes from.

use crate::identity::IdentitySource;
use crate::metrics::AggregatorMetrics;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;
use tailweight_weights::{WeightBook, WeightParams};
use tailweight_wire::protocol::Limits;

/// How requests are admitted and answered.
#[derive(Debug, Clone)]
pub struct RequestLimits {
    pub wire: Limits,
    pub max_body_bytes: usize,
    pub max_reply_endpoints: usize,
    pub max_concurrent_requests: usize,
    pub max_requests_per_principal: usize,
    pub body_timeout: std::time::Duration,
    /// Who may attest for a cluster (`--attest-rule`).
    pub attest_rule: crate::attest::AttestRule,
}

pub struct AppState {
    book: Mutex<WeightBook>,
    pub metrics: AggregatorMetrics,
    pub identity: IdentitySource,
    pub limits: RequestLimits,
    in_progress: Arc<PrincipalSlots>,
    started: Instant,
    /// First recompute done and not shutting down.
    ready: AtomicBool,
    draining: AtomicBool,
}

impl AppState {
    /// Err: the metrics could not be registered (prometheus's reason).
    pub fn new(params: WeightParams, identity: IdentitySource, limits: RequestLimits) -> prometheus::Result<AppState> {
        Ok(AppState {
            book: Mutex::new(WeightBook::new(params)),
            metrics: AggregatorMetrics::new()?,
            identity,
            in_progress: Arc::new(PrincipalSlots { limit: limits.max_requests_per_principal, held: Mutex::default() }),
            limits,
            started: Instant::now(),
            ready: AtomicBool::new(false),
            draining: AtomicBool::new(false),
        })
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

    /// A slot for one more request of `principal`, held until the guard drops; None while it has
    /// `max_requests_per_principal` in progress.
    pub fn enter(&self, principal: &str) -> Option<PrincipalSlot> {
        self.in_progress.enter(principal)
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

/// Requests in progress per principal. Hand-written: tower's concurrency limits keep one count for
/// all callers, and no maintained crate keys one by caller.
#[derive(Debug)]
struct PrincipalSlots {
    limit: usize,
    held: Mutex<HashMap<String, usize>>,
}

impl PrincipalSlots {
    fn enter(self: &Arc<Self>, principal: &str) -> Option<PrincipalSlot> {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        let n = held.entry(principal.to_string()).or_insert(0);
        if *n >= self.limit {
            return None;
        }
        *n += 1;
        Some(PrincipalSlot { slots: self.clone(), principal: principal.to_string() })
    }
}

/// One request of a principal in progress (see `AppState::enter`).
#[derive(Debug)]
pub struct PrincipalSlot {
    slots: Arc<PrincipalSlots>,
    principal: String,
}

impl Drop for PrincipalSlot {
    fn drop(&mut self) {
        let mut held = self.slots.held.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = held.get_mut(&self.principal) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                held.remove(&self.principal);
            }
        }
    }
}
