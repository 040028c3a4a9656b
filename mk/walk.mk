# mk/walk.mk — the stack walker (agent/walk.c, in LIB_SRCS via mk/cfi.mk) held
# against libunwind (the independent oracle; only this test links it).
UNIT_TESTS += tests/unit/test_walk.c
$(BUILD)/tests/test_walk: LIBS += -lunwind
