//! Property tests of report parsing and merging: nothing panics on any input, and whatever was
//! merged, every published weight is finite and non-negative, each cluster's counted weights have mean 1,
//! no weight is below the floor, and the reply passes the filter's own validation.

use proptest::prelude::*;
use tailweight_weights::{WeightBook, WeightParams};
use tailweight_wire::protocol::{Limits, VERSION};
use tailweight_wire::reply::write::write_reply;
use tailweight_wire::report::read::parse_report;
use tailweight_wire::report::write::write_report;
use tailweight_wire::report::{ClusterReport, EndpointReport, Report};

fn endpoint() -> impl Strategy<Value = EndpointReport> {
    (
        0u8..6,
        any::<u64>(),
        any::<u64>(),
        any::<u64>(),
        any::<u32>(),
        prop_oneof![Just(0u64), 1u64..10_000_000, any::<u64>()],
        any::<u64>(),
        proptest::option::of(prop_oneof![Just(0.0f64), 0.0f64..2.0, Just(f64::NAN), Just(-1.0), Just(1e300)]),
        proptest::option::of(any::<u64>()),
    )
        .prop_map(
            |(ip, requests, errors, latency_sum_us, inflight, latency_ewma_us, latency_age_ms, cpu, cpu_age_ms)| {
                EndpointReport {
                    address: format!("10.0.0.{ip}:80"),
                    requests,
                    errors: errors.min(requests),
                    latency_sum_us,
                    inflight,
                    latency_ewma_us,
                    latency_age_ms,
                    cpu,
                    cpu_age_ms,
                    seen_age_ms: latency_ewma_us.checked_rem(7),
                    counted_ms: cpu_age_ms.map(|a| a % 4_000 + 7),
                }
            },
        )
}

fn report() -> impl Strategy<Value = Report> {
    (
        0u8..4,
        0u64..3,
        prop_oneof![Just(1000u32), 10u32..600_000],
        proptest::collection::vec((0u8..3, proptest::collection::vec(endpoint(), 0..6)), 0..3),
    )
        .prop_map(|(reporter, incarnation, interval_ms, clusters)| {
            let mut clusters: Vec<ClusterReport> = clusters
                .into_iter()
                .map(|(c, mut endpoints)| {
                    endpoints.sort_by(|a, b| a.address.cmp(&b.address));
                    endpoints.dedup_by(|a, b| a.address == b.address);
                    ClusterReport { name: format!("c{c}"), endpoints }
                })
                .collect();
            clusters.sort_by(|a, b| a.name.cmp(&b.name));
            clusters.dedup_by(|a, b| a.name == b.name);
            Report { version: VERSION, reporter: format!("r{reporter}"), incarnation, interval_ms, clusters }
        })
}

/// Who the reports come from: the trusted principal, or one of two others.
const PRINCIPALS: [&str; 3] = [tailweight_weights::TRUSTED_PRINCIPAL, "p1", "p2"];

fn check_invariants(book: &WeightBook, now: u64) -> Result<(), TestCaseError> {
    let floor = book.params().floor;
    for cluster in book.decisions(None) {
        let weights: Vec<f64> = cluster.endpoints.iter().map(|e| e.weight).collect();
        for w in &weights {
            prop_assert!(w.is_finite() && *w >= 0.0, "weight {w} in {}", cluster.name);
            prop_assert!(*w >= floor - 1e-9, "weight {w} below the floor");
        }
        // Mean 1 over the endpoints that count (reported by at least half the principals).
        let weights: Vec<f64> = cluster.endpoints.iter().filter(|e| e.counted).map(|e| e.weight).collect();
        if !weights.is_empty() {
            let mean = weights.iter().sum::<f64>() / weights.len() as f64;
            prop_assert!((mean - 1.0).abs() < 1e-6, "mean {mean} of {weights:?}");
        }
        for e in &cluster.endpoints {
            prop_assert!(e.inflight.is_finite() && e.inflight >= 0.0);
            prop_assert!((0.0..=1.0).contains(&e.error_ratio), "error ratio {}", e.error_ratio);
        }
    }
    for (r, principal) in (0..4).flat_map(|r| PRINCIPALS.map(|p| (r, p))) {
        let reply = book.reply_as(principal, &format!("r{r}"), ["c0", "c1", "c2"], now);
        let limits = Limits { max_clusters: 16, max_endpoints_per_cluster: 64 };
        prop_assert!(reply.validate(&limits).is_ok(), "{:?}", reply.validate(&limits));
        // The service's path, the plan taken under the lock and rendered after, writes exactly
        // the typed reply's JSON.
        let mut fast = Vec::new();
        book.reply_plan(principal, &format!("r{r}"), ["c0", "c1", "c2"], now, usize::MAX).render(&mut fast);
        prop_assert_eq!(fast, write_reply(&reply));
    }
    Ok(())
}

proptest! {
    // Failures print their minimal input; no regression files are written into the tree.
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn any_bytes_parse_without_panic(body in proptest::collection::vec(any::<u8>(), 0..512)) {
        if let Err(e) = parse_report(&body, &Limits::default()) {
            prop_assert!(!e.to_string().contains('\n'));
        }
    }

    #[test]
    fn mangled_reports_parse_without_panic(r in report(), cut in 0usize..2000, byte in any::<u8>(), at in 0usize..2000) {
        let mut body = write_report(&r);
        if !body.is_empty() {
            let i = at % body.len();
            body[i] = byte;
        }
        body.truncate(cut.max(1));
        let _ = parse_report(&body, &Limits::default());
    }

    #[test]
    fn merging_any_valid_reports_keeps_the_invariants(
        steps in proptest::collection::vec((report(), 0usize..3, 0u64..3_000_000, any::<bool>(), any::<bool>()), 1..40),
        cpu in proptest::collection::vec((0u8..6, prop_oneof![0.0f64..2.0, Just(f64::NAN), Just(-3.0)]), 0..6),
    ) {
        let mut book = WeightBook::new(WeightParams::default());
        let mut now = 1_000_000u64;
        for (ip, value) in cpu {
            book.set_external_cpu(format!("10.0.0.{ip}").parse().unwrap(), value, now);
        }
        for (report, principal, dt, recompute, expire) in steps {
            now += dt;
            // Only what validation lets through reaches the book, as in the service.
            if report.validate(&Limits::default()).is_ok() {
                let _ = book.ingest_as(&report, PRINCIPALS[principal], now);
            }
            if recompute {
                book.recompute(now);
                check_invariants(&book, now)?;
            }
            if expire {
                book.expire(now);
            }
        }
        book.recompute(now);
        check_invariants(&book, now)?;
    }

    #[test]
    fn a_refused_report_changes_nothing(first in report(), second in report()) {
        let p = WeightParams { max_reporters: 1, max_clusters: 1, max_endpoints_per_cluster: 2, max_observations: 3, ..Default::default() };
        let mut book = WeightBook::new(p);
        let _ = book.ingest(&first, 1_000_000);
        book.recompute(1_000_000);
        let before = (book.counts(), book.decisions(None));
        if book.ingest(&second, 2_000_000).is_err() {
            prop_assert_eq!((book.counts(), book.decisions(None)), before);
        }
    }
}
