//! How the load-balancing policy reaches what the HTTP filter learns, within one process (Envoy
//! loads the module file once, so both halves see this memory):
//! - each filter config's per-worker plugins are listed here (`publish`) until the config goes
//!   (`withdraw`), with the config's `tailweight.picks` counter, into which the policy counts the
//!   choices it makes with a worker's balancer (`Feed::count_pick`), so the filter's stats show the
//!   policy's picks as they show the filter's own;
//! - each worker thread notes its worker index when a stream begins on it (`note_worker`): Envoy
//!   gives the load balancer no index, and a worker's streams and its load balancer run on the same
//!   thread;
//! - each cluster balanced by the policy is listed (`balance` / `unbalance`, counted per load
//!   balancer instance), so the filter learns from its requests without steering them
//!   (`Host::load_balancer_picks`).

use crate::abi::MetricUpdate;
use std::cell::Cell;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{Arc, LazyLock, Mutex, PoisonError, RwLock, Weak};
use tailweight_picker::Balancer;
use tailweight_sidecar::Plugin;

/// One filter config's plugins, one per worker.
pub type WorkerPlugins = [Mutex<Plugin>];

/// A filter config's picks counter: Envoy's counter update (`abi::MetricUpdate`) on that config
/// (`config_envoy`, kept as an address) for its counter `id`.
#[derive(Clone, Copy)]
pub struct PickCounter {
    pub config_envoy: usize,
    pub id: usize,
    pub update: MetricUpdate,
}

/// One published filter config.
struct Published {
    plugins: Weak<WorkerPlugins>,
    picks: Option<PickCounter>,
}

/// What the policy reads for one choice: the calling worker's balancer, and where its picks count.
pub struct Feed<'a> {
    pub balancer: &'a Balancer,
    picks: Option<PickCounter>,
}

impl Feed<'_> {
    /// One more pick in the filter config's `tailweight.picks`.
    pub fn count_pick(&self) {
        if let Some(p) = self.picks {
            // SAFETY: the config is alive: it is withdrawn (under the list's write lock) before
            // Envoy destroys it, and a `Feed` lives only under the list's read lock (`with_feed`).
            unsafe { (p.update)(p.config_envoy as *mut c_void, p.id, std::ptr::null_mut(), 0, 1) };
        }
    }
}

static PLUGINS: LazyLock<RwLock<Vec<Published>>> = LazyLock::new(RwLock::default);
static BALANCED: LazyLock<RwLock<HashMap<String, usize>>> = LazyLock::new(RwLock::default);

thread_local! {
    static WORKER: Cell<Option<usize>> = const { Cell::new(None) };
}

/// List a filter config's plugins and its picks counter (the ones of configs gone are dropped from
/// the list).
pub fn publish(plugins: &Arc<WorkerPlugins>, picks: Option<PickCounter>) {
    let mut list = PLUGINS.write().unwrap_or_else(PoisonError::into_inner);
    list.retain(|p| p.plugins.strong_count() > 0);
    list.push(Published { plugins: Arc::downgrade(plugins), picks });
}

/// Take a filter config's plugins off the list, before its config goes: once this returns no
/// choice reads them or counts into its counter.
pub fn withdraw(plugins: &Arc<WorkerPlugins>) {
    let gone = Arc::downgrade(plugins);
    let mut list = PLUGINS.write().unwrap_or_else(PoisonError::into_inner);
    list.retain(|p| p.plugins.strong_count() > 0 && !p.plugins.ptr_eq(&gone));
}

/// The calling thread is Envoy worker `index`.
pub fn note_worker(index: usize) {
    WORKER.with(|w| w.set(Some(index)));
}

/// Run `f` with the calling worker's balancer of the newest filter config that tracks `cluster`,
/// and that config's picks counter (None: no stream ran on this thread yet, no filter config
/// tracks it, or its plugin is busy: a tick on the main thread holds it).
pub fn with_feed<T>(cluster: &str, f: impl FnOnce(Option<&Feed>) -> T) -> T {
    let Some(worker) = WORKER.with(Cell::get) else { return f(None) };
    let list = PLUGINS.read().unwrap_or_else(PoisonError::into_inner);
    for published in list.iter().rev() {
        let Some(plugins) = published.plugins.upgrade() else { continue };
        let Some(Ok(plugin)) = plugins.get(worker).map(Mutex::try_lock) else { continue };
        if let Some(balancer) = plugin.balancer().filter(|b| b.tracks(cluster)) {
            return f(Some(&Feed { balancer, picks: published.picks }));
        }
    }
    f(None)
}

/// A load balancer instance of the policy now balances `cluster`.
pub fn balance(cluster: &str) {
    let mut balanced = BALANCED.write().unwrap_or_else(PoisonError::into_inner);
    *balanced.entry(cluster.to_string()).or_default() += 1;
}

/// One of `cluster`'s load balancer instances is gone.
pub fn unbalance(cluster: &str) {
    let mut balanced = BALANCED.write().unwrap_or_else(PoisonError::into_inner);
    if let Some(count) = balanced.get_mut(cluster) {
        *count = count.saturating_sub(1);
        if *count == 0 {
            balanced.remove(cluster);
        }
    }
}

/// Does the policy balance `cluster` (at least one instance of it lives)?
pub fn balanced(cluster: &str) -> bool {
    let balanced = BALANCED.read().unwrap_or_else(PoisonError::into_inner);
    !balanced.is_empty() && balanced.contains_key(cluster)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tests that publish plugins run one at a time: each stands for worker 1 on its own test
    /// thread, and a `with_feed` that tries the other test's worker-1 plugin holds it for that try,
    /// so the other's own `with_feed` found it busy (in Envoy one thread is worker 1).
    static PUBLISHING: std::sync::Mutex<()> = std::sync::Mutex::new(());

    fn publishing() -> std::sync::MutexGuard<'static, ()> {
        PUBLISHING.lock().unwrap_or_else(PoisonError::into_inner)
    }

    #[test]
    fn a_cluster_is_balanced_while_an_instance_lives() {
        balance("c1");
        balance("c1");
        unbalance("c1");
        assert!(balanced("c1"));
        unbalance("c1");
        assert!(!balanced("c1") && !balanced("c2"));
        unbalance("c2");
    }

    #[test]
    fn no_balancer_before_a_worker_is_known_or_without_a_client_plugin() {
        let _one_at_a_time = publishing();
        assert!(with_feed("c", |f| f.is_none()));
        let plugins: Arc<WorkerPlugins> = Arc::from(vec![Mutex::new(Plugin::Disabled)]);
        publish(&plugins, None);
        note_worker(0);
        assert!(with_feed("c", |f| f.is_none()));
        note_worker(5);
        assert!(with_feed("c", |f| f.is_none()));
    }

    /// Plugins of two workers, worker 1 having served one request of `cluster` from 10.0.0.1:80.
    fn plugins_that_learned(cluster: &str) -> (Arc<WorkerPlugins>, u64) {
        use tailweight_sidecar::test_host::{Served, TestExchange, TestProxy, TestWorker};
        let proxy = TestProxy::new(1_000_000, 1);
        let mut workers: Vec<TestWorker> =
            (0..2).map(|i| TestWorker::configured(&proxy, i, &format!(r#"{{"clusters": ["{cluster}"]}}"#))).collect();
        let mut exchange = TestExchange::to_cluster(cluster);
        let stream = workers[1].start(&proxy, &mut exchange);
        let served = Served { by: Some("10.0.0.1:80"), status: 200, latency_us: 3_000 };
        workers[1].finish(&proxy, stream, &mut exchange, served);
        (workers.into_iter().map(|w| Mutex::new(w.plugin)).collect(), proxy.now_us())
    }

    #[test]
    fn a_worker_reads_its_own_plugins_balancer_unless_a_tick_holds_it() {
        let _one_at_a_time = publishing();
        const CLUSTER: &str = "outbound|80||feed.test";
        let (plugins, now) = plugins_that_learned(CLUSTER);
        publish(&plugins, None);
        let learned = |f: Option<&Feed>| f.and_then(|f| f.balancer.learned_endpoint(CLUSTER, "10.0.0.1:80", now));
        note_worker(0);
        assert_eq!(with_feed(CLUSTER, learned), None, "worker 0 saw no request");
        note_worker(1);
        assert!(with_feed(CLUSTER, learned).is_some());
        let held = plugins[1].lock();
        assert_eq!(with_feed(CLUSTER, learned), None, "busy: chosen without it");
        drop(held);
    }

    static COUNTED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

    /// Envoy's counter update as the tests see it: config 7, counter 3 only.
    unsafe extern "C" fn count(
        config: *mut c_void,
        id: usize,
        _: *mut crate::abi::ModuleBuffer,
        _: usize,
        by: u64,
    ) -> u32 {
        if config as usize == 7 && id == 3 {
            COUNTED.fetch_add(by, std::sync::atomic::Ordering::Relaxed);
        }
        0
    }

    #[test]
    fn picks_count_into_the_filter_configs_counter_until_it_is_withdrawn() {
        let _one_at_a_time = publishing();
        const CLUSTER: &str = "outbound|80||counted.test";
        let (plugins, _) = plugins_that_learned(CLUSTER);
        publish(&plugins, Some(PickCounter { config_envoy: 7, id: 3, update: count }));
        note_worker(1);
        for _ in 0..3 {
            assert!(with_feed(CLUSTER, |f| f.map(Feed::count_pick)).is_some());
        }
        assert_eq!(COUNTED.load(std::sync::atomic::Ordering::Relaxed), 3);
        withdraw(&plugins);
        assert!(with_feed(CLUSTER, |f| f.is_none()), "withdrawn: no balancer, no counter");
        assert_eq!(COUNTED.load(std::sync::atomic::Ordering::Relaxed), 3);
    }
}
