# mk/layout.mk — the folders say who may call whom (tests/layout/check.py):
# writer/ never includes agent/ or runtime_hooks/, common/ only common/, and
# doc/design.md's "Who calls whom" list matches the includes.
.PHONY: layout-test
layout-test:
	python3 tests/layout/check.py

TEST_TARGETS += layout-test
HELP_LINES += "make layout-test  folder dependencies as doc/design.md says (writer/ never includes agent/)"
