# mk/dune.mk — the OCaml library consumed through dune, as a user would:
# a fresh dune project vendors this tree (tests/dune/test_dune.py, part of
# make test). Debian's dune (ocaml-dune, installed by make deps) drives each
# compiler make deps provides.

.PHONY: dune-test
dune-test: $(BUILD)/flamme
	$(PYTEST_ENV) $(PYTEST) tests/dune $(PYTEST_ARGS)

HELP_LINES += "make dune-test  build and profile a dune project that uses the flamme library"
