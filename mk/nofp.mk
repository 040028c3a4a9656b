# mk/nofp.mk — programs built by an OCaml WITHOUT frame pointers (what a
# default opam switch is): stacks must still be complete, through DWARF CFI
# for OCaml code and the runtime's stack switches. The checks are
# tests/e2e/test_e2e.py's, run with every compiler (part of make test);
# `make nofp-test` runs the ones the nofp group had: the e2e programs built
# by compilers without frame pointers, profiled with the perf engine.
#
# make also builds some e2e programs with the no-fp compiler into
# build/nofp/<name>/ for bench-size (mk/compact.mk).

NOFP_OCAMLOPT ?= $(FLAMME_CACHE)/ocaml-$(OCAML_VERSION)-nofp/bin/ocamlopt
NOFP_PROGS := split domains effects deep

define NOFP_PROG_RULE
$(BUILD)/nofp/$(1)/$(1).exe: tests/e2e/$(1).ml
	@test -x "$$(NOFP_OCAMLOPT)" || { echo "nofp: $$(NOFP_OCAMLOPT) not found; run 'make deps'" >&2; exit 1; }
	@mkdir -p $(BUILD)/nofp/$(1)
	cp $$< $(BUILD)/nofp/$(1)/
	cd $(BUILD)/nofp/$(1) && $$(NOFP_OCAMLOPT) -o $(1).exe $(1).ml
endef
$(foreach p,$(NOFP_PROGS),$(eval $(call NOFP_PROG_RULE,$(p))))

.PHONY: nofp-test
nofp-test: $(BUILD)/libflamme.so $(BUILD)/flamme
	$(PYTEST_ENV) $(PYTEST) tests/e2e -k "nofp and perf" $(PYTEST_ARGS)

HELP_LINES += "make nofp-test  profile programs built by an OCaml without frame pointers (perf engine)"
