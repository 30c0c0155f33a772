//! Shared state: the weight book behind one mutex (held for microseconds: parsing, rendering and
//! serialising happen outside it), metrics, the identity source, the request slots and the memory
//! set aside for requests and CPU polls in progress (`admission.rs`), the weights-page work each
//! requester may have done (`page_rate.rs`), and the monotonic clock every time argument
//! comes from.

use crate::admission::{MemoryBudget, Slot, SlotRefusal, Slots};
use crate::budget::ServiceLimits;
use crate::identity::IdentitySource;
use crate::metrics::AggregatorMetrics;
use crate::page_rate::PageRate;
use crate::shared_page::SharedPage;
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
    /// Where an attesting sender's address comes from (`--attest-address`).
    pub attest_address: crate::attest_address::AttestAddress,
    /// Slowest body accepted, in bytes per second after `body::BODY_RATE_GRACE` (0: any).
    pub min_body_rate: usize,
    /// The oldest `/metrics` page a scrape shares (`shared_page.rs`), in microseconds.
    pub metrics_page_max_age_us: u64,
    /// What the memory budget sets aside for requests (`budget.rs`).
    pub budget: ServiceLimits,
}

impl RequestLimits {
    /// What a report with a body of `body_bytes` reserves (`ServiceLimits::report_cost`).
    pub fn report_cost(&self, body_bytes: usize) -> usize {
        self.budget.report_cost(body_bytes)
    }
}

pub struct AppState {
    book: Mutex<WeightBook>,
    pub metrics: AggregatorMetrics,
    pub identity: IdentitySource,
    pub limits: RequestLimits,
    slots: Arc<Slots>,
    pub memory: MemoryBudget,
    /// The weights-page work each requester may have done (`page_rate.rs`).
    pub pages: PageRate,
    /// The `/metrics` page scrapes share (`shared_page.rs`).
    pub metrics_page: SharedPage,
    started: Instant,
    /// The last recompute completed (none yet: not ready); not ready while shutting down either.
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
            slots: Slots::new(limits.max_concurrent_requests, limits.max_requests_per_principal),
            memory: MemoryBudget::new(limits.budget.work_bytes()),
            pages: PageRate::default(),
            metrics_page: SharedPage::default(),
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

    /// A slot for one more request of `principal`, held until the guard drops (`Slots::enter`).
    pub fn enter(&self, principal: &str) -> Result<Slot, SlotRefusal> {
        self.slots.enter(principal)
    }

    pub fn set_ready(&self) {
        self.ready.store(true, Ordering::Relaxed);
    }

    /// A recompute failed: not ready until one completes (`recompute::supervised_tick`).
    pub fn set_not_ready(&self) {
        self.ready.store(false, Ordering::Relaxed);
    }

    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed) && !self.draining.load(Ordering::Relaxed)
    }

    pub fn start_draining(&self) {
        self.draining.store(true, Ordering::Relaxed);
    }
}
