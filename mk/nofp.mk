# mk/nofp.mk — programs built by an OCaml WITHOUT frame pointers (what a
# default opam switch is): stacks must still be complete, through DWARF CFI
# for OCaml code and the runtime's stack switches. The checks are
# tests/e2e/test_e2e.py's, run with every compiler (part of make test);
# `make nofp-test` runs the ones the nofp group had: the e2e programs built
# by compilers without frame pointers, profiled with the perf engine.

.PHONY: nofp-test
nofp-test: $(BUILD)/libflamme.so $(BUILD)/flamme
	$(PYTEST_ENV) $(PYTEST) tests/e2e -k "nofp and perf" $(PYTEST_ARGS)

HELP_LINES += "make nofp-test  profile programs built by an OCaml without frame pointers (perf engine)"
