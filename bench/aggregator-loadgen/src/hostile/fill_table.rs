//! The attestation fill's rows of the evidence section (`evidence.rs`): the baseline (the same
//! driver without attackers) first, then one row per fill, the honest reports' `sent / due` (the
//! driver) apart from `accepted / sent` (the aggregator). `--attest-fill-only` reruns just these
//! and replaces just these rows of `--md` (and the key `attest_fill` of `--json`).

use super::attest_fill::{self, FillRun};
use crate::args::LoadgenArgs;
use serde::Serialize;

/// Where each fill row starts (what `replace_fill_rows` replaces).
const ROW_START: &str = "| attestation fill";
/// The attacker counts of a fill run: 0 is the baseline.
pub(crate) const ATTACKERS: [usize; 3] = [0, 1, 4];

#[derive(Debug, Serialize)]
struct FillOnly {
    aggregator: String,
    fills: Vec<FillRun>,
    loadavg_before: String,
    loadavg_after: String,
}

fn mib(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.0} MiB"))
}

/// The honest reports of one run: sent of due, accepted of sent, refusals, p99.
fn honest(f: &FillRun) -> String {
    let due = (f.honest.target_rps.unwrap_or(0) as f64 * f.honest.secs).round() as u64;
    format!(
        "honest reports ({}/s on {} connections) sent {} of {} due ({:.2}%), accepted {} of {} sent ({:.2}%), \
         refused by status {:?}, p99 {:.1} ms, the aggregator's CPU {} of its core; honest renewals accepted {} \
         of {} ({:.2}%)",
        f.honest.target_rps.unwrap_or(0),
        f.connections,
        f.honest.sent,
        due,
        f.honest_sent_of_due_pct,
        f.honest.accepted,
        f.honest.sent,
        f.honest_accepted_of_sent_pct,
        f.honest.refused_by_status,
        f.honest.p99_ms,
        f.honest.server_cpu_cores.map_or("-".into(), |c| format!("{c:.2}")),
        f.renewals.outcomes.get("204").copied().unwrap_or(0),
        f.renewals.sent,
        f.renewals_accepted_pct,
    )
}

/// One row per run of `fills` (the baseline's, attackers 0, says what the driver alone sends).
pub(crate) fn rows(fills: &[FillRun]) -> String {
    let mut md = String::new();
    for f in fills {
        if f.attackers == 0 {
            md += &format!(
                "| attestation fill baseline: the same driver, renewals and fresh aggregator, no attacker | {}; \
                 peak RSS {} | the driver sends >= 99.9% of the reports due (else the fill rows' `sent / due` \
                 reads the driver and this machine, not the aggregator) |\n",
                honest(f),
                mib(f.rss_peak_mib),
            );
            continue;
        }
        md += &format!(
            "| attestation fill by {} principal(s) of the service's namespace, {} sources each, back to back on \
             4 connections each; honest reporters all new (no warm-up) | attestations sent {}, accepted (204) {}, \
             refused {:?}; {}; peak RSS {} of `--memory-limit-mib` {}; book bytes at the end {}; the aggregator's \
             refusals (all principals) {} | peak RSS within the limit; honest reports (accepted of sent) and \
             renewals accepted >= 99.9% (100% ideal), sent of due as the baseline's |\n",
            f.attackers,
            tailweight_wire::attest::MAX_SOURCES,
            f.fills.sent,
            f.fills.outcomes.get("204").copied().unwrap_or(0),
            f.fills.outcomes.iter().filter(|(k, _)| k.as_str() != "204").collect::<Vec<_>>(),
            honest(f),
            mib(f.rss_peak_mib),
            mib(f.memory_limit_mib),
            f.book_bytes.map_or("-".into(), |b| format!("{:.1} MiB", b / 1048576.0)),
            super::observe::refusals(&f.aggregator_metrics),
        );
    }
    md
}

/// `text` with its fill rows replaced by `rows` where the first of them was (or `rows` appended).
pub(crate) fn replace_fill_rows(text: &str, rows: &str) -> String {
    let mut out = String::new();
    let mut placed = false;
    for line in text.lines() {
        if line.starts_with(ROW_START) {
            if !placed {
                out += rows;
                placed = true;
            }
            continue;
        }
        out += line;
        out.push('\n');
    }
    if !placed {
        out += rows;
    }
    out
}

/// `--attest-fill-only`: the baseline and the fills, each on a fresh aggregator; their rows
/// replace the fill rows of `--md`, their results the key `attest_fill` of `--json`.
pub(crate) async fn publish(args: &LoadgenArgs) -> Result<(), String> {
    let binary = args.aggregator.as_ref().ok_or("--attest-fill-only needs --aggregator PATH")?;
    let loadavg_before = super::observe::loadavg();
    let mut fills = Vec::new();
    for attackers in ATTACKERS {
        eprintln!("attestation fill by {attackers}");
        fills.push(attest_fill::run(binary, args, attackers, args.attack.attack_secs).await?);
    }
    let rows = rows(&fills);
    let results = FillOnly {
        aggregator: binary.display().to_string(),
        fills,
        loadavg_before,
        loadavg_after: super::observe::loadavg(),
    };
    print!("{rows}");
    eprintln!("load average {} before, {} after", results.loadavg_before, results.loadavg_after);
    if let Some(path) = &args.json {
        let old = std::fs::read(path).ok().and_then(|b| serde_json::from_slice(&b).ok());
        let mut object = match old {
            Some(serde_json::Value::Object(o)) => o,
            _ => serde_json::Map::new(),
        };
        object.insert("attest_fill".into(), serde_json::to_value(&results).map_err(|e| e.to_string())?);
        let body = serde_json::to_vec_pretty(&object).map_err(|e| e.to_string())?;
        std::fs::write(path, body).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    if let Some(path) = &args.md {
        let old = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        std::fs::write(path, replace_fill_rows(&old, &rows)).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_fill_rows_are_replaced_where_they_were() {
        let text = "# t\n\n| a | b |\n|---|---|\n| made-up | x |\n| attestation fill by 1 | y |\n\
                    | attestation fill by 4 | z |\n| 3 clients | w |\n\nafter\n";
        let rows = "| attestation fill baseline | 0 |\n| attestation fill by 1 | 1 |\n";
        assert_eq!(
            replace_fill_rows(text, rows),
            "# t\n\n| a | b |\n|---|---|\n| made-up | x |\n| attestation fill baseline | 0 |\n\
             | attestation fill by 1 | 1 |\n| 3 clients | w |\n\nafter\n"
        );
        assert_eq!(replace_fill_rows("x\n", rows), format!("x\n{rows}"));
    }
}
