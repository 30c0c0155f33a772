# Coverage-guided fuzzing with libFuzzer (cargo-fuzz, nightly) of every parser that takes outside
# input: reports, replies, the plugin configuration, ORCA (text and binary), the filter's shared
# data and the simulator's scenarios. The targets' bodies are tailweight-fuzz (fuzz/src/lib.rs);
# fuzz/libfuzzer holds one libFuzzer binary per target. `make fuzz` runs each target for FUZZ_RUNS
# executions (niced, one job) from the kept corpus, then minimises what it found back into
# fuzz/corpus/<target>; `make test` replays that corpus with plain cargo test (no nightly).
#   make fuzz                    every target, 10^6 executions each
#   make fuzz-report FUZZ_RUNS=N one target
# A finding stops the run and leaves its input in fuzz/libfuzzer/artifacts/<target>/: fix it, and
# copy the input into fuzz/findings/<target>/ (never minimised away) so the replay keeps checking it.
.PHONY: fuzz fuzz-deps

FUZZ_TARGETS := report reply filter_config orca_text orca_bin shared_data scenario
FUZZ_RUNS ?= 1000000
FUZZ_MAX_LEN ?= 8192
FUZZ_WORK := target/fuzz-work
# Tokens libFuzzer splices in (fuzz/libfuzzer/dicts): field names, edge numbers, addresses.
fuzz_dict = fuzz/libfuzzer/dicts/$(if $(filter orca_%,$1),orca,$(if $(filter scenario,$1),scenario,json)).dict
CARGO_FUZZ := env PATH="$(TW_CACHE)/bin:$$PATH" cargo +nightly fuzz

# The nightly toolchain and cargo-fuzz (into the tool cache), each only if missing.
fuzz-deps:
	@rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal
	@[ -x "$(TW_CACHE)/bin/cargo-fuzz" ] || cargo install cargo-fuzz --locked --root "$(TW_CACHE)"

fuzz: $(addprefix fuzz-,$(FUZZ_TARGETS))

fuzz-%: fuzz-deps
	@rm -rf $(FUZZ_WORK)/$* && mkdir -p $(FUZZ_WORK)/$*
	cp fuzz/corpus/$*/* $(FUZZ_WORK)/$*/
	@start=$$(date +%s); \
	nice $(CARGO_FUZZ) run --fuzz-dir fuzz/libfuzzer --sanitizer none $* $(FUZZ_WORK)/$* -- \
	  -runs=$(FUZZ_RUNS) -max_len=$(FUZZ_MAX_LEN) -dict=$(call fuzz_dict,$*) -print_final_stats=1 && \
	echo "fuzz-$*: $(FUZZ_RUNS) runs in $$(( $$(date +%s) - start )) s"
	@# Minimised by the edges it covers (not hit counts): the smallest set that keeps the coverage.
	nice $(CARGO_FUZZ) cmin --fuzz-dir fuzz/libfuzzer --sanitizer none $* $(FUZZ_WORK)/$* -- \
	  -max_len=$(FUZZ_MAX_LEN) -use_counters=0
	rm -f fuzz/corpus/$*/* && cp $(FUZZ_WORK)/$*/* fuzz/corpus/$*/
	@echo "fuzz-$*: corpus kept: $$(ls fuzz/corpus/$* | wc -l) inputs, $$(cat fuzz/corpus/$*/* | wc -c) bytes"
