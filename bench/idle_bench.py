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
Last, the same program computing POOL_SECS seconds of CPU beside 0 and
POOL threads that sleep 50 ms at a time (a pool waiting for work),
profiled at the default rate: the writer's CPU (`flamme report`) per
second of the run. Every sampled thread is reviewed by the writer
(agent/engine.c, flamme_engine_review); a pool's waiting threads should
cost it next to nothing. And DOMAINS times DOMAIN_MS ms of CPU, on the
main thread or each time in a new domain joined at once: what threads
that come and go cost the writer (their slots, rings and reviews).
Usage: idle_bench.py [--build DIR] [--rounds N] [--calls N] [--pause S]
                     [--pool N] [--pool-secs S] [--domains N] [--domain-ms MS]
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


def profiled_rounds(a, lib, base, work, values, extra):
    """(value, environment, profile path) for each run of a.rounds rounds
    of the two values, their order swapped every other round: each run
    profiled by lib, with extra's variables."""
    prof = os.path.join(work, "run.flm")
    for r in range(a.rounds):
        for v in values if r % 2 == 0 else values[::-1]:
            e = dict(base)
            e.update({"LD_PRELOAD": lib, "FLAMME_OUTPUT": prof, "FLAMME_QUIET": "1"})
            e.update(extra)
            yield v, e, prof


def pause_cost(a, exe, lib, base, work):
    """Writer and process CPU of a profiled run (999 Hz) without and with a
    pause of a.pause seconds, medians of a.rounds."""
    flamme = os.path.abspath(os.path.join(a.build, "flamme"))
    res = {0.0: [], a.pause: []}
    for pause, e, prof in profiled_rounds(a, lib, base, work, (0.0, a.pause), {"FLAMME_HZ": "999"}):
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


def writer_cost(a, exe, lib, base, work, title, runs):
    """Writer CPU per second of profiled runs (default rate and engine) of
    the two runs, each (label, arguments, its expected output), medians of
    a.rounds. Returns 0, or 1 if a run went wrong."""
    flamme = os.path.abspath(os.path.join(a.build, "flamme"))
    res = {label: [] for label, _, _ in runs}
    for (label, args, out), e, prof in profiled_rounds(a, lib, base, work, runs, {}):
        so = subprocess.run([exe] + args, env=e, capture_output=True, text=True, timeout=300).stdout
        rep = subprocess.run([flamme, "report", prof], capture_output=True, text=True).stdout
        w = re.search(r"writer ([\d.]+) s", rep)
        d = re.search(r"Hz per thread, ([\d.]+) s", rep)
        if so.strip() != out or not w or not d:
            print("idle: %s: unexpected output %r / %r" % (label, so, rep[:200]), file=sys.stderr)
            return 1
        res[label].append((float(w.group(1)), float(d.group(1))))
    print("%s (default rate; median of %d):" % (title, a.rounds))
    print("  %-30s %10s %10s %16s" % ("run", "run s", "writer s", "writer ms / s"))
    for label, _, _ in runs:
        col = list(zip(*res[label]))
        wr, dur = statistics.median(col[0]), statistics.median(col[1])
        print("  %-30s %10.2f %10.3f %16.2f" % (label, dur, wr, wr * 1e3 / dur))
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=200000)
    ap.add_argument("--pause", type=float, default=5.0)
    ap.add_argument("--pool", type=int, default=30)
    ap.add_argument("--pool-secs", type=float, default=3.0)
    ap.add_argument("--domains", type=int, default=200)
    ap.add_argument("--domain-ms", type=float, default=10.0)
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
    secs = "%g" % a.pool_secs
    rc = writer_cost(a, exe, lib, base, work, "a program beside a pool of waiting threads (%s s of CPU)"
                     % secs, [("0 sleeping", ["pool", "0", secs], "pool=0"),
                              ("%d sleeping" % a.pool, ["pool", str(a.pool), secs],
                               "pool=%d" % a.pool)])
    n, ms = str(a.domains), "%g" % a.domain_ms
    rc |= writer_cost(a, exe, lib, base, work, "domains that come and go (%s times %s ms of CPU)"
                      % (n, ms), [("on the main thread", ["inline", n, ms], "domains=" + n),
                                  ("each in a new domain", ["domains", n, ms], "domains=" + n)])
    for f in os.listdir(work):
        os.unlink(os.path.join(work, f))
    os.rmdir(work)
    return rc


if __name__ == "__main__":
    sys.exit(main())
