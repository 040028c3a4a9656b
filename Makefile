# flamme — top-level Makefile.
# Each area keeps its rules in mk/<area>.mk so several people can work at once
# without editing one file. Targets: make, make deps, make test, make bench,
# make demo, make help. Knobs: DEBUG=1, SAN=address,undefined (tools/tests only).

CC      ?= gcc
BUILD   := build
FLAMME_CACHE ?= $(HOME)/.cache/flamme
OCAML_VERSION ?= 5.3.0
OCAMLPREFIX ?= $(FLAMME_CACHE)/ocaml-$(OCAML_VERSION)-fp
OCAMLOPT ?= $(OCAMLPREFIX)/bin/ocamlopt
export FLAMME_CACHE OCAMLOPT

WARN    := -Wall -Wextra -Werror -Wno-unused-parameter
ifeq ($(DEBUG),1)
OPT     := -O0 -g3
else
OPT     := -O2 -g
endif
CFLAGS_COMMON := -std=gnu11 $(WARN) $(OPT) -fno-omit-frame-pointer -I. -D_GNU_SOURCE
# The preloaded agent never gets sanitizers (they would run inside the profiled program).
CFLAGS_SO := $(CFLAGS_COMMON) -fPIC -fvisibility=hidden -ftls-model=initial-exec
ifneq ($(SAN),)
SANFLAGS := -fsanitize=$(SAN) -fno-sanitize-recover=all
endif
CFLAGS_TOOL := $(CFLAGS_COMMON) $(SANFLAGS)
LDFLAGS_TOOL := $(SANFLAGS)

.DEFAULT_GOAL := all
ALL_TARGETS :=
TEST_TARGETS :=
# What the pytest modules need make to build first (C harnesses, .so
# fixtures, the OCaml library's C object): each mk/<area>.mk adds its own.
TEST_DEPS :=
BENCH_TARGETS :=
HELP_LINES :=

include $(sort $(wildcard mk/*.mk))

.PHONY: all deps test bench demo help clean
all: $(ALL_TARGETS)

deps:
	@bash scripts/deps.sh

# make test: the whole suite through pytest (tests/conftest.py); T=expr
# selects tests by name (pytest -k). Groups with a runner of their own
# (TEST_TARGETS) run from tests/test_groups.py.
PYTEST ?= /usr/bin/python3 -m pytest
PYTEST_ENV = FLAMME_BUILD=$(BUILD) FLAMME_MAKE="$(MAKE)" FLAMME_MAKE_GROUPS="$(TEST_TARGETS)"
test: all $(TEST_DEPS)
	$(PYTEST_ENV) $(PYTEST) $(if $(T),-k "$(T)") $(PYTEST_ARGS)

bench: all $(BENCH_TARGETS)

help:
	@echo "make            build libflamme.so and the flamme command into $(BUILD)/"
	@echo "make deps       install Debian packages, OCaml $(OCAML_VERSION) (with and without frame pointers), 5.1.0 (fp), 5.4.1 and 5.5.2 (no fp) into $(FLAMME_CACHE)"
	@echo "make demo       Debian packages + OCaml $(OCAML_VERSION) + build + profile examples/demo.ml, write flame.svg"
	@echo "make test       the whole test suite through pytest (what CI runs); T=expr selects tests"
	@echo "make bench      benchmarks (print figures, assert nothing)"
	@printf '%s\n' $(HELP_LINES)
	@echo "knobs: DEBUG=1, SAN=address,undefined (tools and unit tests only), OCAMLPREFIX=..."

clean:
	rm -rf $(BUILD)
