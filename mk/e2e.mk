# mk/e2e.mk — end-to-end tests (owner: tests/e2e/). Builds the OCaml programs
# tests/e2e/*.ml with the frame-pointer ocamlopt into build/e2e/<name>/ (each
# in its own directory: ocamlopt writes .cmx/.o next to the source it is
# given, so the source is copied there first) and runs tests/e2e/run.py.
# E2E_ARGS passes options to run.py, e.g. make e2e E2E_ARGS="--skip wall".

E2E_PROGS := split domains effects deep systhread forkexec selectwait forever stress blocking
E2E_EXES  := $(foreach p,$(E2E_PROGS),$(BUILD)/e2e/$(p)/$(p).exe)
E2E_LIBS_systhread := -I +unix -I +threads unix.cmxa threads.cmxa
E2E_LIBS_blocking  := $(E2E_LIBS_systhread)
E2E_LIBS_forkexec  := -I +unix unix.cmxa
E2E_LIBS_selectwait := -I +unix unix.cmxa

define E2E_PROG_RULE
$(BUILD)/e2e/$(1)/$(1).exe: tests/e2e/$(1).ml
	@test -x "$$(OCAMLOPT)" || { echo "e2e: $$(OCAMLOPT) not found; run 'make deps'" >&2; exit 1; }
	@mkdir -p $(BUILD)/e2e/$(1)
	cp $$< $(BUILD)/e2e/$(1)/
	cd $(BUILD)/e2e/$(1) && $$(OCAMLOPT) $$(E2E_LIBS_$(1)) -o $(1).exe $(1).ml
endef
$(foreach p,$(E2E_PROGS),$(eval $(call E2E_PROG_RULE,$(p))))

.PHONY: e2e
e2e: $(BUILD)/libflamme.so $(BUILD)/flamme $(E2E_EXES)
	python3 tests/e2e/run.py --build $(BUILD) --compiler "$(OCAMLOPT)" $(E2E_ARGS)

TEST_TARGETS += e2e
HELP_LINES += "make e2e        end-to-end tests: profile OCaml programs in tests/e2e (needs make deps)"
