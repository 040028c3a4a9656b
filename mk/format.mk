# mk/format.mk — profile format and dedup unit tests (owner: common/profile.c, writer/dedup.c).
# The sources themselves are in LIB_SRCS via mk/agent.mk.
UNIT_TESTS += tests/unit/test_profile.c tests/unit/test_dedup.c
