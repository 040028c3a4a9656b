#!/usr/bin/env python3
"""bench/fidelity_bench.py — overhead and fidelity figures per OCaml 5 program
(`make bench-fidelity`, part of `make bench`). Prints a table; asserts nothing.

Owns: the overhead benchmark. Runs each program of tests/fidelity (built into
build/fidelity/) in interleaved rounds of [plain, agent at 99 Hz, agent at
999 Hz] (the order rotates each round so drift on a shared machine hits each
variant alike); the agent is preloaded directly (LD_PRELOAD + FLAMME_*), so
the wall time is the program's own, profile writing at exit included.
Per program it prints the median over rounds of wall(agent)/wall(plain) - 1,
and from the 999 Hz runs (medians): complete stacks, delivered Hz (sample
weight per CPU-second of the process), lost samples, and the signal
handler's own cost (FLAMME_STATS=1: median and p99 ns). `depth100` (90 levels
of recursion + runtime frames, ~100 frames) gives the handler cost at depth
100. The same paired ratio on CPU seconds (user+sys) is printed too: it
is less sensitive to the machine's other load. Goals are printed beside the
figures.
Usage: fidelity_bench.py [--build DIR] [--rounds N] [--scale X] [--engine E] [--only a,b]
"""
import argparse
import os
import re
import shutil
import statistics
import sys
import tempfile
import types

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
import flammetest  # noqa: E402

STATS = re.compile(r"handler cost: median (\d+) ns, p99 (\d+) ns over (\d+) samples")

GOAL_99 = 1.0     # % wall-clock overhead at 99 Hz
GOAL_999 = 3.0    # % at 999 Hz
GOAL_HANDLER_NS = 1500  # median handler cost at depth ~100
# The agent's cost histogram (agent/handler.c) has 20 ns buckets and puts
# everything slower than ~20.5 us in its last bucket: shown as ">=".
HIST_CAP_NS = 20470

# (row label, program, extra args after the scale, FLAMME_DEPTH)
PROGRAMS = [
    ("depth100", "deep", ["90"], None),
    ("deep20k", "deep", [], 25000),
    ("sched", "sched", [], None),
    ("steal", "steal", [], None),
    ("churn", "churn", [], None),
    ("threads", "threads", [], None),
    ("cstub", "cstub", [], None),
    ("joinalloc", "joinalloc", [], None),
    ("rate", "rate", [], None),
    ("split", "split", [], None),
]


def one_run(build, exe, args, hz, depth, engine, wd):
    """Runs the program once, plain (hz None) or with the agent at hz.
    Returns (Run, profile path or None)."""
    extra, prof = {}, None
    if hz:
        prof = os.path.join(wd, "p%d.flm" % hz)
        if os.path.exists(prof):
            os.unlink(prof)
        extra = {"LD_PRELOAD": build.lib, "FLAMME_HZ": str(hz), "FLAMME_OUTPUT": prof,
                 "FLAMME_QUIET": "1", "FLAMME_STATS": "1", "FLAMME_ENGINE": engine}
        if depth:
            extra["FLAMME_DEPTH"] = str(depth)
    p, wall, cpu = flammetest.run_timed([exe] + args, env=flammetest.clean_env(extra), cwd=wd)
    if p.returncode != 0:
        raise RuntimeError("%s exited with %d: %s" % (exe, p.returncode, p.stderr[-500:]))
    return types.SimpleNamespace(err=p.stderr, wall=wall, cpu=cpu), prof


def report_figures(build, prof):
    """From `flamme report`: dict with records, weight, lost, complete (%)."""
    text = flammetest.report(build, prof)
    fig = {}
    m = re.search(r"samples: (\d+) records, weight (\d+); lost: (\d+)", text)
    if m:
        fig.update(records=int(m.group(1)), weight=int(m.group(2)), lost=int(m.group(3)))
    m = re.search(r"complete stacks: ([0-9.]+)%", text)
    if m:
        fig["complete"] = float(m.group(1))
    return fig


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fmt(x, spec, none="-"):
    return none if x is None else format(x, spec)


def fmt_ns(x):
    if x is None:
        return "-"
    return ">=%d" % x if x >= HIST_CAP_NS else "%d" % x


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--scale", default="0.6", help="work scale passed to each program")
    ap.add_argument("--engine", default="auto")
    ap.add_argument("--only", default="")
    a = ap.parse_args()
    only = set(filter(None, a.only.split(",")))
    progs = [p for p in PROGRAMS if not only or p[0] in only]
    work = tempfile.mkdtemp(prefix="flamme-fidbench-")
    build = flammetest.Build(a.build)
    print("fidelity bench: %d rounds of [plain, 99 Hz, 999 Hz] per program, scale %s, engine %s, "
          "%d CPUs, load average %.2f at start" % (a.rounds, a.scale, a.engine, os.cpu_count(),
                                                    os.getloadavg()[0]))
    data = {p[0]: {"plain": [], 99: [], 999: [], "cpu": {"plain": [], 99: [], 999: []}, "complete": [], "hz": [], "lost": [],
                   "p50": [], "p99": [], "engine": set()} for p in progs}
    variants = ["plain", 99, 999]
    for rnd in range(a.rounds):
        order = variants[rnd % 3:] + variants[:rnd % 3]
        for label, prog, extra_args, depth in progs:
            wd = os.path.join(work, label)
            os.makedirs(wd, exist_ok=True)
            d = data[label]
            for v in order:
                hz = None if v == "plain" else v
                exe = build.path("fidelity", prog, prog + ".exe")
                r, prof = one_run(build, exe, [a.scale] + extra_args, hz, depth, a.engine, wd)
                d[v].append(r.wall)
                d["cpu"][v].append(r.cpu)
                if v != 999:
                    continue
                fig = report_figures(build, prof)
                d["complete"].append(fig.get("complete"))
                d["lost"].append(fig.get("lost"))
                if fig.get("weight") is not None and r.cpu > 0:
                    d["hz"].append(fig["weight"] / r.cpu)
                st = STATS.search(r.err)
                if st:
                    d["p50"].append(int(st.group(1)))
                    d["p99"].append(int(st.group(2)))
        print("  round %d/%d done (load average %.2f)" % (rnd + 1, a.rounds, os.getloadavg()[0]))
        sys.stdout.flush()

    def overhead(d, hz):
        """Median over rounds of the paired ratio, as a percentage."""
        ratios = [w / p for w, p in zip(d[hz], d["plain"]) if p > 0]
        return 100.0 * (med(ratios) - 1.0) if ratios else None

    print()
    hdr = ("program", "plain s", "+% 99Hz", "+% 999Hz", "cpu+% 99", "cpu+% 999", "complete%",
           "deliv Hz", "lost", "handler p50 ns", "p99 ns")
    line = "%-10s %8s %8s %9s %9s %9s %9s %9s %6s %14s %8s"
    print(line % hdr)
    rows = {}
    for label, *_ in progs:
        d = data[label]
        row = (med(d["plain"]), overhead(d, 99), overhead(d, 999), med(d["complete"]),
               med(d["hz"]), med(d["lost"]), med(d["p50"]), med(d["p99"]),
               overhead(d["cpu"], 99), overhead(d["cpu"], 999))
        rows[label] = row
        print(line % (
            label, fmt(row[0], ".3f"), fmt(row[1], "+.2f"), fmt(row[2], "+.2f"), fmt(row[8], "+.2f"),
            fmt(row[9], "+.2f"), fmt(row[3], ".1f"), fmt(row[4], ".0f"), fmt(row[5], ".0f"),
            fmt_ns(row[6]), fmt_ns(row[7])))
    print()
    ov99 = [r[1] for r in rows.values() if r[1] is not None]
    ov999 = [r[2] for r in rows.values() if r[2] is not None]
    if ov99:
        print("goal: overhead <= %.0f%% at 99 Hz:   median over programs %+.2f%%, worst %+.2f%% (%s)"
              % (GOAL_99, med(ov99), max(ov99), "met" if max(ov99) <= GOAL_99 else "not met"))
    if ov999:
        print("goal: overhead <= %.0f%% at 999 Hz:  median over programs %+.2f%%, worst %+.2f%% (%s)"
              % (GOAL_999, med(ov999), max(ov999), "met" if max(ov999) <= GOAL_999 else "not met"))
    if "depth100" in rows and rows["depth100"][6] is not None:
        h = rows["depth100"][6]
        print("goal: handler <= %.1f us median at depth 100: depth100 %.2f us (%s)"
              % (GOAL_HANDLER_NS / 1000.0, h / 1000.0, "met" if h <= GOAL_HANDLER_NS else "not met"))
    print("cpu+%: the same ratio on user+sys CPU seconds (agent's writer thread included); "
          "less sensitive to other load than wall time")
    print("note: wall-clock figures from a shared machine are noisy (load average %.2f at end); "
          "medians of paired ratios over %d rounds" % (os.getloadavg()[0], a.rounds))
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
