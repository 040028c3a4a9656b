#!/usr/bin/env python3
"""tests/lib/run.py — tests of the flamme OCaml library (Flamme.start/stop
linked into the program, no LD_PRELOAD).

Owns: the checks of ocaml_stubs/. Called by `make ocaml-lib-test`
(mk/ocaml_stubs.mk) after tests/lib/*.ml were built into
build/lib/<name>/<name>.exe against build/ocaml_stubs/flamme.cmxa. Each test
runs a program the way a user would and reads its profile back with
`flamme collapse --threads` / `flamme report`; tolerances are stated next to
each assertion. Ends with `lib: N passed, N failed`; exits 1 on a failure.
Usage: run.py [--build DIR] [--only NAME,NAME] [--keep] [--compiler OCAMLOPT]
"""
import argparse
import os
import re
import shutil
import stat
import sys
import tempfile

# The e2e driver's helpers: running a program without the caller's FLAMME_*
# and LD_PRELOAD, reading `flamme collapse`, failure reporting.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e"))
from run import (LABEL_DOMAIN, LABEL_SYSTHREAD, Failure, check, collapse,  # noqa: E402
                 describe, run, total)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import ocaml_compiler  # noqa: E402

HZ = 499


class Ctx:
    def __init__(self, build, work):
        self.build = build
        self.flamme = os.path.abspath(os.path.join(build, "flamme"))
        self.lib = os.path.abspath(os.path.join(build, "libflamme.so"))
        self.work = work

    def exe(self, name):
        path = os.path.abspath(os.path.join(self.build, "lib", name, name + ".exe"))
        check(os.access(path, os.X_OK), "program not built: %s (run `make ocaml-lib-test`)" % path)
        return path

    def path(self, name):
        return os.path.join(self.work, name)


def report(ctx, prof):
    """(status line text, sample weight) from `flamme report`."""
    rc, so, se = run([ctx.flamme, "report", prof])
    check(rc == 0, "flamme report %s failed (%d): %s" % (prof, rc, se.strip()))
    st = re.search(r"^\s*status: (.*)$", so, re.M)
    w = re.search(r"samples: \d+ records, weight (\d+)", so)
    check(st and w, "flamme report %s: no status/samples lines in:\n%s" % (prof, so))
    return st.group(1).strip(), int(w.group(1))


def has(fn):
    """Predicate: some frame is the OCaml function fn (e.g. Phases.middle)."""
    return lambda f: any(x == fn or x.startswith(fn + "_") for x in f[1:])


def complete_profile(ctx, prof, what):
    check(os.path.exists(prof), "%s: no profile at %s" % (what, prof))
    status, samples = report(ctx, prof)
    print("  %s: status %s, %d samples" % (what, status, samples))
    check(status == "complete", "%s: profile %s has status %r, want complete" % (what, prof, status))
    check(samples > 0, "%s: profile %s has no samples" % (what, prof))
    return samples


# --------------------------------------------------------------------- tests

def phases_checks(ctx, prof, what):
    """Only the middle phase is in the profile, on the main thread and on the
    domain spawned before Flamme.start. Returns the total sample count."""
    st = collapse(ctx, prof)
    n = total(st)
    mid = total(st, has("Phases.middle"))
    warm = total(st, has("Phases.warmup"))
    cool = total(st, has("Phases.cooldown"))
    main_mid = total(st, lambda f: f[0] == "main" and has("Phases.middle")(f))
    dom_mid = {}
    for f, c in st:
        if LABEL_DOMAIN.match(f[0]) and has("Phases.middle")(f):
            dom_mid[f[0]] = dom_mid.get(f[0], 0) + c
    print("  %s: %d samples; middle %d (main %d, %s), warmup %d, cooldown %d"
          % (what, n, mid, main_mid, dom_mid, warm, cool))
    # Each domain runs middle for ~1.6 s of CPU, ~800 samples at 499 Hz; 200
    # leaves room for a loaded machine while still proving it was sampled.
    check(main_mid >= 200, "%s: only %d samples of Phases.middle on the main thread\n%s"
          % (what, main_mid, describe(st)))
    check(dom_mid and max(dom_mid.values()) >= 200,
          "%s: the domain spawned before Flamme.start has too few Phases.middle samples: %s\n%s"
          % (what, dom_mid, describe(st)))
    # warmup/cooldown run ~0.6 s each outside the profile: at most 1% of the
    # samples may name them (a sample in flight at start/stop).
    check(warm <= 0.01 * n, "%s: warmup has %d of %d samples (want <= 1%%)" % (what, warm, n))
    check(cool <= 0.01 * n, "%s: cooldown has %d of %d samples (want <= 1%%)" % (what, cool, n))
    return n


def test_phases(ctx):
    """Flamme.start/stop around the middle phase only. The output path is a
    link planted to another file: Flamme.start replaces the link with a
    fresh 0600 profile (umask 022) and leaves the link's target alone."""
    prof = ctx.path("phases.flm")
    victim = ctx.path("victim")
    with open(victim, "w") as f:
        f.write("precious\n")
    os.symlink(victim, prof)
    old = os.umask(0o022)
    try:
        rc, so, se = run([ctx.exe("phases"), prof, str(HZ)])
    finally:
        os.umask(old)
    check(rc == 0, "phases: exit status %d, stderr:\n%s" % (rc, se))
    check("phases: profiled_cpu=" in so, "phases: unexpected output %r" % so)
    check(open(victim, "rb").read() == b"precious\n", "phases: Flamme.start wrote through the link at %s" % prof)
    st = os.lstat(prof)
    check(stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600,
          "phases: %s is not a regular 0600 file: %o" % (prof, st.st_mode))
    complete_profile(ctx, prof, "phases")
    phases_checks(ctx, prof, "phases")


def test_raises(ctx):
    """with_profile around a raising function: the exception leaves the
    program with the original backtrace; the profile is complete."""
    prof = ctx.path("raises.flm")
    rc, so, se = run([ctx.exe("raises"), prof, str(HZ)], env={"OCAMLRUNPARAM": "b"})
    print("  raises: exit %d, stderr: %s" % (rc, " | ".join(se.strip().splitlines()[:3])))
    check(rc == 2, "raises: exit status %d, want 2 (uncaught exception); stderr:\n%s" % (rc, se))
    check("unreachable" not in so, "raises: with_profile returned instead of raising")
    check('Fatal error: exception Failure("boom from inside the profile")' in se,
          "raises: the original exception did not propagate; stderr:\n%s" % se)
    # The backtrace must be the one of the raise inside boom, not one that
    # starts in Flamme.with_profile.
    check("Raises.boom" in se, "raises: backtrace lost the raising function Raises.boom:\n%s" % se)
    complete_profile(ctx, prof, "raises")
    st = collapse(ctx, prof)
    check(total(st, has("Raises.boom")) > 0, "raises: no Raises.boom samples\n%s" % describe(st))


def test_errors(ctx):
    """Misuse raises Flamme.Error with a clear message, never crashes."""
    d = ctx.path("errors")
    os.makedirs(d, exist_ok=True)
    rc, so, se = run([ctx.exe("errors"), d])
    check(rc == 0, "errors: exit status %d, stdout:\n%s\nstderr:\n%s" % (rc, so, se))
    lines = dict(l.split(": ", 1) for l in so.splitlines() if ": " in l)
    for k in sorted(lines):
        print("  %s: %s" % (k, lines[k]))

    def raised(case, pattern):
        v = lines.get(case, "")
        check(v.startswith("raised ") and re.search(pattern, v),
              "errors: %s: want Flamme.Error matching %r, got %r" % (case, pattern, v))
        check("Flamme.Error: " in v, "errors: %s: Printexc.to_string does not say Flamme.Error: %r" % (case, v))

    check(lines.get("first-start") == "ok", "errors: first start failed: %r" % lines.get("first-start"))
    raised("second-start", r"already running")
    check(lines.get("running-after-second") == "true", "errors: a failed second start stopped the first")
    check(lines.get("first-stop") == "ok", "errors: stop failed: %r" % lines.get("first-stop"))
    check(not os.path.exists(os.path.join(d, "second.flm")), "errors: the refused second start created its file")
    raised("stop-again", r"not running")
    raised("bad-path", re.escape(os.path.join(d, "no-such-dir/x.flm")))
    check(lines.get("running-after-bad-path") == "false", "errors: running after a failed start")
    raised("bad-hz", r"hz")
    check(lines.get("restart") == "ok" and lines.get("restart-stop") == "ok",
          "errors: start after errors failed: %r %r" % (lines.get("restart"), lines.get("restart-stop")))
    for name in ("first.flm", "restart.flm"):
        status, _ = report(ctx, os.path.join(d, name))
        check(status == "complete", "errors: %s has status %r" % (name, status))
    raised("bad-alloc", r"alloc rate must be in \(0, 1\]")
    check(lines.get("running-after-bad-alloc") == "false", "errors: running after a refused alloc rate")
    if lines.get("ocaml-memprof") == "true":
        check(lines.get("alloc-start") == "ok" and lines.get("alloc-stop") == "ok",
              "errors: allocation profiling: %r %r" % (lines.get("alloc-start"), lines.get("alloc-stop")))
        status, _ = report(ctx, os.path.join(d, "alloc.flm"))
        check(status == "complete", "errors: alloc.flm has status %r" % status)
    else:  # OCaml 5.1/5.2: one line saying what is needed, no profile left running
        raised("alloc-start", r"allocation profiling needs OCaml 5\.3 or later")
        check(lines.get("running-after-alloc") == "false", "errors: running after a refused alloc start")
    # The profile left running at exit is completed by the at_exit handler.
    check(lines.get("at-exit-start") == "ok", "errors: at-exit start failed")
    complete_profile(ctx, os.path.join(d, "atexit.flm"), "at_exit")


def test_preloaded(ctx):
    """Linked library AND LD_PRELOAD=libflamme.so: the preloaded agent does
    not auto-start, the library drives it, and exactly one profile (the one
    Flamme.start named) is written, without duplicate samples."""
    d = ctx.path("preload")
    os.makedirs(d, exist_ok=True)
    prof = os.path.join(d, "api.flm")
    env_out = os.path.join(d, "from_env.%p.flm")
    rc, so, se = run([ctx.exe("phases"), prof, str(HZ)],
                     env={"LD_PRELOAD": ctx.lib, "FLAMME_OUTPUT": env_out})
    check(rc == 0, "preloaded: exit status %d, stderr:\n%s" % (rc, se))
    m = re.search(r"profiled_cpu=([0-9.]+)", so)
    check(m, "preloaded: unexpected output %r" % so)
    files = sorted(os.listdir(d))
    print("  preloaded: files written: %s" % files)
    check(files == ["api.flm"], "preloaded: want exactly the profile named by Flamme.start, got %s" % files)
    samples = complete_profile(ctx, prof, "preloaded")
    n = phases_checks(ctx, prof, "preloaded")
    cpu = float(m.group(1))
    expected = cpu * HZ
    print("  preloaded: profiled CPU %.2f s x %d Hz = %.0f expected, %d samples (ratio %.2f)"
          % (cpu, HZ, expected, samples, samples / expected))
    # Two agents sampling would double the count; 1.3x leaves room for
    # timer rounding while catching that.
    check(samples <= 1.3 * expected, "preloaded: %d samples for %.0f expected: sampled twice?" % (samples, expected))
    check(n == samples, "preloaded: collapse sums %d samples, report says %d" % (n, samples))


def test_threads(ctx):
    """Program also linked with threads.cmxa: a systhread created before
    start is sampled under its own label."""
    prof = ctx.path("threads.flm")
    rc, so, se = run([ctx.exe("threads_prog"), prof, str(HZ)])
    check(rc == 0 and "threads_prog: done" in so, "threads: exit status %d, stderr:\n%s" % (rc, se))
    complete_profile(ctx, prof, "threads")
    st = collapse(ctx, prof)
    tw = {}
    for f, c in st:
        if has("Threads_prog.thread_work")(f):
            tw[f[0]] = tw.get(f[0], 0) + c
    mw = total(st, lambda f: f[0] == "main" and has("Threads_prog.main_work")(f))
    print("  threads: thread_work by label %s, main_work on main %d" % (tw, mw))
    # ~0.6 s of CPU each at 499 Hz: ~300 samples; want a clear 50.
    check(mw >= 50, "threads: main_work has %d samples on main\n%s" % (mw, describe(st)))
    sys_labels = {l: c for l, c in tw.items() if LABEL_SYSTHREAD.match(l)}
    check(sys_labels and max(sys_labels.values()) >= 50,
          "threads: thread_work not sampled under a 'thread N (domain D)' label: %s\n%s" % (tw, describe(st)))


TESTS = [("phases", test_phases), ("raises", test_raises), ("errors", test_errors),
         ("preloaded", test_preloaded), ("threads", test_threads)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--only", default="")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    ap.add_argument("--compiler", default="",
                    help="the ocamlopt that built the programs (named in the output)")
    a = ap.parse_args()
    compiler = ocaml_compiler.describe(a.compiler)
    print("lib: programs and library built by %s" % compiler, flush=True)
    only = set(filter(None, a.only.split(",")))
    work = tempfile.mkdtemp(prefix="flamme-lib-")
    ctx = Ctx(a.build, work)
    passed = failed = 0
    for name, fn in TESTS:
        if only and name not in only:
            continue
        print("lib %s:" % name)
        try:
            fn(ctx)
            passed += 1
            print("  PASS")
        except Failure as e:
            failed += 1
            print("  FAIL: %s" % e)
    if a.keep or failed:
        print("work directory kept: %s" % work)
    else:
        shutil.rmtree(work, ignore_errors=True)
    print("lib: %d passed, %d failed (%s)" % (passed, failed, compiler))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
