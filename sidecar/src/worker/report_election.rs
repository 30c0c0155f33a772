//! Which worker sends this proxy's report, and when: the first worker to tick in a report period
//! claims it (a CAS on the period's start), if there is something to say: a snapshot changed
//! since the last report (of any worker: the digest of the slot versions it was made of is in the
//! shared state), or requests are in flight. An idle proxy sends nothing (the aggregator forgets
//! it; its views expire and it decides locally until it has traffic again). The period follows the
//! proxy's request rate since the last report (`tick::report_period_ms`).

use crate::digest::report_digest;
use crate::host::Host;
use crate::shared::SharedData;
use crate::shared_layout::LastReport;
use crate::tick;
use tailweight_wire::report::EndpointReport;

#[derive(Default)]
pub struct ReportElection {
    /// The start (ms) of the latest report period this worker knows was claimed.
    claimed_ms: u64,
}

impl ReportElection {
    /// The period of the report this worker sends now, if it wins the period and there is news.
    /// `interval_ms` is the aggregator's report interval; `versions` the (slot, version) of every
    /// snapshot the report is made of (this worker's included), `endpoints` every endpoint in them.
    #[inline(never)]
    pub fn elect<'a, E>(
        &mut self,
        shared: &SharedData<impl Host>,
        interval_ms: u64,
        versions: impl Iterator<Item = (u64, u64)>,
        endpoints: impl Fn() -> E,
        now_us: u64,
    ) -> Option<u64>
    where
        E: Iterator<Item = &'a EndpointReport>,
    {
        let now_ms = now_us / 1_000;
        // A period was claimed within the current report interval: every period (a multiple of
        // the interval) that has begun began at or before it, so a claim would fail. Nothing to
        // read until the next interval.
        let step_ms = interval_ms.max(1);
        if now_ms / step_ms * step_ms <= self.claimed_ms {
            return None;
        }
        let digest = report_digest(versions);
        let last = shared.last_report();
        if digest == last.digest && !endpoints().any(|e| e.inflight > 0) {
            return None;
        }
        let requests = endpoints().map(|e| e.requests).fold(0u64, u64::saturating_add);
        let (new_requests, elapsed_ms) = (requests.checked_sub(last.requests), now_ms.saturating_sub(last.at_ms));
        let period_ms = tick::report_period_ms(new_requests, elapsed_ms, interval_ms);
        let start_ms = now_ms / period_ms * period_ms;
        if let Err(latest_ms) = shared.claim_report(start_ms) {
            self.claimed_ms = self.claimed_ms.max(latest_ms);
            return None;
        }
        self.claimed_ms = self.claimed_ms.max(start_ms);
        shared.set_last_report(LastReport { digest, requests, at_ms: now_ms });
        Some(period_ms)
    }
}
