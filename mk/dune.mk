# mk/dune.mk — the OCaml library consumed through dune, as a user would:
# a fresh dune project vendors this tree (tests/dune/run.py). Debian's dune
# (ocaml-dune, installed by make deps) drives the frame-pointer 5.3.0.

.PHONY: dune-test
dune-test: $(BUILD)/flamme
	python3 tests/dune/run.py --build $(BUILD) --ocaml-bin $(dir $(OCAMLOPT))

TEST_TARGETS += dune-test
HELP_LINES += "make dune-test  build and profile a dune project that uses the flamme library"
