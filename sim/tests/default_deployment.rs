//! One definition of the default deployment: what `helm install` gives (charts/tailweight), the
//! filter's and the aggregator's defaults, and what `make sim-measure` simulates are the same
//! configuration. A new chart value, template flag or simulator setting that departs from the
//! defaults fails here (the aggregator's flags against the weight book's defaults:
//! aggregator/src/config.rs, `the_flags_defaults_are_the_weight_books`; the rendered chart:
//! e2e/istio/test_manifests.py, `test_the_default_install_stamps_every_service...`).

use serde_yaml::Value;
use tailweight_sidecar::FilterConfig;
use tailweight_sim::policy::tailweight::reads_stamps;
use tailweight_sim::runner::filter_config;
use tailweight_sim::scenario::Scenario;
use tailweight_sim::setup::{Overrides, Setup};
use tailweight_sim::variant::Variant;
use tailweight_weights::WeightParams;

const VALUES: &str = include_str!("../../charts/tailweight/values.yaml");
const AGGREGATOR_TEMPLATE: &str = include_str!("../../charts/tailweight/templates/aggregator.yaml");
const MEASURE: &str = include_str!("../scenarios/seed-fib-1000.yaml");
const SIM_MK: &str = include_str!("../../mk/sim.mk");

fn values() -> Value {
    serde_yaml::from_str(VALUES).unwrap()
}

#[test]
fn the_charts_filter_settings_are_the_filters_defaults() {
    let v = values();
    let filter = v["filter"].as_mapping().expect("values.yaml: filter is a mapping");
    assert!(filter.is_empty(), "values.yaml sets filter keys: {filter:?}; change the filter's defaults instead");
    let defaults = FilterConfig::default();
    assert_eq!(v["loadStamps"]["maxAgeMs"].as_u64(), Some(defaults.pick.load_stamp_max_age_us / 1_000));
    // Stamps by default: every listed service's namespace runs the server role (attestations),
    // and without a service's own `loadStamps` that makes it stamped (templates/_helpers.tpl).
    assert_eq!(v["aggregator"]["enabled"].as_bool(), Some(true));
    assert_eq!(v["attestations"]["enabled"].as_bool(), Some(true));
}

#[test]
fn the_chart_runs_the_aggregator_with_its_flags_defaults() {
    let v = values();
    assert_eq!(v["aggregator"]["extraArgs"].as_sequence().map(Vec::len), Some(0));
    assert_eq!(v["aggregator"]["extraEnv"].as_sequence().map(Vec::len), Some(0));
    // The template's own flags are plumbing (where to listen, who is who, the memory budget, where
    // an attesting sender's address comes from), none a weighing parameter; its environment names
    // only the log level and the CPU source.
    let flags: Vec<&str> = AGGREGATOR_TEMPLATE
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- --"))
        .map(|f| f.split('=').next().unwrap_or(f))
        .collect();
    assert_eq!(flags, ["listen", "read-only-listen", "log-format", "identity", "memory-limit-mib", "attest-address"]);
    let env: Vec<&str> =
        AGGREGATOR_TEMPLATE.split("{name: TAILWEIGHT_").skip(1).filter_map(|s| s.split(',').next()).collect();
    assert_eq!(env, ["LOG", "CPU_URL"]);
}

#[test]
fn make_sim_measure_simulates_the_default_deployment() {
    let scenario = Scenario::parse(MEASURE).unwrap();
    let setup = Setup::resolve(&scenario, &Overrides::default()).unwrap();
    assert!(setup.filter_config.is_empty(), "the measure's scenario sets sim.filter_config");
    assert_eq!(setup.variant, Variant::default(), "the measure's scenario sets sim.variant");
    let target = SIM_MK.split("\nsim-measure:").nth(1).and_then(|t| t.split("\n\n").next()).unwrap();
    assert!(!target.contains("--variant") && !target.contains("--filter-config"), "{target}");
    // The default variant weighs as the aggregator's defaults, and with the aggregator the default
    // filter reads the stamps of the one cluster, as the chart lists every stamped service's.
    assert_eq!(setup.variant.weight_params(), WeightParams::default());
    let filter = filter_config(&setup.filter_config, setup.endpoints.len()).unwrap();
    assert_eq!(filter.pick, FilterConfig::default().pick);
    assert!(reads_stamps(&filter, true), "tailweight: stamps with the aggregator, as the chart");
    assert!(!reads_stamps(&filter, false), "tailweight_local: no server role without the aggregator");
}
