# mk/cfi.mk — .eh_frame unwind rows for the stack walker: the handler's
# lookup (agent/cfi.c) and the builder (writer/cfi_build.c, listed in
# mk/agent.mk), and their unit test. agent/cfi.c goes into LIB_SRCS so that
# both libflamme.so and build/libflamme_core.a (hence the unit test) contain
# it; mk/agent.mk's agent/*.c wildcard also put it in SO_SRCS, so it is taken
# out again there, keeping SO_SRCS and LIB_SRCS disjoint as mk/zz-rules.mk
# expects; the walker (agent/walk.c) and its stack memo (agent/memo.c) go
# the same way. (The .so link rule in mk/agent.mk expanded its prerequisites
# before this file was read, so it lists cfi.o exactly once.)
SO_SRCS  := $(filter-out agent/cfi.c agent/walk.c agent/memo.c,$(SO_SRCS))
LIB_SRCS += agent/cfi.c agent/walk.c agent/memo.c
UNIT_TESTS += tests/unit/test_cfi.c tests/unit/test_cfi_cache.c tests/unit/test_cfi_synth.c \
              tests/unit/test_frametable.c tests/unit/test_switch_rows.c
# test_frametable and test_switch_rows compile their runtime_hooks/ module in
# (not in the core library).
$(BUILD)/tests/test_frametable: runtime_hooks/frametable.c runtime_hooks/frametable.h \
                                common/frame_sites.h
$(BUILD)/tests/test_switch_rows: runtime_hooks/switch_rows.c runtime_hooks/switch_rows.h \
                                 common/frame_sites.h
