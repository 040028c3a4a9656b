# mk/alloc.mk — allocation profiles (owner: agent/alloc.c, tools/alloc_view.c,
# tests/alloc/). agent/alloc.c is in the agent through agent.mk's wildcard.
TOOL_SRCS += tools/alloc_view.c

# tests/alloc/split.ml with both OCaml 5.3 compilers, each linking its own
# build of flamme.ml with the library's C object.
ALLOC_OCAMLOPT_fp   := $(FLAMME_CACHE)/ocaml-$(OCAML_VERSION)-fp/bin/ocamlopt
ALLOC_OCAMLOPT_nofp := $(FLAMME_CACHE)/ocaml-$(OCAML_VERSION)-nofp/bin/ocamlopt
ALLOC_CLIBS := -cclib -lz -cclib -lpthread -cclib -ldl -cclib -lrt
define ALLOC_PROG_RULE
$(BUILD)/alloc/$(1)/split.exe: tests/alloc/split.ml ocaml_stubs/flamme.ml ocaml_stubs/flamme.mli $(BUILD)/ocaml_stubs/flamme_c.o
	@test -x "$(ALLOC_OCAMLOPT_$(1))" || { echo "alloc: $(ALLOC_OCAMLOPT_$(1)) not found; run 'make deps'" >&2; exit 1; }
	@mkdir -p $(BUILD)/alloc/$(1)
	cp tests/alloc/split.ml ocaml_stubs/flamme.ml ocaml_stubs/flamme.mli $(BUILD)/alloc/$(1)/
	cd $(BUILD)/alloc/$(1) && $(ALLOC_OCAMLOPT_$(1)) -g -c flamme.mli && $(ALLOC_OCAMLOPT_$(1)) -g -c flamme.ml && \
	  $(ALLOC_OCAMLOPT_$(1)) -g -o split.exe flamme.cmx split.ml $(abspath $(BUILD)/ocaml_stubs/flamme_c.o) $(ALLOC_CLIBS)
endef
$(foreach c,fp nofp,$(eval $(call ALLOC_PROG_RULE,$(c))))

$(BUILD)/alloc/plain/plain.exe: tests/alloc/plain.ml
	@mkdir -p $(dir $@)
	cp $< $(dir $@) && cd $(dir $@) && $(ALLOC_OCAMLOPT_nofp) -o plain.exe plain.ml

.PHONY: alloc-test
alloc-test: $(BUILD)/flamme $(BUILD)/libflamme.so $(BUILD)/alloc/fp/split.exe $(BUILD)/alloc/nofp/split.exe \
            $(BUILD)/alloc/plain/plain.exe
	python3 tests/alloc/run.py --build $(BUILD)
TEST_TARGETS += alloc-test
HELP_LINES += "make alloc-test  allocation profiles (Gc.Memprof through the library), both compilers"

$(BUILD)/alloc/fp/alloc_heavy.exe: bench/alloc_heavy.ml $(BUILD)/alloc/fp/split.exe
	cp bench/alloc_heavy.ml $(BUILD)/alloc/fp/
	cd $(BUILD)/alloc/fp && $(ALLOC_OCAMLOPT_fp) -g -o alloc_heavy.exe flamme.cmx alloc_heavy.ml \
	  $(abspath $(BUILD)/ocaml_stubs/flamme_c.o) $(ALLOC_CLIBS)

.PHONY: bench-alloc
bench-alloc: $(BUILD)/flamme $(BUILD)/alloc/fp/alloc_heavy.exe
	python3 bench/alloc_bench.py --build $(BUILD)
BENCH_TARGETS += bench-alloc
HELP_LINES += "make bench-alloc  cost of allocation profiling on an allocation-heavy program"
