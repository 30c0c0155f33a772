//! One server-role worker's state (see `server_request`): its count of the endpoint's requests in
//! flight, which it publishes in the shared state at its tick when it changed, with the other
//! workers' counts read back; and its attester, if configured (`attester`).

use crate::attester::Attester;
use crate::config::FilterConfig;
use crate::host::Host;
use crate::metrics::StampMetrics;
use crate::server_inflight::ServerInflight;
use crate::shared::SharedData;

/// A worker's published count older than this many ticks (and than `LIVE_MIN_US`) is a worker
/// that went away. A busy worker renews its count every tick; the floor keeps a tick delayed on a
/// loaded machine from hiding a live worker's requests, and a worker that really went away (a
/// reconfiguration) counts a little longer, which only makes stamps read high for that long.
const LIVE_TICKS: u64 = 3;
const LIVE_MIN_US: u64 = 1_000_000;

/// Whether a server-role worker has its slot for its published count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CountSlot {
    Unclaimed,
    Held(u64),
    /// None could be claimed: this worker's count is its own only.
    NoRoom,
}

/// One server-role worker's state.
pub struct Stamper {
    tick_ms: u64,
    /// This endpoint's requests in flight, as all the workers count them.
    pub load: ServerInflight,
    pub metrics: StampMetrics,
    slot: CountSlot,
    /// Whether the listener direction was compared with the role yet (on the first request).
    pub direction_checked: bool,
    /// What this endpoint served, attested to the aggregator (when configured).
    pub attester: Option<Attester>,
}

impl Stamper {
    #[inline(never)] // out of line: V8's compile memory follows the largest function (Makefile, WASM_OPT)
    pub fn new(config: &FilterConfig, host: &impl Host) -> Self {
        SharedData(host).init(host.random_u64());
        Stamper {
            tick_ms: config.sync_interval_ms,
            load: ServerInflight::new(config.inflight_bound_ms * 1_000),
            metrics: StampMetrics::define(host),
            slot: CountSlot::Unclaimed,
            direction_checked: false,
            attester: Attester::of(config, host),
        }
    }

    /// Publish this worker's count when it changed; read the other workers'.
    #[inline(never)] // out of line: V8's compile memory follows the largest function (Makefile, WASM_OPT)
    pub fn tick(&mut self, host: &impl Host, now_us: u64) {
        if let Some(attester) = &mut self.attester {
            attester.tick(host, now_us);
        }
        let shared = SharedData(host);
        if self.slot == CountSlot::Unclaimed {
            self.slot = shared.new_slot().map_or(CountSlot::NoRoom, CountSlot::Held);
        }
        let CountSlot::Held(slot) = self.slot else { return };
        if let Some(count) = self.load.count_to_publish(now_us) {
            shared.publish_server_count(slot, count);
        }
        let others = (0..shared.slots_claimed()).filter(|n| *n != slot).filter_map(|n| shared.read_server_count(n));
        self.load.set_others(others, now_us, (LIVE_TICKS * self.tick_ms * 1_000).max(LIVE_MIN_US));
    }
}
