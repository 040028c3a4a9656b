#!/usr/bin/env python3
"""tests/engine/run.py — what sampling costs the program and what it counts
(issue 8, points 4-6), on programs built with both compilers:

- gcloop: Gc.major in a loop on two domains while others come and go; the
  runtime then runs millions of empty major slices a second. flamme's own
  functions (its GC hooks) must stay <= 0.5% of the samples.

Usage: run.py --build DIR
"""
import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import englib  # noqa: E402

passed = failed = 0


def check(ok, what, detail=""):
    global passed, failed
    if ok:
        passed += 1
        print("ok   " + what)
    else:
        failed += 1
        print("FAIL " + what + (": " + detail if detail else ""))


def test_gcloop(ctx, comp):
    prof = os.path.join(ctx.work, "gcloop-%s.flm" % comp)
    r = englib.record(ctx, ctx.exe(comp, "gcloop"), ["0.15"], prof, hz=999)
    check(r.rc == 0 and "gcloop: checksum" in r.out, "%s gcloop: runs under flamme" % comp,
          r.err.strip()[-300:])
    if r.rc != 0:
        return
    st = englib.stacks(ctx, prof)
    pct, mine, total = englib.own_share(ctx, st)
    print("  %s gcloop: %d of %d samples in flamme's functions (%.2f%%)" % (comp, mine, total, pct))
    check(total >= 500, "%s gcloop: enough samples to judge (%d)" % (comp, total))
    check(pct <= 0.5, "%s gcloop: flamme's own functions <= 0.5%% of samples" % comp,
          "%.2f%% (%d of %d)" % (pct, mine, total))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="flamme-engine-") as tmp:
        ctx = englib.Ctx(a.build, tmp)
        for comp in englib.COMPILERS:
            test_gcloop(ctx, comp)
    print("engine: %d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
