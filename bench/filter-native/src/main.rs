//! The sidecar's code natively, driven through its test host (tailweight-sidecar's `test_host`,
//! the same one its tests use), for instruction counts by function (callgrind) and host calls by
//! method, per request and per tick. Each worker ("VM") is a `TestWorker` of one `TestProxy`; the
//! workers take turns on one thread (the proxy's shared state is the host's, as in Envoy). Requests
//! arrive at `--rate`, `--inflight` at most at a time, answered after a seed-fib-like service time
//! by the endpoint Envoy's override_host would use (the override header's first address, else a
//! round robin); ticks come at the period each worker asks for; report calls are answered with
//! `--reply`'s body (none: they fail).
//!
//!     tailweight-filter-native [--requests N] [--rate RPS] [--vms N] [--endpoints N]
//!         [--inflight N] [--config JSON] [--reply FILE]
//!
//! Prints, per worker: requests, ticks, host calls per request and per tick by method (`Host`'s
//! methods; the request's header and attribute reads are `Exchange`'s and not counted here).

use std::collections::HashMap;
use tailweight_sidecar::host::Attribute;
use tailweight_sidecar::test_host::{Served, TestAnswer, TestExchange, TestProxy, TestWorker, OVERRIDE_HEADER};
use tailweight_sidecar::Stream;

struct Args {
    requests: u64,
    rate: f64,
    vms: usize,
    endpoints: usize,
    inflight: usize,
    config: String,
    reply: Option<Vec<u8>>,
}

fn args() -> Args {
    let mut a =
        Args { requests: 10_000, rate: 75.0, vms: 2, endpoints: 15, inflight: 4, config: "{}".into(), reply: None };
    let argv: Vec<String> = std::env::args().skip(1).collect();
    for pair in argv.chunks(2) {
        let value = pair.get(1).cloned().unwrap_or_default();
        match pair[0].as_str() {
            "--requests" => a.requests = value.parse().expect("--requests N"),
            "--rate" => a.rate = value.parse().expect("--rate RPS"),
            "--vms" => a.vms = value.parse().expect("--vms N"),
            "--endpoints" => a.endpoints = value.parse().expect("--endpoints N"),
            "--inflight" => a.inflight = value.parse().expect("--inflight N"),
            "--config" => a.config = value,
            "--reply" => a.reply = Some(std::fs::read(&value).expect("--reply FILE")),
            other => panic!("unknown argument {other}"),
        }
    }
    a
}

const CLUSTER: &str = "backends";

/// Service time of endpoint `i` (seed-fib-like: 10 ms x 1, 1.6, 2.6 or 6.9).
fn service_us(i: usize) -> u64 {
    let speed = [1.0, 1.0, 1.0, 1.618, 1.618, 2.618, 2.618, 2.618, 2.618, 2.618, 2.618, 2.618, 2.618, 2.618, 6.854];
    (10_000.0 * speed[i % speed.len()]) as u64
}

struct Open {
    done_us: u64,
    stream: Stream,
    exchange: TestExchange,
    served: usize,
}

/// One worker's run: its open requests, next tick, and host calls counted by phase.
struct Vm {
    worker: TestWorker,
    open: Vec<Open>,
    next_tick_us: u64,
    ticks: u64,
    requests: u64,
    fallback: usize,
    request_calls: HashMap<&'static str, u64>,
    tick_calls: HashMap<&'static str, u64>,
}

fn add(into: &mut HashMap<&'static str, u64>, from: Vec<(&'static str, u64)>) {
    for (k, v) in from {
        *into.entry(k).or_default() += v;
    }
}

fn finish(proxy: &TestProxy, vm: &mut Vm, addresses: &[String], o: Open) {
    let Open { stream, mut exchange, served, .. } = o;
    let served = Served { by: Some(&addresses[served]), status: 200, latency_us: 0 };
    vm.worker.finish(proxy, stream, &mut exchange, served);
}

fn main() {
    let a = args();
    let proxy = TestProxy::new(1_700_000_000_000_000, 7);
    let addresses: Vec<String> = (0..a.endpoints).map(|i| format!("10.0.{}.{}:8080", i / 200, i % 200 + 1)).collect();
    let config = a.config.clone();
    let mut vms: Vec<Vm> = (0..a.vms)
        .map(|i| Vm {
            worker: TestWorker::configured(&proxy, i, &config),
            open: Vec::new(),
            next_tick_us: proxy.now_us() + 200_000,
            ticks: 0,
            requests: 0,
            fallback: 0,
            request_calls: HashMap::new(),
            tick_calls: HashMap::new(),
        })
        .collect();
    proxy.take_host_calls();
    let interval_us = (1e6 / a.rate) as u64;
    let answer = a.reply.as_deref().map_or_else(TestAnswer::failed, |body| TestAnswer::status(200, body));
    for n in 0..a.requests {
        let vm = &mut vms[n as usize % a.vms];
        let now = proxy.now_us();
        vm.open.sort_by_key(|o| o.done_us);
        while vm.open.first().is_some_and(|o| o.done_us <= now) || vm.open.len() >= a.inflight {
            let o = vm.open.remove(0);
            finish(&proxy, vm, &addresses, o);
        }
        add(&mut vm.request_calls, proxy.take_host_calls());
        if now >= vm.next_tick_us {
            vm.worker.tick(&proxy);
            for call in proxy.take_calls() {
                vm.worker.answer(&proxy, call.token, &answer);
            }
            vm.ticks += 1;
            add(&mut vm.tick_calls, proxy.take_host_calls());
            vm.next_tick_us = now + proxy.tick_period_ms(vm.worker.index).unwrap_or(200).max(1) * 1_000;
        }
        let mut exchange = TestExchange::to_cluster(CLUSTER);
        let stream = vm.worker.start(&proxy, &mut exchange);
        let steered = exchange.request_header(OVERRIDE_HEADER).and_then(|h| h.split(',').next().map(str::to_string));
        let served = match steered.and_then(|s| addresses.iter().position(|a| *a == s)) {
            Some(i) => i,
            None => {
                vm.fallback += 1;
                vm.fallback % addresses.len()
            }
        };
        exchange.set_number(Attribute::UpstreamAttempts, 1);
        vm.open.push(Open { done_us: now + service_us(served), stream, exchange, served });
        vm.requests += 1;
        add(&mut vm.request_calls, proxy.take_host_calls());
        proxy.advance_us(interval_us);
    }
    for vm in &mut vms {
        for o in std::mem::take(&mut vm.open) {
            finish(&proxy, vm, &addresses, o);
        }
        add(&mut vm.request_calls, proxy.take_host_calls());
    }
    let per = |calls: &HashMap<&'static str, u64>, n: u64| {
        let mut v: Vec<_> = calls.iter().map(|(k, c)| format!("{k} {:.2}", *c as f64 / n.max(1) as f64)).collect();
        v.sort();
        v.join(", ")
    };
    for (i, vm) in vms.iter().enumerate() {
        println!(
            "vm {i}: {} requests ({} to the fallback), {} ticks\n  host calls per request: {}\n  host calls per tick: {}",
            vm.requests,
            vm.fallback,
            vm.ticks,
            per(&vm.request_calls, vm.requests),
            per(&vm.tick_calls, vm.ticks)
        );
    }
    println!("picks steered (all workers): {}", proxy.metric("tailweight.picks"));
}
