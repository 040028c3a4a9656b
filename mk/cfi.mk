# mk/cfi.mk — .eh_frame unwind rows for the stack walker (owner: agent/cfi.c,
# tests/unit/test_cfi.c). agent/cfi.c goes into LIB_SRCS so that both
# libflamme.so and build/libflamme_core.a (hence the unit test) contain it;
# mk/agent.mk's agent/*.c wildcard put it in SO_SRCS as well, which would
# link it twice into the .so, so it is taken out of SO_SRCS first.
SO_SRCS  := $(filter-out agent/cfi.c,$(SO_SRCS))
LIB_SRCS += agent/cfi.c
UNIT_TESTS += tests/unit/test_cfi.c
