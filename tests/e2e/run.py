#!/usr/bin/env python3
"""tests/e2e/run.py — end-to-end tests of flamme on real OCaml 5.3 programs.

Owns: the e2e checks. Called by `make e2e` (mk/e2e.mk) after the programs in
tests/e2e/*.ml were built into build/e2e/<name>/<name>.exe with the
frame-pointer ocamlopt. Each test profiles a program the way a user would
(`flamme record`, or LD_PRELOAD + FLAMME_* variables), reads the result back
with `flamme collapse` / `flamme report` and asserts what a user would look
at: which functions got the samples, on which thread, and whether stacks reach
the thread's root. Tolerances are stated next to each assertion.

Prints, per program, the number of samples and the fraction reaching a root,
and ends with `e2e: N passed, N failed`; exits 1 if anything failed.
Every test runs once per sampling engine (FLAMME_ENGINE: timer, perf).
Usage: run.py [--build DIR] [--only NAME,...] [--skip NAME,...] [--engines timer,perf] [--keep]
              [--compiler OCAMLOPT]
"""
import argparse
import os
import re
import shutil
import struct
import signal
import subprocess
import time
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import ocaml_compiler  # noqa: E402

HZ = 499
RUN_TIMEOUT = 180  # seconds; a hang is a failure, not a stuck CI job

MAIN_ROOTS = {"main", "__libc_start_call_main", "__libc_start_main", "_start"}
THREAD_ROOTS = {"start_thread", "clone3", "clone"}
ALL_ROOTS = MAIN_ROOTS | THREAD_ROOTS
# glibc's thread entries are static functions: with a libc that has no
# .symtab they show up as "[libc.so.6]". Such a frame can only be root-most
# when the walk ended cleanly in libc (a bad frame pointer gives [broken]).
UNNAMED_LIBC = re.compile(r"^\[libc\.so\.[0-9.]+\]$")

LABEL_DOMAIN = re.compile(r"^domain (\d+)$")
LABEL_SYSTHREAD = re.compile(r"^thread (\d+) \(domain (\d+)\)$")


class Failure(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise Failure(msg)


class Ctx:
    def __init__(self, build, work):
        self.build = build
        self.flamme = os.path.join(build, "flamme")
        self.lib = os.path.abspath(os.path.join(build, "libflamme.so"))
        self.work = work
        self.figures = []  # (program, samples, percent reaching a root)
        self.profiles = {}  # program -> profile path, reused by the report test
        self.weight_per_record = 1.0  # of the last recording, see record()
        self.last_records = 0

    def exe(self, name):
        path = os.path.abspath(os.path.join(self.build, "e2e", name, name + ".exe"))
        check(os.access(path, os.X_OK), "program not built: %s (run `make e2e`)" % path)
        return path


ENGINE = {}  # {"FLAMME_ENGINE": name} while the tests of one engine run


def run(cmd, env=None, cwd=None):
    """Runs cmd; returns (rc, stdout, stderr) as text. A timeout is a failure."""
    full_env = dict(os.environ)
    for k in list(full_env):
        if k.startswith("FLAMME_") or k == "LD_PRELOAD":
            del full_env[k]
    full_env.update(ENGINE)
    if env:
        full_env.update(env)
    try:
        p = subprocess.run(cmd, env=full_env, cwd=cwd, capture_output=True, text=True,
                           timeout=RUN_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise Failure("timed out after %ds: %s" % (RUN_TIMEOUT, " ".join(cmd)))
    return p.returncode, p.stdout, p.stderr


# Tests of the walker's completeness on deep stacks at high rates: the
# handler's CPU budget (which shortens such samples, see agent/budget.h) off.
NO_BUDGET = {"FLAMME_BUDGET": "0"}


def record(ctx, name, args=(), out=None, cwd=None, env=None):
    """`flamme record -F HZ -o OUT -- EXE ARGS`; checks the exit status and the
    single summary line, returns (profile path, program stdout, stderr)."""
    out = out or os.path.join(ctx.work, name + ".flm")
    cmd = [os.path.abspath(ctx.flamme), "record", "-F", str(HZ), "-o", out, "--",
           ctx.exe(name)] + list(args)
    rc, so, se = run(cmd, cwd=cwd, env=env)
    check(rc == 0, "%s: exit status %d, stderr:\n%s" % (" ".join(cmd), rc, se))
    summary = [l for l in se.splitlines() if l.startswith("flamme:")]
    check(len(summary) == 1, "%s: expected one 'flamme:' summary line on stderr, got:\n%s" % (name, se))
    m = re.search(r"\bengine (\w+)", summary[0])
    want = ENGINE.get("FLAMME_ENGINE")
    check(not (m and want) or m.group(1) == want, "%s: ran with engine %s, wanted %s" % (name, m and m.group(1), want))
    check(os.path.exists(os.path.join(cwd or "", out)), "%s: no profile written at %s" % (name, out))
    ctx.profiles[name] = os.path.join(cwd or "", out)
    # Collapse counts are sample weights: a sample taken late (timer overrun,
    # e.g. CPU-clock timers that only fire on the scheduler tick) stands for
    # several periods. Statistical power comes from the number of records.
    rc, rep, _ = run([ctx.flamme, "report", ctx.profiles[name]])
    m = re.search(r"samples: (\d+) records, weight (\d+)", rep)
    check(rc == 0 and m, "%s: flamme report gave no 'samples: N records, weight W' line" % name)
    ctx.last_records = int(m.group(1))
    ctx.weight_per_record = max(1.0, int(m.group(2)) / max(1, ctx.last_records))
    return ctx.profiles[name], so, se


def collapse(ctx, profile, threads=True):
    """Returns [(frames list root first, count)] from `flamme collapse`."""
    cmd = [ctx.flamme, "collapse", profile] + (["--threads"] if threads else [])
    rc, so, se = run(cmd)
    check(rc == 0, "%s failed (%d): %s" % (" ".join(cmd), rc, se.strip()))
    stacks = []
    for line in so.splitlines():
        if not line.strip():
            continue
        stack, _, count = line.rpartition(" ")
        check(stack and count.isdigit(), "collapse: malformed line: %r" % line[:200])
        stacks.append((stack.split(";"), int(count)))
    check(stacks, "collapse of %s printed no stacks" % profile)
    return stacks


def total(stacks, pred=lambda f: True):
    return sum(c for f, c in stacks if pred(f))


def frac(stacks, sel, pred):
    """Share (0..1) of the samples selected by sel that also satisfy pred."""
    n = total(stacks, sel)
    return (total(stacks, lambda f: sel(f) and pred(f)) / n) if n else 0.0, n


def is_root(frame):
    return frame in ALL_ROOTS or bool(UNNAMED_LIBC.match(frame))


def reaches(roots):
    """Predicate: the stack (frames[0] = thread label from collapse --threads)
    starts at one of roots, or at an unnamed libc frame that is followed by
    main (for the main roots) or is a thread entry (start_thread)."""
    def pred(f):
        if len(f) < 2:
            return False
        if f[1] in roots:
            return True
        if not UNNAMED_LIBC.match(f[1]):
            return False
        return (len(f) > 2 and f[2] == "main") if roots is MAIN_ROOTS else True
    return pred


def add_figure(ctx, name, stacks):
    n = total(stacks)
    r = total(stacks, lambda f: len(f) > 1 and is_root(f[1]))
    pct = 100.0 * r / n if n else 0.0
    ctx.figures.append((name, n, ctx.last_records, pct))
    print("  figure: %-10s weight=%-6d records=%-6d reaching a root=%5.1f%%" % (name, n, ctx.last_records, pct))


def by_label(stacks):
    labels = {}
    for f, c in stacks:
        labels.setdefault(f[0], []).append((f, c))
    return labels


def describe(stacks, limit=5):
    """The heaviest stacks, shortened, for failure messages."""
    top = sorted(stacks, key=lambda s: -s[1])[:limit]
    out = []
    for f, c in top:
        s = ";".join(f) if len(f) <= 14 else ";".join(f[:6] + ["..."] + f[-6:])
        out.append("    %6d %s" % (c, s))
    return "\n".join(out)


def profiled(ctx, name, expect, env=None):
    """Records program `name`, checks its stdout matches the regex `expect`,
    returns (collapsed stacks with thread labels, regex match)."""
    prof, so, _ = record(ctx, name, env=env)
    m = re.search(expect, so)
    check(m, "%s: unexpected output %r" % (name, so))
    st = collapse(ctx, prof)
    add_figure(ctx, name, st)
    return st, m


def need(ctx, st, sel, what, minimum):
    """Checks there are at least `minimum` sample records selected by sel, so
    that the test's tolerance is statistically sound; returns their weight."""
    n = total(st, sel)
    recs = n / ctx.weight_per_record
    check(recs >= minimum, "only ~%d sample records %s (weight %d; want >= %d at %d Hz)\n%s"
          % (recs, what, n, minimum, HZ, describe(st)))
    return n


# --------------------------------------------------------------------- tests

def test_split(ctx):
    """Single domain, three functions with a 50/30/20 CPU split by
    construction. Tolerance ±5 points: with >= 700 sample records the
    binomial standard deviation is <= 1.9 points, so 5 points is > 2.6 sigma
    (and the construction has no systematic bias: same loop, interleaved)."""
    st, _ = profiled(ctx, "split", r"split: rounds=500 ")
    under = lambda f: "Split.run_rounds" in f
    need(ctx, st, under, "under Split.run_rounds", 700)
    for fn, want in (("Split.work_a", 50.0), ("Split.work_b", 30.0), ("Split.work_c", 20.0)):
        share, _ = frac(st, under, lambda f, fn=fn: fn in f)
        print("  %s: %.1f%% (expected %.0f%% ± 5)" % (fn, 100 * share, want))
        check(abs(100 * share - want) <= 5.0, "split: %s has %.1f%% of the samples, expected %.0f%% ± 5"
              % (fn, 100 * share, want))
    share, nmain = frac(st, lambda f: f[0] == "main", reaches(MAIN_ROOTS))
    print("  main thread: %d samples, %.1f%% reach main" % (nmain, 100 * share))
    check(share >= 0.90, "split: only %.1f%% of the main thread's stacks reach main (want >= 90%%)\n%s"
          % (100 * share, describe(st)))


def test_domains(ctx):
    """Two spawned domains, each calling only its own work function."""
    st, _ = profiled(ctx, "domains", r"^domains: a=")
    labels = by_label(st)
    # 300 records per domain: a 90% share then has a standard deviation of
    # 1.7 points, and a true share of ~100% passes with a wide margin.
    doms = {l: s for l, s in labels.items()
            if LABEL_DOMAIN.match(l) and total(s) / ctx.weight_per_record >= 300}
    check(len(doms) >= 2, "domains: want 2 'domain N' labels with >= 300 sample records, got %s"
          % {l: total(s) for l, s in labels.items()})
    owners = {}
    for label, s in sorted(doms.items()):
        a, n = frac(s, lambda f: True, lambda f: "Domains.work_a" in f)
        b, _ = frac(s, lambda f: True, lambda f: "Domains.work_b" in f)
        own, other = (("work_a", a), ("work_b", b)) if a >= b else (("work_b", b), ("work_a", a))
        root, _ = frac(s, lambda f: True, reaches(THREAD_ROOTS))
        print("  %s: %d samples, work_a %.1f%%, work_b %.1f%%, %.1f%% reach start_thread"
              % (label, n, 100 * a, 100 * b, 100 * root))
        # Each domain's thread must be dominated by its own function (>= 90%) and
        # the other domain's function must be essentially absent (<= 1%).
        check(own[1] >= 0.90, "domains: %s: its main function %s has only %.1f%% (want >= 90%%)\n%s"
              % (label, own[0], 100 * own[1], describe(s)))
        check(other[1] <= 0.01, "domains: %s: %s of the other domain has %.1f%% (want <= 1%%)"
              % (label, other[0], 100 * other[1]))
        check(root >= 0.90, "domains: %s: only %.1f%% of stacks reach start_thread (want >= 90%%)\n%s"
              % (label, 100 * root, describe(s)))
        owners.setdefault(own[0], []).append(label)
    check(set(owners) == {"work_a", "work_b"},
          "domains: both domains attributed to the same function: %s" % owners)


def test_effects(ctx):
    """Fibers under an Effect.Deep handler: samples in the fiber's compute
    function must link through the resumer to run_scheduler and main."""
    st, m = profiled(ctx, "effects", r"switches=(\d+)")
    check(int(m.group(1)) > 10000, "effects: only %s fiber switches" % m.group(1))
    in_fiber = lambda f: "Effects.compute" in f
    # >= 90% wanted, ~100% expected: 500 records (sd of a 90% share: 1.3
    # points) separate the two clearly.
    n = need(ctx, st, in_fiber, "in Effects.compute", 500)
    sched, _ = frac(st, in_fiber, lambda f: "Effects.run_scheduler" in f)
    both, _ = frac(st, in_fiber, lambda f: "Effects.run_scheduler" in f and reaches(MAIN_ROOTS)(f))
    print("  Effects.compute: %d samples, %.1f%% under run_scheduler, %.1f%% also reach main"
          % (n, 100 * sched, 100 * both))
    check(both >= 0.90, "effects: only %.1f%% of Effects.compute stacks contain Effects.run_scheduler "
          "and reach main (want >= 90%%)\n%s" % (100 * both, describe([s for s in st if in_fiber(s[0])])))


def test_deep(ctx):
    """6000 non-tail recursive frames with the CPU at the bottom."""
    st, _ = profiled(ctx, "deep", r"deep: depth=6000 ", env=NO_BUDGET)
    at_bottom = lambda f: "Deep.bottom" in f
    n = need(ctx, st, at_bottom, "in Deep.bottom", 500)  # as for effects
    depth_ok, _ = frac(st, at_bottom, lambda f: f.count("Deep.descend") >= 5000)
    full, _ = frac(st, at_bottom, lambda f: f.count("Deep.descend") >= 5000 and reaches(MAIN_ROOTS)(f))
    deepest = max(f.count("Deep.descend") for f, _ in st)
    print("  Deep.bottom: %d samples, %.1f%% with >= 5000 descend frames (max %d), %.1f%% also reach main"
          % (n, 100 * depth_ok, deepest, 100 * full))
    check(full >= 0.90, "deep: only %.1f%% of Deep.bottom stacks have >= 5000 Deep.descend frames and "
          "reach main (want >= 90%%; deepest seen: %d)" % (100 * full, deepest))


def test_systhread(ctx):
    """A systhread inside a spawned domain: its samples must be on its own
    thread label 'thread TID (domain N)', N being the domain whose main thread
    runs work_domain."""
    st, _ = profiled(ctx, "systhread", r"^systhread: domain=")
    labels = by_label(st)
    wt = {l: total(s, lambda f: "Systhread.work_thread" in f) for l, s in labels.items()}
    wd = {l: total(s, lambda f: "Systhread.work_domain" in f) for l, s in labels.items()}
    tl = max(wt, key=wt.get)
    dl = max(wd, key=wd.get)
    print("  work_thread samples by label: %s" % {l: c for l, c in wt.items() if c})
    print("  work_domain samples by label: %s" % {l: c for l, c in wd.items() if c})
    check(min(wt[tl], wd[dl]) / ctx.weight_per_record >= 300, "systhread: too few sample records (work_thread %d, work_domain %d)"
          % (wt[tl], wd[dl]))
    mt, md = LABEL_SYSTHREAD.match(tl), LABEL_DOMAIN.match(dl)
    check(md, "systhread: work_domain's samples are on %r, expected a 'domain N' label" % dl)
    check(mt, "systhread: work_thread's samples are on %r, expected 'thread TID (domain N)'" % tl)
    check(mt.group(2) == md.group(1), "systhread: thread label %r names another domain than %r" % (tl, dl))
    # The systhread's own samples: >= 90% in work_thread; the work must not
    # leak onto the domain's main thread (<= 2% there, GC/handover noise).
    own, n = frac(labels[tl], lambda f: True, lambda f: "Systhread.work_thread" in f)
    leak = wt.get(dl, 0) / max(1, total(labels[dl]))
    root, _ = frac(labels[tl], lambda f: True, reaches(THREAD_ROOTS))
    print("  %s: %d samples, %.1f%% work_thread, %.1f%% reach start_thread; work_thread on %s: %.1f%%"
          % (tl, n, 100 * own, 100 * root, dl, 100 * leak))
    check(own >= 0.90, "systhread: %s has only %.1f%% work_thread\n%s" % (tl, 100 * own, describe(labels[tl])))
    check(leak <= 0.02, "systhread: %.1f%% of %s's samples are in work_thread" % (100 * leak, dl))
    check(root >= 0.90, "systhread: only %.1f%% of %s's stacks reach start_thread\n%s"
          % (100 * root, tl, describe(labels[tl])))


def test_forkexec(ctx):
    """Children (sh, true, fork+exec echo) run normally; only the parent writes
    a profile, and it is the parent's."""
    cwd = tempfile.mkdtemp(prefix="fork.", dir=ctx.work)
    prof, so, se = record(ctx, "forkexec", out="prof.flm", cwd=cwd)
    for want in ('sh said "hi" (exit 0)', "true exit 0", "fork+exec echo exit 0", "forked-child-ok"):
        check(so.count(want) == 3, "forkexec: expected 3 x %r in the output:\n%s" % (want, so))
    check(os.listdir(cwd) == ["prof.flm"], "forkexec: children left files: %s" % sorted(os.listdir(cwd)))
    m = re.search(r"pid=(\d+)", so)
    with open(prof, "rb") as fh:
        head = fh.read(20)
    check(head[:8] == b"FLAMMEPF", "forkexec: prof.flm is not a flamme profile")
    pid = struct.unpack_from("<I", head, 16)[0]
    check(m and pid == int(m.group(1)), "forkexec: profile is from pid %d, the program was %s"
          % (pid, m.group(1) if m else "?"))
    st = collapse(ctx, prof)
    add_figure(ctx, "forkexec", st)
    share, n = frac(st, lambda f: f[0] == "main", lambda f: "Forkexec.work_parent" in f)
    print("  main thread: %d samples, %.1f%% in Forkexec.work_parent" % (n, 100 * share))
    # The parent spends almost all its CPU in work_parent; 80% leaves room for
    # fork/exec and startup.
    check(n / ctx.weight_per_record >= 300 and share >= 0.80, "forkexec: parent profile has %d samples, %.1f%% work_parent\n%s"
          % (n, 100 * share, describe(st)))


def test_stress(ctx):
    """Fibers whose stacks grow and move, exceptions, allocation and three
    domains, sampled at a high rate: the program must behave exactly as
    without the profiler and its stacks must still mostly reach a root."""
    rc, plain, se = run([ctx.exe("stress")])
    check(rc == 0 and plain.startswith("stress: "), "stress without profiler failed (%d): %s" % (rc, se))
    out = os.path.join(ctx.work, "stress.flm")
    cmd = [ctx.flamme, "record", "-F", "1999", "-o", out, "--", ctx.exe("stress")]
    rc, so, se = run(cmd, env=NO_BUDGET)
    check(rc == 0, "%s: exit status %d:\n%s" % (" ".join(cmd), rc, se))
    check(so == plain, "stress: output differs under the profiler:\n%s\nwithout:\n%s" % (so, plain))
    rc, rep, _ = run([ctx.flamme, "report", out])
    m = re.search(r"samples: (\d+) records, weight (\d+)", rep)
    check(rc == 0 and m, "stress: flamme report failed:\n%s" % rep)
    ctx.last_records = int(m.group(1))
    st = collapse(ctx, out)
    add_figure(ctx, "stress", st)
    share, n = frac(st, lambda f: True, lambda f: "Stress.dive" in f)
    root, _ = frac(st, lambda f: True, lambda f: len(f) > 1 and is_root(f[1]))
    print("  %d records, %.1f%% of the weight in Stress.dive, %.1f%% reach a root" % (ctx.last_records, 100 * share, 100 * root))
    # ~2 s of CPU at 1999 Hz; even a tick-limited timer gives > 300 records.
    check(ctx.last_records >= 300, "stress: only %d sample records" % ctx.last_records)
    check(share >= 0.5, "stress: Stress.dive has only %.1f%% of the samples\n%s" % (100 * share, describe(st)))
    # Stacks that grow while sampled (caml_try_realloc_stack) and the effect
    # switches are the hard cases; the walker follows both.
    check(root >= 0.99, "stress: only %.1f%% of stacks reach a thread root (want >= 99%%)\n%s"
          % (100 * root, describe([x for x in st if not is_root(x[0][1])])))


def test_wall(ctx):
    """Wall-clock mode (FLAMME_MODE=wall, timer engine): blocked threads are
    sampled too. The program must run unchanged (signals on threads blocked
    in read/nanosleep), the main thread's time blocked in Unix.read must be
    attributed to Blocking.reader with stacks reaching main, and the writer
    systhread must be labelled as a thread of domain 0."""
    out = os.path.join(ctx.work, "wall.flm")
    cmd = [ctx.flamme, "record", "-F", str(HZ), "-o", out, "--", ctx.exe("blocking")]
    rc, so, se = run(cmd, env={"FLAMME_MODE": "wall"})
    check(rc == 0 and "blocking: got=50 " in so, "%s: exit %d, output %r:\n%s" % (" ".join(cmd), rc, so, se))
    rc, rep, _ = run([ctx.flamme, "report", out])
    m = re.search(r"samples: (\d+) records", rep)
    check(rc == 0 and m, "wall: flamme report failed:\n%s" % rep)
    ctx.last_records = int(m.group(1))
    st = collapse(ctx, out)
    add_figure(ctx, "blocking", st)
    labels = by_label(st)
    in_read = lambda f: f[0] == "main" and "caml_unix_read" in f
    n = total(st, in_read)
    # ~1.2 s blocked at 499 Hz: ~600 samples expected; 150 is a floor that
    # only a mode that does not sample blocked threads misses.
    check(n >= 150, "wall: only %d main-thread samples in caml_unix_read\n%s" % (n, describe(labels.get("main", st))))
    ok, _ = frac(st, in_read, lambda f: "Blocking.reader" in f and reaches(MAIN_ROOTS)(f))
    print("  main thread blocked in read: %d samples, %.1f%% attributed to Blocking.reader and reaching main"
          % (n, 100 * ok))
    wl = [l for l, s in labels.items() if total(s, lambda f: "caml_unix_sleep" in f or "Blocking.writer" in f)]
    print("  writer thread label(s): %s" % wl)
    check(ok >= 0.90, "wall: only %.1f%% of the main thread's samples in caml_unix_read contain Blocking.reader "
          "and reach main (want >= 90%%)\n%s" % (100 * ok, describe([x for x in st if in_read(x[0])])))
    check(len(wl) == 1 and LABEL_SYSTHREAD.match(wl[0]) and LABEL_SYSTHREAD.match(wl[0]).group(2) == "0",
          "wall: the writer systhread should be one 'thread TID (domain 0)' label, got %s" % wl)
    # The time spent waiting is marked as such: blocked in the read system call.
    blocked, _ = frac(st, in_read, lambda f: f[-1] == "[blocked]")
    print("  main thread in read marked [blocked]: %.1f%%" % (100 * blocked))
    check(blocked >= 0.90, "wall: only %.1f%% of the main thread's samples in caml_unix_read end in "
          "[blocked] (want >= 90%%)" % (100 * blocked))


def preload(ctx, name, args, env):
    e = {"LD_PRELOAD": ctx.lib}
    e.update(env)
    return run([ctx.exe(name)] + list(args), env=e)


def test_robust(ctx):
    """Bad settings never stop the program: one warning line per bad
    variable, the profile is still written; an unwritable output path gives
    one error line and exit status 0."""
    for var, bad in (("FLAMME_HZ", "abc"), ("FLAMME_DEPTH", "-3")):
        out = os.path.join(ctx.work, "robust_%s.flm" % bad.strip("-"))
        rc, so, se = preload(ctx, "split", ["10"], {var: bad, "FLAMME_OUTPUT": out})
        print("  %s=%s: exit %d, stderr: %r" % (var, bad, rc, se.strip()))
        check(rc == 0 and "split: rounds=50" in so, "%s=%s: program failed (exit %d): %s" % (var, bad, rc, se))
        lines = [l for l in se.splitlines() if var in l]
        check(len(lines) == 1, "%s=%s: expected one warning line naming %s, got:\n%s" % (var, bad, var, se))
        check(os.path.exists(out), "%s=%s: no profile written" % (var, bad))
        st = collapse(ctx, out)
        check(total(st, lambda f: "Split.run_rounds" in f) > 0, "%s=%s: profile has no Split samples" % (var, bad))
    blocker = os.path.join(ctx.work, "not_a_dir")
    open(blocker, "w").close()
    out = os.path.join(blocker, "prof.flm")
    rc, so, se = preload(ctx, "split", ["10"], {"FLAMME_OUTPUT": out})
    print("  FLAMME_OUTPUT=%s: exit %d, stderr: %r" % (out, rc, se.strip()))
    check(rc == 0 and "split: rounds=50" in so, "unwritable output: program failed (exit %d): %s" % (rc, se))
    lines = [l for l in se.splitlines() if l.strip()]
    check(len(lines) == 1 and out in lines[0],
          "unwritable output: expected one error line naming %s, got:\n%s" % (out, se))
    # `flamme record` passes the program's exit status through: an uncaught
    # OCaml exception (int_of_string "bogus") exits with 2.
    cmd = [ctx.flamme, "record", "-o", os.path.join(ctx.work, "status.flm"), "--", ctx.exe("split"), "bogus"]
    rc, so, se = run(cmd)
    print("  record of a failing program: exit %d" % rc)
    check(rc == 2 and "Fatal error: exception Failure" in se,
          "%s: expected exit status 2 and the program's error, got %d:\n%s" % (" ".join(cmd), rc, se))


def test_report(ctx):
    """`flamme report` states the share of complete stacks (root-most frame is
    a thread root); it must agree (±0.5 points: rounding to one decimal) with
    the share computed here from `flamme collapse` output."""
    names = [n for n in ("split", "domains", "effects") if n in ctx.profiles]
    if not names:
        record(ctx, "split", ["30"])
        names = ["split"]
    for name in names:
        prof = ctx.profiles[name]
        rc, so, se = run([ctx.flamme, "report", prof])
        check(rc == 0, "report %s failed (%d): %s" % (prof, rc, se.strip()))
        m = re.search(r"complete stacks:\s*([0-9]+(?:\.[0-9]+)?)%", so)
        check(m, "report %s: no 'complete stacks: NN.N%%' line in:\n%s" % (name, so))
        st = collapse(ctx, prof, threads=False)
        mine = 100.0 * total(st, lambda f: is_root(f[0])) / total(st)
        print("  %s: report says %s%%, collapse gives %.2f%%" % (name, m.group(1), mine))
        check(abs(float(m.group(1)) - mine) <= 0.5, "report %s: complete stacks %s%% but collapse gives %.2f%%"
              % (name, m.group(1), mine))


def test_eintr(ctx):
    """Waits that any signal would cut short (Unix.select fails with EINTR
    whatever SA_RESTART says) run to their end under the profiler, in CPU
    mode and in wall-clock mode; in wall mode the waiting time is profiled at
    the function that waited, marked [blocked]."""
    for mode in ("cpu", "wall"):
        out = os.path.join(ctx.work, "eintr_%s.flm" % mode)
        cmd = [ctx.flamme, "record", "-F", str(HZ), "-o", out, "--", ctx.exe("selectwait")]
        rc, so, se = run(cmd, env={"FLAMME_MODE": mode})
        check(rc == 0 and "selectwait: eintr=0 " in so,
              "%s mode: the program saw EINTR or failed (exit %d): %r\n%s" % (mode, rc, so, se))
        print("  %s mode: %s" % (mode, so.strip()))
        if mode == "wall":
            st = collapse(ctx, out)
            waited = total(st, lambda f: "Selectwait.waiter" in f and f[-1] == "[blocked]")
            # ~1.2 s waiting at HZ samples/s; half of it is a floor only a
            # profiler that drops the waits misses.
            print("  wall mode: %d samples blocked under Selectwait.waiter" % waited)
            check(waited >= 0.5 * 1.2 * HZ, "wall mode: only %d samples blocked under "
                  "Selectwait.waiter\n%s" % (waited, describe(st)))


def cpu_seconds(pid):
    """User + system CPU time of process pid so far (0 once it is gone)."""
    try:
        fields = open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def test_interrupt(ctx):
    """A program stopped by a signal (Ctrl-C under `flamme record`, a kill)
    still leaves a complete profile: the agent completes the file, then the
    program dies of that signal, and record reports its status."""
    for sig, name in ((signal.SIGINT, "SIGINT"), (signal.SIGTERM, "SIGTERM")):
        out = os.path.join(ctx.work, "interrupt_%s.flm" % name)
        env = dict(os.environ)
        for k in list(env):
            if k.startswith("FLAMME_") or k == "LD_PRELOAD":
                del env[k]
        env.update(ENGINE)
        p = subprocess.Popen([ctx.flamme, "record", "-F", str(HZ), "-o", out, "--", ctx.exe("forever")],
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        child = None
        deadline = time.time() + 20
        while child is None and time.time() < deadline:
            time.sleep(0.2)
            try:
                kids = open("/proc/%d/task/%d/children" % (p.pid, p.pid)).read().split()
            except OSError:
                kids = []
            child = int(kids[0]) if kids else None
        check(child is not None, "interrupt: the program did not start")
        # One second of the program's CPU time, not of the wall clock: on a
        # loaded machine a wall-clock second may give it a tenth of that.
        while time.time() < deadline + 30 and cpu_seconds(child) < 1.0:
            time.sleep(0.1)
        os.kill(child, sig)
        _, se = p.communicate(timeout=30)
        summary = [l for l in se.splitlines() if l.startswith("flamme:")]
        print("  %s: exit %d, %s" % (name, p.returncode, summary[-1] if summary else se.strip()))
        check(p.returncode == 128 + sig, "interrupt: record exited %d, want %d (the program's death by %s)"
              % (p.returncode, 128 + sig, name))
        check(summary and "truncated" not in summary[-1], "interrupt: profile not complete:\n%s" % se)
        rc, rep, _ = run([ctx.flamme, "report", out])
        check(rc == 0 and "status: complete" in rep, "interrupt: report does not say complete:\n%s" % rep)
        st = collapse(ctx, out)
        n = total(st, lambda f: "Forever.serve" in f)
        check(n >= 0.8 * total(st) and total(st) >= 50,
              "interrupt: %d of %d samples in Forever.serve" % (n, total(st)))


TESTS = [("split", test_split), ("domains", test_domains), ("effects", test_effects),
         ("deep", test_deep), ("systhread", test_systhread), ("forkexec", test_forkexec), ("stress", test_stress), ("wall", test_wall), ("eintr", test_eintr), ("interrupt", test_interrupt),
         ("robust", test_robust), ("report", test_report)]

# Wall-clock mode exists only on the timer engine (the agent switches to it).
TIMER_ONLY = {"wall", "eintr"}


def engine_available(ctx, engine):
    """Whether the agent really uses `engine` here (perf may be refused by
    perf_event_paranoid or seccomp, and the agent then falls back): a short
    recording must report that engine in its summary line."""
    out = os.path.join(ctx.work, "probe.flm")
    rc, _, se = run([ctx.flamme, "record", "-o", out, "--", ctx.exe("split"), "1"])
    m = re.search(r"\bengine (\w+)", se)
    return rc == 0 and (m is None or m.group(1) == engine), se.strip()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--only", default="", help="comma-separated test names")
    ap.add_argument("--skip", default="", help="comma-separated test names not to run")
    ap.add_argument("--engines", default="timer,perf",
                    help="FLAMME_ENGINE values to run every test with (default timer,perf; "
                         "perf is skipped with a note where the kernel refuses it)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    ap.add_argument("--compiler", default="",
                    help="the ocamlopt that built the programs (named in the output)")
    a = ap.parse_args()
    compiler = ocaml_compiler.describe(a.compiler)
    print("e2e: programs built by %s" % compiler, flush=True)
    for f in ("flamme", "libflamme.so"):
        if not os.path.exists(os.path.join(a.build, f)):
            print("e2e: %s missing; run make first" % os.path.join(a.build, f), file=sys.stderr)
            print("e2e: 0 passed, 1 failed (%s)" % compiler)
            return 1
    only = set(filter(None, a.only.split(",")))
    skip = set(filter(None, a.skip.split(",")))
    work = tempfile.mkdtemp(prefix="flamme-e2e.")
    figures = []
    passed = failed = 0
    for engine in filter(None, a.engines.split(",")):
        ENGINE.clear()
        ENGINE["FLAMME_ENGINE"] = engine
        ctx = Ctx(a.build, os.path.join(work, engine))
        os.makedirs(ctx.work)
        try:
            ok, why = engine_available(ctx, engine)
        except Failure as e:
            ok, why = False, str(e)
        if not ok:
            if engine == "perf":
                print("e2e: engine perf not usable here, its tests are skipped: %s" % why)
                continue
            failed += 1
            print("FAIL engine %s: a short recording does not use it: %s" % (engine, why))
            continue
        for name, fn in TESTS:
            if (only and name not in only) or name in skip:
                continue
            if name in TIMER_ONLY and engine != "timer":
                continue
            print("== %s [engine %s]" % (name, engine), flush=True)
            try:
                fn(ctx)
                passed += 1
                print("PASS %s [%s]" % (name, engine), flush=True)
            except Failure as e:
                failed += 1
                print("FAIL %s [%s]: %s" % (name, engine, e), flush=True)
        figures += [(engine,) + f for f in ctx.figures]
    print("figures (sample weight, sample records, share of weight whose stack reaches a thread root):")
    for engine, name, n, recs, pct in figures:
        print("  %-6s %-10s weight %6d  records %6d  %5.1f%%" % (engine, name, n, recs, pct))
    if a.keep or failed:
        print("e2e: profiles kept in %s" % work)
    else:
        shutil.rmtree(work, ignore_errors=True)
    print("e2e: %d passed, %d failed (%s)" % (passed, failed, compiler))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
