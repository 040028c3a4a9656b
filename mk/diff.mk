# mk/diff.mk — `flamme diff` (tools/diff.c, listed in mk/agent.mk) and its test.
# tests/unit/test_folded_roundtrip.c: what collapse and diff write, read back by svg and diff.
UNIT_TESTS += tests/unit/test_folded_roundtrip.c
.PHONY: diff-test
diff-test: $(BUILD)/libflamme.so $(BUILD)/flamme $(BUILD)/e2e/split/split.exe $(BUILD)/e2e/domains/domains.exe
	python3 tests/diff/run.py --build $(BUILD)
TEST_TARGETS += diff-test
HELP_LINES += "make diff-test  flamme diff on folded inputs and two recorded runs"
