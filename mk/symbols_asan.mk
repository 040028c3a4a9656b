# mk/symbols_asan.mk — the symbolizer's build-id test (tests/unit/test_buildid.c)
# in the unit tests, and again built with AddressSanitizer (writer/symbols.c
# compiled into the test): a write past a buffer fails it even when the
# plain build happens to survive.
UNIT_TESTS += tests/unit/test_buildid.c

$(BUILD)/asan/test_buildid: tests/unit/test_buildid.c writer/symbols.c writer/elf.c writer/cfi_cache.c common/fds.c common/bulk.c \
                             common/outfile.c tests/unit/check.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_COMMON) -fsanitize=address,undefined -fno-sanitize-recover=all \
	  tests/unit/test_buildid.c writer/symbols.c writer/elf.c writer/cfi_cache.c common/fds.c common/bulk.c \
	  common/outfile.c -o $@ -ldl

.PHONY: symbols-asan-test
symbols-asan-test: $(BUILD)/asan/test_buildid
	$(BUILD)/asan/test_buildid

TEST_TARGETS += symbols-asan-test
