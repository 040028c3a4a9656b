# mk/agent.mk — libflamme.so and the flamme command (owner: agent/, writer ring+writer, tools/main+record).
# The .so's malloc, calloc, realloc and free go through agent/bigheap.c (--wrap): large blocks
# mapped by the agent, so that glibc never raises the program's mmap threshold on the agent's frees.
SO_SRCS  += $(wildcard agent/*.c) $(wildcard runtime_hooks/*.c)
LIB_SRCS += common/profile.c common/roots.c common/ring.c common/fds.c common/bulk.c writer/dedup.c writer/intern.c writer/elf.c writer/symbols.c \
            writer/cfi_build.c writer/cfi_cache.c writer/cfi_synth.c writer/cfi_ocaml.c writer/lines.c
SO_SRCS  += writer/writer.c
TOOL_SRCS += tools/record.c tools/diff.c

$(BUILD)/libflamme.so: $(patsubst %.c,$(BUILD)/so/%.o,$(SO_SRCS) $(LIB_SRCS)) agent/exports.map
	$(CC) -shared -o $@ $(filter %.o,$^) -Wl,--version-script=agent/exports.map -Wl,-Bsymbolic \
	  -Wl,-z,nodelete -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=free $(LIBS)

$(BUILD)/flamme: $(BUILD)/tool/tools/main.o $(BUILD)/libflamme_core.a
	$(CC) -o $@ $^ $(LDFLAGS_TOOL) $(LIBS) -lm

ALL_TARGETS += $(BUILD)/libflamme.so $(BUILD)/flamme
UNIT_TESTS += tests/unit/test_ring.c tests/unit/test_fds.c

# agent/bigheap.c's test is linked as the .so links it: with the --wrap.
UNIT_TESTS += tests/unit/test_bigheap.c
$(BUILD)/tests/test_bigheap: tests/unit/test_bigheap.c agent/bigheap.c agent/bigheap.h tests/unit/check.h \
                           tests/unit/blocks.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_TOOL) $< agent/bigheap.c -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=free \
	  $(LDFLAGS_TOOL) $(LIBS) -o $@
