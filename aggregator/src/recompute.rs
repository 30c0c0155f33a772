//! The timer that expires silent reporters and recomputes weights. One cluster per lock hold
//! (expire what went silent, then recompute and publish its reply view), with a yield in between,
//! so reports keep flowing while thousands of clusters are processed. Each tick runs as its own
//! task (`supervised_tick`): a panic in it is caught, counted and logged, makes the replica not
//! ready until a later tick completes, and the next tick runs as usual.

use crate::state::AppState;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Expire and recompute every cluster, then expire reporters. Returns the time spent holding the
/// book.
pub async fn once(state: &AppState) -> Duration {
    let names = state.book().cluster_names();
    let mut busy = Duration::ZERO;
    for name in names {
        let t = Instant::now();
        {
            let mut book = state.book();
            let now = state.now_us();
            book.expire_cluster(&name, now);
            book.recompute_cluster(&name, now);
        }
        busy += t.elapsed();
        tokio::task::yield_now().await;
    }
    let t = Instant::now();
    let counts = {
        let mut book = state.book();
        book.expire_reporters(state.now_us());
        book.counts()
    };
    busy += t.elapsed();
    state.metrics.set_counts(&counts);
    state.metrics.recompute_seconds.observe(busy.as_secs_f64());
    busy
}

/// Every `interval`, one `supervised_tick` of `once`: restarts after a panic are bounded by the
/// interval (one a tick).
pub async fn run(state: Arc<AppState>, interval: Duration) {
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        supervised_tick(&state, |state| async move {
            once(&state).await;
        })
        .await;
    }
}

/// Run `tick` once as its own task. Completed: the replica is ready (`/readyz`). Panicked: it is
/// not ready until a later tick completes (its weights may be stale, or the panic may recur on
/// every tick: then other replicas take its callers), and the panic is counted
/// (`tailweight_recompute_panics_total`) and logged. Returns whether the tick completed.
pub async fn supervised_tick<F, Fut>(state: &Arc<AppState>, tick: F) -> bool
where
    F: FnOnce(Arc<AppState>) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    match tokio::spawn(tick(state.clone())).await {
        Ok(()) => {
            state.set_ready();
            true
        }
        Err(e) => {
            state.set_not_ready();
            state.metrics.recompute_panics.inc();
            tracing::error!(error = %e, "the recompute failed; not ready until a recompute completes");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ServiceConfig;
    use clap::Parser;

    fn state() -> Arc<AppState> {
        let config = ServiceConfig::parse_from(["tailweight-aggregator", "--identity", "report"]);
        crate::state_from(&config).unwrap()
    }

    #[tokio::test]
    async fn a_panicking_recompute_makes_the_replica_not_ready_until_a_recompute_completes() {
        let state = state();
        assert!(!state.is_ready(), "not ready before the first recompute");
        assert!(
            supervised_tick(&state, |s| async move {
                once(&s).await;
            })
            .await
        );
        assert!(state.is_ready());
        let panicking = |_: Arc<AppState>| async { panic!("injected") };
        assert!(!supervised_tick(&state, panicking).await);
        assert!(!state.is_ready(), "a panic makes the replica not ready");
        assert!(!supervised_tick(&state, panicking).await);
        assert_eq!(state.metrics.recompute_panics.get(), 2);
        // The next tick runs as usual, and the book (its lock poisoned or not) still works.
        assert!(
            supervised_tick(&state, |s| async move {
                once(&s).await;
            })
            .await
        );
        assert!(state.is_ready());
        let holding_the_lock = |s: Arc<AppState>| async move {
            let _book = s.book();
            panic!("injected while holding the book");
        };
        assert!(!supervised_tick(&state, holding_the_lock).await);
        assert!(
            supervised_tick(&state, |s| async move {
                once(&s).await;
            })
            .await
        );
        assert!(state.is_ready() && state.metrics.recompute_panics.get() == 3);
    }
}
