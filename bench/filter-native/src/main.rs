//! The filter's callbacks driven natively by a simulated host, for instruction counts by function
//! (callgrind) and host calls by kind, per request and per tick. The host is a model of Envoy's
//! side of the proxy-wasm ABI, just enough for the filter: request and response headers,
//! properties, shared data with CAS, metrics, a clock that the driver moves, ticks at the period
//! the filter sets, HTTP calls answered with a canned aggregator reply. Each VM is a thread (the
//! filter keeps its contexts in thread-locals, as it does per V8 VM); shared data is process-wide.
//!
//!     tailweight-filter-native [--requests N] [--rate RPS] [--vms N] [--endpoints N]
//!         [--inflight N] [--config JSON] [--reply FILE]
//!
//! Prints, per VM: requests, ticks, host calls per request and per tick by function.

use std::collections::HashMap;

mod filter_exports;
use filter_exports::*;


// The filter's modules, compiled into this binary (filter/src/lib.rs lists them): their `crate::`
// paths resolve here, and their #[no_mangle] exports are the functions declared above.
#[allow(dead_code)]
#[path = "../../../filter/src/abi.rs"]
mod abi;
#[allow(dead_code)]
#[path = "../../../filter/src/contexts.rs"]
mod contexts;
#[allow(dead_code)]
#[path = "../../../filter/src/digest.rs"]
mod digest;
#[allow(dead_code)]
#[path = "../../../filter/src/direction.rs"]
mod direction;
#[allow(dead_code)]
#[path = "../../../filter/src/dispatch.rs"]
mod dispatch;
#[allow(dead_code)]
#[path = "../../../filter/src/host.rs"]
mod host;
#[allow(dead_code)]
#[path = "../../../filter/src/http.rs"]
mod http;
#[allow(dead_code)]
#[path = "../../../filter/src/metrics.rs"]
mod metrics;
#[allow(dead_code)]
#[path = "../../../filter/src/pairs.rs"]
mod pairs;
#[allow(dead_code)]
#[path = "../../../filter/src/probe.rs"]
mod probe;
#[allow(dead_code)]
#[path = "../../../filter/src/reporter.rs"]
mod reporter;
#[allow(dead_code)]
#[path = "../../../filter/src/root.rs"]
mod root;
#[allow(dead_code)]
#[path = "../../../filter/src/server.rs"]
mod server;
#[allow(dead_code)]
#[path = "../../../filter/src/shared.rs"]
mod shared;
#[allow(dead_code)]
#[path = "../../../filter/src/shared_layout.rs"]
mod shared_layout;
#[allow(dead_code)]
#[path = "../../../filter/src/stamper.rs"]
mod stamper;
#[allow(dead_code)]
#[path = "../../../filter/src/state.rs"]
mod state;
#[allow(dead_code)]
#[path = "../../../filter/src/worker.rs"]
mod worker;

mod simulated_host;
use simulated_host::*;


struct Args {
    requests: u64,
    rate: f64,
    vms: usize,
    endpoints: usize,
    inflight: usize,
    config: String,
    reply: Option<String>,
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
            "--reply" => a.reply = Some(std::fs::read_to_string(&value).expect("--reply FILE")),
            other => panic!("unknown argument {other}"),
        }
    }
    a
}

/// Service time of endpoint `i` (seed-fib-like: 10 ms x 1, 1.6, 2.6 or 6.9).
fn service_ns(i: usize) -> u64 {
    let speed = [1.0, 1.0, 1.0, 1.618, 1.618, 2.618, 2.618, 2.618, 2.618, 2.618, 2.618, 2.618, 2.618, 2.618, 6.854];
    (10_000_000.0 * speed[i % speed.len()]) as u64
}

struct Stream {
    id: u32,
    done_ns: u64,
    /// The endpoint that serves it (what `upstream.address` reads while it completes).
    upstream: String,
}

/// The request path one VM runs: `requests` at `rate`, `inflight` at a time, ticks when due.
#[inline(never)]
#[no_mangle]
pub extern "C" fn drive_vm(vm_index: usize) {
    let a = args();
    let addresses: Vec<String> = (0..a.endpoints).map(|i| format!("10.0.{}.{}:8080", i / 200, i % 200 + 1)).collect();
    VM.with(|vm| {
        let mut vm = vm.borrow_mut();
        vm.now_ns = 1_700_000_000_000_000_000 + vm_index as u64 * 1_000_000;
        vm.config = a.config.clone().into_bytes();
        vm.call_body = a.reply.clone().unwrap_or_default().into_bytes();
    });
    unsafe {
        _initialize();
        proxy_on_context_create(ROOT, 0);
        proxy_on_configure(ROOT, a.config.len());
    }
    let interval_ns = (1e9 / a.rate) as u64;
    let mut next_tick = VM.with(|vm| vm.borrow().now_ns) + VM.with(|vm| vm.borrow().tick_ms) * 1_000_000;
    let mut open: Vec<Stream> = Vec::new();
    let (mut ticks, mut fallback) = (0u64, 0usize);
    let mut request_calls: HashMap<&'static str, u64> = HashMap::new();
    let mut tick_calls: HashMap<&'static str, u64> = HashMap::new();
    let take = || VM.with(|vm| std::mem::take(&mut vm.borrow_mut().host_calls));
    take();
    let add = |into: &mut HashMap<&'static str, u64>, from: Vec<(&'static str, u64)>| {
        for (k, v) in from {
            *into.entry(k).or_default() += v;
        }
    };
    for n in 0..a.requests {
        let now = VM.with(|vm| vm.borrow().now_ns);
        // Finish the streams due by now, oldest first; then tick if due.
        open.sort_by_key(|s| s.done_ns);
        while open.first().is_some_and(|s| s.done_ns <= now) || open.len() >= a.inflight {
            let s = open.remove(0);
            VM.with(|vm| {
                let mut vm = vm.borrow_mut();
                vm.response = vec![(":status".into(), "200".into())];
                vm.upstream = s.upstream.clone();
            });
            complete(s.id);
        }
        if now >= next_tick {
            add(&mut request_calls, take());
            unsafe { proxy_on_tick(ROOT) };
            answer_calls();
            ticks += 1;
            add(&mut tick_calls, take());
            next_tick = now + VM.with(|vm| vm.borrow().tick_ms).max(1) * 1_000_000;
        }
        let id = 1_000 + n as u32;
        VM.with(|vm| {
            vm.borrow_mut().request = vec![
                (":method".into(), "GET".into()),
                (":path".into(), "/".into()),
                (":authority".into(), "backends".into()),
            ]
        });
        unsafe {
            proxy_on_context_create(id, ROOT);
            proxy_on_request_headers(id, 3, 1);
        }
        // Envoy's override_host: the first address of the header, else its fallback (round robin).
        let steered = VM.with(|vm| {
            vm.borrow()
                .request
                .iter()
                .find(|(k, _)| k == OVERRIDE)
                .map(|(_, v)| v.split(',').next().unwrap_or("").to_string())
        });
        let served = match steered.and_then(|s| addresses.iter().position(|a| *a == s)) {
            Some(i) => i,
            None => {
                fallback += 1;
                fallback % addresses.len()
            }
        };
        open.push(Stream { id, done_ns: now + service_ns(served), upstream: addresses[served].clone() });
        VM.with(|vm| vm.borrow_mut().now_ns += interval_ns);
    }
    for s in std::mem::take(&mut open) {
        VM.with(|vm| vm.borrow_mut().upstream = s.upstream.clone());
        complete(s.id);
    }
    add(&mut request_calls, take());
    let per = |calls: &HashMap<&'static str, u64>, n: u64| {
        let mut v: Vec<_> = calls.iter().map(|(k, c)| format!("{k} {:.2}", *c as f64 / n.max(1) as f64)).collect();
        v.sort();
        v.join(", ")
    };
    let picks = VM.with(|vm| vm.borrow().metrics.iter().find(|(n, _)| n == "tailweight.picks").map_or(0, |m| m.1));
    println!(
        "vm {vm_index}: {} requests ({picks} steered, {fallback} to the fallback), {ticks} ticks\n  host calls per request: {}\n  host calls per tick: {}",
        a.requests,
        per(&request_calls, a.requests),
        per(&tick_calls, ticks)
    );
}

fn complete(id: u32) {
    unsafe {
        proxy_on_response_headers(id, 1, 0);
        proxy_on_log(id);
        proxy_on_delete(id);
    }
}

/// Answer the HTTP calls the tick made with the canned reply (or no headers: a failed call).
fn answer_calls() {
    let (calls, body_len) = VM.with(|vm| {
        let mut vm = vm.borrow_mut();
        let n = vm.call_body.len();
        if n > 0 {
            vm.response = vec![(":status".into(), "200".into())];
        }
        (std::mem::take(&mut vm.calls), n)
    });
    for token in calls {
        unsafe { proxy_on_http_call_response(ROOT, token, 1, body_len, 0) };
    }
}

fn main() {
    let vms = args().vms;
    let threads: Vec<_> = (0..vms).map(|i| std::thread::spawn(move || drive_vm(i))).collect();
    for t in threads {
        t.join().expect("a VM thread panicked");
    }
}
