# mk/signal.mk — tests of how the agent shares signals, timers and blocking
# calls with the program (owner: tests/signal/). tests/signal/test_signal.py
# (part of the pytest suite) builds each program tests/signal/<name>.ml
# (+ <name>_stubs.c when it needs C, + tests/lib/work.ml) with every compiler
# make deps provides; armclock links the flamme OCaml library built by the
# same compiler (flammetest.flamme_library), the others are run with the
# agent preloaded.

.PHONY: signal-test
signal-test: $(BUILD)/libflamme.so $(BUILD)/flamme
	$(PYTEST_ENV) $(PYTEST) tests/signal $(PYTEST_ARGS)

HELP_LINES += "make signal-test  the agent shares signals, timers and blocking calls with the program (every compiler)"

# The idle-cost benchmark (bench/idle.ml + bench/idle_stubs.c, fp compiler).
$(BUILD)/bench/idle/idle.exe: bench/idle.ml bench/idle_stubs.c
	@test -x "$(OCAMLOPT)" || { echo "bench-idle: $(OCAMLOPT) not found; run 'make deps'" >&2; exit 1; }
	@mkdir -p $(dir $@)
	cp $^ $(dir $@)
	cd $(dir $@) && $(OCAMLOPT) idle_stubs.c idle.ml -o idle.exe

.PHONY: bench-idle
bench-idle: $(BUILD)/libflamme.so $(BUILD)/bench/idle/idle.exe
	python3 bench/idle_bench.py --build $(BUILD)

BENCH_TARGETS += bench-idle
HELP_LINES += "make bench-idle  cost of the agent while not profiling (interposed calls, thread memory); the writer beside waiting and short-lived threads"

# The fork benchmark (bench/fork.ml, fp compiler).
$(BUILD)/bench/fork/fork.exe: bench/fork.ml
	@test -x "$(OCAMLOPT)" || { echo "bench-fork: $(OCAMLOPT) not found; run 'make deps'" >&2; exit 1; }
	@mkdir -p $(dir $@)
	cp $^ $(dir $@)
	cd $(dir $@) && $(OCAMLOPT) -I +unix unix.cmxa fork.ml -o fork.exe

.PHONY: bench-fork
bench-fork: $(BUILD)/libflamme.so $(BUILD)/bench/fork/fork.exe
	python3 bench/fork_bench.py --build $(BUILD)

BENCH_TARGETS += bench-fork
HELP_LINES += "make bench-fork  what a profiled program pays per fork, children followed or not"
