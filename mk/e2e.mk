# mk/e2e.mk — end-to-end tests (owner: tests/e2e/). `make e2e` runs
# tests/e2e/test_e2e.py (part of make test), which builds the programs
# tests/e2e/*.ml with every compiler itself (tests/conftest.py's ocaml
# fixture). PYTEST_ARGS passes options to pytest, e.g.
# make e2e PYTEST_ARGS="-k split --compilers 5.3.0-fp".
#
# Some e2e programs are also built here, with the frame-pointer ocamlopt,
# for the bench that still takes their path (build/e2e/<name>/<name>.exe:
# bench-size, mk/compact.mk); the test groups build their own.

E2E_PROGS := split domains effects deep

define E2E_PROG_RULE
$(BUILD)/e2e/$(1)/$(1).exe: tests/e2e/$(1).ml
	@test -x "$$(OCAMLOPT)" || { echo "e2e: $$(OCAMLOPT) not found; run 'make deps'" >&2; exit 1; }
	@mkdir -p $(BUILD)/e2e/$(1)
	cp $$< $(BUILD)/e2e/$(1)/
	cd $(BUILD)/e2e/$(1) && $$(OCAMLOPT) -o $(1).exe $(1).ml
endef
$(foreach p,$(E2E_PROGS),$(eval $(call E2E_PROG_RULE,$(p))))

.PHONY: e2e
e2e: $(BUILD)/libflamme.so $(BUILD)/flamme
	$(PYTEST_ENV) $(PYTEST) tests/e2e $(PYTEST_ARGS)

HELP_LINES += "make e2e        end-to-end tests: profile OCaml programs in tests/e2e with every compiler (needs make deps)"
