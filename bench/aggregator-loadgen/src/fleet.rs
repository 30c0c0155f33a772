//! The simulated sidecars: their reports, rendered once per reporter and patched with growing
//! counters.

use std::sync::atomic::{AtomicU64, Ordering};
use tailweight_wire::protocol::VERSION;
use tailweight_wire::report::write::write_report;
use tailweight_wire::report::{ClusterReport, EndpointReport, Report};

/// The header the aggregator takes the principal from in this run.
pub(crate) const PRINCIPAL_HEADER: &str = "x-tailweight-principal";

/// Simulated sidecars: each report advances one reporter's cumulative counters. Each reporter's
/// body is rendered once (by the filter's writer, from a real `Report`) with its counters in fixed-width slots
/// padded by spaces (JSON whitespace); a report then costs a copy and a few integer writes, so
/// the driver is not the bottleneck.
#[derive(Debug)]
pub(crate) struct Fleet {
    pub reporters: usize,
    pub endpoints: usize,
    pub clusters: usize,
    /// Honest principals (0: reports carry none).
    pub principals: usize,
    pub next: AtomicU64,
    pub templates: Vec<Template>,
}

#[derive(Debug)]
pub(crate) struct Template {
    bytes: Vec<u8>,
    /// (offset, width, endpoint index, which counter: 0 requests, 1 errors, 2 latency sum)
    slots: Vec<(usize, usize, usize, u8)>,
}

/// Marker values written where the counters go; replaced by padded slots.
pub(crate) const MARK: [u64; 3] = [9_000_000_001, 9_000_000_002, 9_000_000_000_003];

impl Fleet {
    pub fn new(reporters: usize, endpoints: usize, clusters: usize, principals: usize) -> Fleet {
        let mut fleet =
            Fleet { reporters, endpoints, clusters, principals, next: AtomicU64::new(0), templates: Vec::new() };
        fleet.templates = (0..reporters).map(|r| fleet.template(r)).collect();
        fleet
    }

    pub fn report(&self, reporter: usize, counters: impl Fn(usize) -> [u64; 3]) -> Report {
        let cluster = reporter % self.clusters;
        let endpoints = (0..self.endpoints)
            .map(|e| {
                let [requests, errors, latency_sum_us] = counters(e);
                let latency = 1_000 + 100 * e as u64;
                EndpointReport {
                    address: Fleet::address(cluster, e),
                    requests,
                    errors,
                    latency_sum_us,
                    inflight: (e % 5) as u32,
                    latency_ewma_us: latency,
                    latency_age_ms: 20,
                    cpu: None,
                    cpu_age_ms: None,
                    seen_age_ms: Some(20),
                    counted_ms: None,
                }
            })
            .collect();
        Report {
            version: VERSION,
            reporter: format!("client-{reporter}.bench"),
            incarnation: 1,
            // Slow enough that no reporter expires between its reports at the lowest rate.
            interval_ms: 10_000,
            clusters: vec![ClusterReport { name: Fleet::cluster_name(cluster), endpoints }],
        }
    }

    pub fn template(&self, reporter: usize) -> Template {
        let json = String::from_utf8(write_report(&self.report(reporter, |_| MARK))).unwrap_or_default();
        let (mut bytes, mut slots) = (Vec::with_capacity(json.len() + 64), Vec::new());
        let mut rest = json.as_str();
        let mut seen = [0usize; 3];
        loop {
            let next = MARK.iter().enumerate().filter_map(|(k, m)| rest.find(&m.to_string()).map(|at| (at, k))).min();
            let Some((at, k)) = next else { break };
            bytes.extend_from_slice(&rest.as_bytes()[..at]);
            let width = MARK[k].to_string().len() + 4;
            slots.push((bytes.len(), width, seen[k], k as u8));
            seen[k] += 1;
            bytes.extend(std::iter::repeat_n(b' ', width));
            rest = &rest[at + MARK[k].to_string().len()..];
        }
        bytes.extend_from_slice(rest.as_bytes());
        Template { bytes, slots }
    }

    /// Endpoint e is (1 + e/10) times slower than endpoint 0; 1% errors.
    pub fn counters(round: u64, e: usize) -> [u64; 3] {
        let requests = round * 100;
        let errors = round;
        [requests, errors, (requests - errors) * (1_000 + 100 * e as u64)]
    }

    /// The principal reporter `r` reports as: the reporters of one cluster are spread over them.
    pub fn principal(&self, reporter: usize) -> Option<String> {
        (self.principals > 0).then(|| format!("sa-{}", (reporter / self.clusters) % self.principals))
    }

    pub fn address(cluster: usize, e: usize) -> String {
        format!("10.{}.{}.{}:8080", cluster / 250, cluster % 250, e + 1)
    }

    pub fn cluster_name(cluster: usize) -> String {
        format!("outbound|8080||svc-{cluster}.bench.svc.cluster.local")
    }

    pub fn body(&self) -> Vec<u8> {
        self.next_report().1
    }

    /// The next report: its reporter and body.
    pub fn next_report(&self) -> (usize, Vec<u8>) {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let reporter = (n % self.reporters as u64) as usize;
        let round = n / self.reporters as u64 + 1;
        let Some(t) = self.templates.get(reporter) else { return (reporter, Vec::new()) };
        let mut body = t.bytes.clone();
        for &(at, width, e, k) in &t.slots {
            let value = Fleet::counters(round, e)[usize::from(k)];
            if !write_padded(&mut body[at..at + width], value) {
                // Too wide for its slot (a very long run): render the whole report instead.
                let whole = self.report(reporter, |e| Fleet::counters(round, e));
                return (reporter, write_report(&whole));
            }
        }
        (reporter, body)
    }
}

/// Write `value` right-aligned into `slot` (already spaces); false if it does not fit.
pub(crate) fn write_padded(slot: &mut [u8], mut value: u64) -> bool {
    let mut i = slot.len();
    loop {
        if i == 0 {
            return false;
        }
        i -= 1;
        slot[i] = b'0' + (value % 10) as u8;
        value /= 10;
        if value == 0 {
            return true;
        }
    }
}
