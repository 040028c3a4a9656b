# mk/fuzz.mk — fuzzing and sanitizer runs (owner: tests/fuzz/, issue 10).
#   make fuzz [FUZZ_SECONDS=N]  afl++ (Debian's afl++, installed by make deps)
#       on the profile reader and every verb, then on folded text, N seconds
#       each (default 300); the seeds are the files tests/files writes and
#       records (make files-seeds); prints executions, crashes, hangs and the
#       worst peak memory per input byte; fails on any crash or hang.
#   make fuzz-ci    the same with FUZZ_CI_SECONDS (30) each (part of make test).
#   make san-test   the unit tests and tests/files with the tools built with
#       SAN=address,undefined into $(BUILD)/san (part of make test).
FUZZ_SECONDS ?= 300
FUZZ_CI_SECONDS ?= 30
FUZZ_DIR := $(BUILD)/fuzz
FUZZ_SUB := $(MAKE) --no-print-directory WARN=-w

# Instrumented core (afl-cc, ASan+UBSan; the sub-make rebuilds only what
# changed) and a plain one for the memory figures.
$(FUZZ_DIR)/afl/libflamme_core.a: FORCE_FUZZ
	@$(FUZZ_SUB) BUILD=$(FUZZ_DIR)/afl CC=afl-cc SAN=address,undefined $@
$(FUZZ_DIR)/harness-afl: tests/fuzz/harness.c $(FUZZ_DIR)/afl/libflamme_core.a
	AFL_QUIET=1 afl-cc $(CFLAGS_COMMON) -w -fsanitize=address,undefined -fno-sanitize-recover=all \
	  $< $(FUZZ_DIR)/afl/libflamme_core.a -fsanitize=address,undefined $(LIBS) -lm -o $@
$(FUZZ_DIR)/harness-plain: tests/fuzz/harness.c $(BUILD)/libflamme_core.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_COMMON) $< $(BUILD)/libflamme_core.a $(LIBS) -lm -o $@
.PHONY: FORCE_FUZZ

# Seeds: what files-seeds (mk/files.mk) just wrote into $(FUZZ_DIR)/recorded.
$(FUZZ_DIR)/seeds/.done: tests/fuzz/seeds.py files-seeds
	rm -rf $(FUZZ_DIR)/seeds
	python3 tests/fuzz/seeds.py $(FUZZ_DIR)/recorded/prof $(FUZZ_DIR)/seeds/prof
	python3 tests/fuzz/seeds.py $(FUZZ_DIR)/recorded/folded $(FUZZ_DIR)/seeds/folded
	touch $@

FUZZ_RUN = python3 tests/fuzz/run.py --afl-harness $(FUZZ_DIR)/harness-afl \
	--plain-harness $(FUZZ_DIR)/harness-plain
.PHONY: fuzz fuzz-ci san-test
fuzz fuzz-ci: $(FUZZ_DIR)/harness-afl $(FUZZ_DIR)/harness-plain $(FUZZ_DIR)/seeds/.done
	@secs=$(if $(filter fuzz-ci,$@),$(FUZZ_CI_SECONDS),$(FUZZ_SECONDS)); fail=0; \
	 $(FUZZ_RUN) --seeds $(FUZZ_DIR)/seeds/prof --out $(FUZZ_DIR)/out-prof --seconds $$secs --name "fuzz profile+verbs" || fail=1; \
	 $(FUZZ_RUN) --seeds $(FUZZ_DIR)/seeds/folded --out $(FUZZ_DIR)/out-folded --seconds $$secs --name "fuzz folded text" || fail=1; \
	 exit $$fail

SAN_DIR := $(BUILD)/san
san-test: $(BUILD)/libflamme.so
	@$(MAKE) --no-print-directory BUILD=$(SAN_DIR) SAN=address,undefined $(SAN_DIR)/flamme \
	  $(patsubst $(BUILD)/%,$(SAN_DIR)/%,$(UNIT_BINS))
	@fail=0; for t in $(patsubst $(BUILD)/%,$(SAN_DIR)/%,$(UNIT_BINS)); do \
	   out=$$(ASAN_OPTIONS=detect_leaks=0 $$t 2>&1) || { echo "$$out" | tail -20; echo "san: $$t FAILED"; fail=1; }; done; \
	 FLAMME_BIN=$(abspath $(SAN_DIR))/flamme FLAMME_AGENT=$(abspath $(BUILD))/libflamme.so FLAMME_SAN=1 \
	   ASAN_OPTIONS=detect_leaks=0 $(PYTEST_ENV) $(PYTEST) tests/files $(PYTEST_ARGS) >$(SAN_DIR)/files.log 2>&1 \
	   || { cat $(SAN_DIR)/files.log; fail=1; }; \
	 echo "san-test: $(words $(UNIT_BINS)) unit tests and tests/files: $$(tail -1 $(SAN_DIR)/files.log | tr -d =) (SAN=address,undefined)"; \
	 exit $$fail

TEST_TARGETS += san-test fuzz-ci
HELP_LINES += "make fuzz       afl++ over the profile reader + every verb, and folded text (FUZZ_SECONDS=300 each)" \
              "make san-test   unit tests and tests/files with the tools under SAN=address,undefined"
