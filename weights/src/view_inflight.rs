//! The in-flight count the reply view gives each endpoint (`EndpointView::inflight`, and
//! `peer_inflight` = that less the asker's own): the reporters' last counts, or the mean over the
//! decision's window. A pick with load stamps uses it as the bar a fresh stamp must beat
//! (`Endpoint::stamped_score`); the last counts are one instant's snapshot, the mean is the queue
//! the endpoint usually has.

use crate::decision::EndpointDecision;
use std::fmt;
use std::str::FromStr;

/// Which in-flight count the view publishes (`--view-inflight` of the aggregator).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ViewInflight {
    /// The sum of the live reporters' last counts (robustly clipped; the decision's `inflight`).
    Last,
    /// The time-averaged requests in flight over the decision's window (Little's law): the
    /// default, the bar a fresh load stamp must beat is the queue the endpoint usually has.
    #[default]
    Mean,
}

impl ViewInflight {
    /// The view's in-flight count of the endpoint `d` decides:
    /// - `Last`: `d.inflight`, the reporters' last counts summed;
    /// - `Mean`: `d.qps x d.latency_us / 1e6`, Little's law `L = lambda x W`: requests per second
    ///   times the mean seconds each spends there is the mean number in flight over the window.
    pub fn of(self, d: &EndpointDecision) -> f64 {
        match self {
            ViewInflight::Last => d.inflight,
            ViewInflight::Mean => d.qps * d.latency_us as f64 / 1e6,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ViewInflight::Last => "last",
            ViewInflight::Mean => "mean",
        }
    }
}

impl fmt::Display for ViewInflight {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A view in-flight mode that is neither `last` nor `mean`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownViewInflight(pub String);

impl fmt::Display for UnknownViewInflight {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "view_inflight: expected `last` or `mean`, got {:?}", self.0)
    }
}

impl std::error::Error for UnknownViewInflight {}

impl FromStr for ViewInflight {
    type Err = UnknownViewInflight;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "last" => Ok(ViewInflight::Last),
            "mean" => Ok(ViewInflight::Mean),
            other => Err(UnknownViewInflight(other.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_what_it_displays_and_names_the_field_otherwise() {
        for mode in [ViewInflight::Last, ViewInflight::Mean] {
            assert_eq!(mode.to_string().parse::<ViewInflight>(), Ok(mode));
        }
        assert_eq!(ViewInflight::default(), ViewInflight::Mean);
        let e = "Mean".parse::<ViewInflight>().unwrap_err();
        assert_eq!(e.to_string(), "view_inflight: expected `last` or `mean`, got \"Mean\"");
    }
}
