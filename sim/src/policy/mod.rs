//! What runs in the client proxies: one `Policy` holds the state of every client for one load
//! balancing method. The engine asks it for an endpoint per request, tells it how each request
//! ended, and wakes it on the timers it set (ticks, reports, weight updates).
//!
//! The peers are reference implementations of what Envoy, Linkerd, the seed operator and Prequal
//! do (they are not in the filter); tailweight runs the picker's `Balancer` and the aggregator's
//! `WeightBook` unchanged.

pub mod active;
pub mod cswrr;
pub mod edf;
pub mod least_request;
pub mod operator;
pub mod operator_rule;
pub mod peak_ewma;
pub mod prequal;
pub mod prequal_config;
pub mod prequal_pool;
pub mod prequal_server;
pub mod probe_transit;
pub mod round_robin;
pub mod tailweight;
pub mod tailweight_checks;

use crate::server::{Orca, Server};

/// Policies set their timers on the engine's event queue (through `Ctx`).
pub use crate::queue::{Queue, Timer};

/// The endpoint chosen for one request, and a policy-private token handed back at completion.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Choice {
    pub endpoint: u32,
    pub token: u32,
}

/// How one request ended, as its client proxy sees it.
#[derive(Debug, Clone, Copy)]
pub struct Outcome {
    pub latency_ns: u64,
    pub failed: bool,
    /// The server's ORCA report on the response.
    pub orca: Orca,
    /// The server's load stamp on the response: requests at the server (in service and queued)
    /// right after this one left, as the server's sidecar would write it into a response header.
    pub rif: u32,
}

/// What a policy may see and do besides its own state: the time, the servers (only what real
/// clients could learn from them: ORCA on responses, CPU through metrics, RIF through probes), and
/// the queue for its timers.
pub struct Ctx<'a> {
    pub now_ns: u64,
    pub servers: &'a [Server],
    pub queue: &'a mut Queue,
    /// One-way delay of control messages (reports, replies, probes).
    pub network_delay_ns: u64,
}

impl Ctx<'_> {
    pub fn after(&mut self, delay_ns: u64, timer: Timer) {
        self.queue.timer(self.now_ns + delay_ns, timer);
    }
}

pub trait Policy {
    /// Served from one central queue instead of per-client picks (the ideal bound).
    const CENTRAL: bool = false;

    /// Set the first timers.
    fn start(&mut self, _ctx: &mut Ctx) {}
    fn pick(&mut self, client: u32, ctx: &mut Ctx) -> Choice;
    fn complete(&mut self, client: u32, choice: Choice, outcome: &Outcome, ctx: &mut Ctx);
    fn timer(&mut self, _timer: Timer, _ctx: &mut Ctx) {}
}

/// The ideal bound: one FIFO queue in front of all workers, the fastest idle worker first. The
/// engine does the dispatching; this type only selects that mode.
pub struct Ideal;

impl Policy for Ideal {
    const CENTRAL: bool = true;

    fn pick(&mut self, _client: u32, _ctx: &mut Ctx) -> Choice {
        unreachable!("the engine dispatches the ideal bound itself")
    }

    fn complete(&mut self, _client: u32, _choice: Choice, _outcome: &Outcome, _ctx: &mut Ctx) {}
}

/// Spread per-client periodic timers over the period (clients do not tick in step).
pub fn phase(client: u32, clients: u32, period_ns: u64) -> u64 {
    period_ns * client as u64 / clients.max(1) as u64
}
