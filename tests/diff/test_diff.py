"""tests/diff/test_diff.py — `flamme diff BEFORE AFTER` (make diff-test, part
of make test): the joined "stack BEFORE AFTER" lines of two folded inputs
(exact), --normalize, two recorded OCaml runs (totals match each profile's,
the flame graph of the second run is drawn and marked differential), and
bad input (one line, exit 2).

The recorded runs are tests/e2e/split.ml and domains.ml built with the
default compiler: the subject is how diff joins two profiles, not the walk.
"""
import os

import pytest

from flammetest import parse_folded, record, run, total

HERE = os.path.dirname(os.path.abspath(__file__))


def folded_lines(text):
    """{stack: (before, after)} of diff's folded output."""
    out = {}
    for line in text.splitlines():
        stack, before, after = line.rsplit(" ", 2)
        out[stack] = (float(before), float(after))
    return out


def write(path, text):
    with open(path, "w") as f:
        f.write(text)
    return str(path)


def test_exact(build, check, tmp_path):
    a = write(tmp_path / "a.folded", "main;work;slow 10\nmain;work;fast 5\nmain;gone 2\n")
    b = write(tmp_path / "b.folded", "main;work;slow 4\nmain;work;fast 11\nmain;new thing 5\n")
    p = run([build.flamme, "diff", a, b, "--folded"])
    check(p.returncode == 0, "diff --folded succeeds", p.stderr)
    got = folded_lines(p.stdout)
    want = {"main;work;slow": (10, 4), "main;work;fast": (5, 11), "main;gone": (2, 0),
            "main;new thing": (0, 5)}
    check(got == want, "joined lines: each stack with its BEFORE and AFTER counts", "%r, want %r" % (got, want))
    p = run([build.flamme, "diff", a, b, "--folded", "--normalize"])
    got = folded_lines(p.stdout)
    scale = 20.0 / 17.0
    check(p.returncode == 0 and abs(got["main;work;slow"][0] - 10 * scale) < 1e-9 and
          abs(sum(v[0] for v in got.values()) - 20) < 1e-9,
          "--normalize: BEFORE is scaled to AFTER's total 20", got)


@pytest.mark.slow
def test_recorded(build, ocaml_default, check, tmp_path):
    profs = []
    for name in ("split", "domains"):
        exe = ocaml_default("diff/" + name, [os.path.join(HERE, "..", "e2e", name + ".ml")])
        out = str(tmp_path / (name + ".flm"))
        p = record(build, [exe, "30"], out, ["-F", "499"])
        assert p.returncode == 0, "record %s failed (%d): %s" % (name, p.returncode, p.stderr)
        profs.append(out)
    totals = []
    for prof in profs:
        p = run([build.flamme, "collapse", prof])
        assert p.returncode == 0, "collapse %s failed: %s" % (prof, p.stderr)
        totals.append(total(parse_folded(p.stdout)))
    p = run([build.flamme, "diff", profs[0], profs[1], "--folded"])
    assert p.returncode == 0, "diff of two profiles failed (%d): %s" % (p.returncode, p.stderr)
    got = folded_lines(p.stdout)
    sums = [sum(v[0] for v in got.values()), sum(v[1] for v in got.values())]
    print("  totals: before %d (profile %d), after %d (profile %d)"
          % (sums[0], totals[0], sums[1], totals[1]))
    check(sums == totals, "diff's totals are the profiles' totals", "%r vs %r" % (sums, totals))
    check(any("Split.work_a" in s and v == (v[0], 0) and v[0] > 0 for s, v in got.items()),
          "Split.work_a is only in BEFORE")
    check(any("Domains.work_a" in s and v[0] == 0 and v[1] > 0 for s, v in got.items()),
          "Domains.work_a is only in AFTER")
    svg = str(tmp_path / "diff.svg")
    p = run([build.flamme, "diff", profs[0], profs[1], "-o", svg, "--threads"])
    check(p.returncode == 0 and os.path.exists(svg), "diff draws an SVG", p.stderr)
    text = open(svg, encoding="utf-8").read() if os.path.exists(svg) else ""
    check("Differential:" in text and "Domains.work_a" in text and "domain 1" in text,
          "the SVG has the differential title, AFTER's functions and the thread frames")


def test_bad_input(build, check, tmp_path):
    p = run([build.flamme, "diff", str(tmp_path / "missing.flm"), str(tmp_path / "x")])
    check(p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and "missing.flm" in p.stderr,
          "missing input: exit 2 and one line naming it", "%d %r" % (p.returncode, p.stderr))
    a = write(tmp_path / "a.folded", "main;work 1\n")
    p = run([build.flamme, "diff", a])
    check(p.returncode == 2 and "two inputs" in p.stderr, "one input: exit 2, 'two inputs'",
          "%d %r" % (p.returncode, p.stderr))
