"""tests/lib/test_ocaml_lib.py — the flamme OCaml library (Flamme.start/stop
linked into the program, no LD_PRELOAD): make ocaml-lib-test, part of make
test.

With every compiler (tests/conftest.py): the library is built by that
compiler (flammetest.flamme_library) and so is each program
tests/lib/<name>.ml (+ the shared work.ml) linked with it. Each test runs a
program the way a user would and reads its profile back with `flamme
collapse --threads` / `flamme report`; tolerances are stated next to each
assertion.
"""
import os
import re
import stat

import pytest

import flammetest
from flammetest import LABEL_DOMAIN, LABEL_SYSTHREAD, describe, flamme_library, total

HERE = os.path.dirname(os.path.abspath(__file__))
HZ = 499
LIBS = {"threads_prog": ("unix", "threads")}


@pytest.fixture
def exe(build, compiler, ocaml):
    """exe(name): tests/lib/<name>.ml linked with the library of the compiler."""
    _, flags, deps = flamme_library(build, compiler)

    def make(name):
        return ocaml("lib/" + name, [os.path.join(HERE, "work.ml"), os.path.join(HERE, name + ".ml")],
                     libs=LIBS.get(name, ()), flags=["-g"] + flags, deps=deps)
    return make


def run(cmd, env=None):
    return flammetest.run(cmd, env=flammetest.clean_env(env))


def stacks_of(build, prof):
    return flammetest.collapse(build, prof, "--threads")


def report(build, prof):
    """(status line text, sample weight) from `flamme report`."""
    p = run([build.flamme, "report", prof])
    assert p.returncode == 0, "flamme report %s failed (%d): %s" % (prof, p.returncode, p.stderr.strip())
    st = re.search(r"^\s*status: (.*)$", p.stdout, re.M)
    w = re.search(r"samples: \d+ records, weight (\d+)", p.stdout)
    assert st and w, "flamme report %s: no status/samples lines in:\n%s" % (prof, p.stdout)
    return st.group(1).strip(), int(w.group(1))


def has(fn):
    """Predicate on a labelled stack: some frame is the OCaml function fn
    (e.g. Phases.middle)."""
    return lambda f: any(x == fn or x.startswith(fn + "_") for x in f[1:])


def complete_profile(build, check, prof, what):
    """Checks the profile at PROF is complete and has samples; returns its
    sample weight (0 when there is no profile)."""
    if not check(os.path.exists(prof), "%s: a profile at %s" % (what, prof)):
        return 0
    status, samples = report(build, prof)
    print("  %s: status %s, %d samples" % (what, status, samples))
    check(status == "complete", "%s: the profile's status is complete" % what, status)
    check(samples > 0, "%s: the profile has samples" % what)
    return samples


def phases_checks(build, check, prof, what):
    """Only the middle phase is in the profile, on the main thread and on the
    domain spawned before Flamme.start. Returns the total sample count."""
    st = stacks_of(build, prof)
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
    check(main_mid >= 200, "%s: >= 200 samples of Phases.middle on the main thread" % what,
          "%d\n%s" % (main_mid, describe(st)))
    check(dom_mid and max(dom_mid.values()) >= 200,
          "%s: >= 200 Phases.middle samples on the domain spawned before Flamme.start" % what,
          "%s\n%s" % (dom_mid, describe(st)))
    # warmup/cooldown run ~0.6 s each outside the profile: at most 1% of the
    # samples may name them (a sample in flight at start/stop).
    check(warm <= 0.01 * n, "%s: warmup has <= 1%% of the samples" % what, "%d of %d" % (warm, n))
    check(cool <= 0.01 * n, "%s: cooldown has <= 1%% of the samples" % what, "%d of %d" % (cool, n))
    return n


@pytest.mark.slow
def test_phases(build, exe, check, tmp_path):
    """Flamme.start/stop around the middle phase only. The output path is a
    link planted to another file: Flamme.start replaces the link with a
    fresh 0600 profile (umask 022) and leaves the link's target alone."""
    prof = str(tmp_path / "phases.flm")
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    os.symlink(victim, prof)
    prog = exe("phases")
    old = os.umask(0o022)
    try:
        p = run([prog, prof, str(HZ)])
    finally:
        os.umask(old)
    assert p.returncode == 0, "phases: exit status %d, stderr:\n%s" % (p.returncode, p.stderr)
    check("phases: profiled_cpu=" in p.stdout, "phases: the program's output", p.stdout)
    check(victim.read_bytes() == b"precious\n", "phases: Flamme.start did not write through the link")
    st = os.lstat(prof)
    check(stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600,
          "phases: the profile is a regular 0600 file", "%o" % st.st_mode)
    complete_profile(build, check, prof, "phases")
    phases_checks(build, check, prof, "phases")


@pytest.mark.slow
def test_raises(build, exe, check, tmp_path):
    """with_profile around a raising function: the exception leaves the
    program with the original backtrace; the profile is complete."""
    prof = str(tmp_path / "raises.flm")
    p = run([exe("raises"), prof, str(HZ)], env={"OCAMLRUNPARAM": "b"})
    se = p.stderr
    print("  raises: exit %d, stderr: %s" % (p.returncode, " | ".join(se.strip().splitlines()[:3])))
    check(p.returncode == 2, "raises: exit status 2 (uncaught exception)", "%d; stderr:\n%s" % (p.returncode, se))
    check("unreachable" not in p.stdout, "raises: with_profile raised instead of returning")
    check('Fatal error: exception Failure("boom from inside the profile")' in se,
          "raises: the original exception propagated", se)
    # The backtrace must be the one of the raise inside boom, not one that
    # starts in Flamme.with_profile.
    check("Raises.boom" in se, "raises: the backtrace has the raising function Raises.boom", se)
    if complete_profile(build, check, prof, "raises"):
        st = stacks_of(build, prof)
        check(total(st, has("Raises.boom")) > 0, "raises: Raises.boom has samples", describe(st))


@pytest.mark.slow
def test_errors(build, exe, check, tmp_path):
    """Misuse raises Flamme.Error with a clear message, never crashes."""
    d = str(tmp_path)
    p = run([exe("errors"), d])
    assert p.returncode == 0, "errors: exit status %d, stdout:\n%s\nstderr:\n%s" % (
        p.returncode, p.stdout, p.stderr)
    lines = dict(l.split(": ", 1) for l in p.stdout.splitlines() if ": " in l)
    for k in sorted(lines):
        print("  %s: %s" % (k, lines[k]))

    def raised(case, pattern):
        v = lines.get(case, "")
        check(v.startswith("raised ") and re.search(pattern, v),
              "errors: %s: raises Flamme.Error matching %r" % (case, pattern), v)
        check("Flamme.Error: " in v, "errors: %s: Printexc.to_string says Flamme.Error" % case, v)

    def complete(name):
        if check(os.path.exists(os.path.join(d, name)), "errors: %s written" % name):
            status, _ = report(build, os.path.join(d, name))
            check(status == "complete", "errors: %s is complete" % name, status)

    check(lines.get("first-start") == "ok", "errors: the first start succeeds", lines.get("first-start"))
    raised("second-start", r"already running")
    check(lines.get("running-after-second") == "true", "errors: a failed second start leaves the first running")
    check(lines.get("first-stop") == "ok", "errors: stop succeeds", lines.get("first-stop"))
    check(not os.path.exists(os.path.join(d, "second.flm")), "errors: the refused second start created no file")
    raised("stop-again", r"not running")
    raised("bad-path", re.escape(os.path.join(d, "no-such-dir/x.flm")))
    check(lines.get("running-after-bad-path") == "false", "errors: not running after a failed start")
    raised("bad-hz", r"hz")
    check(lines.get("restart") == "ok" and lines.get("restart-stop") == "ok",
          "errors: start after errors succeeds", "%r %r" % (lines.get("restart"), lines.get("restart-stop")))
    for name in ("first.flm", "restart.flm"):
        complete(name)
    raised("bad-alloc", r"alloc rate must be in \(0, 1\]")
    check(lines.get("running-after-bad-alloc") == "false", "errors: not running after a refused alloc rate")
    if lines.get("ocaml-memprof") == "true":
        check(lines.get("alloc-start") == "ok" and lines.get("alloc-stop") == "ok",
              "errors: allocation profiling starts and stops",
              "%r %r" % (lines.get("alloc-start"), lines.get("alloc-stop")))
        complete("alloc.flm")
    else:  # OCaml 5.1/5.2: one line saying what is needed, no profile left running
        raised("alloc-start", r"allocation profiling needs OCaml 5\.3 or later")
        check(lines.get("running-after-alloc") == "false", "errors: not running after a refused alloc start")
    # The profile left running at exit is completed by the at_exit handler.
    check(lines.get("at-exit-start") == "ok", "errors: the at-exit start succeeds")
    complete_profile(build, check, os.path.join(d, "atexit.flm"), "at_exit")


@pytest.mark.slow
def test_preloaded(build, exe, check, tmp_path):
    """Linked library AND LD_PRELOAD=libflamme.so: the preloaded agent does
    not auto-start, the library drives it, and exactly one profile (the one
    Flamme.start named) is written, without duplicate samples."""
    d = tmp_path / "preload"
    d.mkdir()
    prof = str(d / "api.flm")
    prog = exe("phases")
    p = run([prog, prof, str(HZ)], env={"LD_PRELOAD": build.lib, "FLAMME_OUTPUT": str(d / "from_env.%p.flm")})
    assert p.returncode == 0, "preloaded: exit status %d, stderr:\n%s" % (p.returncode, p.stderr)
    m = re.search(r"profiled_cpu=([0-9.]+)", p.stdout)
    assert m, "preloaded: unexpected output %r" % p.stdout
    files = sorted(os.listdir(d))
    print("  preloaded: files written: %s" % files)
    check(files == ["api.flm"], "preloaded: exactly the profile named by Flamme.start is written", files)
    samples = complete_profile(build, check, prof, "preloaded")
    n = phases_checks(build, check, prof, "preloaded")
    cpu = float(m.group(1))
    expected = cpu * HZ
    print("  preloaded: profiled CPU %.2f s x %d Hz = %.0f expected, %d samples (ratio %.2f)"
          % (cpu, HZ, expected, samples, samples / expected))
    # Two agents sampling would double the count; 1.3x leaves room for
    # timer rounding while catching that.
    check(samples <= 1.3 * expected, "preloaded: not sampled twice (<= 1.3 x the expected samples)",
          "%d samples for %.0f expected" % (samples, expected))
    check(n == samples, "preloaded: collapse sums the samples report counts", "%d vs %d" % (n, samples))


@pytest.mark.slow
def test_heaptrim(build, compiler, ocaml, check, tmp_path):
    """tests/e2e/heaptrim.ml (a churn of OCaml blocks above 128 words, each
    a malloc of the runtime's freed by the sweep) profiled through the
    library (tests/lib/heaptrim_start.ml, linked first, calls Flamme.start):
    the program's heap is kept as alone. The library's agent allocates from
    glibc (no --wrap there); the profile writer's chunk buffer, made by
    Flamme.start's thread and grown by the writer's, lay in the main heap
    among the program's blocks, and its free in mid-run made glibc trim and
    regrow the heap's top at every major slice: 1-3 (fp) and 4-5 (no-fp)
    of 6 runs, 9,000-186,000 page faults for ~650."""
    _, flags, deps = flamme_library(build, compiler)
    prog = ocaml("lib/heaptrim", [os.path.join(HERE, "heaptrim_start.ml"),
                                  os.path.join(HERE, "..", "e2e", "heaptrim.ml")],
                 flags=["-g"] + flags, deps=deps)

    def profiled(i):
        return run([prog], env={"HEAPTRIM_PROFILE": str(tmp_path / ("heaptrim-%d.flm" % i))})
    flammetest.heaptrim_runs(check, run([prog]), profiled, "heaptrim (library, %s)" % compiler.name)
    _, weight = report(build, str(tmp_path / "heaptrim-5.flm"))
    check(weight > 0, "heaptrim (library): the last run's profile has samples", weight)


@pytest.mark.slow
def test_threads(build, exe, check, tmp_path):
    """Program also linked with threads.cmxa: a systhread created before
    start is sampled under its own label."""
    prof = str(tmp_path / "threads.flm")
    p = run([exe("threads_prog"), prof, str(HZ)])
    assert p.returncode == 0 and "threads_prog: done" in p.stdout, \
        "threads: exit status %d, stderr:\n%s" % (p.returncode, p.stderr)
    complete_profile(build, check, prof, "threads")
    st = stacks_of(build, prof)
    tw = {}
    for f, c in st:
        if has("Threads_prog.thread_work")(f):
            tw[f[0]] = tw.get(f[0], 0) + c
    mw = total(st, lambda f: f[0] == "main" and has("Threads_prog.main_work")(f))
    print("  threads: thread_work by label %s, main_work on main %d" % (tw, mw))
    # ~0.6 s of CPU each at 499 Hz: ~300 samples; want a clear 50.
    check(mw >= 50, "threads: main_work has >= 50 samples on main", "%d\n%s" % (mw, describe(st)))
    sys_labels = {l: c for l, c in tw.items() if LABEL_SYSTHREAD.match(l)}
    check(sys_labels and max(sys_labels.values()) >= 50,
          "threads: thread_work sampled (>= 50) under a 'thread N (domain D)' label", "%s\n%s" % (tw, describe(st)))
