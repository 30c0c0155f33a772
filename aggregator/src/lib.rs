//! tailweight aggregator: sidecars POST reports, the reply carries the merged view (weights, global
//! in-flight, latency, ejection) for the clusters they asked about. Weight logic lives in
//! `tailweight_weights`; this crate is the thin service around it.

pub mod admission;
pub mod answer;
pub mod attest;
pub mod attest_address;
pub mod body;
pub mod budget;
pub mod config;
pub mod cpu_source;
pub mod identity;
pub mod metrics;
pub mod page_rate;
pub mod recompute;
pub mod routes;
pub mod scrape;
pub mod shared_page;
pub mod state;
pub mod weights_page;

use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tailweight_wire::protocol::Limits;
use tokio::io::AsyncWriteExt;
use tokio::sync::Semaphore;

pub use config::ServiceConfig;
use routes::Listener;
pub use state::AppState;

/// How long in-flight requests get to finish once shutdown begins.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(8);

/// Build the shared state from the configuration (Err: one line naming the bad setting).
pub fn state_from(config: &ServiceConfig) -> Result<Arc<AppState>, String> {
    let params = config.weight_params()?;
    if config.max_body_bytes == 0 {
        return Err("max_body_bytes must be > 0".into());
    }
    let limits = state::RequestLimits {
        wire: Limits {
            max_clusters: config.max_clusters_per_report.max(1),
            max_endpoints_per_cluster: params.max_endpoints_per_cluster,
        },
        max_body_bytes: config.max_body_bytes,
        max_reply_endpoints: config.max_reply_endpoints,
        max_concurrent_requests: config.max_concurrent_requests as usize,
        max_requests_per_principal: config.max_requests_per_principal as usize,
        body_timeout: config.body_timeout(),
        attest_rule: config.attest_rule,
        attest_address: config.attest_address.clone(),
        min_body_rate: config.min_body_rate,
        metrics_page_max_age_us: config.metrics_page_max_age_ms.saturating_mul(1_000),
        budget: config.service_limits(),
    };
    let state = AppState::new(params, config.identity_source()?, limits).map_err(|e| format!("metrics: {e}"))?;
    Ok(Arc::new(state))
}

/// The connection settings: HTTP/1.1 (what sidecars, Envoy's Wasm calls and Prometheus speak; no
/// protocol sniffing, during which no timeout would run) with the header timeout, which hyper also
/// runs while a keep-alive connection waits for its next request, and a bounded read buffer.
fn connection_builder(config: &ServiceConfig) -> http1::Builder {
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(config.header_timeout())
        .max_buf_size(budget::CONNECTION_BUFFER_BYTES)
        .keep_alive(true);
    builder
}

/// What a connection beyond `--max-connections` gets before it is closed (without reading it).
fn too_many_connections() -> Vec<u8> {
    let line = format!("connections: the limit is reached; retry after {} s\n", routes::RETRY_AFTER_S);
    format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain; charset=utf-8\r\nretry-after: {}\r\n\
         connection: close\r\ncontent-length: {}\r\n\r\n{line}",
        routes::RETRY_AFTER_S,
        line.len()
    )
    .into_bytes()
}

/// Serve on `listener` until `shutdown` resolves, with the recompute loop and (if configured) the
/// CPU poller; in-flight requests get `DRAIN_TIMEOUT` to finish before it returns. Each connection
/// holds one of `--max-connections` permits.
pub async fn serve(
    config: ServiceConfig,
    state: Arc<AppState>,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_with_read_only(config, state, listener, None, shutdown).await
}

/// `serve`, and the read-only router on `read_only` (`--read-only-listen`), if given; both share
/// the connection permits.
pub async fn serve_with_read_only(
    config: ServiceConfig,
    state: Arc<AppState>,
    listener: tokio::net::TcpListener,
    read_only: Option<tokio::net::TcpListener>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let recompute = tokio::spawn(recompute::run(state.clone(), config.recompute_interval()));
    let poller =
        cpu_source::CpuSource::from_config(&config).map(|source| tokio::spawn(cpu_source::run(source, state.clone())));
    let reports = routes::router(state.clone(), Listener::Reports);
    let inspect = routes::router(state.clone(), Listener::ReadOnly);
    let builder = connection_builder(&config);
    let permits = Arc::new(Semaphore::new(config.max_connections as usize));
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    let accept_read_only = async |l: &Option<tokio::net::TcpListener>| match l {
        Some(l) => l.accept().await,
        None => std::future::pending().await,
    };
    loop {
        let (accepted, router) = tokio::select! {
            accepted = listener.accept() => (accepted, &reports),
            accepted = accept_read_only(&read_only) => (accepted, &inspect),
            () = &mut shutdown => break,
        };
        let (tcp, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of file descriptors or the like: wait a little instead of spinning.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            state.metrics.connections_refused.inc();
            tokio::spawn(async move {
                let mut tcp = tcp;
                let _ = tokio::time::timeout(Duration::from_secs(1), tcp.write_all(&too_many_connections())).await;
            });
            continue;
        };
        let _ = tcp.set_nodelay(true);
        let service = router.clone().layer(axum::Extension(routes::Peer(peer)));
        let connection = builder.serve_connection(TokioIo::new(tcp), TowerToHyperService::new(service));
        let connection = graceful.watch(connection);
        let metrics_state = state.clone();
        metrics_state.metrics.connections_open.inc();
        tokio::spawn(async move {
            let _ = connection.await;
            metrics_state.metrics.connections_open.dec();
            drop(permit);
        });
    }
    state.start_draining();
    tracing::info!("shutting down: finishing in-flight requests");
    drop(listener);
    drop(read_only);
    if tokio::time::timeout(DRAIN_TIMEOUT, graceful.shutdown()).await.is_err() {
        tracing::warn!("some connections did not finish within {DRAIN_TIMEOUT:?}");
    }
    recompute.abort();
    if let Some(p) = poller {
        p.abort();
    }
    Ok(())
}
