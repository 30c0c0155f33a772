//! The `/metrics` page: the service's registered metrics (`metrics.rs`) and, made afresh at each
//! scrape from the book's last recompute, one series per tracked endpoint (its weight, the requests
//! per second its reporters saw, whether it is ejected) labelled `upstream_cluster` and
//! `upstream_endpoint` (the labels the chart's sidecar bootstrap override gives the filter's
//! per-endpoint pick counters; not `endpoint`, which the Prometheus Operator sets on every target),
//! and the memory the book may hold beside what it holds.
//!
//! Cardinality is bounded by the book: a cluster or endpoint the book has expired is gone from the
//! next page (nothing to unregister), and at most `MAX_ENDPOINT_SERIES` endpoints are listed, whole
//! clusters in the order of `WeightBook::decided_counts` (attested, then reported by more
//! principals, then by name: one principal's made-up clusters cannot crowd the others off),
//! while their cost (`budget::metrics_cluster_cost`) fits half the requests' memory budget;
//! `tailweight_endpoint_series_omitted` counts the endpoints left out. The page reserves that cost
//! from the budget before it copies anything (none free: 503, like a report). Scrapes share one
//! page built at most once a second by default (`shared_page.rs`), each within its requester's page rate like
//! a weights page (`page_rate.rs`: its scan of the book's clusters, then the page's listed
//! clusters and endpoints; beyond, 429).

use crate::admission::Reservation;
use crate::budget::{metrics_cluster_cost, METRICS_BASE_BYTES};
use crate::page_rate::RetryAfterMs;
use crate::shared_page::Snapshot;
use crate::state::AppState;
use axum::body::Bytes;
use prometheus::core::Collector;
use prometheus::proto::MetricFamily;
use prometheus::{Encoder, GaugeVec, IntGauge, Opts, TextEncoder};
use std::sync::Arc;
use tailweight_weights::ClusterDecision;

/// Endpoint series on one page at most (each endpoint is three series).
pub const MAX_ENDPOINT_SERIES: usize = 4_096;

/// Why a page was not built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Its cost, in bytes, does not fit the requests' memory budget now (503).
    Memory(usize),
    /// Its requester is past its page rate (429).
    Rate(RetryAfterMs),
}

/// The `/metrics` page for `requester` at `now_us`: the shared one (`shared_page.rs`), built at
/// most once per `--metrics-page-max-age-ms` whoever asks. Its scan's units from the requester's page rate
/// first (`weights_page::scan_units`), then the page's listed clusters and endpoints, whether it
/// was built for this scrape or shared. Blocks (the shared page's lock, a build): run it off the
/// runtime's workers.
pub fn page(state: &AppState, requester: &str, now_us: u64) -> Result<Bytes, Refused> {
    let scan = crate::weights_page::scan_units(state.metrics.clusters_tracked());
    state.pages.take(requester, scan, now_us).map_err(Refused::Rate)?;
    let page =
        state.metrics_page.get_or_build(now_us, state.limits.metrics_page_max_age_us, || build(state, now_us))?;
    state.pages.take(requester, page.units, now_us).map_err(Refused::Rate)?;
    Ok(page.text)
}

/// One page, built at `now_us` (counts refreshed from the book first). Under the book's lock: the
/// clusters' names and decided endpoint counts (borrowed), the reservation of what the listed
/// clusters' series cost (`listed`), then copies of the decisions of only those clusters; the page
/// after, then its text's own reservation (what the shared page holds) in place of the build's.
fn build(state: &AppState, now_us: u64) -> Result<Snapshot, Refused> {
    let (counts, decisions, omitted, max_bytes, units, _reservation): (_, _, _, _, _, Reservation) = {
        let book = state.book();
        let max_cost = state.memory.total_bytes() / 2;
        let page = listed(book.decided_counts().into_iter().map(|(name, n)| (name, name.len(), n)), max_cost);
        let cost = page.cost + METRICS_BASE_BYTES;
        let reservation = state.memory.reserve(cost).ok_or(Refused::Memory(cost))?;
        let units = page.shown.len() + page.series;
        (book.counts(), book.decisions_of(page.shown), page.omitted, book.params().max_bytes, units, reservation)
    };
    state.metrics.set_counts(&counts);
    let mut families = state.metrics.gather();
    // Made from fixed names and help texts: an Err would be a bug here, and an empty page the honest answer.
    if let Ok(per_endpoint) = families_of(decisions.iter(), omitted, max_bytes) {
        families.extend(per_endpoint);
    }
    let mut buf = Vec::new();
    if TextEncoder::new().encode(&families, &mut buf).is_err() {
        buf.clear();
    }
    drop((families, decisions));
    let held = state.memory.reserve(buf.len()).map(Arc::new);
    Ok(Snapshot { built_at_us: now_us, text: Bytes::from(buf), units, held })
}

/// The clusters a page lists, the endpoints of those it leaves out, and what the listed cost.
#[derive(Debug, PartialEq)]
struct Listing<T> {
    shown: Vec<T>,
    /// The listed clusters' endpoints.
    series: usize,
    omitted: usize,
    cost: usize,
}

/// What a page lists of `clusters` (each with its name's length and its endpoint count), in the
/// order given: whole clusters while their endpoints fit `MAX_ENDPOINT_SERIES` and their cost
/// (`metrics_cluster_cost`) fits `max_cost`, none without endpoints (they have no series).
fn listed<T>(clusters: impl IntoIterator<Item = (T, usize, usize)>, max_cost: usize) -> Listing<T> {
    let mut page = Listing { shown: Vec::new(), series: 0, omitted: 0, cost: 0 };
    for (cluster, name_bytes, endpoints) in clusters {
        let cost = metrics_cluster_cost(name_bytes, endpoints);
        if page.series + endpoints > MAX_ENDPOINT_SERIES || page.cost.saturating_add(cost) > max_cost {
            page.omitted += endpoints;
        } else if endpoints > 0 {
            page.series += endpoints;
            page.cost += cost;
            page.shown.push(cluster);
        }
    }
    page
}

/// The per-endpoint gauges of `decisions` (up to `MAX_ENDPOINT_SERIES` endpoints of at most
/// `max_cost`, `listed`) and the book's budget, `max_bytes`.
pub fn endpoint_families(
    decisions: &[ClusterDecision],
    max_cost: usize,
    max_bytes: usize,
) -> prometheus::Result<Vec<MetricFamily>> {
    let page = listed(decisions.iter().map(|d| (d, d.name.len(), d.endpoints.len())), max_cost);
    families_of(page.shown.into_iter(), page.omitted, max_bytes)
}

/// The per-endpoint gauges of the listed clusters, with the count of the endpoints left out,
/// `omitted`, and the book's budget, `max_bytes`.
fn families_of<'a>(
    listed: impl Iterator<Item = &'a ClusterDecision>,
    omitted: usize,
    max_bytes: usize,
) -> prometheus::Result<Vec<MetricFamily>> {
    let labels = ["upstream_cluster", "upstream_endpoint"];
    let weight = GaugeVec::new(
        Opts::new("tailweight_endpoint_weight", "The endpoint's weight in the last recompute (mean 1 per cluster)"),
        &labels,
    )?;
    let qps = GaugeVec::new(
        Opts::new("tailweight_endpoint_qps", "Requests per second the endpoint's reporters saw it serve"),
        &labels,
    )?;
    let ejected =
        GaugeVec::new(Opts::new("tailweight_endpoint_ejected", "1 while the aggregator ejects the endpoint"), &labels)?;
    let omitted_gauge = IntGauge::new(
        "tailweight_endpoint_series_omitted",
        "Tracked endpoints left off this page (beyond the per-page limit of endpoint series)",
    )?;
    let budget = IntGauge::new(
        "tailweight_book_budget_bytes",
        "Bytes the weight book may hold (its share of --memory-limit-mib); compare tailweight_book_bytes",
    )?;
    budget.set(i64::try_from(max_bytes).unwrap_or(i64::MAX));
    for cluster in listed {
        for e in &cluster.endpoints {
            let values = [cluster.name.as_str(), e.address.as_str()];
            weight.with_label_values(&values).set(e.weight);
            qps.with_label_values(&values).set(e.qps);
            ejected.with_label_values(&values).set(if e.ejected { 1.0 } else { 0.0 });
        }
    }
    omitted_gauge.set(i64::try_from(omitted).unwrap_or(i64::MAX));
    let mut families = Vec::new();
    for collector in [&weight as &dyn Collector, &qps, &ejected, &omitted_gauge, &budget] {
        // A vector with no series yet is no family at all (the encoder refuses empty ones).
        families.extend(collector.collect().into_iter().filter(|f| !f.get_metric().is_empty()));
    }
    Ok(families)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tailweight_weights::EndpointDecision;

    fn decision(name: &str, endpoints: usize, ejected_at: Option<usize>) -> ClusterDecision {
        ClusterDecision {
            name: name.into(),
            generation: 1,
            computed_at_us: 0,
            endpoints: (0..endpoints)
                .map(|i| EndpointDecision {
                    address: format!("10.0.0.{i}:80"),
                    weight: 1.0 + i as f64,
                    method: Default::default(),
                    capacity: None,
                    backlog: 0.0,
                    target: 1.0,
                    qps: 10.0 * i as f64,
                    eps: 0.0,
                    inflight: 0.0,
                    view_inflight: 0.0,
                    latency_us: 0,
                    service_time_us: None,
                    concurrency: None,
                    cpu: None,
                    cpu_source: None,
                    error_ratio: 0.0,
                    ejected: ejected_at == Some(i),
                    served_age_ms: None,
                    reporters: 1,
                    counted: true,
                })
                .collect(),
        }
    }

    fn text(families: &[MetricFamily]) -> String {
        let mut buf = Vec::new();
        TextEncoder::new().encode(families, &mut buf).unwrap();
        String::from_utf8(buf).unwrap()
    }

    #[test]
    fn each_endpoint_has_its_weight_qps_and_ejection_by_cluster() {
        let page =
            text(&endpoint_families(&[decision("a", 2, Some(1)), decision("b", 1, None)], usize::MAX, 1234).unwrap());
        for line in [
            "tailweight_endpoint_weight{upstream_cluster=\"a\",upstream_endpoint=\"10.0.0.1:80\"} 2",
            "tailweight_endpoint_qps{upstream_cluster=\"a\",upstream_endpoint=\"10.0.0.1:80\"} 10",
            "tailweight_endpoint_ejected{upstream_cluster=\"a\",upstream_endpoint=\"10.0.0.1:80\"} 1",
            "tailweight_endpoint_ejected{upstream_cluster=\"a\",upstream_endpoint=\"10.0.0.0:80\"} 0",
            "tailweight_endpoint_weight{upstream_cluster=\"b\",upstream_endpoint=\"10.0.0.0:80\"} 1",
            "tailweight_endpoint_series_omitted 0",
            "tailweight_book_budget_bytes 1234",
        ] {
            assert!(page.lines().any(|l| l == line), "{line} missing from\n{page}");
        }
    }

    #[test]
    fn whole_clusters_beyond_the_limit_are_left_out_and_counted() {
        let big = decision("big", MAX_ENDPOINT_SERIES - 1, None);
        let page =
            text(&endpoint_families(&[big, decision("c", 2, None), decision("d", 1, None)], usize::MAX, 1).unwrap());
        assert_eq!(page.lines().filter(|l| l.starts_with("tailweight_endpoint_weight{")).count(), MAX_ENDPOINT_SERIES);
        assert!(!page.contains("upstream_cluster=\"c\"") && page.contains("upstream_cluster=\"d\""));
        assert!(page.lines().any(|l| l == "tailweight_endpoint_series_omitted 2"), "{page}");
    }

    #[test]
    fn nothing_tracked_means_no_endpoint_series() {
        let page = text(&endpoint_families(&[], usize::MAX, 1).unwrap());
        assert!(!page.contains("tailweight_endpoint_weight{"), "{page}");
    }

    #[test]
    fn a_page_lists_whole_clusters_in_order_while_they_fit_and_none_without_endpoints() {
        let clusters = [("a", 0), ("b", MAX_ENDPOINT_SERIES - 1), ("c", 2), ("d", 0), ("e", 1), ("f", 1)];
        let page = listed(clusters.map(|(name, n)| (name, 1, n)), usize::MAX);
        assert_eq!((page.shown, page.omitted), (vec!["b", "e"], 3));
        assert_eq!(page.cost, metrics_cluster_cost(1, MAX_ENDPOINT_SERIES));
        assert_eq!(page.series, MAX_ENDPOINT_SERIES);
        assert_eq!(listed::<&str>([], usize::MAX), Listing { shown: vec![], series: 0, omitted: 0, cost: 0 });
    }

    #[test]
    fn a_page_lists_only_what_its_memory_share_can_hold() {
        let (short, long) = (metrics_cluster_cost(10, 100), metrics_cluster_cost(500, 100));
        assert!(long > 2 * short, "a series' cost grows with its labels: {short} {long}");
        let clusters = [("a", 10, 100), ("b", 500, 100), ("c", 10, 100)];
        let page = listed(clusters, 2 * short);
        assert_eq!((page.shown, page.omitted, page.cost), (vec!["a", "c"], 100, 2 * short));
        assert_eq!(listed(clusters, short - 1).shown, Vec::<&str>::new());
    }

    mod served {
        use super::super::*;
        use crate::config::ServiceConfig;
        use clap::Parser;
        use std::sync::Arc;
        use tailweight_wire::report::{ClusterReport, EndpointReport, Report};

        /// A state whose book holds `clusters` (name, endpoints, principals reporting all of them),
        /// recomputed at 1 s.
        fn state_with(clusters: &[(&str, usize, usize)]) -> Arc<AppState> {
            let config = ServiceConfig::parse_from(["tailweight-aggregator", "--identity", "report"]);
            let state = crate::state_from(&config).unwrap();
            for (name, endpoints, principals) in clusters {
                for p in 0..*principals {
                    let endpoints = (0..*endpoints)
                        .map(|e| EndpointReport {
                            address: format!("10.0.{}.{}:80", e / 250, e % 250),
                            ..Default::default()
                        })
                        .collect();
                    let clusters = vec![ClusterReport { name: name.to_string(), endpoints }];
                    let report = Report {
                        version: 1,
                        reporter: format!("{name}-{p}"),
                        incarnation: 1,
                        interval_ms: 1000,
                        clusters,
                    };
                    state.book().ingest_as(&report, &format!("{name}-sa-{p}"), 1).unwrap();
                }
            }
            state.book().recompute(1_000_000);
            let counts = state.book().counts();
            state.metrics.set_counts(&counts);
            state
        }

        #[test]
        fn made_up_clusters_of_one_principal_named_to_sort_first_do_not_crowd_others_off_the_page() {
            // Two clusters of 2,048 made-up endpoints each (one principal) fill the 4,096 series a
            // page holds; a cluster two principals report is listed first all the same.
            let state = state_with(&[("aaa", 2_048, 1), ("aab", 2_048, 1), ("zzz", 3, 2)]);
            let page = String::from_utf8(page(&state, "scraper", 2_000_000).unwrap().to_vec()).unwrap();
            assert!(page.contains(r#"upstream_cluster="zzz""#), "the honest cluster is listed");
            assert!(page.contains("tailweight_endpoint_series_omitted 2048"), "one made-up cluster is left out");
        }

        #[test]
        fn a_page_takes_its_scan_and_its_series_from_the_requesters_page_rate() {
            // 64 clusters of 64 endpoints: a scan of 1 unit and 64 + 4,096 units a page; a burst of
            // 2 x 8,320 units holds 3 pages at one instant, then 429, while another requester's holds its own.
            let clusters: Vec<String> = (0..64).map(|c| format!("c{c:02}")).collect();
            let shape: Vec<(&str, usize, usize)> = clusters.iter().map(|c| (c.as_str(), 64, 1)).collect();
            let state = state_with(&shape);
            let mut served = 0;
            let refused = loop {
                match page(&state, "scraper", 2_000_000) {
                    Ok(_) => served += 1,
                    Err(refused) => break refused,
                }
                assert!(served < 100, "no page rate");
            };
            assert_eq!(served, 3);
            assert!(matches!(refused, Refused::Rate(_)), "{refused:?}");
            assert!(page(&state, "another", 2_000_000).is_ok());
        }
    }
}
