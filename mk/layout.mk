# mk/layout.mk — the folders say who may call whom (tests/layout/check.py):
# writer/ never includes agent/ or runtime_hooks/, common/ only common/, and
# doc/design.md's "Who calls whom" list matches the includes.
.PHONY: layout-test
layout-test:
	python3 tests/layout/check.py

TEST_TARGETS += layout-test
HELP_LINES += "make layout-test  folder dependencies as doc/design.md says (writer/ never includes agent/)"

# What the signal handler can reach calls only async-signal-safe libc
# functions and none of the agent's interposers (tests/layout/sigsafe.py,
# read off the built library's disassembly).
.PHONY: sigsafe-test
sigsafe-test: $(BUILD)/libflamme.so
	python3 tests/layout/sigsafe.py $(BUILD)/libflamme.so

TEST_TARGETS += sigsafe-test
HELP_LINES += "make sigsafe-test the handler's code calls only async-signal-safe functions, never an interposer"
