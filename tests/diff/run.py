#!/usr/bin/env python3
"""tests/diff/run.py — `flamme diff BEFORE AFTER`: the joined "stack BEFORE
AFTER" lines of two folded inputs (exact), --normalize, two recorded OCaml
runs (totals match each profile's, the flame graph of the second run is drawn
and marked differential), and bad input (one line, exit 2).

Usage: run.py --build DIR.  Ends with "diff: N passed, N failed".
"""
import argparse
import os
import subprocess
import sys
import tempfile


def check(cond, msg):
    if not cond:
        raise AssertionError(msg)


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout, p.stderr


def folded_lines(text):
    out = {}
    for line in text.splitlines():
        stack, before, after = line.rsplit(" ", 2)
        out[stack] = (float(before), float(after))
    return out


def t_exact(flamme, tmp):
    a, b = os.path.join(tmp, "a.folded"), os.path.join(tmp, "b.folded")
    with open(a, "w") as f:
        f.write("main;work;slow 10\nmain;work;fast 5\nmain;gone 2\n")
    with open(b, "w") as f:
        f.write("main;work;slow 4\nmain;work;fast 11\nmain;new thing 5\n")
    rc, so, se = run([flamme, "diff", a, b, "--folded"])
    check(rc == 0, "diff --folded failed (%d): %s" % (rc, se))
    got = folded_lines(so)
    want = {"main;work;slow": (10, 4), "main;work;fast": (5, 11), "main;gone": (2, 0),
            "main;new thing": (0, 5)}
    check(got == want, "joined lines %r, want %r" % (got, want))
    rc, so, se = run([flamme, "diff", a, b, "--folded", "--normalize"])
    got = folded_lines(so)
    scale = 20.0 / 17.0
    check(rc == 0 and abs(got["main;work;slow"][0] - 10 * scale) < 1e-9 and
          abs(sum(v[0] for v in got.values()) - 20) < 1e-9,
          "--normalize: BEFORE should be scaled to AFTER's total 20: %r" % got)


def t_recorded(flamme, build, tmp):
    profs = []
    for name, args in (("split", ["30"]), ("domains", ["30"])):
        out = os.path.join(tmp, name + ".flm")
        rc, _, se = run([flamme, "record", "-F", "499", "-o", out, "--",
                         os.path.join(build, "e2e", name, name + ".exe")] + args)
        check(rc == 0, "record %s failed (%d): %s" % (name, rc, se))
        profs.append(out)
    totals = []
    for p in profs:
        rc, so, se = run([flamme, "collapse", p])
        check(rc == 0, "collapse %s failed: %s" % (p, se))
        totals.append(sum(float(l.rsplit(" ", 1)[1]) for l in so.splitlines()))
    rc, so, se = run([flamme, "diff", profs[0], profs[1], "--folded"])
    check(rc == 0, "diff of two profiles failed (%d): %s" % (rc, se))
    got = folded_lines(so)
    sums = [sum(v[0] for v in got.values()), sum(v[1] for v in got.values())]
    print("  totals: before %d (profile %d), after %d (profile %d)"
          % (sums[0], totals[0], sums[1], totals[1]))
    check(sums == totals, "diff totals %r differ from the profiles' %r" % (sums, totals))
    check(any("Split.work_a" in s and v == (v[0], 0) and v[0] > 0 for s, v in got.items()),
          "Split.work_a should be only in BEFORE")
    check(any("Domains.work_a" in s and v[0] == 0 and v[1] > 0 for s, v in got.items()),
          "Domains.work_a should be only in AFTER")
    svg = os.path.join(tmp, "diff.svg")
    rc, _, se = run([flamme, "diff", profs[0], profs[1], "-o", svg, "--threads"])
    check(rc == 0 and os.path.exists(svg), "diff to SVG failed (%d): %s" % (rc, se))
    text = open(svg, encoding="utf-8").read()
    check("Differential:" in text and "Domains.work_a" in text and "domain 1" in text,
          "the SVG lacks the title, AFTER's functions or the thread frames")


def t_bad_input(flamme, tmp):
    rc, _, se = run([flamme, "diff", os.path.join(tmp, "missing.flm"), os.path.join(tmp, "x")])
    check(rc == 2 and len(se.strip().splitlines()) == 1 and "missing.flm" in se,
          "missing input: want exit 2 and one line naming it, got %d %r" % (rc, se))
    rc, _, se = run([flamme, "diff", os.path.join(tmp, "a.folded")])
    check(rc == 2 and "two inputs" in se, "one input: want exit 2, got %d %r" % (rc, se))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    a = ap.parse_args()
    flamme = os.path.join(a.build, "flamme")
    passed = failed = 0
    with tempfile.TemporaryDirectory(prefix="flamme-diff.") as tmp:
        for name, fn in (("exact", lambda: t_exact(flamme, tmp)),
                         ("recorded", lambda: t_recorded(flamme, a.build, tmp)),
                         ("bad_input", lambda: t_bad_input(flamme, tmp))):
            try:
                fn()
                print("PASS %s" % name)
                passed += 1
            except (AssertionError, subprocess.SubprocessError, OSError, ValueError) as e:
                print("FAIL %s: %s" % (name, e))
                failed += 1
    print("diff: %d passed, %d failed" % (passed, failed))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
