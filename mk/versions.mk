# mk/versions.mk — OCaml releases and compilers (owner: runtime_hooks/ocaml_version.c,
# tests/versions/). make deps builds OCaml 5.1.0 with frame pointers and
# 5.3.0 without beside the default 5.3.0 with frame pointers; the pytest
# suite runs every program-level test with each of them (the `compiler`
# fixture of tests/conftest.py), so no target of its own re-runs groups
# per compiler.

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

HELP_LINES += "make versions-test   unknown OCaml runtimes leave the agent dormant with one line"
