# mk/fidelity.mk — profile fidelity tests and the overhead benchmark (owner:
# tests/fidelity/, bench/fidelity_bench.py). fidelity-test runs
# tests/fidelity/test_fidelity.py (part of make test), which builds its
# programs with every compiler itself; PYTEST_ARGS passes options to pytest,
# e.g. make fidelity-test PYTEST_ARGS="-k timer". For bench-fidelity (part of
# make bench), make builds tests/fidelity/<p>.ml (plus its C stubs, if any)
# with the frame-pointer ocamlopt into build/fidelity/<p>/ (sources are
# copied there first: ocamlopt writes .cmx/.o next to what it is given).

FID_PROGS := deep sched steal churn threads cstub joinalloc rate split
FID_EXES  := $(foreach p,$(FID_PROGS),$(BUILD)/fidelity/$(p)/$(p).exe)
FID_LIBS_threads := -I +unix -I +threads unix.cmxa threads.cmxa
FID_C_cstub := cstub_stubs.c
FID_C_rate  := cputime_stubs.c
FID_C_split := cputime_stubs.c
# -fno-builtin: memmove/malloc in the stubs must stay calls into glibc.
FID_CFLAGS  := -ccopt -fno-builtin -ccopt -fno-omit-frame-pointer

define FID_PROG_RULE
$(BUILD)/fidelity/$(1)/$(1).exe: tests/fidelity/$(1).ml $(addprefix tests/fidelity/,$(FID_C_$(1)))
	@test -x "$$(OCAMLOPT)" || { echo "fidelity: $$(OCAMLOPT) not found; run 'make deps'" >&2; exit 1; }
	@mkdir -p $(BUILD)/fidelity/$(1)
	cp $$^ $(BUILD)/fidelity/$(1)/
	cd $(BUILD)/fidelity/$(1) && $$(OCAMLOPT) $(FID_CFLAGS) $$(FID_LIBS_$(1)) -o $(1).exe $(FID_C_$(1)) $(1).ml
endef
$(foreach p,$(FID_PROGS),$(eval $(call FID_PROG_RULE,$(p))))

.PHONY: fidelity-test bench-fidelity fidelity-progs
fidelity-progs: $(FID_EXES)

fidelity-test: $(BUILD)/libflamme.so $(BUILD)/flamme
	$(PYTEST_ENV) $(PYTEST) tests/fidelity $(PYTEST_ARGS)

bench-fidelity: $(BUILD)/libflamme.so $(BUILD)/flamme $(FID_EXES)
	python3 bench/fidelity_bench.py --build $(BUILD)
BENCH_TARGETS += bench-fidelity

HELP_LINES += "make fidelity-test  stack completeness on every kind of OCaml 5 program, delivered rate, known split (every compiler)" \
              "make bench-fidelity overhead at 99/999 Hz, handler cost, completeness per program (prints a table)"
