# mk/live.mk — continuous profiles (owner: common/merge.c, tests/live/):
# segments written by the agent with FLAMME_PERIOD / Flamme.start ~period,
# read back as one by every verb. Target: live-test (part of make test).
TOOL_SRCS += common/merge.c tools/push.c tools/attach.c
LIB_SRCS  += common/lineio.c
# mk/agent.mk's link rule was read before this file: name the object there too
$(BUILD)/libflamme.so: $(BUILD)/so/common/lineio.o
# flamme push speaks HTTP(S) through libcurl (Debian libcurl4-openssl-dev).
$(BUILD)/flamme: LIBS += -lcurl

LIVE_DIR := $(BUILD)/live
LIVE_OCAMLOPT_fp   := $(FLAMME_CACHE)/ocaml-$(OCAML_VERSION)-fp/bin/ocamlopt
LIVE_OCAMLOPT_nofp := $(FLAMME_CACHE)/ocaml-$(OCAML_VERSION)-nofp/bin/ocamlopt

# tests/live programs, each compiler in its own directory (ocamlopt writes
# .cmx/.o beside its sources). phases_lib links the flamme library.
define LIVE_RULES
$(LIVE_DIR)/$(1)/phases_main.exe: tests/live/phases.ml tests/live/phases_main.ml
	@test -x "$(LIVE_OCAMLOPT_$(1))" || { echo "live-test: $(LIVE_OCAMLOPT_$(1)) not found; run 'make deps'" >&2; exit 1; }
	@mkdir -p $$(dir $$@)
	cp $$^ $$(dir $$@)
	cd $$(dir $$@) && $(LIVE_OCAMLOPT_$(1)) -I +unix unix.cmxa phases.ml phases_main.ml -o phases_main.exe
$(LIVE_DIR)/$(1)/phases_lib.exe: tests/live/phases.ml tests/live/phases_lib.ml $(BUILD)/ocaml_stubs/flamme.cmxa
	@mkdir -p $$(dir $$@)lib
	cp tests/live/phases.ml tests/live/phases_lib.ml $$(dir $$@)lib/
	cd $$(dir $$@)lib && $(LIVE_OCAMLOPT_$(1)) -I $(abspath $(BUILD)/ocaml_stubs) -I +unix unix.cmxa flamme.cmxa \
	  phases.ml phases_lib.ml -o ../phases_lib.exe
endef
$(foreach c,fp nofp,$(eval $(call LIVE_RULES,$(c))))
LIVE_EXES := $(foreach c,fp nofp,$(LIVE_DIR)/$(c)/phases_main.exe $(LIVE_DIR)/$(c)/phases_lib.exe)

.PHONY: live-test
live-test: $(BUILD)/flamme $(BUILD)/libflamme.so $(LIVE_EXES)
	python3 tests/live/run.py --build $(BUILD)
	python3 tests/live/push.py --build $(BUILD)
	python3 tests/live/attach.py --build $(BUILD)
TEST_TARGETS += live-test
HELP_LINES += "make live-test  continuous profiles: FLAMME_PERIOD segments, merged reading"

# Timelines: perf-script and speedscope exports, opened in speedscope
# (npm, $(FLAMME_CACHE)/speedscope, make deps) in headless chromium.
.PHONY: timeline-test
timeline-test: $(BUILD)/flamme $(BUILD)/libflamme.so $(LIVE_DIR)/fp/phases_main.exe $(LIVE_DIR)/nofp/phases_main.exe
	python3 tests/live/timeline.py --build $(BUILD)
TEST_TARGETS += timeline-test
HELP_LINES += "make timeline-test  perf-script and speedscope exports opened in speedscope (headless chromium)"
