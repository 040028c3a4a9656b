# mk/export.mk — `flamme export` (speedscope / pprof / folded) (owner: tools/export.c,
# tests/unit/test_export.c, tests/export/). Target: export-test
# (tests/export/test_export.py, part of the pytest suite).
TOOL_SRCS += tools/export.c
UNIT_TESTS += tests/unit/test_export.c

.PHONY: export-test
export-test: $(BUILD)/libflamme.so $(BUILD)/flamme
	$(PYTEST_ENV) $(PYTEST) tests/export $(PYTEST_ARGS)
HELP_LINES += "make export-test  flamme export: speedscope JSON, pprof protobuf, folded; escaping; a real recording read by go tool pprof"
