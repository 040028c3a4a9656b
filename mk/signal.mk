# mk/signal.mk — tests of how the agent shares signals, timers and blocking
# calls with the program (owner: tests/signal/). Each program
# tests/signal/<name>.ml (+ <name>_stubs.c when it needs C, + tests/lib/work.ml) is built with BOTH
# compilers into build/signal/{fp,nofp}/<name>/<name>.exe; programs of
# SIG_LIB_PROGS link the flamme OCaml library (a copy built by the nofp
# compiler lives in build/ocaml_stubs_nofp/), the others are run with the
# agent preloaded. `make signal-test` runs tests/signal/run.py.

SIG_LIB_PROGS := armclock
SIG_PRE_PROGS := ownprof sleeps cancel seccomp masked short
SIG_LIBS_armclock := -I +unix -I +threads unix.cmxa threads.cmxa
SIG_LIBS_ownprof := -I +unix unix.cmxa
SIG_LIBS_seccomp := -I +unix unix.cmxa

SIG_PROGS := $(SIG_LIB_PROGS) $(SIG_PRE_PROGS)
SIG_OCAMLOPT_fp   := $(OCAMLOPT)
SIG_OCAMLOPT_nofp := $(NOFP_OCAMLOPT)
SIG_LIBDIR_fp     := $(OCL_DIR)
SIG_LIBDIR_nofp   := $(BUILD)/ocaml_stubs_nofp

# The library again, by the nofp compiler: the agent's objects are the same,
# the stubs are compiled against that compiler's headers.
OCLN_DIR := $(SIG_LIBDIR_nofp)
OCLN_OUTPUTS := $(addprefix $(OCLN_DIR)/,flamme.cmxa flamme.a flamme.cmi flamme.cmx libflamme_stubs.a)
$(OCLN_DIR)/flamme_stubs.o: ocaml_stubs/flamme_stubs.c
	@test -x "$(NOFP_OCAMLOPT)" || { echo "signal: $(NOFP_OCAMLOPT) not found; run 'make deps'" >&2; exit 1; }
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_SO) -isystem "$$($(NOFP_OCAMLOPT) -where)" -c $< -o $@
$(OCLN_DIR)/flamme_c.o: $$(OCL_OBJS) $(OCLN_DIR)/flamme_stubs.o
	$(CC) -r -nostdlib -o $@.tmp $^
	objcopy --localize-hidden $@.tmp $@ && rm -f $@.tmp
$(OCLN_DIR)/flamme.cmi $(OCLN_DIR)/flamme.cmx &: ocaml_stubs/flamme.mli ocaml_stubs/flamme.ml
	@mkdir -p $(OCLN_DIR)
	cp ocaml_stubs/flamme.mli ocaml_stubs/flamme.ml $(OCLN_DIR)/
	cd $(OCLN_DIR) && $(NOFP_OCAMLOPT) -g -c flamme.mli && $(NOFP_OCAMLOPT) -g -c flamme.ml
$(OCLN_DIR)/flamme.cmxa $(OCLN_DIR)/flamme.a $(OCLN_DIR)/libflamme_stubs.a &: \
		$(OCLN_DIR)/flamme.cmx $(OCLN_DIR)/flamme_c.o
	cd $(OCLN_DIR) && $(dir $(NOFP_OCAMLOPT))ocamlmklib -o flamme -oc flamme_stubs flamme.cmx flamme_c.o $(OCL_CLIBS)
SIG_LIBDEPS_fp   := $(OCL_OUTPUTS)
SIG_LIBDEPS_nofp := $(OCLN_OUTPUTS)

# $(1) = program, $(2) = fp|nofp
define SIG_PROG_RULE
$(BUILD)/signal/$(2)/$(1)/$(1).exe: tests/signal/$(1).ml $(wildcard tests/signal/$(1)_stubs.c) tests/signal/burn.h \
		tests/lib/work.ml $(if $(filter $(1),$(SIG_LIB_PROGS)),$$(SIG_LIBDEPS_$(2)))
	@test -x "$$(SIG_OCAMLOPT_$(2))" || { echo "signal: $$(SIG_OCAMLOPT_$(2)) not found; run 'make deps'" >&2; exit 1; }
	@mkdir -p $$(dir $$@)
	cp $$(filter %.ml %.c,$$^) $$(dir $$@)
	cd $$(dir $$@) && $$(SIG_OCAMLOPT_$(2)) -g -ccopt -I$(abspath tests/signal) $(SIG_LIBS_$(1)) \
	  $(if $(filter $(1),$(SIG_LIB_PROGS)),-I $(abspath $(SIG_LIBDIR_$(2))) flamme.cmxa) work.ml \
	  $(if $(wildcard tests/signal/$(1)_stubs.c),$(1)_stubs.c) $(1).ml -o $(1).exe
endef
$(foreach c,fp nofp,$(foreach p,$(SIG_PROGS),$(eval $(call SIG_PROG_RULE,$(p),$(c)))))

SIG_EXES := $(foreach c,fp nofp,$(foreach p,$(SIG_PROGS),$(BUILD)/signal/$(c)/$(p)/$(p).exe))

.PHONY: signal-test
signal-test: $(BUILD)/libflamme.so $(BUILD)/flamme $(SIG_EXES)
	python3 tests/signal/run.py --build $(BUILD) $(SIG_ARGS)

TEST_TARGETS += signal-test
HELP_LINES += "make signal-test  the agent shares signals, timers and blocking calls with the program (both compilers)"

# The idle-cost benchmark (bench/idle.ml + bench/idle_stubs.c, fp compiler).
$(BUILD)/bench/idle/idle.exe: bench/idle.ml bench/idle_stubs.c
	@test -x "$(OCAMLOPT)" || { echo "bench-idle: $(OCAMLOPT) not found; run 'make deps'" >&2; exit 1; }
	@mkdir -p $(dir $@)
	cp $^ $(dir $@)
	cd $(dir $@) && $(OCAMLOPT) idle_stubs.c idle.ml -o idle.exe

.PHONY: bench-idle
bench-idle: $(BUILD)/libflamme.so $(BUILD)/bench/idle/idle.exe
	python3 bench/idle_bench.py --build $(BUILD)

BENCH_TARGETS += bench-idle
HELP_LINES += "make bench-idle  cost of the agent while not profiling: interposed calls, thread memory"
