# mk/files.mk — profiles as files people pass around (issue 10): every verb
# agrees, nothing from a profile reaches a terminal raw, output files never
# follow links or clobber, hostile profiles cost work in proportion to their
# size (owner: tests/files/). Target: files-test (part of make test).
.PHONY: files-test
# The files it writes and records are kept as make fuzz's seeds.
files-test: $(BUILD)/flamme $(BUILD)/libflamme.so $(BUILD)/e2e/split/split.exe
	rm -rf $(BUILD)/fuzz/recorded
	FLAMME_FUZZ_SEEDS=$(BUILD)/fuzz/recorded python3 tests/files/run.py $(BUILD)
TEST_TARGETS += files-test
HELP_LINES += "make files-test  hostile and odd profiles: numbers, escaping, output files, bounds"
LIB_SRCS += common/outfile.c
# mk/agent.mk's link rule was read before this file: name the object there too
$(BUILD)/libflamme.so: $(BUILD)/so/common/outfile.o
UNIT_TESTS += tests/unit/test_hash.c
