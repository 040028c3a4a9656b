# mk/demo.mk — `make demo`: everything a newcomer needs in one command:
# deps (only what the demo needs: Debian packages and one OCaml 5.3.0; the
# other compilers are for the tests, built by `make deps`), build, profile
# the bundled multi-domain example, write flame.svg.

DEMO_DIR := $(BUILD)/demo

$(DEMO_DIR)/demo.exe: examples/demo.ml
	@test -x "$(OCAMLOPT)" || { echo "demo: $(OCAMLOPT) not found; run 'make deps'" >&2; exit 1; }
	@mkdir -p $(DEMO_DIR)
	cp $< $(DEMO_DIR)/
	cd $(DEMO_DIR) && $(OCAMLOPT) -o demo.exe demo.ml

.PHONY: demo demo-run
demo:
	@bash scripts/deps.sh --demo
	@$(MAKE) --no-print-directory all
	@$(MAKE) --no-print-directory demo-run

demo-run: $(BUILD)/libflamme.so $(BUILD)/flamme $(DEMO_DIR)/demo.exe
	$(BUILD)/flamme record -o $(DEMO_DIR)/demo.flm -- $(DEMO_DIR)/demo.exe
	$(BUILD)/flamme svg $(DEMO_DIR)/demo.flm --threads --title "flamme demo: examples/demo.ml" -o flame.svg
	@echo "demo: flamegraph written to $(CURDIR)/flame.svg (open it in a browser; profile: $(DEMO_DIR)/demo.flm)"
