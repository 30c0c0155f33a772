//! An endpoint's last rated capacity, held while it cannot be rated (step 3, `capacity`).

use crate::decision::Method;
use crate::params::WeightParams;

/// The last capacity an endpoint was rated with, by which method, and when.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct HeldCapacity {
    capacity: f64,
    method: Method,
    at_us: u64,
}

/// The capacity by `method` if there is one this time (and remember it), else the last one by the
/// same method for `capacity_hold_us`: a slow endpoint the picker steers around may see no request
/// in a window, which is no reason to send it the median share.
pub(crate) fn hold(
    held: &mut Option<HeldCapacity>,
    rated: Option<f64>,
    method: Method,
    p: &WeightParams,
    now_us: u64,
) -> Option<f64> {
    match rated {
        Some(capacity) => {
            *held = Some(HeldCapacity { capacity, method, at_us: now_us });
            Some(capacity)
        }
        None => held
            .filter(|h| h.method == method && now_us.saturating_sub(h.at_us) <= p.capacity_hold_us)
            .map(|h| h.capacity),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_capacity_is_held_by_its_own_method_only() {
        let p = WeightParams::default();
        let mut held = None;
        assert_eq!(hold(&mut held, Some(50.0), Method::Cpu, &p, 0), Some(50.0));
        assert_eq!(hold(&mut held, None, Method::Cpu, &p, p.capacity_hold_us), Some(50.0));
        assert_eq!(hold(&mut held, None, Method::Cpu, &p, p.capacity_hold_us + 1), None);
        assert_eq!(hold(&mut held, None, Method::Latency, &p, 1), None);
    }
}
