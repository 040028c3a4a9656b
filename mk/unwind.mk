# mk/unwind.mk — unwinding on real-style OCaml programs (owner: tests/unwind/).
# tests/unwind/test_unwind.py (part of the pytest suite) builds each program
# of tests/unwind with every compiler make deps provides. Make builds the
# one C fixture: dlprog's plugin, without frame pointers (only its unwind
# tables lead out), which the test puts beside the program.
# Targets: unwind-test (part of make test), bench-unwind.

UNW_DLLIB := $(BUILD)/unwind/libdlwork.so
$(UNW_DLLIB): tests/unwind/dlwork.c
	@mkdir -p $(dir $@)
	$(CC) -O2 -fomit-frame-pointer -fPIC -shared -o $@ $<
TEST_DEPS += $(UNW_DLLIB)

.PHONY: unwind-test
unwind-test: $(BUILD)/libflamme.so $(BUILD)/flamme $(UNW_DLLIB)
	$(PYTEST_ENV) $(PYTEST) tests/unwind $(PYTEST_ARGS)

HELP_LINES += "make unwind-test  complete stacks with every compiler: Atomic queue, Hashtbl/String.equal, effects, Thread.yield, broken walks marked"

.PHONY: bench-unwind
bench-unwind: $(BUILD)/libflamme.so $(BUILD)/flamme $(UNW_DLLIB)
	python3 bench/unwind_bench.py --build $(BUILD)
BENCH_TARGETS += bench-unwind
HELP_LINES += "make bench-unwind complete stacks per program and compiler (each one make deps built), 3 rounds at 999 Hz (prints a table)"

.PHONY: bench-compiler
bench-compiler: $(BUILD)/libflamme.so $(BUILD)/flamme
	python3 bench/compiler_bench.py --build $(BUILD)
BENCH_TARGETS += bench-compiler
HELP_LINES += "make bench-compiler flamme on ocamlopt.opt (stacks of ~1,000-16,000 frames): whole stacks, samples the budget shortened, handler and CPU cost"
