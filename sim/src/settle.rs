//! How traffic settles after a scenario event: the numbers the benchmark harness
//! (e2e/harness/analysis.py) and the simulator (`results`) both measure with, kept once in
//! sim/settle-analysis.json (its description says what each does) and compiled in here.

use serde::Deserialize;
use std::sync::LazyLock;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SettleAnalysis {
    #[serde(rename = "description")]
    _description: String,
    /// A share is sampled this often.
    pub sample_s: f64,
    /// Each sample is the share of the requests over this trailing window.
    pub share_window_s: f64,
    /// The final share is the mean of the samples in this last stretch.
    pub final_window_s: f64,
    /// The share before an event is over this stretch before it.
    pub before_window_s: f64,
    /// Settled: within band x the final share.
    pub band: f64,
}

/// sim/settle-analysis.json (a malformed file fails the first use, and the tests).
pub static SETTLE: LazyLock<SettleAnalysis> = LazyLock::new(|| {
    serde_json::from_str(include_str!("../settle-analysis.json")).expect("sim/settle-analysis.json: malformed")
});

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_parses_into_usable_numbers() {
        let s = &*SETTLE;
        assert!(s.sample_s > 0.0 && s.share_window_s >= s.sample_s && s.final_window_s > s.share_window_s, "{s:?}");
        assert!(s.before_window_s > 0.0 && s.band > 0.0 && s.band < 1.0, "{s:?}");
        // The simulator measures in whole series windows.
        for seconds in [s.sample_s, s.share_window_s, s.final_window_s, s.before_window_s] {
            let ns = seconds * 1e9;
            assert_eq!(ns % crate::engine::SERIES_WINDOW_NS as f64, 0.0, "{seconds} s");
        }
    }
}
