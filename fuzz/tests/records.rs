//! The fuzzing records are current: for each target, bench/results/fuzz.md's row names the commit
//! its last run was made on (`at`), and the last commit that changed the target's parser (its
//! source files, `PARSER_SOURCES`) must be that commit or one before it. A parser changed after its
//! record fails here until `make fuzz-<target>` is run again. Reads the clone's history with `git
//! log`; needs the full history (a fresh `git clone`, not a shallow one).

use std::path::{Path, PathBuf};
use std::process::Command;

/// The source files (or directories) of each target's parser, relative to the repository root.
const PARSER_SOURCES: &[(&str, &[&str])] = &[
    ("report", &["wire/src/report/read.rs", "wire/src/report/mod.rs", "wire/src/validate.rs"]),
    ("reply", &["wire/src/reply/read.rs", "wire/src/reply/mod.rs", "wire/src/json", "wire/src/fields.rs"]),
    (
        "filter_config",
        &["sidecar/src/config.rs", "sidecar/src/config/health_checks.rs", "wire/src/json", "wire/src/fields.rs"],
    ),
    ("orca_text", &["wire/src/orca.rs", "wire/src/json"]),
    ("orca_bin", &["wire/src/orca.rs", "wire/src/protobuf.rs"]),
    ("shared_data", &["sidecar/src/slot.rs"]),
    ("scenario", &["sim/src/scenario"]),
    ("json_diff", &["wire/src/json"]),
    ("stamp", &["wire/src/stamp.rs"]),
    ("xfcc", &["aggregator/src/identity.rs"]),
    ("prometheus", &["aggregator/src/cpu_source.rs"]),
    ("attest", &["wire/src/attest/read.rs", "wire/src/attest/mod.rs", "wire/src/validate.rs"]),
    ("grpc_health", &["wire/src/grpc_health.rs", "wire/src/protobuf.rs"]),
];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the fuzz crate is in the workspace").to_path_buf()
}

/// `git args` in the repository: its trimmed output, or None when git fails.
fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").arg("-C").arg(root()).args(args).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Each row of bench/results/fuzz.md: (target, UTC, at).
fn records() -> Vec<(String, String, String)> {
    let text = std::fs::read_to_string(root().join("bench/results/fuzz.md")).expect("bench/results/fuzz.md");
    text.lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| target") && !l.starts_with("| ---"))
        .map(|l| {
            let cells: Vec<&str> = l.trim_matches('|').split('|').map(str::trim).collect();
            let at = cells.len() - 1;
            (cells[0].to_string(), cells[at - 1].to_string(), cells[at].to_string())
        })
        .collect()
}

#[test]
fn every_target_has_its_parser_sources_listed() {
    for (name, _) in tailweight_fuzz::TARGETS {
        let sources = PARSER_SOURCES.iter().find(|(n, _)| *n == name).map(|(_, s)| *s);
        let sources = sources.unwrap_or_else(|| panic!("{name}: no parser sources listed in PARSER_SOURCES"));
        for source in sources {
            assert!(root().join(source).exists(), "{name}: {source} does not exist");
        }
    }
}

#[test]
fn no_parser_changed_after_its_fuzzing_record() {
    if git(&["rev-parse", "--git-dir"]).is_none() {
        eprintln!("not a git clone: the fuzzing records cannot be compared with the history");
        return;
    }
    assert_eq!(
        git(&["rev-parse", "--is-shallow-repository"]).as_deref(),
        Some("false"),
        "a shallow clone: the records need the full history (git fetch --unshallow)"
    );
    let records = records();
    let mut stale = Vec::new();
    for (name, sources) in PARSER_SOURCES {
        let Some((_, utc, at)) = records.iter().find(|(n, _, _)| n == name) else {
            stale.push(format!("{name}: no record in bench/results/fuzz.md"));
            continue;
        };
        let Some(at) = git(&["rev-parse", "--verify", "--quiet", &format!("{at}^{{commit}}")]) else {
            stale.push(format!("{name}: its record's commit {at} is not in the history"));
            continue;
        };
        let mut log = vec!["log", "-1", "--format=%H %cI", "HEAD", "--"];
        log.extend(sources.iter());
        let last = git(&log).expect("git log");
        let Some((changed, when)) = last.split_once(' ') else { continue };
        if git(&["merge-base", "--is-ancestor", changed, &at]).is_none() {
            stale.push(format!(
                "{name}: fuzzed at {} ({utc} UTC), without its parser's last change {} ({when})",
                &at[..7],
                &changed[..7]
            ));
        }
    }
    assert!(stale.is_empty(), "rerun make fuzz-<target> for:\n{}", stale.join("\n"));
}
