//! What the sidecar's integration tests share: a cluster of backends that answer a worker's
//! requests the way Envoy and the endpoints would (the override header's first address if it is
//! in the cluster, else the fallback load balancer's round robin), and reports read back.

#![allow(dead_code)]

use tailweight_sidecar::host::Attribute;
use tailweight_sidecar::test_host::{Served, TestExchange, TestProxy, TestWorker, OVERRIDE_HEADER};
use tailweight_wire::protocol::Limits;
use tailweight_wire::report::read::parse_report;
use tailweight_wire::report::Report;

pub const CLUSTER: &str = "outbound|8080||backends.shop.svc.cluster.local";
pub const START_US: u64 = 1_700_000_000_000_000;
pub const MS: u64 = 1_000;

/// The backends of `CLUSTER` as Envoy sees them.
pub struct Backends {
    pub addresses: Vec<String>,
    /// Endpoints answering 503.
    pub failing: Vec<String>,
    /// Latency of each answer, by endpoint (default 5 ms).
    pub latency_us: Vec<(String, u64)>,
    /// Every endpoint that served a request the worker steered to it, in order.
    pub steered: Vec<String>,
    next_fallback: usize,
}

impl Backends {
    pub fn new(addresses: &[&str]) -> Backends {
        Backends {
            addresses: addresses.iter().map(|a| a.to_string()).collect(),
            failing: Vec::new(),
            latency_us: Vec::new(),
            steered: Vec::new(),
            next_fallback: 0,
        }
    }

    pub fn fail(&mut self, address: &str, failing: bool) {
        self.failing.retain(|a| a != address);
        if failing {
            self.failing.push(address.to_string());
        }
    }

    fn latency_of(&self, address: &str) -> u64 {
        self.latency_us.iter().find(|(a, _)| a == address).map_or(5 * MS, |(_, l)| *l)
    }

    /// One request of `worker` to `CLUSTER`: picked, answered by the endpoint Envoy would use (the
    /// first address of the override header that is in the cluster, else the fallback's next),
    /// after its latency. Returns the endpoint that served.
    pub fn request(&mut self, proxy: &TestProxy, worker: &mut TestWorker) -> String {
        let mut exchange = TestExchange::to_cluster(CLUSTER);
        let stream = worker.start(proxy, &mut exchange);
        let steered = exchange.request_header(OVERRIDE_HEADER).and_then(|h| h.split(',').next()).map(str::to_string);
        let served = match steered.filter(|s| self.addresses.contains(s)) {
            Some(s) => {
                self.steered.push(s.clone());
                s
            }
            None => {
                self.next_fallback += 1;
                self.addresses[self.next_fallback % self.addresses.len()].clone()
            }
        };
        let status = if self.failing.contains(&served) { 503 } else { 200 };
        exchange.set_number(Attribute::UpstreamAttempts, 1);
        proxy.advance_us(self.latency_of(&served));
        worker.finish(proxy, stream, &mut exchange, Served { by: Some(&served), status, latency_us: 0 });
        served
    }

    /// How many steered requests `address` served since the log was last cleared.
    pub fn steered_to(&self, address: &str) -> usize {
        self.steered.iter().filter(|s| *s == address).count()
    }

    /// `n` requests, `gap_us` apart (the worker ticks whenever its period is due); how many each
    /// endpoint served.
    pub fn run(&mut self, proxy: &TestProxy, worker: &mut TestWorker, n: usize, gap_us: u64) -> Vec<(String, usize)> {
        let mut served: Vec<(String, usize)> = self.addresses.iter().map(|a| (a.clone(), 0)).collect();
        let mut next_tick = proxy.now_us();
        for _ in 0..n {
            if proxy.now_us() >= next_tick {
                worker.tick(proxy);
                next_tick = proxy.now_us() + proxy.tick_period_ms(worker.index).unwrap_or(200) * MS;
            }
            let by = self.request(proxy, worker);
            if let Some(entry) = served.iter_mut().find(|(a, _)| *a == by) {
                entry.1 += 1;
            }
            proxy.advance_us(gap_us);
        }
        served
    }
}

/// How many of `counts` went to `address`.
pub fn count_of(counts: &[(String, usize)], address: &str) -> usize {
    counts.iter().find(|(a, _)| a == address).map_or(0, |(_, n)| *n)
}

/// A client worker's configuration: `extra` JSON members after the cluster list.
pub fn client_config(extra: &str) -> String {
    let sep = if extra.is_empty() { "" } else { ", " };
    format!(r#"{{"clusters": ["{CLUSTER}"]{sep}{extra}}}"#)
}

/// The configuration's aggregator member.
pub const AGGREGATOR: &str = r#""aggregator": {"cluster": "aggregator", "report_interval_ms": 1000}"#;

/// The reports among `calls` (by path), read as the aggregator reads them.
pub fn reports(calls: &[tailweight_sidecar::test_host::SentCall]) -> Vec<Report> {
    calls
        .iter()
        .filter(|c| c.header(":path") == Some("/v1/report"))
        .map(|c| parse_report(&c.body, &Limits::default()).expect("a report the aggregator reads"))
        .collect()
}
