#!/usr/bin/env python3
"""tests/engine/run.py — what sampling costs the program and what it counts
(issue 8, points 4-6), on programs built with both compilers:

- gcloop: Gc.major in a loop on two domains while others come and go; the
  runtime then runs millions of empty major slices a second. flamme's own
  functions (its GC hooks) must stay <= 0.5% of the samples.
- deepfx: an effects scheduler whose stack grows to ~400,000 frames, at
  FLAMME_DEPTH=1000000, 99 and 999 Hz (timer engine, which counts kernel
  time too): the sample weight matches the main thread's CPU time within 5%
  (+1 period: where the first and last periods fall), the handler's own
  time not counted; `flamme report` says how many samples the budget
  shortened.

Usage: run.py --build DIR
"""
import argparse
import os
import re
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


def test_deepfx(ctx, comp, hz):
    prof = os.path.join(ctx.work, "deepfx-%s-%d.flm" % (comp, hz))
    r = englib.record(ctx, ctx.exe(comp, "deepfx"), [], prof, hz=hz, engine="timer",
                      env={"FLAMME_DEPTH": "1000000"})
    m = re.search(r"thread_cpu ([0-9.]+)", r.out)
    check(r.rc == 0 and m is not None, "%s deepfx %d Hz: runs under flamme" % (comp, hz),
          r.err.strip()[-300:])
    if r.rc != 0 or m is None:
        return
    rep = englib.report(ctx, prof)
    weight = englib.report_weight(rep)
    h = re.search(r"signal handler ([0-9.]+) s of CPU", rep)
    handler = float(h.group(1)) if h else 0.0
    cpu = float(m.group(1))
    expect = (cpu - handler) * hz
    print("  %s deepfx %d Hz: weight %d, main thread CPU %.3f s - handler %.3f s = %.0f periods"
          % (comp, hz, weight or 0, cpu, handler, expect))
    check(weight is not None and abs(weight - expect) <= 0.05 * expect + 1,
          "%s deepfx %d Hz: sample weight within 5%% of the program's CPU time" % (comp, hz),
          "%s vs %.0f" % (weight, expect))
    check(handler <= 0.05 * cpu, "%s deepfx %d Hz: handler CPU <= 5%% of the thread's" % (comp, hz),
          "%.3f of %.3f s" % (handler, cpu))
    check("were shortened" in rep, "%s deepfx %d Hz: report says samples were shortened" % (comp, hz))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="flamme-engine-") as tmp:
        ctx = englib.Ctx(a.build, tmp)
        for comp in englib.COMPILERS:
            test_gcloop(ctx, comp)
            for hz in (99, 999):
                test_deepfx(ctx, comp, hz)
    print("engine: %d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
