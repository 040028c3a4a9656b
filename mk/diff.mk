# mk/diff.mk — `flamme diff` (tools/diff.c, listed in mk/agent.mk) and its test.
.PHONY: diff-test
diff-test: $(BUILD)/libflamme.so $(BUILD)/flamme $(BUILD)/e2e/split/split.exe $(BUILD)/e2e/domains/domains.exe
	python3 tests/diff/run.py --build $(BUILD)
TEST_TARGETS += diff-test
HELP_LINES += "make diff-test  flamme diff on folded inputs and two recorded runs"
