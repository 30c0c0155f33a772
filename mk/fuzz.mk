# Coverage-guided fuzzing with libFuzzer (cargo-fuzz, nightly) of every parser that takes outside
# input: reports, replies (the filter's reader), the plugin configuration, ORCA (text and binary),
# load stamps, the filter's shared data, the simulator's scenarios, the aggregator's XFCC identity
# and Prometheus responses, the destinations' attestations, the filter's gRPC health answers (grpc_health), and the filter's JSON parser against serde_json (json_diff). The bodies are tailweight-fuzz (fuzz/src/lib.rs);
# fuzz/libfuzzer holds one libFuzzer binary per target. `make fuzz` runs each target for FUZZ_RUNS
# executions (niced, one job) from the kept corpus, then minimises what it found back into
# fuzz/corpus/<target>, and records the run in bench/results/fuzz.md; `make test` replays that
# corpus with plain cargo test (no nightly), and fails while a target's record predates the last
# change to its parser (fuzz/tests/records.rs, which lists each target's parser source files).
#   make fuzz                    every target, 10^6 executions each
#   make fuzz-report FUZZ_RUNS=N one target
# A finding stops the run (its row says so) and leaves its input in fuzz/libfuzzer/artifacts/<target>/: fix it, and
# copy the input into fuzz/findings/<target>/ (never minimised away) so the replay keeps checking it.
.PHONY: fuzz fuzz-deps

FUZZ_TARGETS := report reply filter_config orca_text orca_bin shared_data scenario json_diff stamp xfcc prometheus attest grpc_health
FUZZ_RUNS ?= 1000000
FUZZ_MAX_LEN ?= 8192
# A target whose parser reads at most some bytes is fuzzed at that length: the gRPC health answer's
# body is read up to 64 bytes (the filter's health checks).
FUZZ_MAX_LEN_grpc_health := 64
fuzz_max_len = $(or $(FUZZ_MAX_LEN_$1),$(FUZZ_MAX_LEN))
FUZZ_WORK := target/fuzz-work
FUZZ_RESULTS := bench/results/fuzz.md
# Tokens libFuzzer splices in (fuzz/libfuzzer/dicts): field names, edge numbers, addresses; a
# target's own dictionary if it has one, ORCA's for both ORCA targets, JSON's otherwise.
fuzz_dict = $(firstword $(wildcard fuzz/libfuzzer/dicts/$(patsubst orca_%,orca,$1).dict) fuzz/libfuzzer/dicts/json.dict)
CARGO_FUZZ := env PATH="$(TW_CACHE)/bin:$$PATH" cargo +nightly fuzz

# The nightly toolchain and cargo-fuzz (into the tool cache), each only if missing.
fuzz-deps:
	@rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal
	@[ -x "$(TW_CACHE)/bin/cargo-fuzz" ] || cargo install cargo-fuzz --locked --root "$(TW_CACHE)"

fuzz: $(addprefix fuzz-,$(FUZZ_TARGETS))

# Built first so that the time recorded is the fuzzing's. The run's executions, time, outcome and
# the kept corpus's size go into $(FUZZ_RESULTS) (tools/fuzz_record.py), a finding's too.
fuzz-%: fuzz-deps
	@rm -rf $(FUZZ_WORK)/$* && mkdir -p $(FUZZ_WORK)/$*
	cp fuzz/corpus/$*/* $(FUZZ_WORK)/$*/
	nice $(CARGO_FUZZ) build --fuzz-dir fuzz/libfuzzer --sanitizer none $*
	@start=$$(date +%s); \
	nice $(CARGO_FUZZ) run --fuzz-dir fuzz/libfuzzer --sanitizer none $* $(FUZZ_WORK)/$* -- \
	  -runs=$(FUZZ_RUNS) -max_len=$(call fuzz_max_len,$*) -dict=$(call fuzz_dict,$*) -print_final_stats=1 \
	  2>&1 | tee $(FUZZ_WORK)/$*.log; \
	status=$${PIPESTATUS[0]}; echo $$(( $$(date +%s) - start )) > $(FUZZ_WORK)/$*.seconds; \
	if [ $$status -ne 0 ]; then \
	  python3 tools/fuzz_record.py $* $(FUZZ_WORK)/$*.log $$(cat $(FUZZ_WORK)/$*.seconds) $$status --results $(FUZZ_RESULTS); \
	  exit $$status; \
	fi
	@# Minimised by the edges it covers (not hit counts): the smallest set that keeps the coverage.
	nice $(CARGO_FUZZ) cmin --fuzz-dir fuzz/libfuzzer --sanitizer none $* $(FUZZ_WORK)/$* -- \
	  -max_len=$(call fuzz_max_len,$*) -use_counters=0
	rm -f fuzz/corpus/$*/* && cp $(FUZZ_WORK)/$*/* fuzz/corpus/$*/
	@python3 tools/fuzz_record.py $* $(FUZZ_WORK)/$*.log $$(cat $(FUZZ_WORK)/$*.seconds) 0 --results $(FUZZ_RESULTS)
