# mk/unwind.mk — unwinding on real-style OCaml programs (owner: tests/unwind/).
# Each program of tests/unwind is built with BOTH compilers of `make deps`
# into build/unwind/{fp,nofp}/<p>/ (sources copied there: ocamlopt writes its
# outputs next to them). Targets: unwind-test (part of make test),
# unwind-progs.

UNW_PROGS := atomq hashstr effdeep yielder breakwalk dlprog vclock \
             gcalloc rewrite sched steal churn dthreads cback minicc
UNW_NOFP_OCAMLOPT ?= $(FLAMME_CACHE)/ocaml-$(OCAML_VERSION)-nofp/bin/ocamlopt
UNW_OCAMLOPT_fp   = $(OCAMLOPT)
UNW_OCAMLOPT_nofp = $(UNW_NOFP_OCAMLOPT)
UNW_LIBS_yielder := -I +unix -I +threads unix.cmxa threads.cmxa
UNW_LIBS_vclock  := -I +unix unix.cmxa
UNW_LIBS_dthreads := -I +unix -I +threads unix.cmxa threads.cmxa
UNW_C_breakwalk  := breakwalk_stubs.c
UNW_C_dlprog     := dlprog_stubs.c
UNW_C_cback      := cback_stubs.c
UNW_EXES := $(foreach v,fp nofp,$(foreach p,$(UNW_PROGS),$(BUILD)/unwind/$(v)/$(p)/$(p).exe))

define UNW_PROG_RULE
$(BUILD)/unwind/$(2)/$(1)/$(1).exe: tests/unwind/$(1).ml $(addprefix tests/unwind/,$(UNW_C_$(1)))
	@test -x "$$(UNW_OCAMLOPT_$(2))" || { echo "unwind: $$(UNW_OCAMLOPT_$(2)) not found; run 'make deps'" >&2; exit 1; }
	@mkdir -p $(BUILD)/unwind/$(2)/$(1)
	cp $$^ $(BUILD)/unwind/$(2)/$(1)/
	cd $(BUILD)/unwind/$(2)/$(1) && $$(UNW_OCAMLOPT_$(2)) $$(UNW_LIBS_$(1)) -o $(1).exe $(UNW_C_$(1)) $(1).ml
endef
$(foreach v,fp nofp,$(foreach p,$(UNW_PROGS),$(eval $(call UNW_PROG_RULE,$(p),$(v)))))

# dlprog's plugin, without frame pointers (only its unwind tables lead out).
UNW_DLLIBS := $(foreach v,fp nofp,$(BUILD)/unwind/$(v)/dlprog/libdlwork.so)
$(BUILD)/unwind/%/dlprog/libdlwork.so: tests/unwind/dlwork.c
	@mkdir -p $(dir $@)
	$(CC) -O2 -fomit-frame-pointer -fPIC -shared -o $@ $<

.PHONY: unwind-test unwind-progs
unwind-progs: $(UNW_EXES) $(UNW_DLLIBS)

unwind-test: $(BUILD)/libflamme.so $(BUILD)/flamme $(UNW_EXES) $(UNW_DLLIBS)
	python3 tests/unwind/run.py --build $(BUILD)
TEST_TARGETS += unwind-test

HELP_LINES += "make unwind-test  complete stacks with both compilers: Atomic queue, Hashtbl/String.equal, effects, Thread.yield, broken walks marked"

.PHONY: bench-unwind
bench-unwind: $(BUILD)/libflamme.so $(BUILD)/flamme $(UNW_EXES) $(UNW_DLLIBS)
	python3 bench/unwind_bench.py --build $(BUILD)
BENCH_TARGETS += bench-unwind
HELP_LINES += "make bench-unwind complete stacks per program and compiler (fp/nofp), 3 rounds at 999 Hz (prints a table)"
