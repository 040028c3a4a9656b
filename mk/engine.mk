# mk/engine.mk — what sampling costs and what it counts (owner: tests/engine/,
# bench/engine_bench.py; issue 8 points 4-6): flamme's own frames in the
# profile (GC hooks), the handler's CPU budget at any stack depth, what a
# sample costs per engine (bench/spin.ml), and the
# agreement of the engines. tests/engine/test_engine.py (part of the pytest
# suite) builds each program tests/engine/<p>.ml (plus its C stubs, if any)
# with every compiler make deps provides.
# Targets: engine-test (part of make test), bench-engine (part of make bench).

.PHONY: engine-test bench-engine
engine-test: $(BUILD)/libflamme.so $(BUILD)/flamme
	$(PYTEST_ENV) $(PYTEST) tests/engine $(PYTEST_ARGS)

# The benchmark builds the engine and unwind programs it runs itself (as
# the tests do); engine agreement also runs programs of the fidelity suite.
ENG_BENCH_EXES := $(foreach p,split sched steal joinalloc cstub,$(BUILD)/fidelity/$(p)/$(p).exe)
bench-engine: $(BUILD)/libflamme.so $(BUILD)/flamme $(ENG_BENCH_EXES)
	python3 bench/engine_bench.py --build $(BUILD)
BENCH_TARGETS += bench-engine

HELP_LINES += "make engine-test   flamme's own share of samples, CPU budget at any depth, engine agreement" \
              "make bench-engine  GC hook cost, deep-stack slowdown, cost of a sample per engine, engines against programs that time themselves, engine agreement per program"
