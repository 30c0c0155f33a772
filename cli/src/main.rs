//! `tailweight` (also installed as `kubectl-tailweight`, so `kubectl tailweight endpoints` runs it):
//! why does an endpoint get the traffic it gets? See `endpoints.rs` for what it reads.

mod endpoints;
mod replicas;

use clap::{Parser, Subcommand, ValueEnum};
use endpoints::Report;
use std::process::ExitCode;
use std::time::Duration;

#[derive(Parser)]
#[command(name = "tailweight", version, about = "Inspect tailweight's steering from a client sidecar")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// One row per endpoint of a destination cluster: its share of this sidecar's recent picks,
    /// its weight from the aggregator, its latency and requests in flight as the sidecar's picker
    /// sees them, and its state (healthy, ramping, suspended, ejected, refused). Needs the filter's
    /// `per_endpoint_metrics` (Helm: filter.perEndpointMetrics). For a pod, first
    /// `kubectl -n <ns> port-forward <pod> 15000` and pass `--admin 127.0.0.1:15000`.
    Endpoints(EndpointsArgs),
}

#[derive(clap::Args)]
struct EndpointsArgs {
    /// The client sidecar's Envoy admin address (host:port or http://host:port).
    #[arg(long)]
    admin: String,
    /// The destination's Envoy cluster, e.g. 'outbound|8080||cart.shop.svc.cluster.local'.
    #[arg(long)]
    cluster: String,
    /// The base URL of every aggregator replica (for weights and ejection), repeated or
    /// comma-separated: each replica holds only the clusters it owns, so all are asked and the
    /// owner's view is shown. Without it those columns are empty.
    #[arg(long, env = "TAILWEIGHT_AGGREGATOR", value_delimiter = ',')]
    aggregator: Vec<String>,
    /// Seconds between the two readings of the pick counters (0: picks since the sidecar started).
    #[arg(long, default_value_t = 5.0)]
    window_s: f64,
    #[arg(short = 'o', long, value_enum, default_value_t = Output::Table)]
    output: Output,
}

#[derive(Clone, Copy, ValueEnum)]
enum Output {
    Table,
    Json,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let Command::Endpoints(args) = Cli::parse().command;
    match endpoints_report(&args).await {
        Ok(report) => {
            match args.output {
                Output::Table => print!("{}", endpoints::table(&report)),
                Output::Json => match serde_json::to_string_pretty(&report) {
                    Ok(json) => println!("{json}"),
                    Err(e) => {
                        eprintln!("tailweight: {e}");
                        return ExitCode::FAILURE;
                    }
                },
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("tailweight: {e}");
            ExitCode::FAILURE
        }
    }
}

fn base_url(address: &str) -> String {
    let address = address.trim_end_matches('/');
    if address.contains("://") {
        address.to_string()
    } else {
        format!("http://{address}")
    }
}

async fn get(client: &reqwest::Client, url: &str) -> Result<String, String> {
    let response = client.get(url).send().await.map_err(|e| format!("GET {url}: {e}"))?;
    let status = response.status();
    let body = response.text().await.map_err(|e| format!("GET {url}: {e}"))?;
    if !status.is_success() {
        return Err(format!("GET {url}: {status}: {}", body.trim()));
    }
    Ok(body)
}

async fn endpoints_report(args: &EndpointsArgs) -> Result<Report, String> {
    if !(args.window_s >= 0.0 && args.window_s <= 600.0) {
        return Err(format!("--window-s: {} is outside 0..=600", args.window_s));
    }
    let client = reqwest::Client::builder().timeout(Duration::from_secs(10)).build().map_err(|e| e.to_string())?;
    let admin = base_url(&args.admin);
    let mut stats_url =
        reqwest::Url::parse(&format!("{admin}/stats")).map_err(|e| format!("--admin {admin:?}: {e}"))?;
    stats_url.query_pairs_mut().append_pair("filter", "^wasmcustom\\.tailweight\\.");
    let stats_url = stats_url.to_string();
    let hosts =
        endpoints::parse_clusters(&get(&client, &format!("{admin}/clusters?format=json")).await?, &args.cluster)?;
    let before = if args.window_s > 0.0 {
        let (before, _) = endpoints::parse_stats(&get(&client, &stats_url).await?, &args.cluster);
        tokio::time::sleep(Duration::from_secs_f64(args.window_s)).await;
        before
    } else {
        Default::default()
    };
    let (after, view_age_ms) = endpoints::parse_stats(&get(&client, &stats_url).await?, &args.cluster);
    if after.is_empty() {
        return Err(format!(
            "{admin}/stats: no per-endpoint stats of {:?}: is per_endpoint_metrics on, and has the cluster had \
             requests?",
            args.cluster
        ));
    }
    let weights = if args.aggregator.is_empty() {
        None
    } else {
        let bases: Vec<String> = args.aggregator.iter().map(|a| base_url(a)).collect();
        let merged =
            replicas::merge(&args.cluster, &replicas::ask_every_replica(&client, &bases, &args.cluster).await)?;
        for warning in &merged.warnings {
            eprintln!("tailweight: warning: --aggregator {warning}");
        }
        Some(merged.weights)
    };
    Ok(Report {
        cluster: args.cluster.clone(),
        view_age_ms,
        window_s: args.window_s,
        endpoints: endpoints::rows(&hosts, &before, &after, weights.as_ref()),
    })
}
