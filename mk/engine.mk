# mk/engine.mk — what sampling costs and what it counts (owner: tests/engine/,
# bench/engine_bench.py; issue 8 points 4-6): flamme's own frames in the
# profile (GC hooks), the handler's CPU budget at any stack depth, and the
# agreement of the engines. Each program tests/engine/<p>.ml (plus its C
# stubs, if any) is built with both compilers into build/engine/{fp,nofp}/<p>/.
# Targets: engine-test (part of make test), bench-engine (part of make bench).

ENG_PROGS := gcloop deepfx kern handoff
ENG_OCAMLOPT_fp   := $(FLAMME_CACHE)/ocaml-$(OCAML_VERSION)-fp/bin/ocamlopt
ENG_OCAMLOPT_nofp := $(FLAMME_CACHE)/ocaml-$(OCAML_VERSION)-nofp/bin/ocamlopt
ENG_C_deepfx := tests/fidelity/cputime_stubs.c
ENG_C_kern := tests/fidelity/cputime_stubs.c tests/engine/kern_stubs.c
ENG_LIBS_handoff := -I +unix -I +threads unix.cmxa threads.cmxa
ENG_EXES := $(foreach c,fp nofp,$(foreach p,$(ENG_PROGS),$(BUILD)/engine/$(c)/$(p)/$(p).exe))

define ENG_PROG_RULE
$(BUILD)/engine/$(2)/$(1)/$(1).exe: tests/engine/$(1).ml $(ENG_C_$(1))
	@test -x "$$(ENG_OCAMLOPT_$(2))" || { echo "engine: $$(ENG_OCAMLOPT_$(2)) not found; run 'make deps'" >&2; exit 1; }
	@mkdir -p $$(dir $$@)
	cp $$^ $$(dir $$@)
	cd $$(dir $$@) && $$(ENG_OCAMLOPT_$(2)) $$(ENG_LIBS_$(1)) -o $(1).exe $(notdir $(ENG_C_$(1))) $(1).ml
endef
$(foreach c,fp nofp,$(foreach p,$(ENG_PROGS),$(eval $(call ENG_PROG_RULE,$(p),$(c)))))

.PHONY: engine-test bench-engine engine-progs
engine-progs: $(ENG_EXES)

engine-test: $(BUILD)/libflamme.so $(BUILD)/flamme $(ENG_EXES)
	python3 tests/engine/run.py --build $(BUILD)
TEST_TARGETS += engine-test

# Engine agreement also runs programs of the unwind and fidelity suites.
ENG_BENCH_EXES := $(foreach c,fp nofp,$(foreach p,atomq hashstr effdeep yielder,$(BUILD)/unwind/$(c)/$(p)/$(p).exe)) \
                  $(foreach p,split sched steal joinalloc cstub,$(BUILD)/fidelity/$(p)/$(p).exe)
bench-engine: $(BUILD)/libflamme.so $(BUILD)/flamme $(ENG_EXES) $(ENG_BENCH_EXES)
	python3 bench/engine_bench.py --build $(BUILD)
BENCH_TARGETS += bench-engine

HELP_LINES += "make engine-test   flamme's own share of samples, CPU budget at any depth, engine agreement" \
              "make bench-engine  GC hook cost, deep-stack slowdown, engine agreement per program"
