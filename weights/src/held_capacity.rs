//! An endpoint's last rated capacity, held while it cannot be rated (step 3, `capacity`).

use crate::decision::Method;
use crate::params::WeightParams;

/// One capacity an endpoint was rated with, by which method, and when.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Rating {
    capacity: f64,
    method: Method,
    at_us: u64,
}

impl Rating {
    /// Its capacity, if it was rated by `method` at most `hold_us` before `now_us`.
    fn within(self, method: Method, hold_us: u64, now_us: u64) -> Option<f64> {
        (self.method == method && now_us.saturating_sub(self.at_us) <= hold_us).then_some(self.capacity)
    }
}

/// The last capacity an endpoint was rated with, and the last one rated while it answered cleanly.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct HeldCapacity {
    last: Option<Rating>,
    healthy: Option<Rating>,
}

/// What an endpoint's errors say when its capacity is rated or held.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct ErrorState {
    /// Errors in the reporters' last windows (requests per second).
    pub eps: f64,
    /// The smoothed error ratio (`Ejection::error_ratio`).
    pub error_ratio: f64,
    pub ejected: bool,
}

impl ErrorState {
    /// Healthy as `Ejection::resume` counts it: not ejected, error ratio below a quarter of
    /// `eject_ratio`.
    fn healthy(&self, p: &WeightParams) -> bool {
        !self.ejected && self.error_ratio < p.eject_ratio / 4.0
    }

    /// A rating made now counts as healthy: healthy, and no error in the last windows (an error
    /// costs capacity on both paths, which must not outlive the outage that caused it).
    fn clean(&self, p: &WeightParams) -> bool {
        self.healthy(p) && self.eps <= 0.0
    }
}

/// The capacity by `method` if there is one this time (and remember it, as the healthy one too
/// when `errors` are `clean`). Else, for an endpoint whose errors are healthy now, the last healthy
/// capacity by the same method for `healthy_capacity_hold_us`; else the last one by the same method
/// for `capacity_hold_us`. A slow endpoint the picker steers around may see no request in a window,
/// which is no reason to send it the median share; nor is an endpoint that went away and came back
/// (its proxies suspended it, no request reached it) one: it gets the share it earned when it last
/// answered cleanly, not the median, while it waits to be rated again. The hold never outlasts a
/// rating: an endpoint with traffic, slowed or failing, is rated by what it does now.
pub(crate) fn hold(
    held: &mut HeldCapacity,
    rated: Option<f64>,
    method: Method,
    errors: ErrorState,
    p: &WeightParams,
    now_us: u64,
) -> Option<f64> {
    if let Some(capacity) = rated {
        let rating = Rating { capacity, method, at_us: now_us };
        held.last = Some(rating);
        if errors.clean(p) {
            held.healthy = Some(rating);
        }
        return Some(capacity);
    }
    let healthy =
        held.healthy.filter(|_| errors.healthy(p)).and_then(|h| h.within(method, p.healthy_capacity_hold_us, now_us));
    healthy.or_else(|| held.last.and_then(|h| h.within(method, p.capacity_hold_us, now_us)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLEAN: ErrorState = ErrorState { eps: 0.0, error_ratio: 0.0, ejected: false };

    #[test]
    fn a_capacity_is_held_by_its_own_method_only() {
        let p = WeightParams::default();
        let mut held = HeldCapacity::default();
        let failing = ErrorState { eps: 5.0, error_ratio: 0.3, ..CLEAN };
        assert_eq!(hold(&mut held, Some(50.0), Method::Cpu, failing, &p, 0), Some(50.0));
        assert_eq!(hold(&mut held, None, Method::Cpu, failing, &p, p.capacity_hold_us), Some(50.0));
        assert_eq!(hold(&mut held, None, Method::Cpu, failing, &p, p.capacity_hold_us + 1), None);
        assert_eq!(hold(&mut held, None, Method::Latency, failing, &p, 1), None);
    }

    #[test]
    fn an_endpoint_back_from_a_quiet_outage_gets_its_last_clean_capacity() {
        let p = WeightParams::default();
        let mut held = HeldCapacity::default();
        hold(&mut held, Some(200.0), Method::Cpu, CLEAN, &p, 0);
        // Its last windows fail (connections refused) and lower its rating; then nothing reaches it.
        let failing = ErrorState { eps: 50.0, error_ratio: 0.3, ..CLEAN };
        assert_eq!(hold(&mut held, Some(40.0), Method::Cpu, failing, &p, 1_000_000), Some(40.0));
        assert_eq!(hold(&mut held, None, Method::Cpu, failing, &p, 2_000_000), Some(40.0), "failing: the last");
        let faded = ErrorState { eps: 0.0, error_ratio: 0.05, ejected: false };
        let back = p.capacity_hold_us + 5_000_000;
        assert_eq!(hold(&mut held, None, Method::Cpu, faded, &p, back), Some(200.0), "not the median");
        assert_eq!(hold(&mut held, None, Method::Cpu, faded, &p, p.healthy_capacity_hold_us), Some(200.0));
        assert_eq!(hold(&mut held, None, Method::Cpu, faded, &p, p.healthy_capacity_hold_us + 1), None);
        assert_eq!(hold(&mut held, None, Method::Latency, faded, &p, back), None, "another method's units");
        let ejected = ErrorState { ejected: true, ..faded };
        assert_eq!(hold(&mut held, None, Method::Cpu, ejected, &p, back), None, "ejected: never the healthy one");
    }

    #[test]
    fn a_rating_replaces_the_held_ones() {
        let p = WeightParams::default();
        let mut held = HeldCapacity::default();
        hold(&mut held, Some(200.0), Method::Cpu, CLEAN, &p, 0);
        // Slowed, answering cleanly: its new rating, also held once it goes quiet.
        assert_eq!(hold(&mut held, Some(60.0), Method::Cpu, CLEAN, &p, 1_000_000), Some(60.0));
        assert_eq!(hold(&mut held, None, Method::Cpu, CLEAN, &p, 30_000_000), Some(60.0));
    }
}
