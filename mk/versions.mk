# mk/versions.mk — OCaml releases (owner: runtime_hooks/ocaml_version.c,
# tests/versions/). make deps builds OCaml 5.1.0 with frame pointers beside
# the two 5.3.0 compilers; the e2e, fidelity and OCaml-library tests are
# written against $(BUILD) and $(OCAMLOPT), so they run on another compiler
# by a sub-make with BUILD=$(BUILD)/ocaml-<v> and that compiler's ocamlopt.
# The sub-build reuses the top build's flamme and libflamme.so (symlinks,
# marked old with -o so the sub-make never rebuilds them); only the OCaml
# programs and the OCaml library are built again, into the sub-build.

OCAML_OLD_VERSION ?= 5.1.0
OCAML_OLD_OCAMLOPT ?= $(FLAMME_CACHE)/ocaml-$(OCAML_OLD_VERSION)-fp/bin/ocamlopt

# $(1): sub-build directory, $(2): ocamlopt, $(3): test targets, $(4): extra make arguments
define OCAML_VARIANT_RUN
	@test -x "$(2)" || { echo "$(2) not found; run 'make deps'" >&2; exit 1; }
	@mkdir -p $(1) && ln -sfn ../flamme $(1)/flamme && ln -sfn ../libflamme.so $(1)/libflamme.so
	@echo "== $(3) with $(2)"
	$(MAKE) --no-print-directory BUILD=$(1) OCAMLOPT=$(2) -o $(1)/flamme -o $(1)/libflamme.so $(4) $(3)
endef

# The e2e tests on one engine only (timer): the release matters, not the engine.
.PHONY: ocaml-old-test
ocaml-old-test: $(BUILD)/flamme $(BUILD)/libflamme.so
	$(call OCAML_VARIANT_RUN,$(BUILD)/ocaml-$(OCAML_OLD_VERSION),$(OCAML_OLD_OCAMLOPT),e2e fidelity-test ocaml-lib-test,E2E_ARGS="--engines timer")
#OLDTEST

# An OCaml program whose runtime is not a release the agent knows: one line,
# a dormant agent, the program untouched.
$(BUILD)/versions/fake_runtime: tests/versions/fake_runtime.c
	@mkdir -p $(dir $@)
	$(CC) -std=gnu11 -O1 -rdynamic -o $@ $<

.PHONY: versions-test
versions-test: $(BUILD)/flamme $(BUILD)/libflamme.so $(BUILD)/versions/fake_runtime $(BUILD)/e2e/split/split.exe
	python3 tests/versions/run.py --build $(BUILD)
TEST_TARGETS += versions-test

HELP_LINES += "make ocaml-old-test  e2e, fidelity and library tests with OCaml $(OCAML_OLD_VERSION) (make deps builds it)" \
              "make versions-test   unknown OCaml runtimes leave the agent dormant with one line"
