# mk/files.mk — profiles as files people pass around (issue 10): every verb
# agrees, nothing from a profile reaches a terminal raw, output files never
# follow links or clobber, hostile profiles cost work in proportion to their
# size (owner: tests/files/). Target: files-test (tests/files/test_files.py,
# part of the pytest suite).
.PHONY: files-test files-seeds
files-test: $(BUILD)/flamme $(BUILD)/libflamme.so
	$(PYTEST_ENV) $(PYTEST) tests/files $(PYTEST_ARGS)
# make fuzz's seeds: the files the tests write and record, kept in
# $(BUILD)/fuzz/recorded; the bounds tests (minutes, and no file small
# enough to be a seed) are left out.
files-seeds: $(BUILD)/flamme $(BUILD)/libflamme.so
	rm -rf $(BUILD)/fuzz/recorded
	FLAMME_FUZZ_SEEDS=$(abspath $(BUILD))/fuzz/recorded $(PYTEST_ENV) $(PYTEST) tests/files -k "not bounds" $(PYTEST_ARGS)
HELP_LINES += "make files-test  hostile and odd profiles: numbers, escaping, output files, bounds"
LIB_SRCS += common/outfile.c
# mk/agent.mk's link rule was read before this file: name the object there too
$(BUILD)/libflamme.so: $(BUILD)/so/common/outfile.o
UNIT_TESTS += tests/unit/test_hash.c
