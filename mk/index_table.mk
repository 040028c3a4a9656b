# mk/index_table.mk — common/index_table.h (header only: the interning
# tables' open addressing) and its unit test.
UNIT_TESTS += tests/unit/test_index_table.c
