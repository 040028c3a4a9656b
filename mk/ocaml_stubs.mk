# mk/ocaml_stubs.mk — the flamme OCaml library (owner: ocaml_stubs/, tests/lib/).
# `make ocaml-lib` builds build/ocaml_stubs/{flamme.cmxa,flamme.a,flamme.cmi,
# flamme.cmx,libflamme_stubs.a} with $(OCAMLOPT) and the ocamlmklib beside it.
# The C part is a second copy of the agent (every SO_SRCS + LIB_SRCS file,
# compiled with -DFLAMME_LINKED) plus ocaml_stubs/flamme_stubs.c, merged into
# one relocatable object whose hidden symbols are made local: linking the
# library pulls in the whole agent (constructor included) and none of its
# internal names can clash with the program's own C code.
#
# Fragments sorted after this one may still append to SO_SRCS/LIB_SRCS, so
# the object list is expanded a second time, when every fragment is read.

OCL_DIR    := $(BUILD)/ocaml_stubs
OCL_OBJDIR := $(OCL_DIR)/obj
# Evaluated at use (recipes and second expansion), never at parse time.
OCL_SRCS     = $(sort $(SO_SRCS) $(LIB_SRCS))
OCL_OBJS     = $(patsubst %.c,$(OCL_OBJDIR)/%.o,$(OCL_SRCS))
OCAMLMKLIB   = $(if $(findstring /,$(OCAMLOPT)),$(dir $(OCAMLOPT)))ocamlmklib
OCL_NEED_OCAMLOPT = command -v "$(OCAMLOPT)" >/dev/null || { echo "ocaml-lib: $(OCAMLOPT) not found; run 'make deps'" >&2; exit 1; }
OCL_CLIBS   := -lz -lpthread -ldl -lrt
OCL_OUTPUTS := $(addprefix $(OCL_DIR)/,flamme.cmxa flamme.a flamme.cmi flamme.cmx libflamme_stubs.a)

$(OCL_OBJDIR)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_SO) -DFLAMME_LINKED -MMD -MP -c $< -o $@

$(OCL_OBJDIR)/flamme_stubs.o: ocaml_stubs/flamme_stubs.c
	@$(OCL_NEED_OCAMLOPT)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_SO) -isystem "$$($(OCAMLOPT) -where)" -MMD -MP -c $< -o $@

.SECONDEXPANSION:
# One object for the whole C side; hidden globals become local symbols.
$(OCL_DIR)/flamme_c.o: $$(OCL_OBJS) $(OCL_OBJDIR)/flamme_stubs.o
	$(CC) -r -nostdlib -o $@.tmp $^
	objcopy --localize-hidden $@.tmp $@ && rm -f $@.tmp

$(OCL_DIR)/flamme.cmi $(OCL_DIR)/flamme.cmx &: ocaml_stubs/flamme.mli ocaml_stubs/flamme.ml
	@$(OCL_NEED_OCAMLOPT)
	@mkdir -p $(OCL_DIR)
	cp ocaml_stubs/flamme.mli ocaml_stubs/flamme.ml $(OCL_DIR)/
	cd $(OCL_DIR) && $(OCAMLOPT) -g -c flamme.mli && $(OCAMLOPT) -g -c flamme.ml

# ocamlmklib writes libflamme_stubs.a (+ dllflamme_stubs.so) and flamme.cmxa
# (+ flamme.a) recording -cclib -lflamme_stubs and the agent's C libraries.
$(OCL_DIR)/flamme.cmxa $(OCL_DIR)/flamme.a $(OCL_DIR)/libflamme_stubs.a &: \
		$(OCL_DIR)/flamme.cmx $(OCL_DIR)/flamme_c.o
	cd $(OCL_DIR) && $(OCAMLMKLIB) -o flamme -oc flamme_stubs flamme.cmx flamme_c.o $(OCL_CLIBS)

.PHONY: ocaml-lib ocaml-lib-test
ocaml-lib: $(OCL_OUTPUTS)

# tests/lib/test_ocaml_lib.py builds the library with every compiler
# (flammetest.flamme_library) and its programs against it.
ocaml-lib-test: $(BUILD)/flamme $(BUILD)/libflamme.so
	$(PYTEST_ENV) $(PYTEST) tests/lib $(PYTEST_ARGS)

HELP_LINES += "make ocaml-lib  the OCaml library (Flamme.start/stop) into $(OCL_DIR)/ (needs make deps)"
HELP_LINES += "make ocaml-lib-test  tests of the OCaml library (tests/lib), with every compiler"
