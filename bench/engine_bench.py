#!/usr/bin/env python3
"""bench/engine_bench.py — what sampling costs and what it counts, per program
and compiler (`make bench-engine`, part of `make bench`). Prints tables;
asserts nothing.

- GC hooks: gcloop (Gc.major in a loop on two domains while others come and
  go) alone and under flamme at 999 Hz: CPU seconds of each (median of the
  rounds), flamme's own functions as a share of the samples, and how long the
  major-slice hooks were paused (`flamme report`).
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="flamme-engine-bench-") as tmp:
        ctx = englib.Ctx(a.build, tmp)
        bench_gc_hooks(ctx, a.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
