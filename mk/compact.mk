# mk/compact.mk — what a sample costs on disk (owner: bench/size_bench.py) and
# the old-format fixtures (tests/compat/).
# bench-size records tests/e2e programs (domains, effects, deep recursion,
# split) built with both compilers (the e2e and nofp builds) at -F 999 and
# prints bytes per sample before and after zlib. SIZE_ARGS passes options
# (e.g. --percent 30 for a shorter run, --flamme OTHER/flamme to compare).

SIZE_PROGS := domains effects deep split
SIZE_EXES  := $(foreach p,$(SIZE_PROGS),$(BUILD)/e2e/$(p)/$(p).exe $(BUILD)/nofp/$(p)/$(p).exe)

.PHONY: bench-size
bench-size: $(BUILD)/libflamme.so $(BUILD)/flamme $(SIZE_EXES)
	python3 bench/size_bench.py --build $(BUILD) $(SIZE_ARGS)
BENCH_TARGETS += bench-size
HELP_LINES += "make bench-size  bytes per sample of recorded profiles (4 programs x 2 compilers, -F 999)"

# Old-format files (recorded by the 1.7 writer, tests/compat/v1_7-*) must
# collapse and report exactly as the 1.7 reader did (tests/compat/test_compat.py,
# part of the pytest suite).
.PHONY: compat-test
compat-test: $(BUILD)/flamme
	$(PYTEST_ENV) $(PYTEST) tests/compat $(PYTEST_ARGS)
HELP_LINES += "make compat-test  1.x profiles (tests/compat) still collapse and report as 1.7 did"
