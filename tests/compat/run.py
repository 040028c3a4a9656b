#!/usr/bin/env python3
"""tests/compat/run.py — profiles of an older format still read the same
(make compat-test, mk/compact.mk).

The v1_7-* files were recorded by the 1.7 writer (the last 1.x) from the
e2e programs: domains (fp, two domains), deep (nofp, 2000 frames deep,
handler budget off) and effects (nofp, FLAMME_PERIOD=0.4: four segments).
Beside each, the `collapse` and `report` output the 1.7 reader gave. Every
later flamme must give the same text: the samples, stacks, threads and
segments of an old file mean what they meant. In report's "top functions"
tables only the rows are compared, not their order: how report breaks ties
is presentation, which may change without the file meaning anything else.
Usage: run.py --build BUILD
"""
import argparse
import difflib
import os
import subprocess
import sys

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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    flamme = os.path.abspath(os.path.join(ap.parse_args().build, "flamme"))
    failed = 0
    for want_file, args in CASES:
        p = subprocess.run([flamme] + args, cwd=HERE, capture_output=True, text=True)
        want = open(os.path.join(HERE, want_file)).read()
        if p.returncode != 0 or comparable(p.stdout) != comparable(want):
            failed += 1
            print("FAIL flamme %s: exit %d, differs from %s:\n%s%s" % (
                " ".join(args), p.returncode, want_file, p.stderr,
                "".join(list(difflib.unified_diff(want.splitlines(True), p.stdout.splitlines(True),
                                                  want_file, "now"))[:40])))
        else:
            print("ok   flamme %s (%d lines as 1.7 read them)" % (" ".join(args), want.count("\n")))
    if failed:
        sys.exit("compat: %d of %d cases differ" % (failed, len(CASES)))
    print("compat: all %d cases read as 1.7 read them" % len(CASES))


if __name__ == "__main__":
    main()
