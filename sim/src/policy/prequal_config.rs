//! Prequal's parameters (Wydrowski et al., "Load is not what you should balance: Introducing
//! Prequal", NSDI'24), with the paper's values by default, and the simulator's earlier
//! implementation (`legacy`) for comparison. `--prequal LIST` (tailweight-sim) picks them:
//! `legacy` first (optional), then `name=value` items that override one parameter each.

/// How many queries one pooled probe may route.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Reuse {
    /// Exactly this many.
    Fixed(u32),
    /// The paper's budget from the probe and removal rates (`PrequalConfig::reuse_budget`), with
    /// this delta.
    Paper { delta: f64 },
}

/// Where a probe's latency comes from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum LatencySignal {
    /// The paper's: the median of the server's recent latencies at its current RIF.
    ByRif,
    /// The server's moving average over all its responses (weight 0.1 each), whatever the RIF.
    Ewma,
}

#[derive(Debug, Clone, PartialEq)]
pub struct PrequalConfig {
    /// Probes sent per query (r_probe); a fraction is carried to the next query.
    pub probes_per_query: f64,
    /// Probes a client keeps (m).
    pub pool_size: usize,
    /// A probe older than this (since its answer came back) is dropped.
    pub max_age_ns: u64,
    pub reuse: Reuse,
    /// Probes removed per query (r_remove), alternately the oldest and the worst.
    pub removes_per_query: f64,
    /// A probe is hot when its RIF is above this quantile of the client's RIF estimate (Q_RIF).
    pub q_rif: f64,
    /// The client's estimate of the RIF distribution: the RIFs of its last this many probe
    /// answers; 0: the RIFs of the probes in its pool.
    pub rif_history: usize,
    pub latency: LatencySignal,
    /// The server answers with its state when the probe reaches it (half a round trip after
    /// sending); false: with its state at sending.
    pub answer_on_arrival: bool,
    /// A new probe of a server replaces the pooled probe of the same server.
    pub one_probe_per_server: bool,
    /// A query's probes go to distinct servers (false: drawn with replacement).
    pub distinct_targets: bool,
    /// Below this many pooled probes the query goes to a random server.
    pub min_pool: usize,
}

impl Default for PrequalConfig {
    /// The paper's values: 3 probes per query, pool of 16, 1 s age limit, delta 1, one removal per
    /// query, Q_RIF = 2^-0.25 (about 0.84), random routing below 2 pooled probes.
    fn default() -> Self {
        PrequalConfig {
            probes_per_query: 3.0,
            pool_size: 16,
            max_age_ns: 1_000_000_000,
            reuse: Reuse::Paper { delta: 1.0 },
            removes_per_query: 1.0,
            q_rif: 2f64.powf(-0.25),
            rif_history: 64,
            latency: LatencySignal::ByRif,
            answer_on_arrival: true,
            one_probe_per_server: true,
            distinct_targets: true,
            min_pool: 2,
        }
    }
}

impl PrequalConfig {
    /// What the simulator ran before it was checked against the paper.
    pub fn legacy() -> Self {
        PrequalConfig {
            probes_per_query: 2.0,
            reuse: Reuse::Fixed(2),
            removes_per_query: 0.0,
            q_rif: 0.84,
            rif_history: 0,
            latency: LatencySignal::Ewma,
            answer_on_arrival: false,
            one_probe_per_server: false,
            distinct_targets: false,
            min_pool: 1,
            ..PrequalConfig::default()
        }
    }

    /// The reuse budget of a probe with `servers` servers (the paper's, section on the probe
    /// pool): b = max(1, (1 + delta) / ((1 - m/n) r_probe - r_remove)), m the pool size, n the
    /// servers: probes enter the pool at (1 - m/n) r_probe per query (a probe of a server already
    /// pooled only replaces it) and leave at r_remove + 1/b, so the pool fills while
    /// 1/b < (1 - m/n) r_probe - r_remove, with a margin of 1 + delta. Not positive: probes cannot
    /// keep up, and each probe may route up to a pool's worth of queries.
    pub fn reuse_budget(&self, servers: usize) -> f64 {
        match self.reuse {
            Reuse::Fixed(n) => n as f64,
            Reuse::Paper { delta } => {
                let fill = (self.pool_size as f64 / servers.max(1) as f64).min(1.0);
                let net = (1.0 - fill) * self.probes_per_query - self.removes_per_query;
                if net > 0.0 {
                    ((1.0 + delta) / net).clamp(1.0, self.pool_size as f64)
                } else {
                    self.pool_size as f64
                }
            }
        }
    }

    /// `legacy` (first, optional), then `probes=X, pool=N, max_age_ms=N, reuse=N|paper, delta=X,
    /// remove=X, q_rif=X, rif_history=N|pool, latency=rif|ewma, answer=arrival|send,
    /// per_server=on|off, targets=distinct|any, min_pool=N` in any order; empty: the paper's.
    pub fn parse(text: &str) -> Result<PrequalConfig, String> {
        let mut c = PrequalConfig::default();
        for (i, item) in text.split(',').map(str::trim).filter(|s| !s.is_empty()).enumerate() {
            if item == "legacy" && i == 0 {
                c = PrequalConfig::legacy();
                continue;
            }
            let (name, value) = item
                .split_once('=')
                .map(|(n, v)| (n.trim(), v.trim()))
                .ok_or_else(|| format!("prequal: {item:?} is not name=value (or `legacy`, first); known: {KNOWN}"))?;
            let bad = |what: &str| format!("prequal: {name}: expected {what}, got {value:?}");
            let number =
                |what: &str| value.parse::<f64>().ok().filter(|x| x.is_finite() && *x >= 0.0).ok_or_else(|| bad(what));
            let count = |what: &str| value.parse::<usize>().map_err(|_| bad(what));
            let switch = |on: &str, off: &str| match value {
                v if v == on => Ok(true),
                v if v == off => Ok(false),
                _ => Err(bad(&format!("{on} or {off}"))),
            };
            match name {
                "probes" => c.probes_per_query = number("probes per query, a number >= 0")?,
                "pool" => c.pool_size = count("a pool size")?.max(1),
                "max_age_ms" => c.max_age_ns = (number("milliseconds")? * 1e6) as u64,
                "reuse" if value == "paper" => c.reuse = Reuse::Paper { delta: 1.0 },
                "reuse" => c.reuse = Reuse::Fixed(count("a number of uses or `paper`")?.max(1) as u32),
                "delta" => c.reuse = Reuse::Paper { delta: number("a number >= 0")? },
                "remove" => c.removes_per_query = number("removals per query, a number >= 0")?,
                "q_rif" => {
                    c.q_rif = number("a quantile in [0, 1]").and_then(|q| {
                        if q <= 1.0 {
                            Ok(q)
                        } else {
                            Err(bad("a quantile in [0, 1]"))
                        }
                    })?
                }
                "rif_history" if value == "pool" => c.rif_history = 0,
                "rif_history" => c.rif_history = count("a number of answers or `pool`")?,
                "latency" => {
                    c.latency = if switch("rif", "ewma")? { LatencySignal::ByRif } else { LatencySignal::Ewma }
                }
                "answer" => c.answer_on_arrival = switch("arrival", "send")?,
                "per_server" => c.one_probe_per_server = switch("on", "off")?,
                "targets" => c.distinct_targets = switch("distinct", "any")?,
                "min_pool" => c.min_pool = count("a number of probes")?,
                _ => return Err(format!("prequal: {name:?} is unknown; known: {KNOWN}")),
            }
        }
        Ok(c)
    }
}

const KNOWN: &str = "legacy, probes, pool, max_age_ms, reuse, delta, remove, q_rif, rif_history, latency, answer, \
                     per_server, targets, min_pool";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_paper_reuse_budget_follows_the_probe_and_removal_rates() {
        let paper = PrequalConfig::default();
        // 1,000 servers: (1 + 1) / (0.984 x 3 - 1) = 1.0246.
        assert!((paper.reuse_budget(1_000) - 2.0 / (0.984 * 3.0 - 1.0)).abs() < 1e-12);
        // One probe per query and one removal: the pool cannot fill; a pool's worth of uses.
        let starved = PrequalConfig { probes_per_query: 1.0, ..paper.clone() };
        assert_eq!(starved.reuse_budget(1_000), 16.0);
        // Never below one use.
        let rich = PrequalConfig { probes_per_query: 10.0, removes_per_query: 0.0, ..paper };
        assert_eq!(rich.reuse_budget(1_000), 1.0);
        assert_eq!(PrequalConfig::legacy().reuse_budget(1_000), 2.0);
    }

    #[test]
    fn lists_parse_over_the_paper_or_legacy_and_name_what_is_wrong() {
        assert_eq!(PrequalConfig::parse("").unwrap(), PrequalConfig::default());
        assert_eq!(PrequalConfig::parse("legacy").unwrap(), PrequalConfig::legacy());
        let c = PrequalConfig::parse("legacy, latency=rif, probes=3").unwrap();
        assert_eq!((c.latency, c.probes_per_query, c.reuse), (LatencySignal::ByRif, 3.0, Reuse::Fixed(2)));
        let c = PrequalConfig::parse("rif_history=pool,delta=0.5,answer=send,q_rif=0.6").unwrap();
        assert_eq!(
            (c.rif_history, c.reuse, c.answer_on_arrival, c.q_rif),
            (0, Reuse::Paper { delta: 0.5 }, false, 0.6)
        );
        assert!(PrequalConfig::parse("probes=-1").unwrap_err().contains("probes"));
        assert!(PrequalConfig::parse("q_rif=1.5").unwrap_err().contains("q_rif"));
        assert!(PrequalConfig::parse("latency=p99").unwrap_err().contains("rif or ewma"));
        assert!(PrequalConfig::parse("hedge=on").unwrap_err().contains("\"hedge\" is unknown"));
        assert!(PrequalConfig::parse("probes=3,legacy").unwrap_err().contains("legacy"));
    }
}
