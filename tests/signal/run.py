#!/usr/bin/env python3
"""tests/signal/run.py — the agent shares signals, timers and blocking calls
with the program without harming it or lying about it.

Owns: the checks of agent/engine.c's clocks and signal choice, agent/blocking.c
and the handler's reads. Called by `make signal-test` (mk/signal.mk) after
tests/signal/*.ml were built with both compilers into
build/signal/{fp,nofp}/<name>/<name>.exe. Each test runs a program the way a
user would (linked library, or the agent preloaded) and checks its output and
exit status, then reads its profile with `flamme collapse --threads`;
tolerances are stated next to each assertion. Ends with
`signal: N passed, N failed`; exits 1 on a failure.
Usage: run.py [--build DIR] [--only NAME,NAME] [--compilers fp,nofp] [--keep]
"""
import argparse
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e"))
from run import Failure, check, collapse, describe, run, total  # noqa: E402


class Ctx:
    def __init__(self, build, work, compiler):
        self.build = build
        self.flamme = os.path.abspath(os.path.join(build, "flamme"))
        self.lib = os.path.abspath(os.path.join(build, "libflamme.so"))
        self.work = work
        self.compiler = compiler

    def exe(self, name):
        path = os.path.abspath(os.path.join(self.build, "signal", self.compiler, name, name + ".exe"))
        check(os.access(path, os.X_OK), "program not built: %s (run `make signal-test`)" % path)
        return path

    def path(self, name):
        return os.path.join(self.work, name)


def has(fn):
    """Predicate: some frame is the OCaml function fn (e.g. Armclock.reader)."""
    return lambda f: any(x == fn or x.startswith(fn + "_") for x in f[1:])


# --------------------------------------------------------------------- tests

def test_armclock(ctx):
    """Threads that exist before Flamme.start are sampled on their own CPU
    clock (the timer engine at the default 99 Hz, armed from the main
    thread): the domain that burns most of the CPU gets most samples, the
    systhread blocked in read() none."""
    prof = ctx.path("armclock.flm")
    rc, so, se = run([ctx.exe("armclock"), prof, "99"], env={"FLAMME_ENGINE": "auto"})
    check(rc == 0 and "armclock: done" in so, "armclock: exit %d, stderr:\n%s" % (rc, se))
    st = collapse(ctx, prof)
    n = total(st)
    dom = total(st, has("Armclock.domain_work"))
    main = total(st, has("Armclock.main_work"))
    reader = total(st, has("Armclock.reader"))
    print("  armclock: %d samples: domain_work %d, main_work %d, reader (blocked) %d"
          % (n, dom, main, reader))
    # The domain burns ~1.2 s of CPU, main ~0.15-0.3 s: >= 2x leaves room for
    # scheduling while failing when every thread ticks on main's clock (1x).
    check(dom >= 50, "armclock: only %d samples of the busy domain\n%s" % (dom, describe(st)))
    check(dom >= 2 * main, "armclock: domain_work %d samples vs main_work %d: not on its own clock\n%s"
          % (dom, main, describe(st)))
    # A thread blocked in read() uses no CPU: at most 2% (a sample in flight).
    check(reader <= 0.02 * n, "armclock: the thread blocked in read() has %d of %d samples\n%s"
          % (reader, n, describe(st)))


TESTS = [("armclock", test_armclock)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--only", default="", help="comma-separated test names")
    ap.add_argument("--compilers", default="fp,nofp")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    a = ap.parse_args()
    only = set(filter(None, a.only.split(",")))
    work = tempfile.mkdtemp(prefix="flamme-signal.")
    passed = failed = 0
    for comp in filter(None, a.compilers.split(",")):
        ctx = Ctx(a.build, os.path.join(work, comp), comp)
        os.makedirs(ctx.work)
        for name, fn in TESTS:
            if only and name not in only:
                continue
            print("== %s [%s]" % (name, comp), flush=True)
            try:
                fn(ctx)
                passed += 1
                print("PASS %s [%s]" % (name, comp), flush=True)
            except Failure as e:
                failed += 1
                print("FAIL %s [%s]: %s" % (name, comp, e), flush=True)
    if a.keep or failed:
        print("signal: profiles kept in %s" % work)
    else:
        shutil.rmtree(work, ignore_errors=True)
    print("signal: %d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
