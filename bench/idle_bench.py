#!/usr/bin/env python3
"""bench/idle_bench.py — what the agent costs a program while it is not
profiling (`make bench-idle`, part of `make bench`). Prints a table;
asserts nothing.

Owns: the idle-cost benchmark. Runs build/bench/idle/idle.exe (bench/idle.ml)
plain, with the agent preloaded but not started (FLAMME_AUTOSTART=0, as a
program linking the library is until Flamme.start) and profiling (CPU mode,
99 Hz), in interleaved rounds; per variant it prints the median ns of one
poll(NULL, 0, 0), of a 1-byte read of /dev/zero (both interposed) and of
an open, 1-byte read and close of it (a new descriptor each time), and
VmSize before and after 100 short-lived threads. Then, profiling at 999 Hz,
the same program followed by a pause of PAUSE seconds (asleep): the
writer's CPU (`flamme report`) and the process's CPU (rusage), against
the same run with no pause: what the agent costs a waiting program.
Usage: idle_bench.py [--build DIR] [--rounds N] [--calls N] [--pause S]
"""
import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def pause_cost(a, exe, lib, base, work):
    """Writer and process CPU of a profiled run (999 Hz) without and with a
    pause of a.pause seconds, medians of a.rounds."""
    flamme = os.path.abspath(os.path.join(a.build, "flamme"))
    res = {0.0: [], a.pause: []}
    for r in range(a.rounds):
        for pause in (0.0, a.pause) if r % 2 == 0 else (a.pause, 0.0):
            prof = os.path.join(work, "pause.flm")
            e = dict(base)
            e.update({"LD_PRELOAD": lib, "FLAMME_OUTPUT": prof, "FLAMME_QUIET": "1",
                      "FLAMME_HZ": "999"})
            c0 = children_cpu()
            subprocess.run([exe, "1000", str(pause)], env=e, capture_output=True, timeout=300)
            cpu = children_cpu() - c0
            rep = subprocess.run([flamme, "report", prof], capture_output=True, text=True).stdout
            m = re.search(r"writer ([\d.]+) s", rep)
            res[pause].append((float(m.group(1)) if m else float("nan"), cpu))
    print("a waiting program, profiled at 999 Hz (median of %d rounds):" % a.rounds)
    print("  %-24s %10s %12s" % ("run", "writer s", "process s"))
    for pause in (0.0, a.pause):
        col = list(zip(*res[pause]))
        print("  %-24s %10.3f %12.3f" % ("then asleep %.0f s" % pause if pause else "no pause",
                                         statistics.median(col[0]), statistics.median(col[1])))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=200000)
    ap.add_argument("--pause", type=float, default=5.0)
    a = ap.parse_args()
    exe = os.path.abspath(os.path.join(a.build, "bench", "idle", "idle.exe"))
    lib = os.path.abspath(os.path.join(a.build, "libflamme.so"))
    work = tempfile.mkdtemp(prefix="flamme-idle.")
    base = {k: v for k, v in os.environ.items() if not k.startswith("FLAMME_") and k != "LD_PRELOAD"}
    variants = [
        ("plain", {}),
        ("agent, not profiling", {"LD_PRELOAD": lib, "FLAMME_AUTOSTART": "0"}),
        ("agent, profiling 99 Hz", {"LD_PRELOAD": lib, "FLAMME_OUTPUT": os.path.join(work, "p.%p.flm"),
                                    "FLAMME_QUIET": "1"}),
    ]
    res = {name: [] for name, _ in variants}
    for r in range(a.rounds):
        for name, env in variants[r % 3:] + variants[:r % 3]:
            e = dict(base)
            e.update(env)
            so = subprocess.run([exe, str(a.calls)], env=e, capture_output=True, text=True,
                                timeout=300).stdout
            m = re.search(r"poll_ns=(\d+) read_ns=(\d+) open_ns=(\d+) vmsize0_kb=(\d+) "
                          r"vmsize100_kb=(\d+)", so)
            if not m:
                print("idle: %s: unexpected output %r" % (name, so), file=sys.stderr)
                return 1
            res[name].append(tuple(int(x) for x in m.groups()))
    print("idle cost (median of %d rounds, %d calls each):" % (a.rounds, a.calls))
    print("  %-24s %10s %10s %10s %14s %16s" % ("variant", "poll ns", "read ns", "open ns", "VmSize MB",
                                                "after 100 thr MB"))
    for name, _ in variants:
        col = list(zip(*res[name]))
        med = [statistics.median(c) for c in col]
        print("  %-24s %10.0f %10.0f %10.0f %14.1f %16.1f" % (name, med[0], med[1], med[2], med[3] / 1024,
                                                            med[4] / 1024))
    pause_cost(a, exe, lib, base, work)
    for f in os.listdir(work):
        os.unlink(os.path.join(work, f))
    os.rmdir(work)
    return 0


if __name__ == "__main__":
    sys.exit(main())
