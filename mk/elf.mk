# mk/elf.mk — writer/elf.c, the one ELF reader of writer/ (in LIB_SRCS via
# mk/agent.mk, whose .so rule needs it listed there), and its unit test,
# which also runs built with AddressSanitizer: an image read past its end
# fails it even when the plain build happens to survive.
UNIT_TESTS += tests/unit/test_elf.c

$(BUILD)/asan/test_elf: tests/unit/test_elf.c writer/elf.c writer/elf.h tests/unit/check.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_COMMON) -fsanitize=address,undefined -fno-sanitize-recover=all \
	  tests/unit/test_elf.c writer/elf.c -o $@

.PHONY: elf-asan-test
elf-asan-test: $(BUILD)/asan/test_elf
	$(BUILD)/asan/test_elf

TEST_TARGETS += elf-asan-test
