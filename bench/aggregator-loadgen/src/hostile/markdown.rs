//! The hostile run's results as markdown.

use super::observe::Moved;
use super::results::HostileResults;

pub(crate) fn markdown(r: &HostileResults) -> String {
    let opt = |v: Option<f64>, digits: usize| v.map_or("-".to_string(), |v| format!("{v:.digits$}"));
    let mut s = String::from("# Aggregator under attack\n\n");
    s.push_str(&format!(
        "{} honest reporters x {} endpoints ({} clusters, {} principals) report {} times a second over {} \
         keep-alive connections; after a {:.0} s baseline, every attack runs for {:.0} s while they go on. The \
         aggregator: one worker thread pinned to one core, `{}`.\n\n",
        r.reporters,
        r.endpoints_per_reporter,
        r.clusters,
        r.honest_principals,
        r.honest_rate,
        r.connections,
        r.baseline.secs,
        r.attack.secs,
        r.server_args.join(" ")
    ));
    s.push_str("| | result | target |\n|---|---:|---:|\n");
    s.push_str(&format!(
        "| honest reports accepted during the attack | {:.3}% ({} of {}) | 100% |\n",
        r.honest_accepted_pct,
        r.attack.accepted,
        r.attack.accepted + r.attack.refused + r.attack.failed
    ));
    s.push_str(&format!(
        "| their p99 latency | {:.2} ms (baseline {:.2} ms) | < 5 ms |\n",
        r.honest_p99_ms, r.baseline.p99_ms
    ));
    s.push_str(&format!(
        "| aggregator RSS, peak | {} MiB | < {:.0} MiB (the pod's limit) |\n",
        opt(r.rss_peak_mib, 1),
        r.pod_limit_mib
    ));
    let moved = |m: &Moved| {
        format!(
            "{:.2}% (mean {:.3}%), {} ejections flipped",
            100.0 * m.max_share_change,
            100.0 * m.mean_share_change,
            m.ejections_flipped
        )
    };
    s.push_str(&format!(
        "| weights moved by the attackers (largest change of an endpoint's share, {} attacked clusters) | {} | <= 5% |\n",
        r.weights_moved.clusters,
        moved(&r.weights_moved)
    ));
    s.push_str(&format!(
        "| the same in {} control clusters nobody lied about (drift) | {} | |\n\n",
        r.weights_moved_control.clusters,
        moved(&r.weights_moved_control)
    ));
    s.push_str(&details(r));
    s
}

/// What each attack got, the honest reports' numbers, the machine, and the aggregator's counters.
fn details(r: &HostileResults) -> String {
    let opt = |v: Option<f64>, digits: usize| v.map_or("-".to_string(), |v| format!("{v:.digits$}"));
    let mut s = String::new();
    s.push_str("| attack | sent | outcomes |\n|---|---:|---|\n");
    for (name, t) in &r.attacks {
        let outcomes: Vec<String> = t.outcomes.iter().map(|(k, v)| format!("{k}: {v}")).collect();
        s.push_str(&format!("| {name} | {} | {} |\n", t.sent, outcomes.join(", ")));
    }
    s.push_str(&format!(
        "\nHonest reports: baseline {:.0}/s accepted, p50 {:.2} ms, p99 {:.2} ms; attack {:.0}/s accepted, p50 {:.2} ms, \
         p99 {:.2} ms, p99.9 {:.2} ms, max {:.1} ms; refused {}, failed {}.\n",
        r.baseline.accepted_per_s,
        r.baseline.p50_ms,
        r.baseline.p99_ms,
        r.attack.accepted_per_s,
        r.attack.p50_ms,
        r.attack.p99_ms,
        r.attack.p999_ms,
        r.attack.max_ms,
        r.attack.refused,
        r.attack.failed
    ));
    let m = &r.machine;
    s.push_str(&format!(
        "Machine: {} CPUs, load average {} before and {} after; during the attack the machine was busy {} cores, \
         of which the aggregator {} and this driver {} (the rest: other work on the shared machine).\n",
        m.cpus,
        m.loadavg_before,
        m.loadavg_after,
        opt(m.busy_cores, 2),
        opt(m.aggregator_cores, 2),
        opt(m.driver_cores, 2)
    ));
    s.push_str("\nAggregator counters at the end (non-zero):\n\n```\n");
    for (k, v) in &r.aggregator_metrics {
        s.push_str(&format!("{k} {v}\n"));
    }
    s.push_str("```\n");
    s
}
