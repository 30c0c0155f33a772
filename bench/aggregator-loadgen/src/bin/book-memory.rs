//! Bytes the weight book holds per observation, endpoint, cluster and reporter, measured with a
//! counting allocator: the figures `aggregator/src/budget.rs` derives the caps from. Worst case:
//! every name as long as the wire allows, each unit added with nothing else it could share (an
//! endpoint with one observation, a reporter with one endpoint...), eight principals per endpoint
//! where observations are counted, after a recompute (decisions and published reply views exist)
//! and a second report (routes and windows exist).
//!
//! Usage: `cargo run --release -p tailweight-aggregator-loadgen --bin tailweight-book-memory`

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};
use tailweight_core::weights::{WeightBook, WeightParams};
use tailweight_core::wire::{ClusterReport, EndpointReport, Report, MAX_NAME_LEN, VERSION};

/// The system allocator, counting the bytes live (requested sizes: the allocator's own rounding
/// and fragmentation come on top, which is why the budget keeps a margin).
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(new_size as isize - layout.size() as isize, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn live() -> isize {
    LIVE.load(Ordering::Relaxed)
}

/// A name of `len` bytes, unique by `tag` and `i`.
fn name(tag: &str, i: usize, len: usize) -> String {
    let head = format!("{tag}{i}.");
    format!("{head}{}", "x".repeat(len.saturating_sub(head.len())))
}

/// An endpoint address: IPv4 (11..=21 bytes) or the longest IPv6 form (47 bytes).
fn address(i: usize, long: bool) -> String {
    if long {
        format!("[2001:db8:ffff:ffff:ffff:ffff:{:04x}:{:04x}]:65535", i / 65_536, i % 65_536)
    } else {
        format!("10.{}.{}.{}:80", i / 65_536 % 256, i / 256 % 256, i % 256)
    }
}

fn endpoint(address: String, round: u64) -> EndpointReport {
    EndpointReport {
        address,
        requests: 100 * round,
        errors: round,
        latency_sum_us: 5_000 * 99 * round,
        inflight: 3,
        latency_ewma_us: 5_000,
        latency_age_ms: 10,
        cpu: Some(0.5),
        cpu_age_ms: Some(100),
        seen_age_ms: Some(10),
    }
}

/// `reporters` reporters, each naming the same `endpoints` endpoints in each of the same
/// `clusters` clusters; names `name_len` bytes, addresses long or short; each reporter its own
/// principal or all one.
#[derive(Clone, Copy)]
struct Shape {
    reporters: usize,
    clusters: usize,
    endpoints: usize,
    name_len: usize,
    long_addresses: bool,
    own_principals: bool,
}

/// Bytes the book holds for `shape`, after two rounds of reports and recomputes.
fn fill(shape: Shape) -> isize {
    let params = WeightParams {
        max_reporters: usize::MAX,
        max_clusters: usize::MAX,
        max_endpoints_per_cluster: usize::MAX,
        max_observations: usize::MAX,
        ..WeightParams::default()
    };
    let report = |r: usize, round: u64| Report {
        version: VERSION,
        reporter: name("reporter", r, shape.name_len),
        incarnation: 1,
        interval_ms: 1_000,
        clusters: (0..shape.clusters)
            .map(|c| ClusterReport {
                name: name("cluster", c, shape.name_len),
                endpoints: (0..shape.endpoints).map(|e| endpoint(address(e, shape.long_addresses), round)).collect(),
            })
            .collect(),
    };
    let principal = |r: usize| name("principal", if shape.own_principals { r } else { 0 }, shape.name_len);
    let before = live();
    let mut book = WeightBook::new(params);
    for round in 1..=2u64 {
        for r in 0..shape.reporters {
            // The report and the principal's name are dropped before the next is made.
            book.ingest_as(&report(r, round), &principal(r), round * 1_000_000).expect("no caps");
        }
        book.recompute(round * 1_000_000);
    }
    let held = live() - before;
    std::hint::black_box(&book);
    drop(book);
    held
}

/// Bytes per unit of `grow`: the difference between two sizes, per unit added (fixed costs
/// cancel), over a span of sizes wide enough that hash tables and vectors grow within it (a
/// doubling costs up to twice a unit's share while it lasts: the book's counts add a margin).
fn per_unit(shape: Shape, grow: impl Fn(Shape, usize) -> Shape, units: impl Fn(usize) -> usize) -> f64 {
    let (small, large) = (100, 1_100);
    let (a, b) = (fill(grow(shape, small)), fill(grow(shape, large)));
    (b - a) as f64 / (units(large) - units(small)) as f64
}

/// A unit's cost as `base + per_byte x length`, from its cost at two lengths.
fn linear(short: f64, long: f64, short_len: usize, long_len: usize) -> (f64, f64) {
    let per_byte = (long - short) / (long_len - short_len) as f64;
    (short - per_byte * short_len as f64, per_byte)
}

fn main() {
    let (short, long) = (8usize, MAX_NAME_LEN);
    let base =
        Shape { reporters: 1, clusters: 1, endpoints: 1, name_len: short, long_addresses: false, own_principals: true };
    let reporters = |s: Shape, n| Shape { reporters: n, ..s };
    let clusters = |s: Shape, n| Shape { clusters: n, ..s };
    let endpoints = |s: Shape, n| Shape { endpoints: n, ..s };
    let id = |n| n;
    // A reporter (with one observation) of its own principal, and of a shared one.
    let reporter_own = |len| per_unit(Shape { name_len: len, ..base }, reporters, id);
    let reporter_shared = |len| per_unit(Shape { name_len: len, own_principals: false, ..base }, reporters, id);
    // Endpoints with one observation each, and with eight (of eight principals).
    let ep =
        |long_addresses, n_reporters| per_unit(Shape { long_addresses, reporters: n_reporters, ..base }, endpoints, id);
    let (one_short, one_long) = (ep(false, 1), ep(true, 1));
    let (eight_short, eight_long) = (ep(false, 8), ep(true, 8));
    let observation = linear((eight_short - one_short) / 7.0, (eight_long - one_long) / 7.0, 11, 47);
    let endpoint = linear(
        one_short - observation.0 - observation.1 * 11.0,
        one_long - observation.0 - observation.1 * 47.0,
        11,
        47,
    );
    let obs_short = observation.0 + observation.1 * 11.0;
    let (shared_short, shared_long) = (reporter_shared(short) - obs_short, reporter_shared(long) - obs_short);
    let reporter = linear(shared_short, shared_long, short, long);
    let principal = linear(
        reporter_own(short) - obs_short - shared_short,
        reporter_own(long) - obs_short - shared_long,
        short,
        long,
    );
    // Clusters of one endpoint each, of one reporter.
    let cluster_of = |len| per_unit(Shape { name_len: len, ..base }, clusters, id) - (one_short - 0.0);
    let cluster = linear(cluster_of(short), cluster_of(long), short, long);
    for (what, (b, per_byte)) in [
        ("reporter (and its route)", reporter),
        ("principal", principal),
        ("cluster", cluster),
        ("endpoint", endpoint),
        ("observation (and its route entry)", observation),
    ] {
        println!("{what}: {b:.0} bytes + {per_byte:.2} per byte of its name or address");
    }
}
