//! Where the filter's time goes, for the overhead benchmark: with the `cost-probe` feature, every
//! exported callback and the parts of the tick add their host-clock time (wall ns between entry and
//! exit: the callbacks never block, so it is CPU time unless the thread was preempted) and their
//! call count to a per-VM table, which each tick adds to counters
//! `tailweight.probe.<site>.ns` / `.calls` (summed over the VMs by Envoy). Without the feature
//! `span` is a no-op that the compiler removes. Only measurement builds enable it
//! (`cargo build --features cost-probe`): two clock reads per span cost ~0.2-0.5 us each, so a
//! probed module is slower than the product one; site `clock` times 16 back-to-back clock reads
//! once per tick to say by how much.

#[derive(Clone, Copy)]
pub enum Site {
    ContextCreate,
    Configure,
    RequestHeaders,
    ResponseHeaders,
    Log,
    Delete,
    HttpCallResponse,
    Tick,
    #[cfg_attr(not(feature = "cost-probe"), allow(dead_code))]
    Clock16,
}

#[cfg(feature = "cost-probe")]
mod on {
    use super::Site;
    use crate::host;
    use std::cell::RefCell;

    const NAMES: [&str; 9] = [
        "context_create",
        "configure",
        "request_headers",
        "response_headers",
        "log",
        "delete",
        "http_call_response",
        "tick",
        "clock16",
    ];

    #[derive(Default)]
    struct Table {
        /// (ns, calls) per site not yet added to the counters.
        pending: [(u64, u64); 9],
        /// Counter ids (ns, calls) per site, defined on the first flush.
        ids: Option<Vec<(Option<u32>, Option<u32>)>>,
    }

    thread_local! {
        static TABLE: RefCell<Table> = RefCell::new(Table::default());
    }

    fn now_ns() -> u64 {
        let mut nanos = 0u64;
        // SAFETY: the host writes one u64 into `nanos`.
        unsafe { crate::abi::proxy_get_current_time_nanoseconds(&mut nanos) };
        nanos
    }

    pub struct Span(Site, u64);

    pub fn span(site: Site) -> Span {
        Span(site, now_ns())
    }

    impl Drop for Span {
        fn drop(&mut self) {
            let ns = now_ns().saturating_sub(self.1);
            TABLE.with(|t| {
                if let Ok(mut t) = t.try_borrow_mut() {
                    let entry = &mut t.pending[self.0 as usize];
                    entry.0 += ns;
                    entry.1 += 1;
                }
            });
        }
    }

    /// Add what was measured since the last flush to the counters (once per tick).
    pub fn flush() {
        {
            let start = now_ns();
            for _ in 0..15 {
                now_ns();
            }
            let ns = now_ns().saturating_sub(start);
            TABLE.with(|t| {
                if let Ok(mut t) = t.try_borrow_mut() {
                    t.pending[Site::Clock16 as usize].0 += ns;
                    t.pending[Site::Clock16 as usize].1 += 1;
                }
            });
        }
        TABLE.with(|t| {
            let Ok(mut t) = t.try_borrow_mut() else { return };
            let ids = t
                .ids
                .get_or_insert_with(|| {
                    NAMES
                        .iter()
                        .map(|n| {
                            (
                                host::define_counter(&format!("tailweight.probe.{n}.ns")),
                                host::define_counter(&format!("tailweight.probe.{n}.calls")),
                            )
                        })
                        .collect()
                })
                .clone();
            for (i, (ns_id, calls_id)) in ids.into_iter().enumerate() {
                let (ns, calls) = std::mem::take(&mut t.pending[i]);
                if calls > 0 {
                    host::increment(ns_id, ns as i64);
                    host::increment(calls_id, calls as i64);
                }
            }
        });
    }
}

#[cfg(feature = "cost-probe")]
pub use on::{flush, span};

/// Without the feature: nothing (an empty `Drop`, so that ending a span early reads the same).
#[cfg(not(feature = "cost-probe"))]
pub struct Span;

#[cfg(not(feature = "cost-probe"))]
impl Drop for Span {
    #[inline(always)]
    fn drop(&mut self) {}
}

#[cfg(not(feature = "cost-probe"))]
#[inline(always)]
pub fn span(_site: Site) -> Span {
    Span
}

#[cfg(not(feature = "cost-probe"))]
#[inline(always)]
pub fn flush() {}
