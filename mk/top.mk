# mk/top.mk — `flamme top` (owner: tools/top.c, tools/fnagg.c, tests/top/):
# the live view of a profile being written. Target: top-test (part of make
# test: tests/top/test_top.py), driven in tmux (Debian package, make deps).
TOOL_SRCS += tools/top.c tools/fnagg.c
UNIT_TESTS += tests/unit/test_fnagg.c

# tests/top/test_top.py builds tests/top/phases.ml with every compiler.
.PHONY: top-test
top-test: $(BUILD)/flamme $(BUILD)/libflamme.so
	$(PYTEST_ENV) $(PYTEST) tests/top $(PYTEST_ARGS)
HELP_LINES += "make top-test   flamme top: live view in tmux (keys, phases, terminal restored), plain tables, bad input"
