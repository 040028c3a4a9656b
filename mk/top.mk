# mk/top.mk — `flamme top` (owner: tools/top.c, tools/fnagg.c, tests/top/).
TOOL_SRCS += tools/fnagg.c
