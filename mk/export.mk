# mk/export.mk — `flamme export` (speedscope / pprof / folded) (owner: tools/export.c,
# tests/unit/test_export.c, tests/export/). Target: export-test (part of make test).
TOOL_SRCS += tools/export.c
UNIT_TESTS += tests/unit/test_export.c

.PHONY: export-test
export-test: $(BUILD)/libflamme.so $(BUILD)/flamme $(BUILD)/e2e/split/split.exe
	python3 tests/export/run.py $(BUILD)/flamme $(BUILD)/e2e/split/split.exe
TEST_TARGETS += export-test
HELP_LINES += "make export-test  flamme export: speedscope JSON, pprof protobuf, folded; escaping; a real recording"
