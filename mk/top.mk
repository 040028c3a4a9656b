# mk/top.mk — `flamme top` (owner: tools/top.c, tools/fnagg.c, tests/top/):
# the live view of a profile being written. Target: top-test (part of make
# test), driven in tmux (Debian package, make deps).
TOOL_SRCS += tools/top.c tools/fnagg.c
UNIT_TESTS += tests/unit/test_fnagg.c

TOP_DIR := $(BUILD)/top
TOP_OCAMLOPT_fp   := $(FLAMME_CACHE)/ocaml-$(OCAML_VERSION)-fp/bin/ocamlopt
TOP_OCAMLOPT_nofp := $(FLAMME_CACHE)/ocaml-$(OCAML_VERSION)-nofp/bin/ocamlopt

# The test program, each compiler in its own directory (ocamlopt writes
# .cmx/.o beside its sources).
define TOP_RULES
$(TOP_DIR)/$(1)/phases.exe: tests/top/phases.ml
	@test -x "$(TOP_OCAMLOPT_$(1))" || { echo "top-test: $(TOP_OCAMLOPT_$(1)) not found; run 'make deps'" >&2; exit 1; }
	@mkdir -p $$(dir $$@)
	cp $$^ $$(dir $$@)
	cd $$(dir $$@) && $(TOP_OCAMLOPT_$(1)) -I +unix unix.cmxa phases.ml -o phases.exe
endef
$(foreach c,fp nofp,$(eval $(call TOP_RULES,$(c))))

.PHONY: top-test
top-test: $(BUILD)/flamme $(BUILD)/libflamme.so $(TOP_DIR)/fp/phases.exe $(TOP_DIR)/nofp/phases.exe
	python3 tests/top/run.py --build $(BUILD)
TEST_TARGETS += top-test
HELP_LINES += "make top-test   flamme top: live view in tmux (keys, phases, terminal restored), plain tables, bad input"
