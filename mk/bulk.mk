# mk/bulk.mk — common/bulk.c (huge-page chunks for the large once-read
# tables; in LIB_SRCS via mk/agent.mk) and its unit test.
UNIT_TESTS += tests/unit/test_bulk.c
