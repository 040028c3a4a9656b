#!/usr/bin/env python3
"""bench/alloc_bench.py — what allocation profiling costs (`make
bench-alloc`, part of `make bench`). Prints a table; asserts nothing.

Runs build/alloc/fp/alloc_heavy.exe (bench/alloc_heavy.ml, linked with the
flamme library) without profiling, with CPU profiling only, and with CPU and
allocation profiling at the default rate (Flamme.default_alloc_rate, 1e-4),
at 1e-3, and at the default rate with live tracking, in interleaved rounds;
prints the median CPU time (user + system) of each and its cost over the
program alone, and the allocation records of one profiled run.
Usage: alloc_bench.py [--build DIR] [--rounds N]
"""
import argparse
import os
import re
import resource
import statistics
import subprocess
import tempfile


def cpu_run(cmd, env):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--rounds", type=int, default=7)
    a = ap.parse_args()
    exe = os.path.abspath(os.path.join(a.build, "alloc", "fp", "alloc_heavy.exe"))
    flamme = os.path.abspath(os.path.join(a.build, "flamme"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLAMME_") and k != "LD_PRELOAD"}
    work = tempfile.mkdtemp(prefix="flamme-alloc-bench-")
    out = os.path.join(work, "p.flm")
    variants = [("program alone", ["none"]), ("CPU profiling (99 Hz)", ["cpu"]),
                ("+ allocations, rate 1e-4 (default)", ["1e-4"]),
                ("+ allocations, rate 1e-3", ["1e-3"]),
                ("+ allocations 1e-4, live tracking", ["1e-4", "live"])]
    times = {name: [] for name, _ in variants}
    for _ in range(a.rounds):
        for name, args in variants:
            times[name].append(cpu_run([exe, out] + args, env))
    base = statistics.median(times["program alone"])
    cpu = statistics.median(times["CPU profiling (99 Hz)"])
    print("allocation profiling cost on bench/alloc_heavy.ml (fp, median CPU time of %d runs):"
          % a.rounds)
    print("  %-38s %9s %10s %12s" % ("variant", "CPU s", "vs alone", "vs CPU only"))
    for name, _ in variants:
        m = statistics.median(times[name])
        print("  %-38s %9.3f %+9.1f%% %+11.1f%%" % (name, m, 100 * (m / base - 1), 100 * (m / cpu - 1)))
    subprocess.run([exe, out, "1e-4"], env=env, check=True, stdout=subprocess.DEVNULL)
    rep = subprocess.run([flamme, "report", out], env=env, capture_output=True, text=True).stdout
    m = re.search(r"^allocations \(.*$\n^.*$", rep, re.M)
    print("  one run at 1e-4: " + (" / ".join(l.strip() for l in m.group(0).splitlines()) if m else "?"))
    old = os.path.join(os.environ.get("FLAMME_CACHE", os.path.expanduser("~/.cache/flamme")),
                       "ocaml-5.1.0-fp", "bin", "ocamlopt")
    errs = os.path.abspath(os.path.join(a.build, "ocaml-5.1.0", "lib", "errors", "errors.exe"))
    if os.path.exists(errs):
        so = subprocess.run([errs, work], env=env, capture_output=True, text=True).stdout
        line = [l for l in so.splitlines() if l.startswith("alloc-start:")]
        print("  OCaml 5.1: Flamme.start ~alloc " + (line[0].split(": ", 1)[1] if line else "?"))
    else:
        print("  OCaml 5.1: Flamme.start ~alloc raises Flamme.Error \"allocation profiling needs "
              "OCaml 5.3 or later (Gc.Memprof)\" (not measured here: %s not built; make ocaml-old-test)"
              % ("5.1 compiler" if not os.path.exists(old) else errs))
    subprocess.run(["rm", "-rf", work])


if __name__ == "__main__":
    main()
