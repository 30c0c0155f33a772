//! Client-side WRR's weight periods: how long a new weight waits before it counts (blackout) and how
//! often the weights are taken up (update). The scenario sets them; `policy::cswrr` runs with them.

/// Envoy's defaults (the benchmark harness sets 1 s and 0.5 s).
pub const BLACKOUT_NS: u64 = 10_000_000_000;
pub const UPDATE_PERIOD_NS: u64 = 1_000_000_000;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Periods {
    pub blackout_ns: u64,
    pub update_ns: u64,
}

impl Default for Periods {
    fn default() -> Self {
        Periods { blackout_ns: BLACKOUT_NS, update_ns: UPDATE_PERIOD_NS }
    }
}
