//! Which endpoints carry traffic now. Proxies keep listing an endpoint that left the cluster (a
//! deleted pod) until their own ttl drops it, with a request rate of 0; its capacity then falls
//! with that rate (CPU path) or holds a stale value. Such an endpoint still gets a weight, but
//! while no reporter has sent it a request or held one in flight there for `quiet_uncounted_us`,
//! it does not count in what the cluster's endpoints share: the mean of 1, the median target a new
//! endpoint gets, the cluster's method, the median concurrency. Counted, the left pods of a rolling
//! update dragged the median target down to the floor, so the new pods entered there while the old
//! ones left queued (rollout-failing).

use crate::merge::Merged;
use crate::params::WeightParams;
use crate::record::EndpointRecord;

/// Whether `merged` shows traffic at the endpoint: requests or errors in the reporters' last
/// windows, or requests in flight.
fn carries_traffic(merged: &Merged) -> bool {
    merged.qps > 0.0 || merged.eps > 0.0 || merged.inflight > 0.0
}

/// Note each endpoint's traffic (`merged`, aligned with `endpoints`) at `now_us`, and whether it is
/// back from quiet: traffic now, after none for longer than `quiet_uncounted_us` (it had some
/// before). Then clear
/// `counted` for those quiet for longer than `quiet_uncounted_us` since that traffic (or since
/// the book first heard of them). When that would leave no counted endpoint (a cluster nobody
/// sends to), `counted` stays as it was.
pub(crate) fn uncount_quiet(
    endpoints: &mut [EndpointRecord],
    merged: &[Merged],
    p: &WeightParams,
    now_us: u64,
    counted: &mut [bool],
) {
    for (endpoint, m) in endpoints.iter_mut().zip(merged) {
        let traffic = carries_traffic(m);
        endpoint.back_from_quiet =
            traffic && endpoint.last_traffic_us.is_some_and(|t| now_us.saturating_sub(t) > p.quiet_uncounted_us);
        if traffic {
            endpoint.last_traffic_us = Some(now_us);
        }
    }
    let quiet = |e: &EndpointRecord| {
        let since = e.last_traffic_us.unwrap_or(e.first_seen_us).max(e.first_seen_us);
        now_us.saturating_sub(since) > p.quiet_uncounted_us
    };
    let stays_counted = endpoints.iter().zip(counted.iter()).any(|(e, c)| *c && !quiet(e));
    if !stays_counted {
        return;
    }
    for (e, c) in endpoints.iter().zip(counted.iter_mut()) {
        *c &= !quiet(e);
    }
}
