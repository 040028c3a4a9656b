# mk/nofp.mk — the same e2e programs built by an OCaml WITHOUT frame pointers
# (what a default opam switch is): stacks must still be complete, through
# DWARF CFI for OCaml code and the runtime's stack switches.

NOFP_OCAMLOPT ?= $(FLAMME_CACHE)/ocaml-$(OCAML_VERSION)-nofp/bin/ocamlopt
NOFP_PROGS := split domains effects deep systhread
NOFP_EXES  := $(foreach p,$(NOFP_PROGS),$(BUILD)/nofp/$(p)/$(p).exe)
NOFP_LIBS_systhread := -I +unix -I +threads unix.cmxa threads.cmxa

define NOFP_PROG_RULE
$(BUILD)/nofp/$(1)/$(1).exe: tests/e2e/$(1).ml
	@test -x "$$(NOFP_OCAMLOPT)" || { echo "nofp: $$(NOFP_OCAMLOPT) not found; run 'make deps'" >&2; exit 1; }
	@mkdir -p $(BUILD)/nofp/$(1)
	cp $$< $(BUILD)/nofp/$(1)/
	cd $(BUILD)/nofp/$(1) && $$(NOFP_OCAMLOPT) $$(NOFP_LIBS_$(1)) -o $(1).exe $(1).ml
endef
$(foreach p,$(NOFP_PROGS),$(eval $(call NOFP_PROG_RULE,$(p))))

.PHONY: nofp-test
nofp-test: $(BUILD)/libflamme.so $(BUILD)/flamme $(NOFP_EXES)
	python3 tests/nofp/run.py --build $(BUILD)

TEST_TARGETS += nofp-test
HELP_LINES += "make nofp-test  profile programs built by an OCaml without frame pointers"
