//! Research variants of the tailweight deployment (sim/README.md, "Closing the gap"): what the
//! aggregator and the mesh would do differently from the default deployment, selected with
//! `--variant a,b=c` or `sim.variant`; the empty variant is the default deployment (the
//! aggregator's flag defaults, `WeightParams::default()`). Load stamps and report intervals are the
//! filter's own configuration (`--filter-config`).

use tailweight_math::rng::Rng;
use tailweight_weights::{ViewInflight, WeightParams};

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Variant {
    /// Each proxy's cluster is a deterministic subset of this many endpoints (0: all of them).
    pub subset: usize,
    /// The view's `inflight` (the aggregator's `--view-inflight`): `mean`, the endpoint's
    /// time-averaged requests in flight over the last recompute (qps x latency, Little's law), or
    /// `last`, the sum of the reporters' last counts (None: the book's default, `mean`).
    pub view_inflight: Option<ViewInflight>,
    /// The aggregator's `orca_max_age` (ORCA votes older than this are not used), milliseconds
    /// (None: the book's default, 1 s).
    pub orca_max_age_ms: Option<u64>,
    /// The aggregator's weight smoothing time constant, milliseconds (None: the default, 2 s).
    pub smoothing_ms: Option<u64>,
    /// Each pick also probes this many random endpoints (a fraction carries over), Prequal's way
    /// (`probe_transit`): the server-role sidecar answers with the endpoint's requests in flight,
    /// which reaches the pick as a load stamp a round trip after sending (0: no probes). Only
    /// with load stamps on (`load_stamp_max_age_ms` in the filter configuration).
    pub probe_stamps: f64,
    /// The aggregator's `--rate-new-counters`: a proxy's first report of an endpoint whose
    /// counters are new is rated over them at once.
    pub rate_new_counters: bool,
}

impl Variant {
    /// `view_inflight=last|mean,orca_max_age_ms=N,smoothing_ms=N,subset=N,probe_stamps=X,
    /// rate_new_counters` in any order (`mean_inflight` is `view_inflight=mean`); empty: the
    /// default deployment.
    pub fn parse(text: &str) -> Result<Variant, String> {
        let mut v = Variant::default();
        for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            match item.split_once('=') {
                None if item == "mean_inflight" => v.view_inflight = Some(ViewInflight::Mean),
                None if item == "rate_new_counters" => v.rate_new_counters = true,
                Some(("view_inflight", mode)) => {
                    v.view_inflight = Some(mode.trim().parse().map_err(|e| format!("variant: {e}"))?)
                }
                Some(("orca_max_age_ms", n)) => {
                    v.orca_max_age_ms = Some(n.trim().parse().ok().filter(|n| *n > 0).ok_or_else(|| {
                        format!("variant: orca_max_age_ms: expected a positive number of milliseconds, got {n:?}")
                    })?)
                }
                Some(("smoothing_ms", n)) => {
                    v.smoothing_ms = Some(n.trim().parse().ok().filter(|n| *n > 0).ok_or_else(|| {
                        format!("variant: smoothing_ms: expected a positive number of milliseconds, got {n:?}")
                    })?)
                }
                Some(("probe_stamps", n)) => {
                    v.probe_stamps = n.trim().parse().ok().filter(|n: &f64| n.is_finite() && *n > 0.0).ok_or_else(|| {
                        format!("variant: probe_stamps: expected a positive number of probes per request, got {n:?}")
                    })?
                }
                Some(("subset", n)) => {
                    v.subset =
                        n.trim().parse().ok().filter(|n| *n > 0).ok_or_else(|| {
                            format!("variant: subset: expected a positive number of endpoints, got {n:?}")
                        })?
                }
                _ => {
                    return Err(format!(
                    "variant: {item:?} is unknown (known: view_inflight=last|mean, mean_inflight, rate_new_counters, orca_max_age_ms=N, smoothing_ms=N, subset=N, probe_stamps=X)"
                ))
                }
            }
        }
        Ok(v)
    }

    pub fn is_default(&self) -> bool {
        *self == Variant::default()
    }

    /// The aggregator's parameters under this variant: the book's defaults where it sets none.
    pub fn weight_params(&self) -> WeightParams {
        let defaults = WeightParams::default();
        WeightParams {
            orca_max_age_us: self.orca_max_age_ms.map_or(defaults.orca_max_age_us, |ms| ms * 1_000),
            smoothing_us: self.smoothing_ms.map_or(defaults.smoothing_us, |ms| ms as f64 * 1e3),
            view_inflight: self.view_inflight.unwrap_or(defaults.view_inflight),
            rate_new_counters: self.rate_new_counters || defaults.rate_new_counters,
            ..defaults
        }
    }

    /// The short form `parse` reads (empty for the default deployment).
    pub fn label(&self) -> String {
        let mut parts = Vec::new();
        if let Some(mode) = self.view_inflight {
            parts.push(format!("view_inflight={mode}"));
        }
        if let Some(ms) = self.orca_max_age_ms {
            parts.push(format!("orca_max_age_ms={ms}"));
        }
        if let Some(ms) = self.smoothing_ms {
            parts.push(format!("smoothing_ms={ms}"));
        }
        if self.subset > 0 {
            parts.push(format!("subset={}", self.subset));
        }
        if self.probe_stamps > 0.0 {
            parts.push(format!("probe_stamps={}", self.probe_stamps));
        }
        if self.rate_new_counters {
            parts.push("rate_new_counters".to_string());
        }
        parts.join(",")
    }
}

/// Deterministic subsetting (Google SRE book, "Load Balancing in the Datacenter"): clients are
/// taken in rounds of `endpoints / size`; each round shuffles the endpoints with the round's own
/// seed and gives each of its clients the next `size` of them, so every endpoint has the same
/// number of clients (within one) and the subsets of one round do not overlap. Returns each
/// client's endpoints.
pub fn deterministic_subsets(clients: u32, endpoints: u32, size: usize, seed: u64) -> Vec<Vec<u32>> {
    let size = size.clamp(1, endpoints.max(1) as usize);
    let per_round = (endpoints as usize / size).max(1);
    let mut order: Vec<u32> = (0..endpoints).collect();
    let mut out = Vec::with_capacity(clients as usize);
    for client in 0..clients as usize {
        if client % per_round == 0 {
            let mut rng = Rng::new(seed ^ (client / per_round) as u64);
            order.sort_unstable();
            for i in (1..order.len()).rev() {
                order.swap(i, rng.below(i + 1));
            }
        }
        let start = (client % per_round) * size;
        out.push(order[start..start + size].to_vec());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variants_parse_and_refuse_unknown_items_naming_them() {
        let v = Variant::parse("view_inflight=last, subset=20,orca_max_age_ms=3000,probe_stamps=1.5,rate_new_counters")
            .unwrap();
        let expected = Variant {
            subset: 20,
            view_inflight: Some(ViewInflight::Last),
            orca_max_age_ms: Some(3000),
            probe_stamps: 1.5,
            rate_new_counters: true,
            ..Default::default()
        };
        assert_eq!(v, expected);
        assert_eq!(Variant::parse(&v.label()).unwrap(), v);
        assert!(Variant::parse("").unwrap().is_default());
        assert!(Variant::parse("subset=0").unwrap_err().contains("subset"));
        assert!(Variant::parse("probe_stamps=0").unwrap_err().contains("probe_stamps"));
        assert!(Variant::parse("stamps").unwrap_err().contains("\"stamps\" is unknown"));
        assert!(Variant::parse("view_inflight=average").unwrap_err().contains("view_inflight"));
        assert_eq!(Variant::parse("mean_inflight").unwrap().view_inflight, Some(ViewInflight::Mean));
    }

    #[test]
    fn the_default_variant_weighs_as_the_aggregators_defaults() {
        assert_eq!(Variant::default().weight_params(), WeightParams::default());
        let v = Variant::parse("view_inflight=last,orca_max_age_ms=3000,smoothing_ms=5000").unwrap();
        let p = v.weight_params();
        assert_eq!((p.view_inflight, p.orca_max_age_us, p.smoothing_us), (ViewInflight::Last, 3_000_000, 5e6));
        assert!(Variant::parse("rate_new_counters").unwrap().weight_params().rate_new_counters);
    }

    #[test]
    fn every_endpoint_gets_the_same_number_of_clients() {
        let subsets = deterministic_subsets(100, 50, 10, 7);
        let mut clients_of = vec![0u32; 50];
        for s in &subsets {
            assert_eq!(s.len(), 10);
            let mut sorted = s.clone();
            sorted.sort_unstable();
            sorted.dedup();
            assert_eq!(sorted.len(), 10, "no endpoint twice in one subset");
            for &e in s {
                clients_of[e as usize] += 1;
            }
        }
        // 100 clients x 10 / 50 endpoints: 20 each, exactly (rounds of 5 clients cover all 50).
        assert!(clients_of.iter().all(|&c| c == 20), "{clients_of:?}");
        assert_ne!(subsets[0], subsets[5], "each round shuffles anew");
    }
}
