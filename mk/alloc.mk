# mk/alloc.mk — allocation profiles (owner: agent/alloc.c, tools/alloc_view.c,
# tests/alloc/). agent/alloc.c is in the agent through agent.mk's wildcard.
TOOL_SRCS += tools/alloc_view.c
