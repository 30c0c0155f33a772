//! Replays every input kept in fuzz/corpus/<target>/ (the minimised corpus `make fuzz` leaves) and
//! fuzz/findings/<target>/ (inputs that once made a target fail, fixed since) through its target:
//! what covered a path or found a bug keeps being checked by `cargo test`, without nightly.

use std::path::{Path, PathBuf};

/// The inputs in `dir`, sorted (none if it does not exist).
fn inputs(dir: &Path) -> Vec<PathBuf> {
    let mut inputs: Vec<PathBuf> = match std::fs::read_dir(dir) {
        Ok(entries) => entries.map(|entry| entry.expect("a directory entry").path()).collect(),
        Err(_) => Vec::new(),
    };
    inputs.sort();
    inputs
}

#[test]
fn every_kept_input_passes_its_target() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for (name, target) in tailweight_fuzz::TARGETS {
        let corpus = inputs(&root.join("corpus").join(name));
        assert!(!corpus.is_empty(), "fuzz/corpus/{name}: no inputs");
        for input in corpus.iter().chain(&inputs(&root.join("findings").join(name))) {
            let data = std::fs::read(input).unwrap_or_else(|e| panic!("{}: {e}", input.display()));
            let outcome = std::panic::catch_unwind(|| target(&data));
            assert!(outcome.is_ok(), "{name}: {} fails", input.display());
        }
    }
}

#[test]
fn the_findings_fail_nothing_and_exist() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("findings");
    let names: Vec<&str> = tailweight_fuzz::TARGETS.iter().map(|(n, _)| *n).collect();
    for dir in inputs(&root) {
        let name = dir.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_string();
        assert!(names.contains(&name.as_str()), "fuzz/findings/{name}: no such target");
    }
}
