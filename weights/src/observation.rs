//! What one reporter last said about one endpoint, and the rates over its last window: reports
//! carry cumulative counters, so a window's rates are the differences between two reports at
//! least half an interval apart.

use tailweight_wire::protocol;
use tailweight_wire::report::EndpointReport;

#[cfg(test)]
mod tests;

/// What one reporter last said about one endpoint.
#[derive(Debug, Clone)]
pub(crate) struct Observation {
    pub incarnation: u64,
    /// The book's id of the principal whose reporter said it (see `WeightBook::ingest_as`).
    pub principal: u32,
    /// Cumulative counters at the start of the current window.
    pub requests: u64,
    errors: u64,
    latency_sum_us: u64,
    window_start_us: u64,
    /// Over the last completed window, which counts until `window_until_us` (two of the reporter's
    /// intervals after it closed): without a new window since (resets, or no report), the rates
    /// are unknown, never an old value paired with fresh CPU or in-flight numbers.
    pub window_until_us: u64,
    pub qps: f64,
    pub eps: f64,
    pub successes: u64,
    pub mean_latency_us: Option<f64>,
    pub inflight: u32,
    /// Its peak-EWMA latency and when it was sampled (fallback when the window has no success).
    pub ewma: Option<(f64, u64)>,
    /// ORCA utilisation and when it was measured.
    pub cpu: Option<(f64, u64)>,
    pub expires_us: u64,
    /// Its clipped in-flight contribution at the last recompute (subtracted for peer_inflight).
    pub counted_inflight: f64,
    /// When its reporter's users were last answered well there, as far as its reports show (see
    /// `served_at`). None: not since the observation began.
    pub served_us: Option<u64>,
}

impl Observation {
    /// The observation a reporter's first report of an endpoint begins (its reporter's interval
    /// `interval_us`): at once a window over its counters when they are new, `new_counters` long
    /// (see `new_counters_us`), else a window that starts now.
    pub fn first(
        e: &EndpointReport,
        incarnation: u64,
        principal: u32,
        new_counters: Option<u64>,
        interval_us: u64,
        expires_us: u64,
        now_us: u64,
    ) -> Self {
        let mut o = Observation {
            incarnation,
            principal,
            requests: e.requests,
            errors: e.errors,
            latency_sum_us: e.latency_sum_us,
            window_start_us: now_us,
            window_until_us: 0,
            qps: 0.0,
            eps: 0.0,
            successes: 0,
            mean_latency_us: None,
            inflight: 0,
            ewma: None,
            cpu: None,
            expires_us,
            counted_inflight: 0.0,
            served_us: None,
        };
        if let Some(window_us) = new_counters.filter(|w| *w > 0) {
            (o.requests, o.errors, o.latency_sum_us) = (0, 0, 0);
            o.window_start_us = now_us.saturating_sub(window_us);
            o.close_window(e, window_us, interval_us, now_us);
        }
        o.instant(e, expires_us, now_us);
        o
    }

    /// Take the differences since the window started (if it is long enough), or start again after
    /// a reset (new incarnation, or a counter that went down). A reset starts a window now whatever
    /// `counted_ms` says: a sum that went down may be one worker's counters gone while another's,
    /// already counted here, run on.
    pub fn update(&mut self, e: &EndpointReport, incarnation: u64, interval_us: u64, expires_us: u64, now_us: u64) {
        let reset = incarnation != self.incarnation
            || e.requests < self.requests
            || e.errors < self.errors
            || e.latency_sum_us < self.latency_sum_us;
        let elapsed = now_us.saturating_sub(self.window_start_us);
        if reset {
            self.incarnation = incarnation;
            self.restart(e, now_us);
        } else if elapsed >= interval_us / 2 && elapsed > 0 {
            self.close_window(e, elapsed, interval_us, now_us);
        }
        // else: too soon after the last window (a duplicate or a burst): keep accumulating.
        self.instant(e, expires_us, now_us);
    }

    /// The rates over the window from the counters it started with to `e`'s, `elapsed_us` long
    /// (> 0), and a new window from `e`'s.
    fn close_window(&mut self, e: &EndpointReport, elapsed_us: u64, interval_us: u64, now_us: u64) {
        let dt_s = elapsed_us as f64 / 1e6;
        let d_requests = e.requests.saturating_sub(self.requests);
        let d_errors = e.errors.saturating_sub(self.errors);
        let d_successes = d_requests.saturating_sub(d_errors);
        let d_latency = e.latency_sum_us.saturating_sub(self.latency_sum_us);
        self.qps = d_requests as f64 / dt_s;
        self.eps = d_errors as f64 / dt_s;
        self.successes = d_successes;
        self.mean_latency_us =
            (d_successes > 0).then(|| (d_latency as f64 / d_successes as f64).min(protocol::MAX_LATENCY_US as f64));
        self.window_until_us = now_us.saturating_add(interval_us.saturating_mul(2));
        if d_successes > 0 {
            self.served_us = Some(served_at(self.window_start_us, e.seen_age_ms, now_us));
        }
        self.restart(e, now_us);
    }

    /// Its rates over the last window while they count (else unknown: zero).
    pub fn rates(&self, now_us: u64) -> (f64, f64) {
        if self.window_until_us > now_us {
            (self.qps, self.eps)
        } else {
            (0.0, 0.0)
        }
    }

    pub fn live(&self, now_us: u64) -> bool {
        self.expires_us > now_us
    }

    fn restart(&mut self, e: &EndpointReport, now_us: u64) {
        (self.requests, self.errors, self.latency_sum_us, self.window_start_us) =
            (e.requests, e.errors, e.latency_sum_us, now_us);
    }

    /// The values that are not counters: in flight now, latency estimate, ORCA CPU.
    fn instant(&mut self, e: &EndpointReport, expires_us: u64, now_us: u64) {
        self.inflight = e.inflight;
        self.expires_us = expires_us;
        self.ewma = (e.latency_ewma_us > 0)
            .then(|| (e.latency_ewma_us as f64, now_us.saturating_sub(e.latency_age_ms.saturating_mul(1_000))));
        self.cpu = match (e.cpu, e.cpu_age_ms) {
            (Some(cpu), age) if cpu.is_finite() && cpu >= 0.0 => {
                Some((cpu, now_us.saturating_sub(age.unwrap_or(0).saturating_mul(1_000))))
            }
            _ => None,
        };
    }
}

/// A reporter's first report of an endpoint whose counters began `counted` ago (`counted_ms`) with
/// `counted <= NEW_COUNTERS_INTERVALS x interval` holds only requests the book has never counted
/// (an observation of the same counters that ended would have lived a reporter ttl, 3 intervals,
/// past its last report), so its first window (with `WeightParams::rate_new_counters`) is the
/// counters over
///
/// `window = max(counted, interval)`: rates `qps = requests / window` (errors alike)
///
/// and not one that starts at the report, which leaves them out (the cold start undercounts every
/// endpoint's rate, and its CPU capacity, until each pair's second report). Not over `counted`
/// alone: counters start at a request (the proxy's first contact with the endpoint), so a pair that sees one request a
/// minute would be rated `1 / counted`, far above it, whenever its first report came soon after;
/// over at least an interval, the time until the next window replaces this one, every request
/// counts once, as in the windows after it. None (a window from the report on): absent (a reporter
/// that does not say), or longer (counters the book may have counted: an endpoint observed again).
pub(crate) fn new_counters_us(counted_ms: Option<u64>, interval_us: u64) -> Option<u64> {
    let counted_us = counted_ms?.saturating_mul(1_000);
    (interval_us > 0 && counted_us <= interval_us.saturating_mul(NEW_COUNTERS_INTERVALS))
        .then(|| counted_us.max(interval_us))
}

/// How many of its reporter's intervals a pair's counters may have counted for its first report to
/// be rated over them (see `new_counters_us`).
pub(crate) const NEW_COUNTERS_INTERVALS: u64 = 2;

/// When a window from `window_start_us` to `now_us` whose successes moved last answered a user
/// well: `now - seen_age`, the reporter's latest good answer, but not before the window began (a
/// success counted in it came after that); without `seen_age`, the window's start. Health checks
/// are not requests, so they never move the successes; a check's pass can only make the time later
/// within a window whose users were also answered well.
pub(crate) fn served_at(window_start_us: u64, seen_age_ms: Option<u64>, now_us: u64) -> u64 {
    match seen_age_ms {
        Some(age) => now_us.saturating_sub(age.saturating_mul(1_000)).max(window_start_us),
        None => window_start_us,
    }
}
