# mk/runsort.mk — common/runsort.h (header only: the natural merge sort of
# the unwind and line tables) and its unit test.
UNIT_TESTS += tests/unit/test_runsort.c
