# mk/budget.mk — the handler's side of the agent's CPU budget
# (agent/budget.c, compiled into its unit test).
UNIT_TESTS += tests/unit/test_budget.c
$(BUILD)/tests/test_budget: agent/budget.c agent/budget.h
