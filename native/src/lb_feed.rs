//! How the load-balancing policy reaches what the HTTP filter learns, within one process (Envoy
//! loads the module file once, so both halves see this memory):
//! - each filter config's per-worker plugins are listed here (`publish`) for as long as they live;
//! - each worker thread notes its worker index when a stream begins on it (`note_worker`): Envoy
//!   gives the load balancer no index, and a worker's streams and its load balancer run on the same
//!   thread;
//! - each cluster balanced by the policy is listed (`balance` / `unbalance`, counted per load
//!   balancer instance), so the filter learns from its requests without steering them
//!   (`Host::load_balancer_picks`).

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex, PoisonError, RwLock, Weak};
use tailweight_picker::Balancer;
use tailweight_sidecar::Plugin;

/// One filter config's plugins, one per worker.
pub type WorkerPlugins = [Mutex<Plugin>];

static PLUGINS: LazyLock<RwLock<Vec<Weak<WorkerPlugins>>>> = LazyLock::new(RwLock::default);
static BALANCED: LazyLock<RwLock<HashMap<String, usize>>> = LazyLock::new(RwLock::default);

thread_local! {
    static WORKER: Cell<Option<usize>> = const { Cell::new(None) };
}

/// List a filter config's plugins (the ones of configs gone are dropped from the list).
pub fn publish(plugins: &Arc<WorkerPlugins>) {
    let mut list = PLUGINS.write().unwrap_or_else(PoisonError::into_inner);
    list.retain(|p| p.strong_count() > 0);
    list.push(Arc::downgrade(plugins));
}

/// The calling thread is Envoy worker `index`.
pub fn note_worker(index: usize) {
    WORKER.with(|w| w.set(Some(index)));
}

/// Run `f` with the calling worker's balancer of the newest filter config that tracks `cluster`
/// (None: no stream ran on this thread yet, no filter config tracks it, or its plugin is busy: a
/// tick on the main thread holds it).
pub fn with_balancer<T>(cluster: &str, f: impl FnOnce(Option<&Balancer>) -> T) -> T {
    let Some(worker) = WORKER.with(Cell::get) else { return f(None) };
    let list = PLUGINS.read().unwrap_or_else(PoisonError::into_inner);
    for plugins in list.iter().rev().filter_map(Weak::upgrade) {
        let Some(Ok(plugin)) = plugins.get(worker).map(Mutex::try_lock) else { continue };
        if let Some(balancer) = plugin.balancer().filter(|b| b.tracks(cluster)) {
            return f(Some(balancer));
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
        assert!(with_balancer("c", |b| b.is_none()));
        let plugins: Arc<WorkerPlugins> = Arc::from(vec![Mutex::new(Plugin::Disabled)]);
        publish(&plugins);
        note_worker(0);
        assert!(with_balancer("c", |b| b.is_none()));
        note_worker(5);
        assert!(with_balancer("c", |b| b.is_none()));
    }

    #[test]
    fn a_worker_reads_its_own_plugins_balancer_unless_a_tick_holds_it() {
        use tailweight_sidecar::test_host::{Served, TestExchange, TestProxy, TestWorker};
        const CLUSTER: &str = "outbound|80||feed.test";
        let proxy = TestProxy::new(1_000_000, 1);
        let mut workers: Vec<TestWorker> =
            (0..2).map(|i| TestWorker::configured(&proxy, i, &format!(r#"{{"clusters": ["{CLUSTER}"]}}"#))).collect();
        let mut exchange = TestExchange::to_cluster(CLUSTER);
        let stream = workers[1].start(&proxy, &mut exchange);
        let served = Served { by: Some("10.0.0.1:80"), status: 200, latency_us: 3_000 };
        workers[1].finish(&proxy, stream, &mut exchange, served);
        let plugins: Arc<WorkerPlugins> = workers.into_iter().map(|w| Mutex::new(w.plugin)).collect();
        publish(&plugins);
        let now = proxy.now_us();
        let learned = |b: Option<&Balancer>| b.and_then(|b| b.learned_endpoint(CLUSTER, "10.0.0.1:80", now));
        note_worker(0);
        assert_eq!(with_balancer(CLUSTER, learned), None, "worker 0 saw no request");
        note_worker(1);
        assert!(with_balancer(CLUSTER, learned).is_some());
        let held = plugins[1].lock();
        assert_eq!(with_balancer(CLUSTER, learned), None, "busy: chosen without it");
        drop(held);
    }
}
