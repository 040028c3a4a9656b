#!/usr/bin/env python3
"""bench/heapfill_bench.py — heap-fill sampling (`flamme record --alloc` of
an unmodified binary) against Gc.Memprof (the same program linking the
flamme library), `make bench-heapfill`. Prints tables; asserts nothing.

Each program is built with both OCaml 5.3 compilers twice: linking the
flamme library (the ground truth: Gc.Memprof at 1e-3 per word, ~0.3 pp of
sampling error on these programs), and with the stand-in Flamme module of
tests/alloc/unlinked/ (no flamme code: the agent comes from LD_PRELOAD and
samples by heap fill). For each, the byte share of every leaf function
with 2% or more under either method, and the largest difference over all
leaves. Programs: tests/alloc/split.ml (a known 50/30/20 split, two
domains), bench/alloc_heavy.ml (Map building), bench/heapfill_logproc.ml
(Printf, Hashtbl, Map, Buffer, List.sort; one and two domains; the
two-domain run repeated, its samples depend on scheduling) and
bench/heapfill_periodic.ml (the aliasing worst case). Then the cost: CPU
time of alloc_heavy alone, under CPU profiling, and with --alloc.
Usage: heapfill_bench.py [--build DIR] [--cache DIR] [--rounds N]
"""
import argparse
import collections
import os
import resource
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "tests"))
import flammetest  # noqa: E402

RATE = "1e-3"
# (label, source, arguments after OUT RATE, repeats)
PROGRAMS = [
    ("split (2 domains)", "tests/alloc/split.ml", [], 1),
    ("alloc_heavy", "bench/alloc_heavy.ml", [], 1),
    ("logproc, 1 domain", "bench/heapfill_logproc.ml", ["1"], 1),
    ("logproc, 2 domains", "bench/heapfill_logproc.ml", ["2"], 3),
    ("periodic", "bench/heapfill_periodic.ml", [], 1),
]


def leaves(build, prof):
    """{leaf function: byte share in %} of PROF's allocations, and the MB."""
    st = flammetest.collapse(build, prof, "--alloc")
    tot = sum(w for _, w in st)
    c = collections.Counter()
    for f, w in st:
        c[f[-1]] += w
    return {k: 100.0 * v / tot for k, v in c.items()}, tot / 1e6


def compare(build, comp, label, lib_exe, bare_exe, args, work):
    env = flammetest.clean_env()
    truth = os.path.join(work, "mp.flm")
    hf = os.path.join(work, "hf.flm")
    for p in (truth, hf):
        if os.path.exists(p):
            os.unlink(p)
    subprocess.run([lib_exe, truth, RATE] + args, env=env, check=True, stdout=subprocess.DEVNULL)
    r = flammetest.record(build, [bare_exe, "unused", RATE] + args, hf, args=["--alloc"])
    if r.returncode != 0:
        raise SystemExit("record --alloc %s failed: %s" % (bare_exe, r.stderr))
    t, tmb = leaves(build, truth)
    h, hmb = leaves(build, hf)
    worst = max(abs(h.get(k, 0) - t.get(k, 0)) for k in set(t) | set(h))
    print("%s, OCaml 5.3.0 %s: %.0f MB (Memprof estimate), %.0f MB (heap fill); largest "
          "difference %.1f pp" % (label, comp, tmb, hmb, worst))
    for k in sorted(set(t) | set(h), key=lambda k: -t.get(k, 0)):
        if max(t.get(k, 0), h.get(k, 0)) >= 2.0:
            print("  %-40s %8.1f%% %8.1f%% %+7.1f" % (k[:40], t.get(k, 0), h.get(k, 0),
                                                   h.get(k, 0) - t.get(k, 0)))
    return worst


def cpu_run(cmd, env):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--cache", default=os.path.join(os.path.expanduser("~"), ".cache", "flamme"))
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    build = flammetest.Build(a.build)
    comps = [c for c in flammetest.find_compilers(a.cache) if c.name in ("5.3.0-fp", "5.3.0-nofp")]
    if len(comps) != 2:
        raise SystemExit("heapfill_bench: OCaml 5.3.0 fp and no-fp not found in %s (make deps)" % a.cache)
    standin = [os.path.join(REPO, "tests", "alloc", "unlinked", "flamme.ml")]
    work = tempfile.mkdtemp(prefix="flamme-heapfill-bench-")
    print("byte share by leaf function: Gc.Memprof (library, rate %s) vs heap fill (LD_PRELOAD)" % RATE)
    print("  %-40s %9s %9s %7s" % ("function", "Memprof", "heap fill", "pp"))
    summary = []
    exes = {}
    for comp in comps:
        for label, src, args, repeats in PROGRAMS:
            name = os.path.splitext(os.path.basename(src))[0]
            out = build.path("heapfill", comp.name)
            _, largs, deps = flammetest.flamme_library(build, comp)
            lib_exe = flammetest.build_ocaml(comp, [os.path.join(REPO, src)], os.path.join(out, "lib"),
                                             flags=["-g"] + largs, deps=deps)
            bare_exe = flammetest.build_ocaml(comp, standin + [os.path.join(REPO, src)],
                                              os.path.join(out, "unlinked"), flags=["-g"])
            exes[(comp.name, name)] = bare_exe
            for _ in range(repeats):
                summary.append((label, comp.name, compare(build, "fp" if comp.fp else "no-fp", label,
                                                          lib_exe, bare_exe, args, work)))
    print("\nlargest difference per run (pp):")
    for label, comp, worst in summary:
        print("  %-22s %-11s %5.1f" % (label, comp, worst))
    # Cost, interleaved rounds, median CPU time.
    exe = exes[("5.3.0-nofp", "alloc_heavy")]
    env = flammetest.clean_env()
    out = os.path.join(work, "c.flm")
    variants = [("alloc_heavy alone", [exe, out, RATE]),
                ("CPU profiling", [build.flamme, "record", "-o", out, "--", exe, out, RATE]),
                ("CPU + --alloc (heap fill)", [build.flamme, "record", "--alloc", "-o", out, "--",
                                               exe, out, RATE])]
    times = {v: [] for v, _ in variants}
    for _ in range(a.rounds):
        for v, cmd in variants:
            if os.path.exists(out):
                os.unlink(out)
            times[v].append(cpu_run(cmd, env))
    base = statistics.median(times[variants[0][0]])
    print("\ncost (OCaml 5.3.0 no-fp, median CPU seconds of %d interleaved rounds):" % a.rounds)
    for v, _ in variants:
        m = statistics.median(times[v])
        print("  %-28s %7.3f s  %+6.1f%%" % (v, m, 100 * (m - base) / base))


if __name__ == "__main__":
    main()
