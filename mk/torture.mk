# mk/torture.mk — `make torture` (owner: tests/torture/). Every program
# tests/torture/<name>.ml is built with both compilers (fp, nofp) into
# build/torture/<cc>/<name>/<name>.exe, with tests/torture/<name>_stubs.c
# when it exists and the libraries named on its `torture-libs:` line
# (unix, threads, flamme = the OCaml library). tests/torture/lib*.c become
# build/torture/lib*.so. tests/torture/run.py runs each case alone and under
# every engine and mode and compares. TORTURE_BUDGET (seconds) bounds a run;
# CI (make test) runs torture-ci with a short budget.

TORTURE_BUDGET ?= 900
TORTURE_CI_BUDGET ?= 150
TORTURE_ARGS ?=
TORTURE_CCS := fp nofp
TORTURE_OCAMLOPT_fp := $(FLAMME_CACHE)/ocaml-$(OCAML_VERSION)-fp/bin/ocamlopt
TORTURE_OCAMLOPT_nofp := $(FLAMME_CACHE)/ocaml-$(OCAML_VERSION)-nofp/bin/ocamlopt
TORTURE_PROGS := $(basename $(notdir $(wildcard tests/torture/*.ml)))
TORTURE_SOS := $(patsubst tests/torture/%.c,$(BUILD)/torture/%.so,$(wildcard tests/torture/lib*.c))
TORTURE_EXES := $(foreach c,$(TORTURE_CCS),$(foreach p,$(TORTURE_PROGS),$(BUILD)/torture/$(c)/$(p)/$(p).exe))

# Link flags for one `torture-libs:` word; $(1) = compiler (flamme.cmx is
# compiled per compiler, the agent's C object is shared).
torture_lib_unix = -I +unix unix.cmxa
torture_lib_threads = -I +threads threads.cmxa
torture_lib_flamme = -I $(abspath $(BUILD)/torture/$(1)/flamme) flamme.cmx \
  $(abspath $(OCL_DIR)/flamme_c.o) $(addprefix -cclib ,$(OCL_CLIBS))
torture_libs_of = $(shell sed -n 's/.*torture-libs:\([a-z ]*\).*/\1/p' tests/torture/$(1).ml)

define TORTURE_CC_RULE
$(BUILD)/torture/$(1)/flamme/flamme.cmx: ocaml_stubs/flamme.mli ocaml_stubs/flamme.ml
	@mkdir -p $$(dir $$@)
	cp $$^ $$(dir $$@)
	cd $$(dir $$@) && $$(TORTURE_OCAMLOPT_$(1)) -g -c flamme.mli && $$(TORTURE_OCAMLOPT_$(1)) -g -c flamme.ml
endef

define TORTURE_PROG_RULE
$(BUILD)/torture/$(1)/$(2)/$(2).exe: tests/torture/$(2).ml $(wildcard tests/torture/$(2)_stubs.c) \
  $(if $(filter flamme,$(call torture_libs_of,$(2))),$(BUILD)/torture/$(1)/flamme/flamme.cmx $(OCL_DIR)/flamme_c.o)
	@test -x "$$(TORTURE_OCAMLOPT_$(1))" || { echo "torture: $$(TORTURE_OCAMLOPT_$(1)) not found; run 'make deps'" >&2; exit 1; }
	@mkdir -p $$(dir $$@)
	cp $$(filter %.ml %.c,$$^) $$(dir $$@)
	cd $$(dir $$@) && $$(TORTURE_OCAMLOPT_$(1)) -g \
	  $$(foreach l,$(call torture_libs_of,$(2)),$$(call torture_lib_$$(l),$(1))) \
	  -o $(2).exe $(notdir $(wildcard tests/torture/$(2)_stubs.c)) $(2).ml
endef
$(foreach c,$(TORTURE_CCS),$(eval $(call TORTURE_CC_RULE,$(c))))
$(foreach c,$(TORTURE_CCS),$(foreach p,$(TORTURE_PROGS),$(eval $(call TORTURE_PROG_RULE,$(c),$(p)))))

$(BUILD)/torture/lib%.so: tests/torture/lib%.c
	@mkdir -p $(dir $@)
	$(CC) -std=gnu11 -O1 -g -fPIC -shared -o $@ $< -lpthread

.PHONY: torture torture-ci torture-build
torture-build: $(BUILD)/libflamme.so $(BUILD)/flamme $(TORTURE_EXES) $(TORTURE_SOS)

torture: torture-build
	python3 tests/torture/run.py --build $(BUILD) --budget $(TORTURE_BUDGET) $(TORTURE_ARGS)

torture-ci: torture-build
	python3 tests/torture/run.py --build $(BUILD) --budget $(TORTURE_CI_BUDGET) $(TORTURE_ARGS)

TEST_TARGETS += torture-ci
HELP_LINES += "make torture    torture: programs of both compilers, every engine and mode, compared with the program alone (TORTURE_BUDGET=seconds)"
