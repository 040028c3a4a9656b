# mk/versions.mk — OCaml releases and compilers (owner: runtime_hooks/ocaml_version.c,
# tests/versions/). make deps builds OCaml 5.1.0 with frame pointers and
# 5.3.0 without beside the default 5.3.0 with frame pointers; the e2e,
# fidelity and OCaml-library tests are written against $(BUILD) and
# $(OCAMLOPT), so compilers-test runs them again with each other compiler,
# in a sub-build $(BUILD)/ocaml-<name> (tests/versions/compilers.py says
# how, and prints one result line per compiler and group).

# Names of the cache's compilers (ocaml-<name>/bin/ocamlopt) besides $(OCAMLOPT).
OCAML_TEST_COMPILERS ?= 5.1.0-fp $(OCAML_VERSION)-nofp

.PHONY: compilers-test
compilers-test: $(BUILD)/flamme $(BUILD)/libflamme.so
	python3 tests/versions/compilers.py --build $(BUILD) --cache $(FLAMME_CACHE) --make "$(MAKE)" \
	  --default "$(OCAMLOPT)" $(OCAML_TEST_COMPILERS)
TEST_TARGETS += compilers-test

# An OCaml program whose runtime is not a release the agent knows: one line,
# a dormant agent, the program untouched.
$(BUILD)/versions/fake_runtime: tests/versions/fake_runtime.c
	@mkdir -p $(dir $@)
	$(CC) -std=gnu11 -O1 -rdynamic -o $@ $<

TEST_DEPS += $(BUILD)/versions/fake_runtime

# tests/versions/test_versions.py, part of make test.
.PHONY: versions-test
versions-test: $(BUILD)/flamme $(BUILD)/libflamme.so $(BUILD)/versions/fake_runtime
	$(PYTEST_ENV) $(PYTEST) tests/versions/test_versions.py $(PYTEST_ARGS)

HELP_LINES += "make compilers-test  e2e, fidelity and library tests with OCaml $(OCAML_TEST_COMPILERS) (make deps builds them)" \
              "make versions-test   unknown OCaml runtimes leave the agent dormant with one line"
