//! The hostile run's results as markdown.

use super::fair::{FairPhase, FairResults, TITLE as FAIR_TITLE};
use super::observe::Moved;
use super::results::HostileResults;

pub(crate) fn markdown(r: &HostileResults) -> String {
    let opt = |v: Option<f64>, digits: usize| v.map_or("-".to_string(), |v| format!("{v:.digits$}"));
    let mut s = String::from("# Aggregator under attack\n\n");
    s.push_str(&format!(
        "{}; after a {:.0} s baseline, every attack runs for {:.0} s while they go on. The aggregator: one \
         worker thread pinned to one core, `{}`.\n\n",
        r.honest.describe(),
        r.baseline.secs,
        r.attack.secs,
        r.honest.server_args.join(" ")
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

/// The trickling-and-polling section: a column per run and phase, the target beside.
pub(crate) fn fair_markdown(r: &FairResults) -> String {
    let opt = |v: Option<f64>, digits: usize| v.map_or("-".to_string(), |v| format!("{v:.digits$}"));
    let n = r.runs.len();
    let mut s = format!("{FAIR_TITLE}: {} principals\n\n", r.attackers);
    s.push_str(&format!(
        "{}. After a baseline, {} attacker principals at once (on a thread of the driver's own) trickle \
         report bodies, each declaring 512 KiB, on {} connections each (half at {:.0} B/s, just above \
         `--min-body-rate` {} B/s; half at {:.0} B/s, below it; a connection that was answered opens again after \
         100 ms), and poll `GET /v1/weights?limit=1024` back to back on {} connections each; then they poll alone \
         (their polls then find slots). Accepted = accepted of the reports due at the rate. A fresh aggregator per \
         run (one worker thread pinned to one core, `{}`); {} run{}, each column one run's phase.\n\n",
        r.honest.describe(),
        r.attackers,
        r.trickle_connections_per_attacker,
        r.trickle_bytes_per_s[0],
        r.min_body_rate,
        r.trickle_bytes_per_s[1],
        r.poll_connections_per_attacker,
        r.honest.server_args.join(" "),
        n,
        if n == 1 { "" } else { "s" }
    ));
    let phases: Vec<(usize, &FairPhase)> =
        r.runs.iter().enumerate().flat_map(|(k, run)| run.phases.iter().map(move |p| (k + 1, p))).collect();
    let cells = |f: &dyn Fn(&FairPhase) -> String| phases.iter().map(|(_, p)| f(p)).collect::<Vec<_>>().join(" | ");
    let heads: Vec<String> = phases.iter().map(|(k, p)| format!("run {k}: {}", p.name)).collect();
    s.push_str(&format!("| honest reports | {} | target (during the attacks) |\n", heads.join(" | ")));
    s.push_str(&format!("|---|{}---:|\n", "---:|".repeat(phases.len())));
    type Row<'a> = (&'a str, &'a dyn Fn(&FairPhase) -> String, &'a str);
    let rows: [Row; 6] = [
        (
            "accepted",
            &|p| format!("{:.3}% ({} of {})", p.honest_accepted_pct, p.honest.accepted, p.honest.sent),
            ">= 99%",
        ),
        ("p50", &|p| format!("{:.2} ms", p.honest.p50_ms), ""),
        ("p99", &|p| format!("{:.2} ms", p.honest.p99_ms), "< 5 ms"),
        ("p99.9 / max", &|p| format!("{:.1} / {:.1} ms", p.honest.p999_ms, p.honest.max_ms), ""),
        ("weights pages served / s", &|p| format!("{:.0}", p.polls_per_s), ""),
        (
            "CPU: aggregator / driver / machine",
            &|p| {
                let m = &p.machine;
                format!("{} / {} / {}", opt(m.aggregator_cores, 2), opt(m.driver_cores, 2), opt(m.busy_cores, 2))
            },
            "",
        ),
    ];
    for (name, f, target) in rows {
        s.push_str(&format!("| {name} | {} | {target} |\n", cells(f)));
    }
    s.push_str("\nWhat the attackers' requests got, and each run's peak RSS (VmHWM):\n\n");
    for (k, run) in r.runs.iter().enumerate() {
        s.push_str(&format!("- run {}: peak RSS {} MiB (the pod's limit: 256 MiB)", k + 1, opt(run.rss_peak_mib, 1)));
        for p in run.phases.iter().filter(|p| !p.attackers.is_empty()) {
            let kinds: Vec<String> = p
                .attackers
                .iter()
                .map(|(kind, t)| {
                    let outcomes: Vec<String> = t.outcomes.iter().map(|(o, v)| format!("{o}: {v}")).collect();
                    format!("{kind}: {} sent ({})", t.sent, outcomes.join(", "))
                })
                .collect();
            s.push_str(&format!("; {}: {}", p.name, kinds.join("; ")));
        }
        let counts: Vec<String> = run
            .aggregator_metrics
            .iter()
            .filter(|(name, _)| name.contains("shed") || name.contains("rejected"))
            .map(|(name, v)| format!("`{name}` {v}"))
            .collect();
        s.push_str(&format!("; the aggregator's counts at the end: {}.\n", counts.join(", ")));
    }
    s
}
