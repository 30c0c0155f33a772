//! tailweight-sim command line: `run`, `sweep` and `speed` over a scenario file; `check` and
//! `operator` answer the benchmark harness (e2e/harness), which shares the scenario schema and the
//! operator rule with the simulator.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use tailweight_sim::policy::operator_rule::RuleRequest;
use tailweight_sim::runner::{filter_config, run_all, sweep};
use tailweight_sim::scenario::{check_policies, Scenario};
use tailweight_sim::setup::{Overrides, Setup};

const USAGE: &str = "usage:
  tailweight-sim run   SCENARIO.yaml [options] --out DIR     results.json + results.md
  tailweight-sim sweep SCENARIO.yaml --loads 0.5,0.6,... [options] --out DIR   sweep.json + sweep.md
  tailweight-sim speed SCENARIO.yaml [options] --out DIR     sim-speed.json + sim-speed.md (one thread)
  tailweight-sim check SCENARIO.yaml|- [--policies a,b,...]  the file (- : stdin) checked against the
                         scenario schema (docs/scenario.md), as JSON with the defaults filled in
  tailweight-sim operator   the operator rule (sim/src/policy/operator_rule.rs) on a JSON question on
                         stdin: {\"capacity\": {..}} or {\"weights\": {..}, \"cpu\": {..}}, optional \"rule\"
options:
  --policies a,b,...     default: the scenario's list (all: round_robin,least_request,peak_ewma,
                         cswrr_orca,operator,prequal,tailweight_local,tailweight,ideal)
  --clients N            client proxies (default: sim.clients, else clients.count)
  --endpoints N          scale the backend groups proportionally to N endpoints
  --backend-scale N      repeat the backend groups N times
  --load-factor X        offered load as a share of total capacity (replaces clients.qps)
  --warmup-s S  --duration-s S  --seed N
  --connection-limit | --open-loop   cap each client at clients.connections in flight (Fortio) or not
  --filter-config JSON   tailweight filter plugin configuration (default: sim.filter_config)
  --cswrr-periods B,U    client-side WRR blackout and weight update periods in seconds
                         (default: sim.cswrr_blackout_s, sim.cswrr_update_s: Envoy's 10,1)
  --variant LIST         research variant of tailweight's deployment (default: none, the default
                         deployment): view_inflight=last|mean (the aggregator's --view-inflight),
                         orca_max_age_ms=N, smoothing_ms=N (aggregator parameters), subset=N (each
                         proxy's cluster is a deterministic subset of N), probe_stamps=X,
                         rate_new_counters (the aggregator's --rate-new-counters)
  --prequal LIST         Prequal's parameters (default: the paper's): legacy (first: the simulator's
                         earlier Prequal), probes=X, pool=N, max_age_ms=N, reuse=N|paper, delta=X,
                         remove=X, q_rif=X, rif_history=N|pool, latency=rif|ewma, answer=arrival|send,
                         per_server=on|off, targets=distinct|any, min_pool=N
  --threads N            policies (and sweep points) run in parallel (default 1)";

struct Args {
    command: String,
    scenario: PathBuf,
    out: Option<PathBuf>,
    policies: Option<Vec<String>>,
    loads: Vec<f64>,
    filter_config: Option<String>,
    threads: usize,
    overrides: Overrides,
}

fn parse_args(mut args: impl Iterator<Item = String>) -> Result<Args, String> {
    let command = args.next().ok_or("missing command")?;
    if !matches!(command.as_str(), "run" | "sweep" | "speed" | "check") {
        return Err(format!("unknown command {command:?}"));
    }
    let scenario = PathBuf::from(args.next().ok_or("missing scenario file")?);
    let mut a = Args {
        command,
        scenario,
        out: None,
        policies: None,
        loads: vec![],
        filter_config: None,
        threads: 1,
        overrides: Overrides::default(),
    };
    while let Some(flag) = args.next() {
        if a.command == "check" && flag != "--policies" {
            return Err(format!("check: unknown option {flag:?} (only --policies)"));
        }
        let mut value = |what: &str| args.next().ok_or_else(|| format!("{flag}: missing {what}"));
        let o = &mut a.overrides;
        match flag.as_str() {
            "--out" => a.out = Some(PathBuf::from(value("directory")?)),
            "--policies" => a.policies = Some(value("policy list")?.split(',').map(|s| s.trim().to_string()).collect()),
            "--loads" => {
                a.loads = value("load list")?.split(',').map(|s| number(&flag, s.trim())).collect::<Result<_, _>>()?
            }
            "--clients" => o.clients = Some(number(&flag, &value("count")?)?),
            "--endpoints" => o.endpoints = Some(number(&flag, &value("count")?)?),
            "--backend-scale" => o.backend_scale = Some(number(&flag, &value("count")?)?),
            "--load-factor" => o.load_factor = Some(number(&flag, &value("share")?)?),
            "--warmup-s" => o.warmup_s = Some(number(&flag, &value("seconds")?)?),
            "--duration-s" => o.duration_s = Some(number(&flag, &value("seconds")?)?),
            "--seed" => o.seed = Some(number(&flag, &value("seed")?)?),
            "--connection-limit" => o.connection_limit = Some(true),
            "--open-loop" => o.connection_limit = Some(false),
            "--filter-config" => a.filter_config = Some(value("JSON")?),
            "--cswrr-periods" => {
                let v = value("blackout,update")?;
                let (b, u) =
                    v.split_once(',').ok_or_else(|| format!("{flag}: expected two numbers: blackout,update"))?;
                o.cswrr_periods_s = Some((number(&flag, b.trim())?, number(&flag, u.trim())?));
            }
            "--variant" => o.variant = Some(value("variant list")?),
            "--prequal" => o.prequal = Some(value("Prequal parameter list")?),
            "--threads" => a.threads = number(&flag, &value("count")?)?,
            other => return Err(format!("unknown option {other:?}")),
        }
    }
    if a.command == "sweep" && a.loads.is_empty() {
        return Err("sweep: --loads is required".into());
    }
    if a.command != "sweep" && !a.loads.is_empty() {
        return Err("--loads is for sweep only".into());
    }
    Ok(a)
}

fn number<T: std::str::FromStr>(flag: &str, s: &str) -> Result<T, String> {
    s.parse().map_err(|_| format!("{flag}: {s:?} is not a valid number"))
}

fn write(dir: &Path, name: &str, text: &str) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let path = dir.join(name);
    std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))
}

fn json<T: serde::Serialize>(value: &T) -> Result<String, String> {
    serde_json::to_string_pretty(value).map(|s| s + "\n").map_err(|e| format!("cannot write JSON: {e}"))
}

/// The whole of stdin as text.
fn stdin() -> Result<String, String> {
    let mut text = String::new();
    std::io::stdin().read_to_string(&mut text).map_err(|e| format!("stdin: {e}"))?;
    Ok(text)
}

/// The scenario checked against the schema (with the command line's policies instead of the
/// file's), printed as JSON.
fn check(a: &Args) -> Result<(), String> {
    let mut scenario =
        if a.scenario == Path::new("-") { Scenario::parse(&stdin()?)? } else { Scenario::load(&a.scenario)? };
    if let Some(policies) = &a.policies {
        check_policies(policies, scenario.server_sidecars, scenario.stamping_backends)?;
        scenario.policies = Some(policies.clone());
    }
    println!("{}", serde_json::to_string(&scenario).map_err(|e| format!("cannot write JSON: {e}"))?);
    Ok(())
}

/// One answer of the operator rule, printed as JSON.
fn operator() -> Result<(), String> {
    let request: RuleRequest = serde_json::from_str(&stdin()?).map_err(|e| format!("operator: {e}"))?;
    println!("{}", serde_json::to_string(&request.answer()?).map_err(|e| format!("cannot write JSON: {e}"))?);
    Ok(())
}

fn main_inner(a: Args) -> Result<(), String> {
    if a.command == "check" {
        return check(&a);
    }
    let scenario = Scenario::load(&a.scenario)?;
    let setup = Setup::resolve(&scenario, &a.overrides)?;
    let policies = a.policies.clone().unwrap_or_else(|| setup.policies.clone());
    let filter = filter_config(a.filter_config.as_deref().unwrap_or(&setup.filter_config), setup.endpoints.len())?;
    let out = a.out.as_deref();
    match a.command.as_str() {
        "run" => {
            let result = run_all(&setup, &policies, &filter, a.threads)?;
            let md = result.markdown();
            print!("{md}");
            if let Some(dir) = out {
                write(dir, "results.json", &json(&result)?)?;
                write(dir, "results.md", &md)?;
            }
        }
        "sweep" => {
            let result = sweep(&setup, &a.loads, &policies, &filter, a.threads)?;
            let md = result.markdown();
            print!("{md}");
            if let Some(dir) = out {
                write(dir, "sweep.json", &json(&result)?)?;
                write(dir, "sweep.md", &md)?;
            }
        }
        _ => {
            // Speed: one thread, so the figure is simulated requests per second of one core.
            let result = run_all(&setup, &policies, &filter, 1)?;
            let mut md = format!(
                "## Simulator speed: {} clients x {} endpoints, {:.0} rps offered ({:.0}% load), {} s simulated, one thread\n\n",
                result.clients,
                result.endpoints,
                result.qps,
                result.load_factor * 100.0,
                result.warmup_s + result.duration_s
            );
            md += "| policy | simulated requests | wall s | CPU s | simulated requests / wall s | simulated requests / CPU s |\n";
            md += "| --- | ---: | ---: | ---: | ---: | ---: |\n";
            for p in &result.policies {
                md += &format!(
                    "| {} | {} | {:.2} | {} | {:.2e} | {} |\n",
                    p.policy,
                    p.simulated_requests,
                    p.wall_s,
                    p.cpu_s.map_or("n/a".into(), |c| format!("{c:.2}")),
                    p.requests_per_wall_s,
                    p.requests_per_cpu_s.map_or("n/a".into(), |r| format!("{r:.2e}")),
                );
            }
            print!("{md}");
            if let Some(dir) = out {
                write(dir, "sim-speed.json", &json(&result)?)?;
                write(dir, "sim-speed.md", &md)?;
            }
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    if std::env::args().nth(1).as_deref() == Some("operator") {
        return match operator() {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("tailweight-sim: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let args = match parse_args(std::env::args().skip(1)) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("tailweight-sim: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match main_inner(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tailweight-sim: {e}");
            ExitCode::FAILURE
        }
    }
}
