# mk/zz-rules.mk — generic build rules; read last (sorted include), after every
# fragment has appended to:
#   SO_SRCS    only in libflamme.so (agent, handler)        -fPIC, hidden, no sanitizers
#   LIB_SRCS   in libflamme.so AND in build/libflamme_core.a (format, ring, dedup, symbols)
#   TOOL_SRCS  in the flamme command and build/libflamme_core.a (never in the .so)
#   UNIT_TESTS tests/unit/test_*.c, each linked with build/libflamme_core.a

SO_OBJS   := $(patsubst %.c,$(BUILD)/so/%.o,$(SO_SRCS) $(LIB_SRCS))
CORE_OBJS := $(patsubst %.c,$(BUILD)/tool/%.o,$(LIB_SRCS) $(TOOL_SRCS))
UNIT_BINS := $(patsubst tests/unit/%.c,$(BUILD)/tests/%,$(UNIT_TESTS))
LIBS      := -lz -lpthread -ldl -lrt

$(BUILD)/so/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_SO) -MMD -MP -c $< -o $@

$(BUILD)/tool/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_TOOL) -MMD -MP -c $< -o $@

$(BUILD)/libflamme_core.a: $(CORE_OBJS)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/tests/%: tests/unit/%.c $(BUILD)/libflamme_core.a tests/unit/check.h tests/unit/maps.h tests/unit/blocks.h \
                 tests/unit/no_runtime.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_TOOL) $< $(BUILD)/libflamme_core.a $(LDFLAGS_TOOL) $(LIBS) -lm -o $@

.PHONY: unit
unit: $(UNIT_BINS)
	@fail=0; for t in $(UNIT_BINS); do $$t || fail=1; done; \
	 if [ $$fail -ne 0 ]; then echo "unit tests FAILED"; exit 1; fi
TEST_TARGETS := unit $(TEST_TARGETS)
ALL_TARGETS += $(BUILD)/libflamme_core.a

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
