//! How much of a cluster this proxy's own evidence covers: the share of the cluster's endpoints it
//! has a fresh latency estimate of (what decides whether load stamps steer its picks).

/// `fresh / (known + listed_unknown)`, 0 when the denominator is 0: `fresh` endpoints known here
/// with a latency estimate of this proxy's own younger than `stale_after`, over the `known` ones
/// and the `listed_unknown` ones a fresh view lists that this proxy has not met yet. Without the
/// latter, a proxy that starts with the whole mesh has met only the endpoints it reached in its
/// first seconds, all of them freshly: its share stays near 1 until it has met most of the
/// cluster (at 1,000 proxies x 1,000 endpoints, ~73 requests a second each: tens of seconds),
/// and the stamps that a proxy reaching each endpoint that rarely needs stay out of its picks.
pub fn own_fresh_share(fresh: usize, known: usize, listed_unknown: usize) -> f64 {
    match known + listed_unknown {
        0 => 0.0,
        all => fresh.min(all) as f64 / all as f64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_the_view_lists_and_this_proxy_has_not_met_count_as_not_fresh() {
        // A proxy that has met 4 endpoints, 3 of them within `stale_after`.
        assert_eq!(own_fresh_share(3, 4, 0), 0.75);
        // The same proxy once a view lists the cluster's other 6: its evidence covers 3 of 10.
        assert_eq!(own_fresh_share(3, 4, 6), 0.3);
        assert_eq!(own_fresh_share(0, 0, 0), 0.0);
        assert_eq!(own_fresh_share(0, 0, 5), 0.0);
        assert_eq!(own_fresh_share(5, 5, 0), 1.0);
    }
}
