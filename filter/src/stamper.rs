//! One server-role VM's state (see `server`): its count of the endpoint's requests in flight, which
//! it publishes in shared data at its tick when it changed, with the other VMs' counts read back;
//! and its attester, if configured (`attester`).

use crate::attester::Attester;
use crate::host;
use crate::metrics::StampMetrics;
use crate::shared;
use tailweight_picker::server_inflight::ServerInflight;
use tailweight_picker::FilterConfig;

/// A VM's published count older than this many ticks (and than `LIVE_MIN_US`) is a VM that went
/// away. A busy VM renews its count every tick; the floor keeps a tick delayed on a loaded machine
/// from hiding a live VM's requests, and a VM that really went away (a reconfiguration) counts a
/// little longer, which only makes stamps read high for that long.
const LIVE_TICKS: u64 = 3;
const LIVE_MIN_US: u64 = 1_000_000;

/// One server-role VM's state.
pub struct Stamper {
    tick_ms: u64,
    /// This endpoint's requests in flight, as all the VMs count them.
    pub load: ServerInflight,
    pub metrics: StampMetrics,
    slot: Option<u64>,
    /// Whether the listener direction was compared with the role yet (on the first request).
    pub direction_checked: bool,
    /// What this endpoint served, attested to the aggregator (when configured).
    pub attester: Option<Attester>,
}

impl Stamper {
    pub fn new(config: &FilterConfig) -> Self {
        shared::init(host::random_u64());
        Stamper {
            tick_ms: config.sync_interval_ms,
            load: ServerInflight::new(config.inflight_bound_ms * 1_000),
            metrics: StampMetrics::define(),
            slot: None,
            direction_checked: false,
            attester: Attester::of(config),
        }
    }

    /// Publish this VM's count when it changed; read the other VMs'.
    pub fn tick(&mut self, now_us: u64) {
        if let Some(attester) = &mut self.attester {
            attester.tick(now_us);
        }
        let slot = *self.slot.get_or_insert_with(|| shared::new_slot().unwrap_or(u64::MAX));
        if slot == u64::MAX {
            return;
        }
        if let Some(count) = self.load.to_publish(now_us) {
            shared::publish_server_count(slot, count);
        }
        let others = (0..shared::slots_claimed()).filter(|n| *n != slot).filter_map(shared::read_server_count);
        self.load.set_others(others, now_us, (LIVE_TICKS * self.tick_ms * 1_000).max(LIVE_MIN_US));
    }
}
