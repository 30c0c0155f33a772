//! tailweight-aggregator: CLI, logging, runtime, signals. Everything else is in the library.

use clap::Parser;
use tailweight_aggregator::config::{LogFormat, ServiceConfig};

fn main() -> std::process::ExitCode {
    let config = ServiceConfig::parse();
    init_logging(&config);
    let state = match tailweight_aggregator::state_from(&config) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("tailweight-aggregator: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    // One worker: a current-thread runtime. Accepting, serving and recomputing then share one
    // thread, with none of the multi-thread scheduler's cross-thread wake-ups (a multi-thread
    // runtime with one worker still accepts on the main thread and hands each wake-up over).
    let mut runtime = if config.worker_threads == 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        if config.worker_threads > 0 {
            b.worker_threads(config.worker_threads);
        }
        b
    };
    let runtime = match runtime.enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("tailweight-aggregator: cannot start the runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(config.listen).await?;
        let bound = listener.local_addr()?;
        let read_only = match config.read_only_listen {
            Some(addr) => {
                let l = tokio::net::TcpListener::bind(addr).await?;
                tracing::info!(listen = %l.local_addr()?, "read-only listener (weights, metrics, probes)");
                Some(l)
            }
            None => None,
        };
        if let Some(path) = &config.ready_file {
            write_ready_file(path, bound)?;
        }
        tracing::info!(listen = %bound, "tailweight-aggregator listening");
        tailweight_aggregator::serve_with_read_only(config, state, listener, read_only, shutdown_signal()).await
    });
    match result {
        Ok(()) => {
            tracing::info!("stopped");
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            tracing::error!(error = %e, "server failed");
            std::process::ExitCode::FAILURE
        }
    }
}

fn init_logging(config: &ServiceConfig) {
    let filter = tracing_subscriber::EnvFilter::try_new(&config.log)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    match config.log_format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.init(),
    }
}

/// The bound address, written to a temporary name and renamed into place (never read half-written).
fn write_ready_file(path: &std::path::Path, bound: std::net::SocketAddr) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    std::fs::write(&tmp, format!("{bound}\n"))?;
    std::fs::rename(&tmp, path)
}

/// SIGTERM or SIGINT.
async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => tracing::info!("SIGINT"),
        _ = term => tracing::info!("SIGTERM"),
    }
}
