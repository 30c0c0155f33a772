//! A deterministic host for the sidecar (feature `test-host`): one proxy (`TestProxy`) whose
//! workers share its state, metrics, clock and calls out, each worker a `TestWorker` holding its
//! `Plugin`. The clock moves only when a test moves it; randomness is seeded; calls out wait in a
//! list until the test answers them (or never does: a lost answer), in any order (late answers).
//! Metrics are process-wide as in Envoy: a name defined twice is one metric.
//!
//! The instruction-count benchmark (bench/filter-native) drives the same workers, so the counts and
//! the tests see the same code. Host calls are counted by method (`host_calls`) for it.

use crate::host::{Attribute, CallAnswer, CallToken, Exchange, HeaderMap, Host, LogLevel, MetricKind, OutgoingCall};
use crate::shared_store::SharedStore;
use crate::{Plugin, Stream};
use std::borrow::Cow;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use tailweight_math::rng::Rng;

/// A call a worker made, waiting for the test to answer it.
#[derive(Debug, Clone, PartialEq)]
pub struct SentCall {
    pub worker: usize,
    pub token: CallToken,
    pub cluster: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub timeout_ms: u64,
    pub sent_us: u64,
}

impl SentCall {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

/// One proxy: what its workers share.
pub struct TestProxy {
    now_us: Cell<u64>,
    rng: RefCell<Rng>,
    shared: RefCell<SharedStore>,
    /// Shared-state writes are refused while set (a host out of room).
    pub refuse_shared_writes: Cell<bool>,
    /// Calls out are refused with this word while set (e.g. the cluster is gone).
    pub refuse_calls: Cell<Option<&'static str>>,
    /// Every cluster's load balancer picks from the workers' balancers while set (see
    /// `Host::load_balancer_picks`).
    pub load_balancer_picks: Cell<bool>,
    metrics: RefCell<Vec<(String, MetricKind, i64)>>,
    logs: RefCell<Vec<(LogLevel, String)>>,
    calls: RefCell<Vec<SentCall>>,
    next_token: Cell<CallToken>,
    tick_periods: RefCell<HashMap<usize, u64>>,
    env: RefCell<Vec<(String, String)>>,
    node_id: RefCell<Option<String>>,
    host_calls: RefCell<Vec<(&'static str, u64)>>,
}

impl TestProxy {
    pub fn new(start_us: u64, seed: u64) -> TestProxy {
        TestProxy {
            now_us: Cell::new(start_us),
            rng: RefCell::new(Rng::new(seed)),
            shared: RefCell::default(),
            refuse_shared_writes: Cell::new(false),
            refuse_calls: Cell::new(None),
            load_balancer_picks: Cell::new(false),
            metrics: RefCell::default(),
            logs: RefCell::default(),
            calls: RefCell::default(),
            next_token: Cell::new(0),
            tick_periods: RefCell::default(),
            env: RefCell::default(),
            node_id: RefCell::new(Some("sidecar~10.0.0.1~client-0.ns~ns.svc.cluster.local".into())),
            host_calls: RefCell::default(),
        }
    }

    pub fn now_us(&self) -> u64 {
        self.now_us.get()
    }

    pub fn advance_us(&self, by_us: u64) {
        self.now_us.set(self.now_us.get() + by_us);
    }

    pub fn set_env(&self, name: &str, value: &str) {
        self.env.borrow_mut().push((name.into(), value.into()));
    }

    /// A metric's value (0: never defined or never moved).
    pub fn metric(&self, name: &str) -> i64 {
        self.metrics.borrow().iter().find(|(n, _, _)| n == name).map_or(0, |m| m.2)
    }

    /// Set every metric whose name starts with `prefix` to `value` (to see who writes it next).
    pub fn set_metrics(&self, prefix: &str, value: i64) {
        for m in self.metrics.borrow_mut().iter_mut().filter(|(n, _, _)| n.starts_with(prefix)) {
            m.2 = value;
        }
    }

    /// Every metric whose name starts with `prefix`, with its value.
    pub fn metrics_named(&self, prefix: &str) -> Vec<(String, i64)> {
        self.metrics
            .borrow()
            .iter()
            .filter(|(n, _, _)| n.starts_with(prefix))
            .map(|(n, _, v)| (n.clone(), *v))
            .collect()
    }

    pub fn logs(&self) -> Vec<(LogLevel, String)> {
        self.logs.borrow().clone()
    }

    /// The calls made and not yet taken, oldest first (taking them leaves them unanswered until
    /// the test answers).
    pub fn take_calls(&self) -> Vec<SentCall> {
        std::mem::take(&mut *self.calls.borrow_mut())
    }

    /// The tick period worker `worker` last asked for.
    pub fn tick_period_ms(&self, worker: usize) -> Option<u64> {
        self.tick_periods.borrow().get(&worker).copied()
    }

    /// The raw shared value under `key`.
    pub fn shared_value(&self, key: &str) -> Option<Vec<u8>> {
        self.shared.borrow().value(key).map(<[u8]>::to_vec)
    }

    pub fn shared_keys(&self) -> Vec<String> {
        self.shared.borrow().keys()
    }

    /// Host calls by method since the last take, and reset.
    pub fn take_host_calls(&self) -> Vec<(&'static str, u64)> {
        std::mem::take(&mut *self.host_calls.borrow_mut())
    }

    fn count(&self, method: &'static str) {
        let mut calls = self.host_calls.borrow_mut();
        match calls.iter_mut().find(|(m, _)| std::ptr::eq(*m, method)) {
            Some(entry) => entry.1 += 1,
            None => calls.push((method, 1)),
        }
    }

    /// Worker `worker`'s host.
    pub fn host(&self, worker: usize) -> TestHost<'_> {
        TestHost { proxy: self, worker }
    }
}

/// One worker's view of its proxy.
#[derive(Clone, Copy)]
pub struct TestHost<'p> {
    proxy: &'p TestProxy,
    worker: usize,
}

impl Host for TestHost<'_> {
    #[inline(never)]
    fn now_us(&self) -> u64 {
        self.proxy.count("now_us");
        self.proxy.now_us.get()
    }

    #[inline(never)]
    fn random_u64(&self) -> u64 {
        self.proxy.count("random_u64");
        self.proxy.rng.borrow_mut().next_u64()
    }

    #[inline(never)]
    fn log(&self, level: LogLevel, message: &str) {
        self.proxy.count("log");
        self.proxy.logs.borrow_mut().push((level, message.to_string()));
    }

    #[inline(never)]
    fn define_metric(&self, kind: MetricKind, name: &str) -> Option<u32> {
        self.proxy.count("define_metric");
        let mut metrics = self.proxy.metrics.borrow_mut();
        let at = metrics.iter().position(|(n, _, _)| n == name).unwrap_or_else(|| {
            metrics.push((name.to_string(), kind, 0));
            metrics.len() - 1
        });
        u32::try_from(at).ok()
    }

    #[inline(never)]
    fn increment_metric(&self, metric: u32, by: i64) {
        self.proxy.count("increment_metric");
        if let Some(m) = self.proxy.metrics.borrow_mut().get_mut(metric as usize) {
            m.2 += by;
        }
    }

    #[inline(never)]
    fn record_metric(&self, metric: u32, value: u64) {
        self.proxy.count("record_metric");
        if let Some(m) = self.proxy.metrics.borrow_mut().get_mut(metric as usize) {
            m.2 = i64::try_from(value).unwrap_or(i64::MAX);
        }
    }

    #[inline(never)]
    fn shared_get(&self, key: &str) -> (Option<Vec<u8>>, Option<u32>) {
        self.proxy.count("shared_get");
        self.proxy.shared.borrow().get(key)
    }

    #[inline(never)]
    fn shared_set(&self, key: &str, value: &[u8], cas: Option<u32>) -> bool {
        self.proxy.count("shared_set");
        !self.proxy.refuse_shared_writes.get() && self.proxy.shared.borrow_mut().set(key, value, cas)
    }

    #[inline(never)]
    fn http_call(&self, call: &OutgoingCall) -> Result<CallToken, &'static str> {
        self.proxy.count("http_call");
        if let Some(word) = self.proxy.refuse_calls.get() {
            return Err(word);
        }
        let token = self.proxy.next_token.get() + 1;
        self.proxy.next_token.set(token);
        self.proxy.calls.borrow_mut().push(SentCall {
            worker: self.worker,
            token,
            cluster: call.cluster.to_string(),
            headers: call.headers.iter().map(|(n, v)| (n.to_string(), v.to_string())).collect(),
            body: call.body.to_vec(),
            timeout_ms: call.timeout_ms,
            sent_us: self.proxy.now_us.get(),
        });
        Ok(token)
    }

    #[inline(never)]
    fn set_tick_period_ms(&self, period_ms: u64) {
        self.proxy.count("set_tick_period_ms");
        self.proxy.tick_periods.borrow_mut().insert(self.worker, period_ms);
    }

    fn env(&self, name: &str) -> Option<String> {
        self.proxy.env.borrow().iter().find(|(n, _)| n == name).map(|(_, v)| v.clone())
    }

    fn node_id(&self) -> Option<String> {
        self.proxy.node_id.borrow().clone()
    }

    fn load_balancer_picks(&self, _cluster: &str) -> bool {
        self.proxy.load_balancer_picks.get()
    }
}

/// A request as the host holds it: its headers, its response's, and its attributes.
#[derive(Debug, Clone, Default)]
pub struct TestExchange {
    pub request: Vec<(String, String)>,
    pub response: Vec<(String, String)>,
    pub trailers: Vec<(String, String)>,
    pub texts: Vec<(Attribute, String)>,
    pub numbers: Vec<(Attribute, u64)>,
}

impl TestExchange {
    /// A GET to `cluster` (the route's cluster attribute) with `:authority` `authority`.
    pub fn to_cluster(cluster: &str) -> TestExchange {
        TestExchange {
            request: vec![
                (":method".into(), "GET".into()),
                (":path".into(), "/".into()),
                (":authority".into(), "svc".into()),
            ],
            texts: vec![(Attribute::ClusterName, cluster.into())],
            ..TestExchange::default()
        }
    }

    pub fn with_request_header(mut self, name: &str, value: &str) -> Self {
        self.request.push((name.into(), value.into()));
        self
    }

    pub fn set_text(&mut self, attribute: Attribute, value: &str) {
        self.texts.retain(|(a, _)| *a != attribute);
        self.texts.push((attribute, value.into()));
    }

    pub fn set_number(&mut self, attribute: Attribute, value: u64) {
        self.numbers.retain(|(a, _)| *a != attribute);
        self.numbers.push((attribute, value));
    }

    fn map(&self, map: HeaderMap) -> &Vec<(String, String)> {
        match map {
            HeaderMap::Request => &self.request,
            HeaderMap::Response => &self.response,
            HeaderMap::ResponseTrailers => &self.trailers,
        }
    }

    fn map_mut(&mut self, map: HeaderMap) -> &mut Vec<(String, String)> {
        match map {
            HeaderMap::Request => &mut self.request,
            HeaderMap::Response => &mut self.response,
            HeaderMap::ResponseTrailers => &mut self.trailers,
        }
    }

    /// The request's header `name`.
    pub fn request_header(&self, name: &str) -> Option<&str> {
        self.request.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    pub fn response_header(&self, name: &str) -> Option<&str> {
        self.response.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

impl Exchange for TestExchange {
    fn header(&self, map: HeaderMap, name: &str) -> Option<Cow<'_, str>> {
        self.map(map).iter().find(|(n, _)| n == name).map(|(_, v)| Cow::Borrowed(v.as_str()))
    }

    fn set_header(&mut self, map: HeaderMap, name: &str, value: &str) {
        let headers = self.map_mut(map);
        headers.retain(|(n, _)| n != name);
        headers.push((name.into(), value.into()));
    }

    fn remove_header(&mut self, map: HeaderMap, name: &str) {
        self.map_mut(map).retain(|(n, _)| n != name);
    }

    /// As the proxy-wasm shell does: the override header.
    fn steer(&mut self, header: &str, hosts: &str) {
        self.set_header(HeaderMap::Request, header, hosts);
    }

    fn text_attribute(&self, attribute: Attribute) -> Option<String> {
        self.texts.iter().find(|(a, _)| *a == attribute).map(|(_, v)| v.clone()).filter(|v| !v.is_empty())
    }

    fn number_attribute(&self, attribute: Attribute) -> Option<u64> {
        self.numbers.iter().find(|(a, _)| *a == attribute).map(|(_, v)| *v)
    }
}

/// An answer to a call out.
#[derive(Debug, Clone, Default)]
pub struct TestAnswer {
    pub headers: Vec<(String, String)>,
    pub trailers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl TestAnswer {
    /// An answer with `:status` `status` and `body`.
    pub fn status(status: u16, body: &[u8]) -> TestAnswer {
        TestAnswer {
            headers: vec![(":status".into(), status.to_string())],
            body: body.to_vec(),
            ..TestAnswer::default()
        }
    }

    /// A failed or timed-out call: no headers.
    pub fn failed() -> TestAnswer {
        TestAnswer::default()
    }
}

impl CallAnswer for TestAnswer {
    fn header(&self, name: &str) -> Option<String> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone())
    }

    fn trailer(&self, name: &str) -> Option<String> {
        self.trailers.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone())
    }

    fn body_size(&self) -> usize {
        self.body.len()
    }

    fn body(&self, max: usize) -> Vec<u8> {
        self.body[..max.min(self.body.len())].to_vec()
    }
}

/// How a request went, for `TestWorker::serve`.
#[derive(Debug, Clone, Copy)]
pub struct Served<'a> {
    /// The endpoint that answered (`upstream.address`), if any.
    pub by: Option<&'a str>,
    /// The HTTP status (0: no response headers at all: a reset before any answer).
    pub status: u16,
    pub latency_us: u64,
}

/// One worker of a `TestProxy`: its plugin, driven through the proxy's host.
pub struct TestWorker {
    pub index: usize,
    pub plugin: Plugin,
}

impl TestWorker {
    /// Worker `index`, configured with `configuration` (JSON).
    pub fn configured(proxy: &TestProxy, index: usize, configuration: &str) -> TestWorker {
        let mut plugin = Plugin::default();
        plugin.configure(&proxy.host(index), configuration.as_bytes());
        TestWorker { index, plugin }
    }

    /// The slot its worker holds (None: not a client worker).
    pub fn plugin_slot(&self) -> Option<crate::SlotHold> {
        match &self.plugin {
            Plugin::Client(w) => Some(w.slot()),
            _ => None,
        }
    }

    pub fn tick(&mut self, proxy: &TestProxy) {
        self.plugin.tick(&proxy.host(self.index));
    }

    pub fn answer(&mut self, proxy: &TestProxy, token: CallToken, answer: &TestAnswer) {
        self.plugin.on_call_answer(&proxy.host(self.index), token, answer);
    }

    /// A new stream at its request headers.
    pub fn start(&mut self, proxy: &TestProxy, exchange: &mut TestExchange) -> Stream {
        let mut stream = self.plugin.new_stream();
        self.plugin.on_request_headers(&mut stream, &proxy.host(self.index), exchange);
        stream
    }

    /// The response headers of `stream` (`status`, served by `by`), then its end.
    pub fn finish(&mut self, proxy: &TestProxy, mut stream: Stream, exchange: &mut TestExchange, served: Served) {
        let host = proxy.host(self.index);
        if let Some(by) = served.by {
            exchange.set_text(Attribute::UpstreamAddress, by);
        }
        if served.status > 0 {
            exchange.response.push((":status".into(), served.status.to_string()));
            self.plugin.on_response_headers(&mut stream, &host, exchange);
        }
        exchange.set_number(Attribute::ResponseCode, u64::from(served.status));
        self.plugin.on_stream_done(&mut stream, &host, exchange);
    }

    /// One whole request to `cluster`: its request headers now, then `served.latency_us` later its
    /// answer. Returns the override header the worker wrote (None: not steered).
    pub fn serve(&mut self, proxy: &TestProxy, cluster: &str, served: Served) -> Option<String> {
        let mut exchange = TestExchange::to_cluster(cluster);
        let stream = self.start(proxy, &mut exchange);
        let steered = exchange.request_header(OVERRIDE_HEADER).map(str::to_string);
        proxy.advance_us(served.latency_us);
        self.finish(proxy, stream, &mut exchange, served);
        steered
    }
}

/// The default override header (`FilterConfig::default().header`).
pub const OVERRIDE_HEADER: &str = "x-gateway-destination-endpoint";
