# mk/install.mk — `make install` / `make uninstall` (owner: install, tests/install/).
# GNU conventions: PREFIX (default /usr/local), DESTDIR for staged installs,
# BINDIR / LIBDIR / MANDIR for distributions (opam passes its own MANDIR).
#
#   $(BINDIR)/flamme                the command
#   $(LIBDIR)/flamme/libflamme.so   the agent; `flamme record` finds it as
#                                   ../lib/flamme/libflamme.so from its own
#                                   executable, so the tree can be moved
#   $(MANDIR)/man1/flamme.1         the man page
#   $(OCAML_LIBDIR)/flamme/         the OCaml library (META, flamme.cmxa, ...)
#                                   when $(OCAMLOPT) exists; with the default
#                                   OCAML_LIBDIR = $(LIBDIR) this is the same
#                                   directory as the agent, as in an opam
#                                   switch: `ocamlfind ... -package flamme`
#                                   finds it with OCAMLPATH=$(LIBDIR) (opam
#                                   switches have it on their path already),
#                                   `ocamlopt -I $(LIBDIR)/flamme flamme.cmxa`
#                                   without ocamlfind.
# The OCaml library goes through `ocamlfind install` when ocamlfind exists,
# else is copied into the same findlib layout. WITH_OCAML=no skips it.

PREFIX       ?= /usr/local
BINDIR       ?= $(PREFIX)/bin
LIBDIR       ?= $(PREFIX)/lib
MANDIR       ?= $(PREFIX)/share/man
OCAML_LIBDIR ?= $(LIBDIR)
INSTALL      ?= install
OCAMLFIND    ?= ocamlfind

# The tool's version is flamme.opam's (the one place it is written).
FLAMME_VERSION := $(shell sed -n 's/^version: *"\(.*\)"/\1/p' flamme.opam)
$(BUILD)/tool/tools/main.o: CFLAGS_TOOL += -DFLAMME_TOOL_VERSION='"$(FLAMME_VERSION)"'
$(BUILD)/tool/tools/main.o: flamme.opam

# yes when the OCaml compiler is there (decided when install runs).
WITH_OCAML ?= $(if $(shell command -v "$(OCAMLOPT)" 2>/dev/null),yes,no)
OCL_INSTALL_FILES = $(addprefix $(OCL_DIR)/,flamme.cmxa flamme.a flamme.cmi flamme.cmx \
                      flamme.mli libflamme_stubs.a)

.PHONY: install uninstall install-ocaml-lib
install: $(BUILD)/flamme $(BUILD)/libflamme.so $(if $(filter yes,$(WITH_OCAML)),install-ocaml-lib)
	$(INSTALL) -d "$(DESTDIR)$(BINDIR)" "$(DESTDIR)$(LIBDIR)/flamme" "$(DESTDIR)$(MANDIR)/man1"
	$(INSTALL) -m 755 $(BUILD)/flamme "$(DESTDIR)$(BINDIR)/flamme"
	$(INSTALL) -m 755 $(BUILD)/libflamme.so "$(DESTDIR)$(LIBDIR)/flamme/libflamme.so"
	$(INSTALL) -m 644 doc/flamme.1 "$(DESTDIR)$(MANDIR)/man1/flamme.1"

# ocamlfind refuses a package directory that already exists, so the library
# goes in before the agent joins it. -ldconf ignore: native code only, no
# stub DLL to register.
install-ocaml-lib: $(OCL_OUTPUTS)
	cp ocaml_stubs/flamme.mli $(OCL_DIR)/flamme.mli
	$(INSTALL) -d "$(DESTDIR)$(OCAML_LIBDIR)"
	@if command -v "$(OCAMLFIND)" >/dev/null 2>&1; then \
	  echo "$(OCAMLFIND) install flamme -> $(DESTDIR)$(OCAML_LIBDIR)/flamme"; \
	  "$(OCAMLFIND)" remove -destdir "$(DESTDIR)$(OCAML_LIBDIR)" -ldconf ignore flamme >/dev/null 2>&1; \
	  "$(OCAMLFIND)" install -destdir "$(DESTDIR)$(OCAML_LIBDIR)" -ldconf ignore flamme \
	    ocaml_stubs/META $(OCL_INSTALL_FILES); \
	else \
	  echo "install OCaml library (no ocamlfind) -> $(DESTDIR)$(OCAML_LIBDIR)/flamme"; \
	  $(INSTALL) -d "$(DESTDIR)$(OCAML_LIBDIR)/flamme" && \
	  $(INSTALL) -m 644 ocaml_stubs/META $(OCL_INSTALL_FILES) "$(DESTDIR)$(OCAML_LIBDIR)/flamme/"; \
	fi

# Removes exactly what install wrote and flamme's own directory; the shared
# ones (bin, man1, lib) stay, as with any GNU package.
uninstall:
	rm -f "$(DESTDIR)$(BINDIR)/flamme" "$(DESTDIR)$(LIBDIR)/flamme/libflamme.so" \
	  "$(DESTDIR)$(MANDIR)/man1/flamme.1"
	rm -f $(addprefix "$(DESTDIR)$(OCAML_LIBDIR)/flamme/",META $(notdir $(OCL_INSTALL_FILES)))
	-rmdir "$(DESTDIR)$(OCAML_LIBDIR)/flamme" "$(DESTDIR)$(LIBDIR)/flamme" 2>/dev/null

HELP_LINES += "make install    PREFIX=/usr/local (DESTDIR, BINDIR, LIBDIR, MANDIR): command, agent, man page, OCaml library" \
              "make uninstall  remove what make install wrote (same variables)"

# Builds a clone, installs it into a temporary DESTDIR, moves the installed
# tree and deletes the clone, then profiles with only the installed files:
# tests/install/test_install.py, part of make test.
.PHONY: install-test
install-test: $(BUILD)/flamme $(BUILD)/libflamme.so
	$(PYTEST_ENV) $(PYTEST) tests/install $(PYTEST_ARGS)
HELP_LINES += "make install-test  install into a temporary prefix, profile with only the installed files, uninstall"

# opam lint of flamme.opam (Debian's opam; make deps installs it). Warnings
# 35/36 (no homepage / bug-reports) are off: the project has no public URL
# to put there yet. opam lint exits 0 on warnings, so its verdict is read.
.PHONY: opam-lint
opam-lint:
	@command -v opam >/dev/null || { echo "opam-lint: opam not found; run 'make deps'" >&2; exit 1; }
	@out="$$(opam lint --warnings=-35-36 flamme.opam 2>/dev/null)"; echo "$$out"; \
	 case "$$out" in *": Passed.") ;; *) echo "opam-lint: flamme.opam is not clean" >&2; exit 1;; esac
TEST_TARGETS += opam-lint
HELP_LINES += "make opam-lint  opam lint flamme.opam"
