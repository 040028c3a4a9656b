# mk/symbols.mk — demangling and the collapse/report verbs (owner: symbols).
# writer/symbols.c is in LIB_SRCS via mk/agent.mk.
TOOL_SRCS  += tools/demangle.c tools/collapse.c tools/report.c
UNIT_TESTS += tests/unit/test_symbols.c tests/unit/test_demangle.c tests/unit/test_collapse.c
