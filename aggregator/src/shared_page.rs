//! One `/metrics` page shared by every scrape: built at most once per `--metrics-page-max-age-ms`
//! (1 s by default, the recompute's usual interval: the endpoint series are the last recompute's
//! anyway), by the first scrape that finds the last one older, while the scrapes arriving
//! meanwhile wait for it and take it; held with the memory its text takes reserved once, however
//! many scrapes send it. Pure of the clock: each scrape brings its time.

use crate::admission::Reservation;
use axum::body::Bytes;
use std::sync::{Arc, Mutex, MutexGuard};

/// One built page.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub built_at_us: u64,
    pub text: Bytes,
    /// What a scrape of it costs its requester's page rate: its listed clusters and endpoints.
    pub units: usize,
    /// The budget its text holds while it is the shared page (None: it was not kept).
    pub held: Option<Arc<Reservation>>,
}

/// The page scrapes share, and the lock its one builder holds.
#[derive(Debug, Default)]
pub struct SharedPage {
    last: Mutex<Option<Snapshot>>,
    building: Mutex<()>,
}

/// Whether a page built at `built_at_us` may be given at `now_us`: `now_us - built_at_us <
/// max_age_us` (a scrape whose time precedes the build takes it).
pub fn is_fresh(built_at_us: u64, now_us: u64, max_age_us: u64) -> bool {
    now_us.saturating_sub(built_at_us) < max_age_us
}

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl SharedPage {
    /// The page for a scrape at `now_us`: the last one while fresh (`is_fresh`, `max_age_us`), else
    /// the one `build` makes, kept for the next scrapes only if it holds its budget (`held`). One
    /// build at a time: a scrape that finds one under way waits and takes its page. Err: `build`'s,
    /// kept for nobody. Blocks: run it off the runtime's workers.
    pub fn get_or_build<E>(
        &self,
        now_us: u64,
        max_age_us: u64,
        build: impl FnOnce() -> Result<Snapshot, E>,
    ) -> Result<Snapshot, E> {
        if let Some(page) = self.fresh(now_us, max_age_us) {
            return Ok(page);
        }
        let _builder = locked(&self.building);
        if let Some(page) = self.fresh(now_us, max_age_us) {
            return Ok(page);
        }
        let page = build()?;
        *locked(&self.last) = page.held.is_some().then(|| page.clone());
        Ok(page)
    }

    fn fresh(&self, now_us: u64, max_age_us: u64) -> Option<Snapshot> {
        locked(&self.last).as_ref().filter(|p| is_fresh(p.built_at_us, now_us, max_age_us)).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::MemoryBudget;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Barrier;

    const SEC: u64 = 1_000_000;

    fn snapshot(budget: &MemoryBudget, at: u64, text: &str) -> Snapshot {
        let held = budget.reserve(text.len()).map(Arc::new);
        Snapshot { built_at_us: at, text: Bytes::from(text.to_string()), units: 7, held }
    }

    #[test]
    fn a_page_is_fresh_for_its_max_age() {
        assert!(is_fresh(SEC, SEC, SEC));
        assert!(is_fresh(SEC, 2 * SEC - 1, SEC));
        assert!(!is_fresh(SEC, 2 * SEC, SEC));
        assert!(is_fresh(2 * SEC, SEC, SEC), "a scrape older than the page takes it");
    }

    #[test]
    fn scrapes_within_the_max_age_share_one_build() {
        let (shared, budget, builds) = (SharedPage::default(), MemoryBudget::new(1 << 20), AtomicUsize::new(0));
        let build = |at: u64| {
            builds.fetch_add(1, Ordering::Relaxed);
            Ok::<_, ()>(snapshot(&budget, at, "page"))
        };
        let first = shared.get_or_build(SEC, SEC, || build(SEC)).unwrap();
        let second = shared.get_or_build(SEC + SEC / 2, SEC, || build(SEC + SEC / 2)).unwrap();
        assert_eq!((builds.load(Ordering::Relaxed), second.built_at_us), (1, SEC));
        assert_eq!(first.text.as_ptr(), second.text.as_ptr(), "the same bytes, not a copy");
        let third = shared.get_or_build(2 * SEC, SEC, || build(2 * SEC)).unwrap();
        assert_eq!((builds.load(Ordering::Relaxed), third.built_at_us), (2, 2 * SEC));
        // Its memory is reserved once: the budget holds one page's KiB however many share it.
        drop((first, second));
        assert_eq!(budget.free_bytes(), (1 << 20) - 1024);
    }

    #[test]
    fn concurrent_scrapes_wait_for_the_one_build_under_way() {
        let (shared, budget, builds) = (SharedPage::default(), MemoryBudget::new(1 << 20), AtomicUsize::new(0));
        let start = Barrier::new(4);
        let pages: Vec<Snapshot> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..4)
                .map(|_| {
                    s.spawn(|| {
                        start.wait();
                        shared
                            .get_or_build(SEC, SEC, || {
                                builds.fetch_add(1, Ordering::Relaxed);
                                Ok::<_, ()>(snapshot(&budget, SEC, "page"))
                            })
                            .unwrap()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(builds.load(Ordering::Relaxed), 1);
        assert!(pages.iter().all(|p| p.text.as_ptr() == pages[0].text.as_ptr()));
    }

    #[test]
    fn a_failed_build_or_one_without_its_budget_is_kept_for_nobody() {
        let (shared, none) = (SharedPage::default(), MemoryBudget::new(0));
        assert_eq!(shared.get_or_build(SEC, SEC, || Err::<Snapshot, _>("no memory")).unwrap_err(), "no memory");
        let unkept = shared.get_or_build(SEC, SEC, || Ok::<_, ()>(snapshot(&none, SEC, &"x".repeat(4096)))).unwrap();
        assert!(unkept.held.is_none());
        let builds = AtomicUsize::new(0);
        let budget = MemoryBudget::new(1 << 20);
        shared
            .get_or_build(SEC, SEC, || {
                builds.fetch_add(1, Ordering::Relaxed);
                Ok::<_, ()>(snapshot(&budget, SEC, "page"))
            })
            .unwrap();
        assert_eq!(builds.load(Ordering::Relaxed), 1, "the page without its budget was not shared");
    }
}
