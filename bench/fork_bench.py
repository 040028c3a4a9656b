#!/usr/bin/env python3
"""bench/fork_bench.py — what a profiled program pays per fork (`make
bench-fork`, part of `make bench`). Prints a table; asserts nothing.

Runs build/bench/fork/fork.exe (bench/fork.ml: N forks of a child that
ends at once with Unix._exit, then N Unix.system "true") without flamme,
profiled at 99 Hz with FLAMME_FORK=0 (children left alone), and profiled
following its children (the default: each child starts a profile of its
own, and removes it when it ends or execs before a sample), in
interleaved rounds. Per variant: the median wall time of one fork and of
one Unix.system, in us, and the CPU of the whole process tree per fork
(rusage of the children, both loops), in ms.
Usage: fork_bench.py [--build DIR] [--rounds N] [--forks N]
"""
import argparse
import os
import resource
import statistics
import subprocess
import tempfile


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--forks", type=int, default=100)
    a = ap.parse_args()
    exe = os.path.abspath(os.path.join(a.build, "bench", "fork", "fork.exe"))
    lib = os.path.abspath(os.path.join(a.build, "libflamme.so"))
    base = {k: v for k, v in os.environ.items() if not k.startswith("FLAMME_") and k != "LD_PRELOAD"}
    variants = [("without flamme", {}),
                ("profiled, FLAMME_FORK=0", {"LD_PRELOAD": lib, "FLAMME_FORK": "0"}),
                ("profiled, children too", {"LD_PRELOAD": lib})]
    res = {v[0]: [] for v in variants}
    with tempfile.TemporaryDirectory(prefix="flamme-fork-bench.") as work:
        for r in range(a.rounds):
            for name, extra in (variants if r % 2 == 0 else variants[::-1]):
                env = dict(base, **extra)
                if extra:
                    env.update({"FLAMME_QUIET": "1", "FLAMME_HZ": "99",
                                "FLAMME_OUTPUT": os.path.join(work, "p.%p.flm")})
                c0 = children_cpu()
                p = subprocess.run([exe, str(a.forks)], env=env, cwd=work, capture_output=True,
                                   text=True, timeout=600)
                cpu = children_cpu() - c0
                f = p.stdout.split()
                if p.returncode != 0 or len(f) != 4:
                    print("%s: fork.exe failed (%d): %s" % (name, p.returncode, p.stderr[-300:]))
                    return
                res[name].append((float(f[1]), float(f[3]), 1000 * cpu / (2 * a.forks)))
                for n in os.listdir(work):
                    os.unlink(os.path.join(work, n))
    print("a program that forks, profiled at 99 Hz (%d forks of each kind, median of %d rounds):"
          % (a.forks, a.rounds))
    print("  %-26s %16s %18s %14s" % ("run", "fork+_exit us", "Unix.system us", "CPU ms/fork"))
    for name, _ in variants:
        col = list(zip(*res[name]))
        print("  %-26s %16.0f %18.0f %14.2f" % (name, statistics.median(col[0]),
                                                statistics.median(col[1]), statistics.median(col[2])))


if __name__ == "__main__":
    main()
