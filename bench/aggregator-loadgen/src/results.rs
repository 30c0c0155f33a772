//! The rate steps' results, as markdown and JSON (`--md`, `--json`).

use crate::args::LoadgenArgs;
use crate::drive::Step;
use crate::inprocess::InProcess;
use serde::Serialize;

#[derive(Serialize)]
pub(crate) struct Results {
    pub reporters: usize,
    pub endpoints_per_reporter: usize,
    pub clusters: usize,
    pub connections: usize,
    pub server_worker_threads: u32,
    pub warmup: Step,
    pub rss_after_warmup_mib: Option<f64>,
    pub steps: Vec<Step>,
    pub rss_end_mib: Option<f64>,
    pub rss_peak_mib: Option<f64>,
    pub best_accepted_per_s_under_5ms_p99: Option<f64>,
    pub max_accepted_per_core_s: Option<f64>,
    pub inprocess: Option<InProcess>,
}

pub(crate) fn markdown(r: &Results) -> String {
    let mut s = String::new();
    s.push_str("# Aggregator benchmark\n\n");
    s.push_str(&format!(
        "{} simulated reporters x {} endpoints ({} clusters), {} keep-alive connections; aggregator pinned to one core \
         with `--worker-threads 1`, load driver on the other core. Latency = send to full response, at the driver.\n\n",
        r.reporters, r.endpoints_per_reporter, r.clusters, r.connections
    ));
    s.push_str("| target reports/s | accepted/s | server cores | accepted/s per core | p50 ms | p90 ms | p99 ms | p99.9 ms | max ms | refused | failed |\n");
    s.push_str("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    let opt = |v: Option<f64>, digits: usize| v.map_or("-".to_string(), |v| format!("{v:.digits$}"));
    for st in &r.steps {
        s.push_str(&format!(
            "| {} | {:.0} | {} | {} | {:.3} | {:.3} | {:.3} | {:.3} | {:.1} | {} | {} |\n",
            st.target_rps.map_or("max (unpaced)".into(), |t| t.to_string()),
            st.accepted_per_s,
            opt(st.server_cpu_cores, 2),
            opt(st.accepted_per_core_s, 0),
            st.p50_ms,
            st.p90_ms,
            st.p99_ms,
            st.p999_ms,
            st.max_ms,
            st.refused,
            st.failed
        ));
    }
    s.push_str(&format!(
        "\nRSS after registering all {} reporters x {} endpoints: {} MiB; at the end: {} MiB; peak: {} MiB (target < 256).\n",
        r.reporters,
        r.endpoints_per_reporter,
        opt(r.rss_after_warmup_mib, 1),
        opt(r.rss_end_mib, 1),
        opt(r.rss_peak_mib, 1)
    ));
    s.push_str(&format!(
        "Highest accepted reports/s with p99 < 5 ms: {}; highest accepted reports/s per server core: {} (targets >= 20,000 and p99 < 5 ms).\n",
        opt(r.best_accepted_per_s_under_5ms_p99, 0),
        opt(r.max_accepted_per_core_s, 0)
    ));
    if let Some(p) = &r.inprocess {
        s.push_str(&format!(
            "Handling logic alone (parse, merge, reply, serialise; no HTTP), one thread: {:.1} us per report = {:.0} reports/s; \
             one full recompute of the {} x {} book: {:.1} ms.\n",
            p.us_per_report, p.reports_per_s, r.reporters, r.endpoints_per_reporter, p.recompute_ms
        ));
        let sh = &p.share_pct;
        s.push_str(&format!(
            "Shares of that time: parse + validate {}%, merge (ingest) {}%, reply (prepared JSON) {}%.\n",
            sh.parse, sh.ingest, sh.reply
        ));
    }
    s
}

/// Print the results' markdown and write it and their JSON where `--md` and `--json` say.
pub(crate) fn publish(args: &LoadgenArgs, results: &impl Serialize, md: String) -> Result<(), String> {
    print!("{md}");
    if let Some(path) = &args.json {
        let body = serde_json::to_vec_pretty(results).map_err(|e| e.to_string())?;
        std::fs::write(path, body).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    if let Some(path) = &args.md {
        std::fs::write(path, md).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(())
}

/// Print a section's markdown and put it in `--md` in place of the section that starts with
/// `title` (up to the next `## ` heading; or at the end), keeping the rest of that file. Its JSON
/// goes to `--json`: the whole file, or with `json_key` that key of the object there (the rest
/// kept).
pub(crate) fn publish_section(
    args: &LoadgenArgs,
    results: &impl Serialize,
    section: &str,
    title: &str,
    json_key: Option<&str>,
) -> Result<(), String> {
    print!("{section}");
    if let Some(path) = &args.json {
        let value = serde_json::to_value(results).map_err(|e| e.to_string())?;
        let value = match json_key {
            None => value,
            Some(key) => {
                let old = std::fs::read(path).ok().and_then(|b| serde_json::from_slice(&b).ok());
                let mut object = match old {
                    Some(serde_json::Value::Object(o)) => o,
                    _ => serde_json::Map::new(),
                };
                object.insert(key.to_string(), value);
                serde_json::Value::Object(object)
            }
        };
        let body = serde_json::to_vec_pretty(&value).map_err(|e| e.to_string())?;
        std::fs::write(path, body).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    if let Some(path) = &args.md {
        let old = std::fs::read_to_string(path).unwrap_or_default();
        std::fs::write(path, replace_section(&old, title, section)).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(())
}

/// `text` with the section that starts with `title` (up to the next line starting `## `, or the
/// end) replaced by `section`; `section` at the end if there is none.
pub(crate) fn replace_section(text: &str, title: &str, section: &str) -> String {
    let Some(at) = text.find(title) else { return format!("{}\n{section}", text.trim_end()) };
    let after = at + title.len();
    let rest = text[after..].find("\n## ").map_or("", |end| &text[after + end..]);
    let section = section.trim_end();
    format!("{}\n{section}\n{rest}", text[..at].trim_end())
}

#[cfg(test)]
mod tests {
    use super::replace_section;

    #[test]
    fn a_section_replaces_its_namesake_only_and_else_goes_at_the_end() {
        let text = "# T\n\n## A\none\n\n## B\ntwo\n";
        assert_eq!(replace_section(text, "\n## A", "\n## A\nnew\n"), "# T\n\n## A\nnew\n\n## B\ntwo\n");
        assert_eq!(replace_section(text, "\n## B", "\n## B\nnew\n"), "# T\n\n## A\none\n\n## B\nnew\n");
        assert_eq!(replace_section(text, "\n## C", "\n## C\nc\n"), "# T\n\n## A\none\n\n## B\ntwo\n\n## C\nc\n");
    }
}
