//! `tailweight` (also installed as `kubectl-tailweight`, so `kubectl tailweight endpoints` runs it):
//! why does an endpoint get the traffic it gets (`endpoints.rs`), and is anything silently wrong
//! with the installation (`check/`)? The apiserver is read through kubectl (`kube.rs` says why).

mod check;
mod endpoints;
mod kube;
mod pods;
mod replicas;

use clap::{Parser, Subcommand, ValueEnum};
use endpoints::Report;
use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::Duration;

#[derive(Parser)]
#[command(name = "tailweight", version, about = "Inspect tailweight's steering from a client sidecar")]
struct Cli {
    #[command(subcommand)]
    command: Command,
    #[command(flatten)]
    kube: kube::Kubectl,
}

#[derive(Subcommand)]
enum Command {
    /// One row per endpoint of a destination cluster: its share of this sidecar's recent picks,
    /// its weight from the aggregator, its latency and requests in flight as the sidecar's picker
    /// sees them, and its state (healthy, ramping, suspended, ejected, refused). Needs the filter's
    /// `per_endpoint_metrics` (Helm: filter.perEndpointMetrics). Name the client pod with
    /// `--pod <namespace>/<name>` (reached through `kubectl port-forward`), or give its admin
    /// address with `--admin`. Endpoints are shown with their pod's name (from the apiserver).
    Endpoints(EndpointsArgs),
    /// Reads the apiserver for the installation's silent failures (the aggregator without a
    /// sidecar or hidden from an opted-in namespace, DestinationRules that conflict with steering,
    /// monitors no Prometheus selects, pods naming a missing bootstrap ConfigMap) and says how to
    /// fix each. Exit code 1 when any finding is an error, 2 when the apiserver cannot be read.
    Check(CheckArgs),
}

#[derive(clap::Args)]
struct CheckArgs {
    #[arg(short = 'o', long, value_enum, default_value_t = Output::Table)]
    output: Output,
}

/// How `--pod` reaches the sidecar's admin port.
#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
enum Reach {
    /// `kubectl port-forward` to the pod (Envoy's admin port listens on the pod's localhost).
    PortForward,
    /// The pod IP itself (from inside the cluster network, where the admin port listens on it).
    Direct,
}

#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("client").required(true).args(["admin", "pod"])))]
struct EndpointsArgs {
    /// The client sidecar's Envoy admin address (host:port or http://host:port).
    #[arg(long)]
    admin: Option<String>,
    /// The client pod, <namespace>/<name>: its sidecar's admin port is found through the apiserver
    /// (`proxyAdminPort` of its proxy.istio.io/config annotation, else 15000).
    #[arg(long)]
    pod: Option<String>,
    /// How --pod reaches the admin port.
    #[arg(long, value_enum, default_value_t = Reach::PortForward)]
    reach: Reach,
    /// Show addresses only: do not ask the apiserver which pod has each.
    #[arg(long)]
    no_pod_names: bool,
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
    let cli = Cli::parse();
    match cli.command {
        Command::Endpoints(args) => match endpoints_report(&args, &cli.kube).await {
            Ok(report) => print_output(args.output, &report, || endpoints::table(&report)),
            Err(e) => {
                eprintln!("tailweight: {e}");
                ExitCode::FAILURE
            }
        },
        Command::Check(args) => run_check(&args, &cli.kube).await,
    }
}

fn print_output<T: serde::Serialize>(output: Output, value: &T, table: impl FnOnce() -> String) -> ExitCode {
    match output {
        Output::Table => print!("{}", table()),
        Output::Json => match serde_json::to_string_pretty(value) {
            Ok(json) => println!("{json}"),
            Err(e) => {
                eprintln!("tailweight: {e}");
                return ExitCode::FAILURE;
            }
        },
    }
    ExitCode::SUCCESS
}

async fn run_check(args: &CheckArgs, kubectl: &kube::Kubectl) -> ExitCode {
    let snapshot = match kube::snapshot(kubectl).await {
        Ok(snapshot) => snapshot,
        Err(e) => {
            eprintln!("tailweight check: {e}");
            return ExitCode::from(2);
        }
    };
    let findings = check::check(&snapshot);
    let printed = print_output(args.output, &findings, || check::table(&findings));
    if printed != ExitCode::SUCCESS {
        return printed;
    }
    if findings.iter().any(|f| f.severity == check::Severity::Error) {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// The admin address of `--admin`, or of `--pod` (with the port-forward child, kept until the
/// report is done).
async fn admin_address(
    args: &EndpointsArgs,
    kubectl: &kube::Kubectl,
) -> Result<(String, Option<tokio::process::Child>), String> {
    if let Some(admin) = &args.admin {
        return Ok((base_url(admin), None));
    }
    let (ns, name) = pods::parse_ref(args.pod.as_deref().unwrap_or_default(), "default")?;
    let pod = kubectl.get("pod", &ns, &name).await?;
    let (ip, port) = pods::admin_target(&pod)?;
    match args.reach {
        Reach::Direct if ip.contains(':') => Ok((format!("http://[{ip}]:{port}"), None)),
        Reach::Direct => Ok((format!("http://{ip}:{port}"), None)),
        Reach::PortForward => {
            let (child, local) = kubectl.port_forward(&ns, &name, port).await?;
            Ok((base_url(&local), Some(child)))
        }
    }
}

/// Pod names by IP in the destination's namespace (its pods and its Service's EndpointSlices);
/// empty, with a warning, when the apiserver cannot say.
async fn pod_names(kubectl: &kube::Kubectl, cluster: &str) -> BTreeMap<String, String> {
    let Some((service, ns)) = check::parse_cluster(cluster).and_then(|(_, _, host)| check::service_of_host(&host))
    else {
        return BTreeMap::new();
    };
    let selector = format!("kubernetes.io/service-name={service}");
    let pods_args = ["get", "pods", "--namespace", &ns];
    let slices_args = ["get", "endpointslices", "--namespace", &ns, "--selector", &selector];
    let (pods, slices) = tokio::join!(kubectl.get_json(&pods_args), kubectl.get_json(&slices_args));
    let items = |list: Result<serde_json::Value, String>| match list {
        Ok(list) => list["items"].as_array().cloned().unwrap_or_default(),
        Err(e) => {
            eprintln!("tailweight: warning: pod names: {e}");
            Vec::new()
        }
    };
    pods::names_by_ip(&items(slices), &items(pods))
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

async fn endpoints_report(args: &EndpointsArgs, kubectl: &kube::Kubectl) -> Result<Report, String> {
    if !(args.window_s >= 0.0 && args.window_s <= 600.0) {
        return Err(format!("--window-s: {} is outside 0..=600", args.window_s));
    }
    let client = reqwest::Client::builder().timeout(Duration::from_secs(10)).build().map_err(|e| e.to_string())?;
    let (admin, _port_forward) = admin_address(args, kubectl).await?;
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
    let pods = if args.no_pod_names { BTreeMap::new() } else { pod_names(kubectl, &args.cluster).await };
    Ok(Report {
        cluster: args.cluster.clone(),
        view_age_ms,
        window_s: args.window_s,
        endpoints: endpoints::rows(&hosts, &before, &after, weights.as_ref(), &pods),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from([&["tailweight"], args].concat())
    }

    #[test]
    fn the_client_by_admin_address_as_before_or_by_pod() {
        let Command::Endpoints(old) =
            parse(&["endpoints", "--admin", "127.0.0.1:15000", "--cluster", "c"]).unwrap().command
        else {
            panic!("not endpoints")
        };
        assert_eq!((old.admin.as_deref(), old.pod.as_deref()), (Some("127.0.0.1:15000"), None));
        let cli = parse(&["--context", "prod", "endpoints", "--pod", "shop/web-1", "--cluster", "c"]).unwrap();
        assert_eq!(cli.kube.context.as_deref(), Some("prod"));
        let Command::Endpoints(by_pod) = cli.command else { panic!("not endpoints") };
        assert!(by_pod.pod.as_deref() == Some("shop/web-1") && by_pod.reach == Reach::PortForward);
        assert!(parse(&["endpoints", "--cluster", "c"]).is_err());
        assert!(parse(&["endpoints", "--admin", "a", "--pod", "b/c", "--cluster", "c"]).is_err());
        // The kubectl flags are global: after the subcommand too.
        let check = parse(&["check", "--kubeconfig", "/tmp/kc", "-o", "json"]).unwrap();
        assert_eq!(check.kube.kubeconfig.as_deref(), Some("/tmp/kc"));
    }
}
