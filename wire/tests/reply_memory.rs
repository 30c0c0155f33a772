//! What reading an aggregator reply can cost the filter: the peak of the bytes allocated while
//! `read_reply` reads replies of 4 MiB built to cost the most, against the reply's size (target:
//! at most 2x, issue 38). Counted by a global allocator that rounds each allocation up to 16
//! bytes (the least a chunk of the Wasm module's allocator takes) and counts a reallocation as
//! the old and the new block both held.
//!
//! Before this reader, the reply was parsed into a tree of the whole text first: a 4 MiB array of
//! `0,` in an unknown field cost ~40x its size.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use tailweight_wire::protocol::Limits;
use tailweight_wire::reply::read::read_reply;

struct Counting;

static HELD: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn charged(size: usize) -> usize {
    size.max(1).next_multiple_of(16)
}

fn hold(size: usize) {
    let held = HELD.fetch_add(charged(size), Relaxed) + charged(size);
    PEAK.fetch_max(held, Relaxed);
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        hold(layout.size());
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        HELD.fetch_sub(charged(layout.size()), Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        hold(new_size);
        let moved = unsafe { System.realloc(ptr, layout, new_size) };
        HELD.fetch_sub(charged(layout.size()), Relaxed);
        moved
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const SIZE: usize = 4 << 20;

/// `head`, then `item` repeated (comma-separated) while the whole stays within `SIZE`, then `tail`.
fn filled(head: &str, item: &str, tail: &str) -> Vec<u8> {
    let mut out = head.as_bytes().to_vec();
    let mut first = true;
    while out.len() + item.len() + 1 + tail.len() <= SIZE {
        if !first {
            out.push(b',');
        }
        first = false;
        out.extend_from_slice(item.as_bytes());
    }
    out.extend_from_slice(tail.as_bytes());
    out
}

/// The most endpoints the reader keeps per byte: the shortest endpoint it accepts, 2,048 to a
/// cluster (the cap), clusters until 4 MiB.
fn most_endpoints() -> Vec<u8> {
    let endpoint = r#"{"address":"a","weight":0,"inflight":0,"peer_inflight":0,"latency_us":0}"#;
    let cluster = format!(r#"{{"name":"c","endpoints":[{}]}}"#, vec![endpoint; 2048].join(","));
    let mut body = filled(r#"{"version":1,"ttl_ms":1,"clusters":["#, &cluster, "");
    // The rest with one more cluster of as many endpoints as fit.
    body.truncate(body.len().min(SIZE - 64));
    let room = SIZE - body.len() - 40;
    let n = room / (endpoint.len() + 1);
    body.extend_from_slice(format!(r#",{{"name":"d","endpoints":[{}]}}]}}"#, vec![endpoint; n].join(",")).as_bytes());
    body
}

/// Every hostile shape, by name.
fn replies() -> Vec<(&'static str, Vec<u8>)> {
    let long = "x".repeat(SIZE - 200);
    vec![
        ("a tree's worst: 0s in an unknown field", filled(r#"{"version":1,"ttl_ms":1,"clusters":[],"x":["#, "0", "]}")),
        ("empty arrays in an unknown field", filled(r#"{"version":1,"ttl_ms":1,"clusters":[],"x":["#, "[]", "]}")),
        ("the most endpoints kept", most_endpoints()),
        ("endpoints past the cap", {
            let endpoint = r#"{"address":"a","weight":0,"inflight":0,"peer_inflight":0,"latency_us":0}"#;
            filled(r#"{"version":1,"ttl_ms":1,"clusters":[{"name":"c","endpoints":["#, endpoint, "]}]}")
        }),
        (
            "clusters past the cap",
            filled(r#"{"version":1,"ttl_ms":1,"clusters":["#, r#"{"name":"c","endpoints":[]}"#, "]}"),
        ),
        (
            "empty endpoint objects",
            filled(r#"{"version":1,"ttl_ms":1,"clusters":[{"name":"c","endpoints":["#, "{}", "]}]}"),
        ),
        (
            "a long address",
            format!(r#"{{"version":1,"ttl_ms":1,"clusters":[{{"name":"c","endpoints":[{{"address":"{long}"}}]}}]}}"#)
                .into_bytes(),
        ),
        ("a long key", format!(r#"{{"{long}":1,"version":1,"ttl_ms":1,"clusters":[]}}"#).into_bytes()),
        ("a long array where a number goes", filled(r#"{"version":1,"ttl_ms":["#, "0", r#"],"clusters":[]}"#)),
    ]
}

/// Peak bytes held while reading `body`, over what was held before.
fn peak_of(body: &[u8]) -> usize {
    let before = HELD.load(Relaxed);
    PEAK.store(before, Relaxed);
    let read = read_reply(body, &Limits::default());
    let peak = PEAK.load(Relaxed) - before;
    drop(read);
    peak
}

#[test]
fn a_reply_of_4_mib_costs_at_most_twice_its_size() {
    let mut worst = (0.0, "");
    for (name, body) in replies() {
        assert!(body.len() <= SIZE && body.len() > SIZE - 4096, "{name}: {} bytes", body.len());
        let ratio = peak_of(&body) as f64 / body.len() as f64;
        println!("{name}: {} bytes, peak {ratio:.3}x", body.len());
        if ratio > worst.0 {
            worst = (ratio, name);
        }
    }
    println!("worst: {} ({:.3}x)", worst.1, worst.0);
    assert!(worst.0 <= 2.0, "{} costs {:.2}x its size", worst.1, worst.0);
}
