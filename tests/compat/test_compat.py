"""tests/compat/test_compat.py — profiles of an older format still read the
same (make compat-test, mk/compact.mk; part of the pytest suite).

The v1_7-* files were recorded by the 1.7 writer (the last 1.x) from the
e2e programs: domains (fp, two domains), deep (nofp, 2000 frames deep,
handler budget off) and effects (nofp, FLAMME_PERIOD=0.4: four segments).
Beside each, the `collapse` and `report` output the 1.7 reader gave. Every
later flamme must give the same text: the samples, stacks, threads and
segments of an old file mean what they meant. In report's "top functions"
tables only the rows are compared, not their order: how report breaks ties
is presentation, which may change without the file meaning anything else.
"""
import difflib
import os

import pytest

from flammetest import run

HERE = os.path.dirname(os.path.abspath(__file__))
SEGS = ["v1_7-seg1.flm", "v1_7-seg2.flm", "v1_7-seg3.flm", "v1_7-seg4.flm"]
CASES = [
    ("v1_7-domains.collapsed", ["collapse", "--threads", "v1_7-domains.flm"]),
    ("v1_7-domains.report", ["report", "v1_7-domains.flm"]),
    ("v1_7-deep.collapsed", ["collapse", "--threads", "v1_7-deep.flm"]),
    ("v1_7-deep.report", ["report", "v1_7-deep.flm"]),
    ("v1_7-seg.collapsed", ["collapse"] + SEGS),
    ("v1_7-seg.report", ["report"] + SEGS),
]


def comparable(text):
    """The text in sections (a section starts at an unindented line), the
    rows of report's "top functions" tables sorted."""
    parts = []
    for line in text.splitlines(True):
        if line[:1].isalpha() or not parts:
            parts.append([line])
        else:
            parts[-1].append(line)
    return "".join("".join(p[:1] + sorted(p[1:]) if p[0].startswith("top functions") else p)
                   for p in parts)


@pytest.mark.parametrize("want_file, args", CASES, ids=[c[0] for c in CASES])
def test_reads_as_1_7_did(build, want_file, args):
    p = run([build.flamme] + args, cwd=HERE)
    want = open(os.path.join(HERE, want_file)).read()
    assert p.returncode == 0, "flamme %s: exit %d: %s" % (" ".join(args), p.returncode, p.stderr)
    assert comparable(p.stdout) == comparable(want), "flamme %s differs from %s:\n%s" % (
        " ".join(args), want_file,
        "".join(list(difflib.unified_diff(want.splitlines(True), p.stdout.splitlines(True),
                                          want_file, "now"))[:40]))
