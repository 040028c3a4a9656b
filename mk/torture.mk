# mk/torture.mk — `make torture` (owner: tests/torture/).
# tests/torture/test_torture.py (part of the pytest suite, with the CI
# budget) builds every program tests/torture/<name>.ml with every compiler,
# and runs each case alone and under every engine and mode and compares.
# Make builds the C fixtures: tests/torture/lib*.c become
# build/torture/lib*.so (TEST_DEPS). TORTURE_BUDGET (seconds of runs) bounds
# `make torture`; make test and torture-ci run TORTURE_CI_BUDGET.
# TORTURE_ARGS passes pytest options (e.g. -k closefds).

TORTURE_BUDGET ?= 900
TORTURE_CI_BUDGET ?= 150
TORTURE_ARGS ?=
TORTURE_SOS := $(patsubst tests/torture/%.c,$(BUILD)/torture/%.so,$(wildcard tests/torture/lib*.c))

$(BUILD)/torture/lib%.so: tests/torture/lib%.c
	@mkdir -p $(dir $@)
	$(CC) -std=gnu11 -O1 -g -fPIC -shared -o $@ $< -lpthread
TEST_DEPS += $(TORTURE_SOS)

.PHONY: torture torture-ci torture-build
torture-build: $(BUILD)/libflamme.so $(BUILD)/flamme $(TORTURE_SOS)

torture: torture-build
	TORTURE_BUDGET=$(TORTURE_BUDGET) $(PYTEST_ENV) $(PYTEST) tests/torture $(TORTURE_ARGS) $(PYTEST_ARGS)

torture-ci: torture-build
	TORTURE_BUDGET=$(TORTURE_CI_BUDGET) $(PYTEST_ENV) $(PYTEST) tests/torture $(TORTURE_ARGS) $(PYTEST_ARGS)

HELP_LINES += "make torture    torture: programs of every compiler, every engine and mode, compared with the program alone (TORTURE_BUDGET=seconds)"
