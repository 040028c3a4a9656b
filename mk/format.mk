# mk/format.mk — profile format, dedup and stack interning unit tests (owner: common/profile.c,
# writer/dedup.c, writer/intern.c).
# The sources themselves are in LIB_SRCS via mk/agent.mk.
UNIT_TESTS += tests/unit/test_profile.c tests/unit/test_dedup.c tests/unit/test_intern.c
