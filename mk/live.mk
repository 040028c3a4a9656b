# mk/live.mk — continuous profiles (owner: common/merge.c, tests/live/):
# segments written by the agent with FLAMME_PERIOD / Flamme.start ~period,
# read back as one by every verb; flamme push, flamme attach.
TOOL_SRCS += common/merge.c tools/push.c tools/attach.c
LIB_SRCS  += common/lineio.c
# mk/agent.mk's link rule was read before this file: name the object there too
$(BUILD)/libflamme.so: $(BUILD)/so/common/lineio.o
# flamme push speaks HTTP(S) through libcurl (Debian libcurl4-openssl-dev),
# loaded with dlopen when push runs (tools/push.c): not at every command's start.

# tests/live/test_live.py, test_push.py, test_attach.py (live-test) and
# test_timeline.py (timeline-test) build their programs themselves, with
# every compiler (tests/live/livelib.py); both are part of make test.
.PHONY: live-test timeline-test
live-test: $(BUILD)/flamme $(BUILD)/libflamme.so
	$(PYTEST_ENV) $(PYTEST) tests/live/test_live.py tests/live/test_push.py tests/live/test_attach.py $(PYTEST_ARGS)
HELP_LINES += "make live-test  continuous profiles: FLAMME_PERIOD segments, merged reading, push, attach"

# Timelines: perf-script and speedscope exports, opened in speedscope
# (npm, $(FLAMME_CACHE)/speedscope, make deps) in headless chromium.
timeline-test: $(BUILD)/flamme $(BUILD)/libflamme.so
	$(PYTEST_ENV) $(PYTEST) tests/live/test_timeline.py $(PYTEST_ARGS)
HELP_LINES += "make timeline-test  perf-script and speedscope exports opened in speedscope (headless chromium)"
