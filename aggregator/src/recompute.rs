//! The timer that expires silent reporters and recomputes weights. One cluster per lock hold
//! (expire what went silent, then recompute and publish its reply view), with a yield in between,
//! so reports keep flowing while thousands of clusters are processed.

use crate::state::AppState;
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

pub async fn run(state: Arc<AppState>, interval: Duration) {
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        once(&state).await;
        state.set_ready();
    }
}
