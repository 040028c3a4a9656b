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
import re
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e"))
from run import LABEL_DOMAIN, LABEL_SYSTHREAD, Failure, check, collapse, describe, run, total  # noqa: E402


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
    # By thread (the stacks of a program linking the library and built
    # without frame pointers break above Work.burn: a separate limit).
    dom = total(st, lambda f: LABEL_DOMAIN.match(f[0]) and "Work.burn" in f)
    main = total(st, lambda f: f[0] == "main" and "Work.burn" in f)
    reader = total(st, lambda f: LABEL_SYSTHREAD.match(f[0]) is not None)
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


def preload(ctx, name, args, out, env=None):
    """Runs program `name` with the agent preloaded writing `out`; returns
    (rc, stdout, stderr)."""
    e = {"LD_PRELOAD": ctx.lib, "FLAMME_OUTPUT": out}
    e.update(env or {})
    return run([ctx.exe(name)] + list(args), env=e)


def engines(ctx):
    """(engine, rate) pairs to run with: the default (timer at 99 Hz) and
    perf at 499 Hz where the kernel allows it."""
    out = [("auto", 99)]
    rc, _, se = preload(ctx, "ownprof", ["0.05"], ctx.path("probe.flm"),
                        {"FLAMME_ENGINE": "perf", "FLAMME_HZ": "499"})
    if rc == 0 and "using the timer engine" not in se:
        out.append(("perf", 499))
    return out


def test_ownprof(ctx):
    """The program owns SIGPROF and ITIMER_PROF (handler installed after the
    agent started): it gets exactly its own ticks, and flamme still gets its
    samples."""
    for engine, hz in engines(ctx):
        prof = ctx.path("ownprof-%s.flm" % engine)
        rc, so, se = preload(ctx, "ownprof", ["0.6"], prof,
                             {"FLAMME_ENGINE": engine, "FLAMME_HZ": str(hz)})
        m = re.search(r"ownprof: ticks=(\d+) cpu=([0-9.]+)", so)
        check(rc == 0 and m, "ownprof [%s]: exit %d, stdout %r, stderr:\n%s" % (engine, rc, so, se))
        ticks, cpu = int(m.group(1)), float(m.group(2))
        st = collapse(ctx, prof)
        burn = total(st, has("Ownprof.burn"))
        print("  ownprof [%s %d Hz]: program ticks %d for %.2f s CPU (%.0f expected), flamme %d samples "
              "of Ownprof.burn (%.0f expected)" % (engine, hz, ticks, cpu, cpu / 0.01, burn, cpu * hz))
        # ITIMER_PROF at 100 Hz: cpu/0.01 ticks. Flamme's signals reaching
        # the program's handler would add another 99 (or 499) per CPU second
        # (+50% allowed for tick rounding); an agent taking ITIMER_PROF over
        # would leave it none (seen as low as 47% of the count on a machine
        # loaded 10 times over: OCaml merges ticks its handler has not run
        # for yet).
        check(0.25 * cpu / 0.01 <= ticks <= 1.5 * cpu / 0.01,
              "ownprof [%s]: the program's handler counted %d ticks for %.2f s of CPU at 100 Hz"
              % (engine, ticks, cpu))
        check(burn >= 0.5 * cpu * hz, "ownprof [%s]: flamme got %d samples of Ownprof.burn for %.2f s "
              "of CPU at %d Hz\n%s" % (engine, burn, cpu, hz, describe(st)))
        check("replaced flamme's handler" not in se, "ownprof [%s]: %s" % (engine, se.strip()))


SLEEP_CASES = ["usleep", "sleep", "pause", "sigsuspend", "sigtimedwait", "epoll_pwait2",
               "rcvtimeo_read", "rcvtimeo_recv"]


def test_sleeps(ctx):
    """Wall mode samples every thread, blocked or not: C code's blocking
    calls that EINTR would cut short must still wait their full time (each
    case checks its return value and that >= 0.19 s of its 0.2 s (1 s for
    sleep) passed), and their waiting time is profiled at the C function
    that waits."""
    prof = ctx.path("sleeps.flm")
    rc, so, se = preload(ctx, "sleeps", SLEEP_CASES, prof, {"FLAMME_MODE": "wall", "FLAMME_HZ": "999"})
    check(rc == 0, "sleeps: exit %d, stderr:\n%s" % (rc, se))
    got = dict(l.split(": ", 1) for l in so.splitlines() if ": " in l)
    st = collapse(ctx, prof)
    bad = []
    for c in SLEEP_CASES:
        w = total(st, lambda f, c=c: "case_" + c in f)
        print("  sleeps: %-14s %s, %d samples (wall weight) at case_%s" % (c, got.get(c), w, c))
        if got.get(c) != "ok":
            bad.append("%s: %s" % (c, got.get(c)))
        # 0.2 s waited at up to 250 signals/s (timer ticks): ~50; at least
        # 10 shows the wait is attributed to the waiting function.
        elif w < 10:
            bad.append("%s: only %d samples of wall time at case_%s" % (c, w, c))
    check(not bad, "sleeps: " + "; ".join(bad) + "\n" + describe(st, 8))


def test_cancel(ctx):
    """Wall mode: threads cancelled inside poll, their slots then reused by
    threads that get sampled, leave no dangling snapshot (the program ran
    into a freed ring before); a poll made by a SIGUSR1 handler while the
    thread waits in another poll keeps the outer call's snapshot, so the
    outer wait is profiled at its caller and flamme's own code never shows."""
    prof = ctx.path("cancel.flm")
    rc, so, se = preload(ctx, "cancel", ["12", "1.0"], prof, {"FLAMME_MODE": "wall", "FLAMME_HZ": "999"})
    check(rc == 0 and "cancel: rounds done" in so and "nested: woken: true" in so,
          "cancel: exit status %d, stdout %r, stderr:\n%s" % (rc, so, se))
    st = collapse(ctx, prof)
    outer = total(st, lambda f: "nested_outer" in f)
    ours = total(st, lambda f: "nested_outer" in f and any("sigmask" in x for x in f))
    burn = total(st, lambda f: "burner" in f)
    print("  cancel: %s; burner threads %d samples; nested_outer %d samples, %d of them in "
          "flamme's signal-mask code" % (so.strip().replace("\n", ", "), burn, outer, ours))
    check(burn > 0, "cancel: the threads that reused the slots were not sampled\n%s" % describe(st))
    # A C thread's samples in a system call are in its own start routine (or
    # in its registration at start and exit); a dangling snapshot shows up
    # as a blocked stack that is not.
    own = ("burner", "kicker", "waiter")
    stale = [(f, c) for f, c in st if f[0] != "main" and f[-1] == "[blocked]" and
             not any(x in own or x.startswith("flamme_thread_") for x in f)]
    check(not stale, "cancel: %d samples of the C threads are not theirs (a cancelled thread's "
          "snapshot committed through its reused slot):\n%s" % (total(stale), describe(stale)))
    check(outer >= 100, "cancel: only %d samples of nested_outer's 1 s wait\n%s" % (outer, describe(st)))
    # A signal arriving just as a call ends is a real (rare) sample there.
    check(ours <= 0.05 * outer, "cancel: %d of %d samples of the outer wait show flamme's own "
          "signal-mask code: the nested call dropped the outer snapshot\n%s" % (ours, outer, describe(st)))


def test_seccomp(ctx):
    """A seccomp filter refuses process_vm_readv (EPERM), installed before
    the agent starts ("early": the program re-execs itself under it) or while
    it profiles ("late"): the walker's checked reads must stay checked (they
    read arbitrary memory before, and a garbage frame pointer in C code
    killed the program with SIGSEGV), and OCaml stacks still reach main."""
    for mode in ("early", "late"):
        d = ctx.path("seccomp-" + mode)
        os.makedirs(d)
        rc, so, se = preload(ctx, "seccomp", [mode], os.path.join(d, "p.%p.flm"), {"FLAMME_HZ": "499"})
        check(rc == 0 and "seccomp: done" in so,
              "seccomp [%s]: exit status %d (-11: SIGSEGV), stdout %r, stderr:\n%s" % (mode, rc, so, se))
        profs = sorted(os.path.join(d, f) for f in os.listdir(d))
        st = max((collapse(ctx, p) for p in profs), key=total)
        ml = total(st, has("Seccomp.ocaml_work"))
        ml_main = total(st, lambda f: has("Seccomp.ocaml_work")(f) and "main" in f)
        spin = total(st, lambda f: "garbage_rbp_spin" in f)
        print("  seccomp [%s]: Seccomp.ocaml_work %d samples (%d reach main), garbage_rbp_spin %d"
              % (mode, ml, ml_main, spin))
        check(ml >= 50 and spin >= 20, "seccomp [%s]: too few samples\n%s" % (mode, describe(st)))
        # The filter leaves OCaml frames readable directly; 90% leaves room
        # for the samples taken while the late filter goes in.
        check(ml_main >= 0.9 * ml, "seccomp [%s]: only %d of %d OCaml samples reach main\n%s"
              % (mode, ml_main, ml, describe(st)))


def test_masked(ctx):
    """CPU time spent with the sample signal blocked still counts: the
    periods are delivered late, at the unblocking, and weigh what they
    stood for (perf: the overflows recorded in the event's buffer, up to 64;
    timer: overruns). Before, the perf engine's coalesced SIGPROF counted 1.
    perf: 0.4 s at 499 Hz is ~200 periods, past the 64 overflows the event
    may hold back (agent/engine.c: PERF_MAX_UNCONSUMED); the rest is made
    up from the thread's CPU clock. The burn is the program's first work,
    often before its first overflow, when they come every random part of a
    period (a blocked burn then weighed as little as 19 of 50 in CI)."""
    for engine, hz in engines(ctx):
        secs = 0.4
        prof = ctx.path("masked-%s.flm" % engine)
        rc, so, se = preload(ctx, "masked", [str(secs)], prof, {"FLAMME_ENGINE": engine, "FLAMME_HZ": str(hz)})
        check(rc == 0 and "masked: done" in so, "masked [%s]: exit %d, stderr:\n%s" % (engine, rc, se))
        st = collapse(ctx, prof)
        masked = total(st, lambda f: "masked_burn" in f)
        opened = total(st, lambda f: "open_burn" in f)
        print("  masked [%s %d Hz]: %.1f s CPU blocked: weight %d; %.1f s open: weight %d (%.0f expected each)"
              % (engine, hz, secs, masked, secs, opened, secs * hz))
        check(opened >= 0.5 * secs * hz, "masked [%s]: only %d for the open burn\n%s" % (engine, opened, describe(st)))
        # The blocked burn weighs the CPU time it stood for (not 1), within
        # the same margin as the open one. Not compared with the open burn:
        # on a loaded machine the perf engine's task-clock loses periods in
        # both (seen: open 28-35 of 50 at load 11), which a ratio would
        # turn into a spurious failure.
        check(0.5 * secs * hz <= masked <= 1.6 * secs * hz,
              "masked [%s]: the blocked burn weighs %d for %.0f expected (the open one %d)\n%s"
              % (engine, masked, secs * hz, opened, describe(st)))


def test_short(ctx):
    """Threads shorter than one sampling period get their share: 300 threads
    of 2 ms CPU each at 99 Hz (10 ms periods) are 0.6 s of CPU, ~60
    samples (fewer in practice: the perf engine drops overflows that land
    in kernel code, and thread start and exit are mostly kernel time). The perf engine's first overflow comes after a random part of
    a period; it came after a full one, so such threads (and the first
    period of every thread) were never sampled. (The timer engine's first
    expiry is random too, but POSIX CPU timers are checked on the 4 ms
    kernel tick, which a 2 ms thread mostly escapes: a documented limit.)"""
    for engine, _ in engines(ctx):
        if engine != "perf":
            continue
        prof = ctx.path("short-%s.flm" % engine)
        rc, so, se = preload(ctx, "short", ["300", "0.002"], prof, {"FLAMME_ENGINE": engine, "FLAMME_HZ": "99"})
        check(rc == 0 and "short: done" in so, "short [%s]: exit %d, stderr:\n%s" % (engine, rc, se))
        rc, out, err = run([ctx.flamme, "collapse", prof])
        check(rc == 0, "short [%s]: collapse failed: %s" % (engine, err))
        w = sum(int(l.rpartition(" ")[2]) for l in out.splitlines() if "short_burn" in l)
        print("  short [%s 99 Hz]: 300 threads x 2 ms CPU: %d samples in short_burn (<= 60 expected)" % (engine, w))
        # Measured 33-44 here; 5 is far below chance, and a full first
        # period gives 0.
        check(w >= 5, "short [%s]: only %d samples for 0.6 s of CPU in short threads" % (engine, w))


TESTS = [("armclock", test_armclock), ("ownprof", test_ownprof), ("sleeps", test_sleeps),
         ("cancel", test_cancel), ("seccomp", test_seccomp), ("masked", test_masked),
         ("short", test_short)]


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
