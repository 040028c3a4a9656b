#!/usr/bin/env python3
"""bench/engine_bench.py — what sampling costs and what it counts, per program
and compiler (`make bench-engine`, part of `make bench`). Prints tables;
asserts nothing.

- GC hooks: gcloop (Gc.major in a loop on two domains while others come and
  go) alone and under flamme at 999 Hz: CPU seconds of each (median of the
  rounds), flamme's own functions as a share of the samples, and how long the
  major-slice hooks were paused (`flamme report`).
- CPU budget: deepfx (stacks of ~400,000 frames) alone and under flamme at
  FLAMME_DEPTH=1000000, 99 and 999 Hz: wall and CPU slowdown (medians; goal
  <= 1.2x), handler CPU as a share of the thread's, samples shortened.
Usage: engine_bench.py [--build DIR] [--rounds N]
"""
import argparse
import os
import re
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "engine"))
import englib  # noqa: E402


def bench_gc_hooks(ctx, rounds):
    print("GC hooks (gcloop 0.3, 999 Hz; goal: flamme's functions <= 0.5% of samples)")
    print("  %-5s %10s %10s %8s %12s %16s" % ("build", "cpu alone", "cpu flamme", "ratio",
                                               "flamme fns", "hooks paused"))
    for comp in englib.COMPILERS:
        try:
            exe = ctx.exe(comp, "gcloop")
        except FileNotFoundError as e:
            print("  %-5s %s" % (comp, e))
            continue
        alone, under, own, paused = [], [], [], ""
        for i in range(rounds):
            a = englib.run([exe, "0.3"], englib.clean_env(), ctx.work)
            alone.append(a.cpu)
            prof = os.path.join(ctx.work, "gc.flm")
            r = englib.record(ctx, exe, ["0.3"], prof)
            under.append(r.cpu)
            own.append(englib.own_share(ctx, englib.stacks(ctx, prof))[0])
            m = re.search(r"hooks paused (\d+) times, (\d+) ms", englib.report(ctx, prof))
            paused = "%s ms (%s)" % (m.group(2), m.group(1)) if m else "never"
        ca, cu = statistics.median(alone), statistics.median(under)
        print("  %-5s %9.2fs %9.2fs %8.3f %11.2f%% %16s" % (comp, ca, cu, cu / ca,
                                                           statistics.median(own), paused))


def bench_budget(ctx, rounds):
    print("CPU budget (deepfx, ~400,000-frame stacks, FLAMME_DEPTH=1000000; goal: <= 1.2x alone)")
    print("  %-5s %6s %10s %10s %8s %8s %10s %12s" % ("build", "Hz", "wall alone", "wall flamme",
                                                     "wall x", "cpu x", "handler", "shortened"))
    for comp in englib.COMPILERS:
        try:
            exe = ctx.exe(comp, "deepfx")
        except FileNotFoundError as e:
            print("  %-5s %s" % (comp, e))
            continue
        for hz in (99, 999):
            aw, ac, fw, fc, hs, sh = [], [], [], [], [], ""
            for i in range(rounds):
                a = englib.run([exe], englib.clean_env(), ctx.work)
                aw.append(a.wall)
                ac.append(a.cpu)
                prof = os.path.join(ctx.work, "deep.flm")
                r = englib.record(ctx, exe, [], prof, hz=hz, env={"FLAMME_DEPTH": "1000000"})
                fw.append(r.wall)
                fc.append(r.cpu)
                rep = englib.report(ctx, prof)
                m = re.search(r"signal handler ([0-9.]+) s", rep)
                t = re.search(r"thread_cpu ([0-9.]+)", r.out)
                if m and t:
                    hs.append(100.0 * float(m.group(1)) / float(t.group(1)))
                m = re.search(r"(\d+) samples \(weight \d+\) were shortened", rep)
                w = englib.report_weight(rep)
                sh = "%s of %s" % (m.group(1) if m else 0, w)
            med = statistics.median
            print("  %-5s %6d %9.2fs %9.2fs %8.2f %8.2f %9.1f%% %12s"
                  % (comp, hz, med(aw), med(fw), med(fw) / med(aw), med(fc) / med(ac),
                     med(hs) if hs else float("nan"), sh))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="flamme-engine-bench-") as tmp:
        ctx = englib.Ctx(a.build, tmp)
        bench_gc_hooks(ctx, a.rounds)
        bench_budget(ctx, a.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
