# mk/gc.mk — GC insight (owner: runtime_hooks/gc_hooks.c, tools/gc_frames.c,
# tests/unit/test_gc*.c, tests/gc/). runtime_hooks/*.c is in SO_SRCS via
# mk/agent.mk. gc-test profiles tests/gc/gcwork.ml (an allocation-heavy
# multi-domain program) with and without systhreads linked in (-linkall, so
# that Thread's initialiser, which replaces several runtime hooks, runs).
TOOL_SRCS  += tools/gc_frames.c
UNIT_TESTS += $(wildcard tests/unit/test_gc*.c)

GC_DIR := $(BUILD)/gc
$(GC_DIR)/plain/gcwork.exe $(GC_DIR)/threads/gcwork.exe: tests/gc/gcwork.ml
	@test -x "$(OCAMLOPT)" || { echo "gc-test: $(OCAMLOPT) not found; run 'make deps'" >&2; exit 1; }
	@mkdir -p $(dir $@)
	cp $< $(dir $@)
	cd $(dir $@) && $(OCAMLOPT) $(if $(findstring /threads/,$@),-linkall -I +unix -I +threads unix.cmxa threads.cmxa) \
	  -o gcwork.exe gcwork.ml

.PHONY: gc-test
gc-test: $(BUILD)/libflamme.so $(BUILD)/flamme $(GC_DIR)/plain/gcwork.exe $(GC_DIR)/threads/gcwork.exe
	python3 tests/gc/run.py --build $(BUILD)

TEST_TARGETS += gc-test
HELP_LINES += "make gc-test    GC insight: GC records vs the runtime's counts, report GC section, --fold-gc"
