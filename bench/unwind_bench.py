#!/usr/bin/env python3
"""bench/unwind_bench.py — stack completeness per program and compiler
(`make bench-unwind`, part of `make bench`). Prints a table; asserts nothing.

Records each real-style program of tests/unwind (built here with every
compiler make deps built, as the tests build them; --compilers narrows
them) with `flamme record -F HZ`,
ROUNDS times, and prints per program and compiler: samples, the share of
samples whose stack reaches its thread's root (median and worst round), and
the issue's goals beside them (>= 99.5% without frame pointers, >= 99.9%
with). breakwalk is built to break walks: its figure shows what share is
NOT marked, which must be 0.
Usage: unwind_bench.py [--build DIR] [--cache DIR] [--compilers a,b] [--rounds N] [--hz N]
                       [--scale X] [--only a,b]
"""
import argparse
import os
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "..", "tests"), os.path.join(HERE, "..", "tests", "unwind")]
import flammetest  # noqa: E402
import unwind_stacks as us  # noqa: E402

GOAL = {"fp": 99.9, "nofp": 99.5}
PROGRAMS = ["atomq", "hashstr", "effdeep", "yielder", "dlprog", "vclock", "gcalloc", "rewrite",
            "sched", "fxexn", "cbraise", "steal", "churn", "dthreads", "cback", "minicc", "breakwalk"]


def one(build, exe, scale, hz, wd):
    out = os.path.join(wd, "p.flm")
    env = flammetest.clean_env({"LD_LIBRARY_PATH": os.path.dirname(exe)})
    p = flammetest.record(build, [exe, str(scale)], out, ["-F", str(hz)], env=env, cwd=wd)
    if p.returncode != 0:
        raise RuntimeError("%s exited %d: %s" % (exe, p.returncode, p.stderr[-300:]))
    st = us.stacks(build, out)
    pc, tot = us.share(st)
    unmarked = sum(s.weight for s in st
                   if not s.complete() and (not s.frames or s.frames[0] not in us.MARKERS))
    return tot, pc, unmarked, us.incomplete_top(st, 2)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--cache", default=flammetest.CACHE, help="where make deps put the OCaml compilers")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--hz", type=int, default=999)
    ap.add_argument("--scale", type=float, default=2.0)
    ap.add_argument("--only", default="")
    ap.add_argument("--compilers", default="", help="e.g. 5.3.0-fp,5.4.1-nofp (default: all)")
    a = ap.parse_args()
    only = set(a.only.split(",")) if a.only else None
    print("stack completeness, %d rounds at %d Hz, scale %g (complete = root-most frame is a "
          "thread root)" % (a.rounds, a.hz, a.scale))
    print("%-10s %-11s %8s %10s %10s %9s %6s" % ("program", "compiler", "samples", "median %",
                                               "worst %", "unmarked", "goal"))
    with tempfile.TemporaryDirectory(prefix="flamme-unwind-bench.") as wd:
        build = flammetest.Build(a.build)
        compilers, _ = flammetest.select_compilers(a.cache, a.compilers)
        if not compilers:
            print("no OCaml compiler%s in %s (make deps)" % (" " + a.compilers if a.compilers else "",
                                                              a.cache))
            return
        for prog in PROGRAMS:
            if only and prog not in only:
                continue
            for compiler in compilers:
                name = compiler.name
                try:
                    exe = us.build_program(flammetest.builder(build, compiler), build, prog)
                    runs = [one(build, exe, a.scale, a.hz, wd) for _ in range(a.rounds)]
                except (RuntimeError, FileNotFoundError) as e:
                    print("%-10s %-11s error: %s" % (prog, name, e))
                    continue
                pcs = [r[1] for r in runs]
                goal = "-" if prog == "breakwalk" else ">=%.1f" % GOAL["fp" if compiler.fp else "nofp"]
                print("%-10s %-11s %8d %10.2f %10.2f %9d %6s" % (
                    prog, name, int(statistics.median(r[0] for r in runs)), statistics.median(pcs),
                    min(pcs), sum(r[2] for r in runs), goal))
                worst = min(runs, key=lambda r: r[1])
                if prog != "breakwalk" and worst[1] < 100.0:
                    for line in worst[3]:
                        print("      " + line[:200])


if __name__ == "__main__":
    main()
