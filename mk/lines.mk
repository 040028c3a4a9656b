# mk/lines.mk — source positions (owner: writer/lines.c, tests/unit/test_lines.c,
# tests/lines/). writer/lines.c must also be in libflamme.so: mk/agent.mk's
# .so rule expands its prerequisites when agent.mk is read, so it has to be
# listed there too (this LIB_SRCS line only reaches build/libflamme_core.a
# and the OCaml library's object list).
ifeq ($(filter writer/lines.c,$(LIB_SRCS)),)
LIB_SRCS += writer/lines.c
endif
UNIT_TESTS += tests/unit/test_lines.c

# tests/lines/test_lines.py (part of the pytest suite) records tests/e2e/split.ml
# built with every compiler.
.PHONY: lines-test
lines-test: $(BUILD)/libflamme.so $(BUILD)/flamme
	$(PYTEST_ENV) $(PYTEST) tests/lines $(PYTEST_ARGS)
HELP_LINES += "make lines-test flamme collapse --lines on a recorded OCaml program: positions within the functions"
