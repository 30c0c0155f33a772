//! The weight book's count of its own bytes (`Counts::bytes`, what `max_bytes` bounds) stays above
//! what it really allocates, whatever the shape of what it holds: a counting allocator measures the
//! truth while books of different shapes (many reporters, many endpoints, many clusters, many
//! principals, long names, IPv6 addresses) grow, churn and expire.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::sync::Mutex;
use tailweight_core::weights::{WeightBook, WeightParams};
use tailweight_core::wire::{ClusterReport, EndpointReport, Report, MAX_NAME_LEN, VERSION};

struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);
/// Tests run on threads of one process: one measurement at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

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

#[derive(Debug, Clone, Copy)]
struct Shape {
    reporters: usize,
    principals: usize,
    clusters: usize,
    endpoints: usize,
    name_len: usize,
    ipv6: bool,
}

fn name(tag: &str, i: usize, len: usize) -> String {
    let head = format!("{tag}{i}.");
    format!("{head}{}", "n".repeat(len.saturating_sub(head.len())))
}

fn address(i: usize, ipv6: bool) -> String {
    if ipv6 {
        format!("[2001:db8::{:x}:{:x}]:8080", i / 65_536, i % 65_536)
    } else {
        format!("10.{}.{}.{}:8080", i / 65_536 % 256, i / 256 % 256, i % 256)
    }
}

fn report(s: Shape, r: usize, round: u64) -> Report {
    Report {
        version: VERSION,
        reporter: name("reporter", r, s.name_len),
        incarnation: 1,
        interval_ms: 1_000,
        clusters: (0..s.clusters)
            .map(|c| ClusterReport {
                name: name("cluster", (r + c) % (2 * s.clusters), s.name_len),
                endpoints: (0..s.endpoints)
                    .map(|e| EndpointReport {
                        address: address(e + r % 3, s.ipv6),
                        requests: 100 * round + r as u64,
                        errors: round,
                        latency_sum_us: 5_000 * 99 * round,
                        inflight: (r % 4) as u32,
                        latency_ewma_us: 5_000,
                        latency_age_ms: 10,
                        cpu: (r % 2 == 0).then_some(0.4),
                        cpu_age_ms: Some(100),
                        seen_age_ms: Some(10),
                    })
                    .collect(),
            })
            .collect(),
    }
}

/// Grow a book to `shape` over a few rounds (with recomputes and an expiry), and return the most
/// it allocated beyond what it counted, and what it counted then.
fn overshoot(shape: Shape) -> (isize, usize) {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let params = WeightParams {
        max_reporters: usize::MAX,
        max_clusters: usize::MAX,
        max_endpoints_per_cluster: usize::MAX,
        max_observations: usize::MAX,
        max_bytes: usize::MAX,
        ..WeightParams::default()
    };
    let base = LIVE.load(Ordering::Relaxed);
    let mut book = WeightBook::new(params);
    let mut worst = (isize::MIN, 0);
    for round in 1..=3u64 {
        let now = round * 1_000_000;
        for r in 0..shape.reporters {
            let report = report(shape, r, round);
            let principal = name("spiffe://cluster.local/ns/x/sa/", r % shape.principals, shape.name_len);
            book.ingest_as(&report, &principal, now).expect("no caps");
        }
        book.recompute(now);
        let allocated = LIVE.load(Ordering::Relaxed) - base;
        let counted = book.counts().bytes;
        if allocated - counted as isize > worst.0 {
            worst = (allocated - counted as isize, counted);
        }
    }
    // Half the reporters fall silent: what they said expires.
    for r in 0..shape.reporters / 2 {
        let report = report(shape, r, 4);
        book.ingest_as(
            &report,
            &name("spiffe://cluster.local/ns/x/sa/", r % shape.principals, shape.name_len),
            4_000_000,
        )
        .expect("no caps");
    }
    book.expire(5_500_000);
    book.recompute(5_500_000);
    let allocated = LIVE.load(Ordering::Relaxed) - base;
    if allocated - book.counts().bytes as isize > worst.0 {
        worst = (allocated - book.counts().bytes as isize, book.counts().bytes);
    }
    drop(book);
    worst
}

#[test]
fn the_book_counts_at_least_what_it_allocates() {
    // Sizes just past a power of two: hash tables and vectors have just doubled.
    let shapes = [
        Shape { reporters: 257, principals: 257, clusters: 1, endpoints: 1, name_len: MAX_NAME_LEN, ipv6: false },
        Shape { reporters: 513, principals: 513, clusters: 1, endpoints: 1, name_len: 8, ipv6: false },
        Shape { reporters: 129, principals: 1, clusters: 1, endpoints: 20, name_len: 20, ipv6: false },
        Shape { reporters: 9, principals: 9, clusters: 1, endpoints: 513, name_len: 20, ipv6: true },
        Shape { reporters: 9, principals: 9, clusters: 1, endpoints: 1_025, name_len: 8, ipv6: false },
        Shape { reporters: 1, principals: 1, clusters: 1, endpoints: 2_049, name_len: 8, ipv6: false },
        Shape { reporters: 40, principals: 5, clusters: 3, endpoints: 50, name_len: 60, ipv6: true },
        Shape { reporters: 2, principals: 2, clusters: 257, endpoints: 1, name_len: MAX_NAME_LEN, ipv6: false },
        Shape { reporters: 1, principals: 1, clusters: 513, endpoints: 1, name_len: 8, ipv6: false },
        Shape { reporters: 1, principals: 1, clusters: 1, endpoints: 1, name_len: 1, ipv6: false },
    ];
    for shape in shapes {
        let (over, counted) = overshoot(shape);
        // The book's fixed part (empty maps, scratch of a tiny cluster) is not counted per unit.
        assert!(over <= 16 * 1024, "{shape:?}: allocated {over} bytes beyond the {counted} counted");
    }
}
