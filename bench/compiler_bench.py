#!/usr/bin/env python3
"""bench/compiler_bench.py — flamme on a real program with deep stacks: the
OCaml compiler itself (`make bench-compiler`, part of `make bench`). Prints a
table; asserts nothing.

ocamlopt.opt of each OCaml 5.3.0 that make deps built (with and without
frame pointers) compiles a generated file: N functions of pattern matching
over a variant, each with a closure, and a main that calls every seventh.
The type checker and the pattern-match compiler recurse over it: stacks of
~1,000 frames on average, up to ~16,000. Recorded with `flamme record -F HZ`
ROUNDS times at the default CPU budget and once walked whole
(FLAMME_BUDGET=100), it prints per compiler: samples, the share of whole
stacks (root-most frame a thread root), the samples the budget shortened to
their leaf-most frames, the handler's and the writer's CPU and the agent's
share of the program's (with its start-up), also beside what it spent once
(-setup: the unwind tables at start-up, the writer's reads of symbol
tables and the executable's line table; all from `flamme report`), and the
compiler's CPU alone and under flamme (task clock of the process tree,
median of the rounds). Then what a short compile (one process of a build)
pays once, with the unwind tables, symbols and line tables built, and kept
and read back between processes (writer/cfi_cache.h).
Usage: compiler_bench.py [--build DIR] [--cache DIR] [--rounds N] [--hz N] [--functions N]
"""
import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "..", "tests"), os.path.join(HERE, "..", "tests", "unwind")]
import flammetest  # noqa: E402
import unwind_stacks as us  # noqa: E402


def source(n):
    """The generated compilation unit: n functions, deterministic."""
    out = ["type t = A of int | B of string | C of t * t | D of float list\n"]
    for i in range(n):
        out.append(
            "let f%d x y = match x with\n"
            "  | A n when n > %d -> C (A (n - %d), B (string_of_int (y + %d)))\n"
            "  | A n -> A (n * %d + y)\n"
            "  | B s -> B (s ^ \"%d\" ^ String.make (y mod 5) 'x')\n"
            "  | C (a, b) -> C (b, a)\n"
            "  | D l -> D (List.map (fun v -> v *. %d.5 +. float y) l)\n"
            "let g%d = let r = ref 0 in fun z -> r := !r + z + %d; (f%d (A !r) z, !r)\n"
            % (i, i, i, i, i % 7 + 1, i, i, i, i, i))
    out.append("let () = let acc = ref 0 in\n")
    for i in range(0, n, 7):
        out.append("  acc := !acc + snd (g%d %d);\n" % (i, i))
    out.append("  print_int !acc\n")
    return "".join(out)


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def timed(cmd, env, cwd):
    """Runs cmd; returns (CompletedProcess, CPU seconds of its process tree)."""
    before = children_cpu()
    p = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=600)
    return p, children_cpu() - before


def figure(rep, pattern):
    m = re.search(pattern, rep)
    return float(m.group(1)) if m else 0.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--cache", default=flammetest.CACHE, help="where make deps put the OCaml compilers")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--hz", type=int, default=999)
    ap.add_argument("--functions", type=int, default=1500)
    a = ap.parse_args()
    build = flammetest.Build(a.build)
    compilers = {c.name: c for c in flammetest.find_compilers(a.cache)}
    print("flamme on ocamlopt.opt compiling a generated %d-function file, %d Hz, %d rounds "
          "(whole = root-most frame is a thread root)" % (a.functions, a.hz, a.rounds))
    print("%-6s %-8s %8s %8s %10s %10s %9s %8s %8s %9s %9s %7s" % (
        "build", "budget", "samples", "whole %", "shortened", "handler s", "writer s", "agent %",
        "-setup %", "cpu alone", "cpu flame", "cpu x"))
    with tempfile.TemporaryDirectory(prefix="flamme-compiler-bench.") as wd:
        with open(os.path.join(wd, "big.ml"), "w") as f:
            f.write(source(a.functions))
        for v in ("fp", "nofp"):
            c = compilers.get("5.3.0-" + v)
            if c is None:
                print("%-6s no OCaml 5.3.0-%s compiler (make deps)" % (v, v))
                continue
            opt = os.path.join(os.path.dirname(c.ocamlopt), "ocamlopt.opt")
            cmd = [opt, "-c", "big.ml"]
            env = flammetest.clean_env()
            alone = []
            for _ in range(a.rounds):
                p, cpu = timed(cmd, env, wd)
                if p.returncode != 0:
                    print("%-6s ocamlopt.opt failed: %s" % (v, p.stderr[-300:]))
                    break
                alone.append(cpu)
            if len(alone) < a.rounds:
                continue
            for budget, rounds in (("default", a.rounds), ("100%", 1)):
                rows = []
                for _ in range(rounds):
                    prof = os.path.join(wd, "p.flm")
                    rcmd = [build.flamme, "record", "-F", str(a.hz), "-o", prof, "--"] + cmd
                    renv = dict(env)
                    if budget != "default":
                        renv["FLAMME_BUDGET"] = "100"
                    p, cpu = timed(rcmd, renv, wd)
                    if p.returncode != 0:
                        print("%-6s flamme record failed: %s" % (v, p.stderr[-300:]))
                        break
                    st = us.stacks(build, prof)
                    pc, tot = us.share(st)
                    rep = flammetest.report(build, prof)
                    rows.append((tot, pc, figure(rep, r"(\d+) samples \(weight \d+\) were shortened"),
                                 figure(rep, r"signal handler ([\d.]+) s of CPU"), cpu,
                                 figure(rep, r"writer ([\d.]+) s:"),
                                 figure(rep, r"writer [\d.]+ s: ([\d.]+)% of the program"),
                                 figure(rep, r"\(([\d.]+)% beside ")))
                if not rows:
                    continue
                med = lambda i: statistics.median(r[i] for r in rows)  # noqa: E731
                print("%-6s %-8s %8d %8.1f %10d %10.3f %9.3f %8.1f %8.1f %9.2f %9.2f %7.3f" % (
                    v, budget, med(0), med(1), med(2), med(3), med(5), med(6), med(7),
                    statistics.median(alone), med(4), med(4) / statistics.median(alone)))
    short_processes(build, compilers, a.hz, max(5, a.rounds))


def short_processes(build, compilers, hz, runs):
    """A build under `flamme record` starts the compiler once per file: what
    each such process pays once, with the unwind tables, symbols and line
    tables (index and rows) kept between processes (writer/cfi_cache.h) and
    without. A 40-function file; per
    compiler the median of `runs` recordings: the start-up (the unwind
    tables, before main) and all the report counts as spent once, from
    `flamme report`, the CPU of the process tree (`flamme record` and the
    compiler), and what that adds to the
    median CPU of the compile alone (same number of runs, before)."""
    print()
    print("one short compile per process (40 functions, %d Hz, median of %d): what each pays once"
          % (hz, runs))
    print("%-6s %-22s %11s %11s %9s %9s" % ("build", "kept tables", "start-up s", "once s", "cpu s",
                                           "added ms"))
    with tempfile.TemporaryDirectory(prefix="flamme-short-bench.") as wd:
        with open(os.path.join(wd, "small.ml"), "w") as f:
            f.write(source(40))
        for v in ("fp", "nofp"):
            c = compilers.get("5.3.0-" + v)
            if c is None:
                continue
            opt = os.path.join(os.path.dirname(c.ocamlopt), "ocamlopt.opt")
            cache = os.path.join(wd, "rows-" + v)
            alone = [timed([opt, "-c", "small.ml"], flammetest.clean_env(), wd)[1]
                     for _ in range(runs)]
            base = statistics.median(alone)
            print("%-6s %-22s %11s %11s %9.4f" % (v, "alone", "", "", base))
            for label, extra in (("built (FLAMME_CACHE=0)", {"FLAMME_CACHE": "0"}),
                                 ("first run, kept", {"FLAMME_CACHE_DIR": cache}),
                                 ("read back", {"FLAMME_CACHE_DIR": cache})):
                env = flammetest.clean_env()
                env.update(extra)
                rows = []
                for _ in range(1 if label.startswith("first") else runs):
                    prof = os.path.join(wd, "s.flm")
                    p, cpu = timed([build.flamme, "record", "-F", str(hz), "-o", prof, "--",
                                    opt, "-c", "small.ml"], env, wd)
                    if p.returncode != 0:
                        print("%-6s flamme record failed: %s" % (v, p.stderr[-300:]))
                        break
                    rep = flammetest.report(build, prof)
                    rows.append((figure(rep, r"start-up ([\d.]+) s"),
                                 figure(rep, r"([\d.]+) s spent once"), cpu))
                if rows:
                    med = lambda i: statistics.median(r[i] for r in rows)  # noqa: E731
                    print("%-6s %-22s %11.4f %11.4f %9.4f %9.1f" % (v, label, med(0), med(1), med(2),
                                                                   1000 * (med(2) - base)))


if __name__ == "__main__":
    main()
