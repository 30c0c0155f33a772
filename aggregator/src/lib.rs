//! tailweight aggregator: sidecars POST reports, the reply carries the merged view (weights, global
//! in-flight, latency, ejection) for the clusters they asked about. Weight logic lives in
//! `tailweight_core::weights`; this crate is the thin service around it.

pub mod config;
pub mod cpu_source;
pub mod metrics;
pub mod recompute;
pub mod routes;
pub mod state;

use std::future::Future;
use std::sync::Arc;
use tailweight_core::wire::Limits;

pub use config::ServiceConfig;
pub use state::AppState;

/// Build the shared state from the configuration (Err: one line naming the bad setting).
pub fn state_from(config: &ServiceConfig) -> Result<Arc<AppState>, String> {
    let params = config.weight_params().map_err(|e| e.to_string())?;
    if config.max_body_bytes == 0 {
        return Err("max_body_bytes must be > 0".into());
    }
    let limits = Limits {
        max_clusters: config.max_clusters_per_report.max(1),
        max_endpoints_per_cluster: params.max_endpoints_per_cluster,
    };
    Ok(Arc::new(AppState::new(params, limits, config.max_body_bytes)))
}

/// Serve on `listener` until `shutdown` resolves, with the recompute loop and (if configured) the
/// CPU poller; in-flight requests finish before it returns.
pub async fn serve(
    config: ServiceConfig,
    state: Arc<AppState>,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let recompute = tokio::spawn(recompute::run(state.clone(), config.recompute_interval()));
    let poller =
        cpu_source::CpuSource::from_config(&config).map(|source| tokio::spawn(cpu_source::run(source, state.clone())));
    let draining = state.clone();
    let result = axum::serve(listener, routes::router(state))
        .with_graceful_shutdown(async move {
            shutdown.await;
            draining.start_draining();
            tracing::info!("shutting down: finishing in-flight requests");
        })
        .await;
    recompute.abort();
    if let Some(p) = poller {
        p.abort();
    }
    result
}
