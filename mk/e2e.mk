# mk/e2e.mk — end-to-end tests (owner: tests/e2e/). `make e2e` runs
# tests/e2e/test_e2e.py (part of make test), which builds the programs
# tests/e2e/*.ml with every compiler itself (tests/conftest.py's ocaml
# fixture). PYTEST_ARGS passes options to pytest, e.g.
# make e2e PYTEST_ARGS="-k split --compilers 5.3.0-fp".
#
# Four e2e programs are also built here for the bench that takes their path
# (bench-size, mk/compact.mk; the test groups build their own): by the
# frame-pointer ocamlopt into build/e2e/<name>/<name>.exe and by the no-fp
# one into build/nofp/<name>/.

E2E_PROGS := split domains effects deep
NOFP_OCAMLOPT ?= $(FLAMME_CACHE)/ocaml-$(OCAML_VERSION)-nofp/bin/ocamlopt
E2E_OCAMLOPT_e2e = $(OCAMLOPT)
E2E_OCAMLOPT_nofp = $(NOFP_OCAMLOPT)

# $(1) = program, $(2) = e2e | nofp (the build directory and the compiler)
define E2E_PROG_RULE
$(BUILD)/$(2)/$(1)/$(1).exe: tests/e2e/$(1).ml
	@test -x "$$(E2E_OCAMLOPT_$(2))" || { echo "e2e: $$(E2E_OCAMLOPT_$(2)) not found; run 'make deps'" >&2; exit 1; }
	@mkdir -p $$(dir $$@)
	cp $$< $$(dir $$@)
	cd $$(dir $$@) && $$(E2E_OCAMLOPT_$(2)) -o $(1).exe $(1).ml
endef
$(foreach d,e2e nofp,$(foreach p,$(E2E_PROGS),$(eval $(call E2E_PROG_RULE,$(p),$(d)))))

.PHONY: e2e
e2e: $(BUILD)/libflamme.so $(BUILD)/flamme
	$(PYTEST_ENV) $(PYTEST) tests/e2e $(PYTEST_ARGS)

HELP_LINES += "make e2e        end-to-end tests: profile OCaml programs in tests/e2e with every compiler (needs make deps)"
