"""tests/test_groups.py — the test groups that keep a runner of their own,
run from the suite: the C unit tests (tests/unit, `make unit`), the
sanitizer and fuzz builds, the torture run, opam lint, and the Python
groups not yet written as pytest modules. Each is one test, `make GROUP`
at the top of the tree; the groups are the make variable TEST_TARGETS,
which `make test` passes in FLAMME_MAKE_GROUPS. A group passes when its
make target exits 0; its output (every check it printed) is shown when it
fails.
"""
import os
import re

import pytest

GROUPS = os.environ.get("FLAMME_MAKE_GROUPS", "").split()
RESULT = re.compile(r"^.*\b\d+ passed, \d+ failed.*$", re.M)


@pytest.mark.slow
@pytest.mark.parametrize("group", GROUPS)
def test_group(group, make_target):
    p = make_target(group)
    print(p.stdout)
    print(p.stderr)
    results = RESULT.findall(p.stdout)
    assert p.returncode == 0, "make %s exited %d; last lines:\n%s" % (
        group, p.returncode, "\n".join((p.stdout + p.stderr).splitlines()[-25:]))
    if results:
        print("%s: %s" % (group, results[-1]))
