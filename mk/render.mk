# mk/render.mk — `flamme svg`, the flame graph renderer (owner: tools/svg.c,
# tools/folded.[ch], tools/flamegraph.[ch], tools/fg_*.[ch], tools/flamegraph.js, tests/render/,
# bench/render*). Targets: render-test (part of make test), bench-render.
TOOL_SRCS += tools/svg.c tools/folded.c tools/flamegraph.c tools/fg_layout.c tools/fg_palette.c \
             tools/fg_nameattr.c tools/fg_svg.c
UNIT_TESTS += $(wildcard tests/unit/test_folded*.c tests/unit/test_flamegraph*.c)

# The viewer's JavaScript is kept as a plain .js file and turned into a C
# string literal that tools/fg_svg.c includes.
$(BUILD)/gen/flamegraph_js.inc: tools/flamegraph.js
	@mkdir -p $(dir $@)
	sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/^/"/' -e 's/$$/\\n"/' $< > $@.tmp && mv $@.tmp $@
$(BUILD)/tool/tools/fg_svg.o: $(BUILD)/gen/flamegraph_js.inc
$(BUILD)/tool/tools/fg_svg.o: CFLAGS_TOOL += -I$(BUILD)/gen

.PHONY: render-test bench-render
# tests/render/test_render.py (part of the pytest suite); its Chromium
# tests are marked browser.
render-test: $(BUILD)/flamme
	$(PYTEST_ENV) $(PYTEST) tests/render $(PYTEST_ARGS)

# 200,000 unique stacks (~198 MB), made once under build/.
RENDER_BIG := $(BUILD)/render/big.folded
$(RENDER_BIG):
	@mkdir -p $(dir $@)
	python3 $(CURDIR)/../shared/bench/gen_folded.py --lines 200000 -o $@.tmp && mv $@.tmp $@

bench-render: $(BUILD)/flamme $(RENDER_BIG)
	python3 bench/render_bench.py $(BUILD)/flamme $(RENDER_BIG)
BENCH_TARGETS += bench-render

HELP_LINES += "make render-test  flamme svg tests (parser, options, escaping, headless chromium)" \
              "make bench-render render a 200k-stack folded file; prints wall time and peak RSS"
