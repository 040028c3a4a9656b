# mk/diff.mk — `flamme diff` (tools/diff.c, listed in mk/agent.mk) and its test,
# tests/diff/test_diff.py (part of the pytest suite).
# tests/unit/test_folded_roundtrip.c: what collapse and diff write, read back by svg and diff.
UNIT_TESTS += tests/unit/test_folded_roundtrip.c
.PHONY: diff-test
diff-test: $(BUILD)/libflamme.so $(BUILD)/flamme
	$(PYTEST_ENV) $(PYTEST) tests/diff $(PYTEST_ARGS)
HELP_LINES += "make diff-test  flamme diff on folded inputs and two recorded runs"
