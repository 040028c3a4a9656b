# mk/alloc.mk — allocation profiles (owner: agent/alloc.c, tools/alloc_view.c,
# tests/alloc/). agent/alloc.c is in the agent through agent.mk's wildcard.
TOOL_SRCS += tools/alloc_view.c

# tests/alloc/test_alloc.py (part of the pytest suite) builds
# tests/alloc/split.ml with every compiler, each linking the flamme library
# built by the same compiler (flammetest.flamme_library);
# tests/alloc/test_heapfill.py builds it without the library (heap fill).
.PHONY: alloc-test
alloc-test: $(BUILD)/flamme $(BUILD)/libflamme.so
	$(PYTEST_ENV) $(PYTEST) tests/alloc $(PYTEST_ARGS)
HELP_LINES += "make alloc-test  allocation profiles (Gc.Memprof through the library, heap fill without), every compiler"

# The benchmark's program, with make's build of the library ($(OCAMLOPT)).
$(BUILD)/alloc/fp/alloc_heavy.exe: bench/alloc_heavy.ml $(addprefix $(BUILD)/ocaml_stubs/,flamme.cmxa flamme.a libflamme_stubs.a)
	@mkdir -p $(dir $@)
	cp bench/alloc_heavy.ml $(dir $@)
	cd $(dir $@) && $(OCAMLOPT) -g -I $(abspath $(OCL_DIR)) flamme.cmxa -o alloc_heavy.exe alloc_heavy.ml

.PHONY: bench-alloc
bench-alloc: $(BUILD)/flamme $(BUILD)/alloc/fp/alloc_heavy.exe
	python3 bench/alloc_bench.py --build $(BUILD)
BENCH_TARGETS += bench-alloc
HELP_LINES += "make bench-alloc  cost of allocation profiling on an allocation-heavy program"
