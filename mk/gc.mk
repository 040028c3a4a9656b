# mk/gc.mk — GC insight (owner: runtime_hooks/gc_hooks.c, tools/gc_frames.c,
# tests/unit/test_gc*.c, tests/gc/). runtime_hooks/*.c is in SO_SRCS via
# mk/agent.mk. gc-test profiles tests/gc/gcwork.ml (an allocation-heavy
# multi-domain program) with and without systhreads linked in (-linkall, so
# that Thread's initialiser, which replaces several runtime hooks, runs),
# with every compiler: tests/gc/test_gc.py, part of the pytest suite.
TOOL_SRCS  += tools/gc_frames.c
UNIT_TESTS += $(wildcard tests/unit/test_gc*.c)

.PHONY: gc-test
gc-test: $(BUILD)/libflamme.so $(BUILD)/flamme
	$(PYTEST_ENV) $(PYTEST) tests/gc $(PYTEST_ARGS)

HELP_LINES += "make gc-test    GC insight: GC records vs the runtime's counts, report GC section, --fold-gc"
