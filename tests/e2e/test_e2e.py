"""tests/e2e/test_e2e.py — end-to-end tests of flamme on real OCaml 5 programs
(make e2e, part of make test).

Each test profiles a program of tests/e2e/ the way a user would (`flamme
record`, or LD_PRELOAD + FLAMME_* variables), reads the result back with
`flamme collapse` / `flamme report` and asserts what a user would look at:
which functions got the samples, on which thread, and whether stacks reach
the thread's root. Tolerances are stated next to each assertion.

Each test runs per compiler (tests/conftest.py) and sampling engine
(FLAMME_ENGINE: timer, perf). What depends on the compiler is the code the
agent walks and the runtime it reads, not the engine nor the command's
handling of bad input, signals and reports: with the default compiler every
test runs on both engines; with the others, the program tests run on the
timer engine, and on compilers without frame pointers (a default opam
switch: stacks come from DWARF CFI) split, domains, effects, deep and
systhread also run on perf. robust, report, eintr and interrupt run with the
default compiler only; wall and eintr on the timer engine only (the agent
has wall-clock mode there only).
"""
import os
import pathlib
import re
import shutil
import signal
import struct
import subprocess
import tempfile
import time

import pytest

import flammetest
from flammetest import LABEL_DOMAIN, LABEL_SYSTHREAD, describe, is_complete, total

HERE = os.path.dirname(os.path.abspath(__file__))
HZ = 499
RUN_TIMEOUT = 180  # seconds; a hang is a failure, not a stuck CI job

# tests/e2e/<name>.ml and the libraries it links.
PROGS = {"split": (), "domains": (), "effects": (), "deep": (), "forever": (), "stress": (),
         "systhread": ("unix", "threads"), "blocking": ("unix", "threads"),
         "forkexec": ("unix",), "selectwait": ("unix",), "mmapth": (), "heaptrim": (),
         "execchain": ("unix",), "forkwork": ("unix", "threads"), "errfile": ("unix",)}

ENGINES = ("timer", "perf")
ON_EVERY_COMPILER = {"split", "domains", "effects", "deep", "systhread", "forkexec", "execchain", "forkwork",
                     "forkdaemon", "stderr_file", "stress", "wall",
                     "no_flamme_at_start_and_exit", "mmapth", "heaptrim"}
NOFP_PERF = {"split", "domains", "effects", "deep", "systhread", "no_flamme_at_start_and_exit"}
TIMER_ONLY = {"wall", "eintr"}

MAIN_ROOTS = {"main", "__libc_start_call_main", "__libc_start_main", "_start"}
THREAD_ROOTS = {"start_thread", "clone3", "clone"}
ALL_ROOTS = MAIN_ROOTS | THREAD_ROOTS
# glibc's thread entries are static functions: with a libc that has no
# .symtab they show up as "[libc.so.6]". Such a frame can only be root-most
# when the walk ended cleanly in libc (a bad frame pointer gives [broken]).
UNNAMED_LIBC = re.compile(r"^\[libc\.so\.[0-9.]+\]$")


# Tests of the walker's completeness on deep stacks at high rates: the
# handler's CPU budget (which shortens such samples, see agent/budget.h) off.
NO_BUDGET = {"FLAMME_BUDGET": "0"}

# Of the compilers without frame pointers (the former nofp group): at least
# this share of a whole profile's stacks is complete (root-most frame a
# thread root by name), 90% for the 6000-deep recursion.
NOFP_COMPLETE = 0.95

_engines = {}    # engine -> (usable, why) from a short probe recording
_profiles = {}   # (compiler, engine) -> {program: profile}, reused by test_report


def plan(name, compiler, default, engine):
    """None when test NAME runs with COMPILER and ENGINE, else why not."""
    if engine != "timer" and name in TIMER_ONLY:
        return "wall-clock mode exists on the timer engine only"
    if compiler.name == default.name:
        return None
    if name not in ON_EVERY_COMPILER:
        return "does not depend on the compiler: runs with %s only" % default
    if engine == "timer" or (not compiler.fp and name in NOFP_PERF):
        return None
    return "the perf engine runs with %s and, for the core programs, compilers without frame pointers" % default


class Ctx:
    """One test's run: the build, the compiler's programs, the engine."""

    def __init__(self, build, ocaml, compiler, engine, work, check):
        self.flamme = build.flamme
        self.lib = build.lib
        self.ocaml = ocaml
        self.compiler = compiler
        self.engine = engine
        self.work = str(work)
        self.check = check
        self.profiles = _profiles.setdefault((compiler.name, engine), {})
        self.weight_per_record = 1.0  # of the last recording, see record()
        self.last_records = 0

    def exe(self, name):
        stubs = os.path.join(HERE, name + "_stubs.c")
        sources = ([stubs] if os.path.exists(stubs) else []) + [os.path.join(HERE, name + ".ml")]
        return self.ocaml("e2e/" + name, sources, libs=PROGS[name])

    def env(self, extra=None):
        return flammetest.clean_env(dict({"FLAMME_ENGINE": self.engine}, **(extra or {})))

    def run(self, cmd, env=None, cwd=None):
        return flammetest.run(cmd, env=self.env(env), cwd=cwd, timeout=RUN_TIMEOUT)

    def path(self, name):
        return os.path.join(self.work, name)


@pytest.fixture
def ctx(request, build, compiler, default_compiler, ocaml, engine, tmp_path, check):
    name = request.function.__name__[len("test_"):]
    why = plan(name, compiler, default_compiler, engine)
    if why:
        pytest.skip(why)
    c = Ctx(build, ocaml, compiler, engine, tmp_path, check)
    if engine not in _engines:
        # Whether the agent really uses the engine here (perf may be refused
        # by perf_event_paranoid or seccomp, and the agent then falls back).
        p = c.run([c.flamme, "record", "-o", c.path("probe.flm"), "--", c.exe("split"), "1"])
        m = re.search(r"\bengine (\w+)", p.stderr)
        _engines[engine] = (p.returncode == 0 and (m is None or m.group(1) == engine), p.stderr.strip())
    usable, why = _engines[engine]
    if not usable and engine == "perf":
        pytest.skip("engine perf not usable here: %s" % why)
    assert usable, "engine %s: a short recording does not use it: %s" % (engine, why)
    return c


def report_counts(ctx, prof):
    """Sets ctx.last_records and ctx.weight_per_record from `flamme report`.
    Collapse counts are sample weights: a sample taken late (timer overrun,
    e.g. CPU-clock timers that only fire on the scheduler tick) stands for
    several periods. Statistical power comes from the number of records."""
    p = ctx.run([ctx.flamme, "report", prof])
    m = re.search(r"samples: (\d+) records, weight (\d+)", p.stdout)
    assert p.returncode == 0 and m, "flamme report %s gave no 'samples: N records, weight W' line:\n%s" % (
        prof, p.stdout + p.stderr)
    ctx.last_records = int(m.group(1))
    ctx.weight_per_record = max(1.0, int(m.group(2)) / max(1, ctx.last_records))
    return p.stdout


def record(ctx, name, args=(), out=None, cwd=None, env=None):
    """`flamme record -F HZ -o OUT -- EXE ARGS`; asserts the exit status and
    the single summary line, returns (profile path, program stdout, stderr)."""
    out = out or ctx.path(name + ".flm")
    cmd = [ctx.flamme, "record", "-F", str(HZ), "-o", out, "--", ctx.exe(name), *args]
    p = ctx.run(cmd, cwd=cwd, env=env)
    assert p.returncode == 0, "%s: exit status %d, stderr:\n%s" % (" ".join(cmd), p.returncode, p.stderr)
    summary = [l for l in p.stderr.splitlines() if l.startswith("flamme:")]
    assert len(summary) == 1, "%s: expected one 'flamme:' summary line on stderr, got:\n%s" % (name, p.stderr)
    m = re.search(r"\bengine (\w+)", summary[0])
    assert not m or m.group(1) == ctx.engine, "%s: ran with engine %s, wanted %s" % (
        name, m.group(1), ctx.engine)
    prof = os.path.join(cwd or "", out)
    assert os.path.exists(prof), "%s: no profile written at %s" % (name, out)
    ctx.profiles[name] = prof
    report_counts(ctx, prof)
    return prof, p.stdout, p.stderr


def stacks_of(ctx, prof, threads=True):
    """[(frames root first, count)] from `flamme collapse` (--threads: the
    first frame is the thread's label); asserts every line parses."""
    p = ctx.run([ctx.flamme, "collapse", prof] + (["--threads"] if threads else []))
    assert p.returncode == 0, "collapse %s failed (%d): %s" % (prof, p.returncode, p.stderr.strip())
    stacks = flammetest.parse_folded(p.stdout)
    lines = [l for l in p.stdout.splitlines() if l.strip()]
    assert len(stacks) == len(lines), "collapse: malformed lines in the output of %s" % prof
    assert stacks, "collapse of %s printed no stacks" % prof
    return stacks


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


def figure(ctx, name, stacks):
    n = total(stacks)
    r = total(stacks, lambda f: len(f) > 1 and is_root(f[1]))
    print("  figure: %-10s weight=%-6d records=%-6d reaching a root=%5.1f%%"
          % (name, n, ctx.last_records, 100.0 * r / n if n else 0.0))


def by_label(stacks):
    labels = {}
    for f, c in stacks:
        labels.setdefault(f[0], []).append((f, c))
    return labels


def profiled(ctx, name, expect, args=(), env=None):
    """Records program `name`, asserts its stdout matches the regex `expect`,
    returns (collapsed stacks with thread labels, regex match)."""
    prof, so, _ = record(ctx, name, args, env=env)
    m = re.search(expect, so)
    assert m, "%s: unexpected output %r" % (name, so)
    st = stacks_of(ctx, prof)
    figure(ctx, name, st)
    return st, m


def enough(ctx, st, sel, what, minimum):
    """Asserts there are at least `minimum` sample records selected by sel,
    so that the test's tolerance is statistically sound; returns their weight."""
    n = total(st, sel)
    recs = n / ctx.weight_per_record
    assert recs >= minimum, "only ~%d sample records %s (weight %d; want >= %d at %d Hz)\n%s" % (
        recs, what, n, minimum, HZ, describe(st))
    return n


def nofp_complete(ctx, name, st, want=NOFP_COMPLETE):
    """Compilers without frame pointers: the whole profile's stacks are
    complete (CFI for OCaml code and the runtime's stack switches)."""
    if ctx.compiler.fp:
        return
    share = flammetest.completeness(st, labelled=True)
    bad = sorted(((c, ";".join(f[-6:])) for f, c in st if not is_complete(f, True)), reverse=True)[:3]
    print("  %s: %.1f%% of the stacks complete" % (name, 100 * share))
    ctx.check(share >= want, "%s (no frame pointers): stacks complete >= %.0f%%" % (name, 100 * want),
              "%.1f%%; heaviest incomplete: %s" % (100 * share, bad))


ENGINE = pytest.mark.parametrize("engine", ENGINES)


@pytest.mark.slow
@ENGINE
def test_split(ctx):
    """Single domain, three functions with a 50/30/20 CPU split by
    construction. Tolerance ±5 points: with >= 700 sample records the
    binomial standard deviation is <= 1.9 points, so 5 points is > 2.6 sigma
    (and the construction has no systematic bias: same loop, interleaved)."""
    st, _ = profiled(ctx, "split", r"split: rounds=500 ")
    under = lambda f: "Split.run_rounds" in f
    enough(ctx, st, under, "under Split.run_rounds", 700)
    for fn, want in (("Split.work_a", 50.0), ("Split.work_b", 30.0), ("Split.work_c", 20.0)):
        share, _ = frac(st, under, lambda f, fn=fn: fn in f)
        print("  %s: %.1f%% (expected %.0f%% ± 5)" % (fn, 100 * share, want))
        ctx.check(abs(100 * share - want) <= 5.0, "split: %s has %.0f%% ± 5 of the samples" % (fn, want),
                  "%.1f%%" % (100 * share))
    share, nmain = frac(st, lambda f: f[0] == "main", reaches(MAIN_ROOTS))
    print("  main thread: %d samples, %.1f%% reach main" % (nmain, 100 * share))
    ctx.check(share >= 0.90, "split: >= 90% of the main thread's stacks reach main",
              "%.1f%%\n%s" % (100 * share, describe(st)))
    nofp_complete(ctx, "split", st)


@pytest.mark.slow
@ENGINE
def test_domains(ctx):
    """Two spawned domains, each calling only its own work function."""
    st, _ = profiled(ctx, "domains", r"^domains: a=")
    labels = by_label(st)
    # 300 records per domain: a 90% share then has a standard deviation of
    # 1.7 points, and a true share of ~100% passes with a wide margin.
    doms = {l: s for l, s in labels.items()
            if LABEL_DOMAIN.match(l) and total(s) / ctx.weight_per_record >= 300}
    assert len(doms) >= 2, "domains: want 2 'domain N' labels with >= 300 sample records, got %s" % {
        l: total(s) for l, s in labels.items()}
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
        ctx.check(own[1] >= 0.90, "domains: %s: its main function %s has >= 90%%" % (label, own[0]),
                  "%.1f%%\n%s" % (100 * own[1], describe(s)))
        ctx.check(other[1] <= 0.01, "domains: %s: %s of the other domain has <= 1%%" % (label, other[0]),
                  "%.1f%%" % (100 * other[1]))
        ctx.check(root >= 0.90, "domains: %s: >= 90%% of stacks reach start_thread" % label,
                  "%.1f%%\n%s" % (100 * root, describe(s)))
        owners.setdefault(own[0], []).append(label)
    ctx.check(set(owners) == {"work_a", "work_b"}, "domains: each domain attributed to its own function",
              owners)
    nofp_complete(ctx, "domains", st)


@pytest.mark.slow
@ENGINE
def test_effects(ctx):
    """Fibers under an Effect.Deep handler: samples in the fiber's compute
    function must link through the resumer to run_scheduler and main."""
    st, m = profiled(ctx, "effects", r"switches=(\d+)")
    ctx.check(int(m.group(1)) > 10000, "effects: more than 10000 fiber switches", m.group(1))
    in_fiber = lambda f: "Effects.compute" in f
    # >= 90% wanted, ~100% expected: 500 records (sd of a 90% share: 1.3
    # points) separate the two clearly.
    n = enough(ctx, st, in_fiber, "in Effects.compute", 500)
    sched, _ = frac(st, in_fiber, lambda f: "Effects.run_scheduler" in f)
    both, _ = frac(st, in_fiber, lambda f: "Effects.run_scheduler" in f and reaches(MAIN_ROOTS)(f))
    print("  Effects.compute: %d samples, %.1f%% under run_scheduler, %.1f%% also reach main"
          % (n, 100 * sched, 100 * both))
    ctx.check(both >= 0.90, "effects: >= 90% of Effects.compute stacks contain Effects.run_scheduler "
              "and reach main", "%.1f%%\n%s" % (100 * both, describe([s for s in st if in_fiber(s[0])])))
    nofp_complete(ctx, "effects", st)


@pytest.mark.slow
@ENGINE
def test_deep(ctx):
    """6000 non-tail recursive frames with the CPU at the bottom."""
    st, _ = profiled(ctx, "deep", r"deep: depth=6000 ", env=NO_BUDGET)
    at_bottom = lambda f: "Deep.bottom" in f
    n = enough(ctx, st, at_bottom, "in Deep.bottom", 500)  # as for effects
    depth_ok, _ = frac(st, at_bottom, lambda f: f.count("Deep.descend") >= 5000)
    full, _ = frac(st, at_bottom, lambda f: f.count("Deep.descend") >= 5000 and reaches(MAIN_ROOTS)(f))
    deepest = max(f.count("Deep.descend") for f, _ in st)
    print("  Deep.bottom: %d samples, %.1f%% with >= 5000 descend frames (max %d), %.1f%% also reach main"
          % (n, 100 * depth_ok, deepest, 100 * full))
    ctx.check(full >= 0.90, "deep: >= 90% of Deep.bottom stacks have >= 5000 Deep.descend frames and "
              "reach main", "%.1f%%; deepest seen: %d" % (100 * full, deepest))
    ctx.check(deepest >= 6000, "deep: the deepest stack holds all 6000 Deep.descend frames", deepest)
    nofp_complete(ctx, "deep", st, 0.90)


@pytest.mark.slow
@ENGINE
def test_systhread(ctx):
    """A systhread inside a spawned domain: its samples must be on its own
    thread label 'thread TID (domain N)', N being the domain whose main thread
    runs work_domain."""
    st, _ = profiled(ctx, "systhread", r"^systhread: domain=")
    nofp_complete(ctx, "systhread", st)
    labels = by_label(st)
    wt = {l: total(s, lambda f: "Systhread.work_thread" in f) for l, s in labels.items()}
    wd = {l: total(s, lambda f: "Systhread.work_domain" in f) for l, s in labels.items()}
    tl = max(wt, key=wt.get)
    dl = max(wd, key=wd.get)
    print("  work_thread samples by label: %s" % {l: c for l, c in wt.items() if c})
    print("  work_domain samples by label: %s" % {l: c for l, c in wd.items() if c})
    assert min(wt[tl], wd[dl]) / ctx.weight_per_record >= 300, \
        "systhread: too few sample records (work_thread %d, work_domain %d)" % (wt[tl], wd[dl])
    mt, md = LABEL_SYSTHREAD.match(tl), LABEL_DOMAIN.match(dl)
    assert md, "systhread: work_domain's samples are on %r, expected a 'domain N' label" % dl
    assert mt, "systhread: work_thread's samples are on %r, expected 'thread TID (domain N)'" % tl
    ctx.check(mt.group(2) == md.group(1), "systhread: the thread label names the domain running work_domain",
              "%r vs %r" % (tl, dl))
    # The systhread's own samples: >= 90% in work_thread; the work must not
    # leak onto the domain's main thread (<= 2% there, GC/handover noise).
    own, n = frac(labels[tl], lambda f: True, lambda f: "Systhread.work_thread" in f)
    leak = wt.get(dl, 0) / max(1, total(labels[dl]))
    root, _ = frac(labels[tl], lambda f: True, reaches(THREAD_ROOTS))
    print("  %s: %d samples, %.1f%% work_thread, %.1f%% reach start_thread; work_thread on %s: %.1f%%"
          % (tl, n, 100 * own, 100 * root, dl, 100 * leak))
    ctx.check(own >= 0.90, "systhread: the systhread has >= 90% work_thread",
              "%s: %.1f%%\n%s" % (tl, 100 * own, describe(labels[tl])))
    ctx.check(leak <= 0.02, "systhread: <= 2% of the domain's samples are in work_thread",
              "%.1f%% of %s's" % (100 * leak, dl))
    ctx.check(root >= 0.90, "systhread: >= 90% of the systhread's stacks reach start_thread",
              "%.1f%% of %s's\n%s" % (100 * root, tl, describe(labels[tl])))


@pytest.mark.slow
@ENGINE
def test_forkexec(ctx, tmp_path):
    """Children (sh, true, fork+exec echo) run normally; only the parent writes
    a profile, and it is the parent's."""
    cwd = tmp_path / "fork"
    cwd.mkdir()
    prof, so, se = record(ctx, "forkexec", out="prof.flm", cwd=str(cwd))
    for want in ('sh said "hi" (exit 0)', "true exit 0", "fork+exec echo exit 0", "forked-child-ok"):
        ctx.check(so.count(want) == 3, "forkexec: 3 x %r in the output" % want, so)
    ctx.check(os.listdir(cwd) == ["prof.flm"], "forkexec: children left no files", sorted(os.listdir(cwd)))
    m = re.search(r"pid=(\d+)", so)
    with open(prof, "rb") as fh:
        head = fh.read(20)
    assert head[:8] == b"FLAMMEPF", "forkexec: prof.flm is not a flamme profile"
    pid = struct.unpack_from("<I", head, 16)[0]
    ctx.check(m and pid == int(m.group(1)), "forkexec: the profile is the parent's",
              "profile is from pid %d, the program was %s" % (pid, m.group(1) if m else "?"))
    st = stacks_of(ctx, prof)
    figure(ctx, "forkexec", st)
    share, n = frac(st, lambda f: f[0] == "main", lambda f: "Forkexec.work_parent" in f)
    print("  main thread: %d samples, %.1f%% in Forkexec.work_parent" % (n, 100 * share))
    # The parent spends almost all its CPU in work_parent; 80% leaves room for
    # fork/exec and startup.
    ctx.check(n / ctx.weight_per_record >= 300 and share >= 0.80,
              "forkexec: parent profile has >= 300 records, >= 80% work_parent",
              "%d samples, %.1f%%\n%s" % (n, 100 * share, describe(st)))


def image_profiles(ctx, files, pid):
    """For each profile file of an exec chain: (the image from its command
    line, its share of samples in that image's own work function); asserts
    each is the process's (pid) and complete."""
    out = []
    for f in files:
        rep = ctx.run([ctx.flamme, "report", f]).stdout
        m = re.search(r"command: \S*execchain\.exe(?: (\d))?\n", rep)
        ctx.check(("pid %d," % pid) in rep and "status: complete" in rep and m,
                  "execchain: %s is a complete profile of pid %d" % (os.path.basename(f), pid), rep[:300])
        image = int(m.group(1) or 0) if m else -1
        st = stacks_of(ctx, f)
        share, n = frac(st, lambda fr: True, lambda fr: "Execchain.work%d" % image in fr)
        out.append((image, share, n))
    return out


@pytest.mark.slow
@ENGINE
def test_execchain(ctx, tmp_path):
    """A program that execs an OCaml program keeps its pid: each image's
    profile is kept, under `flamme record` (FILE, FILE.<pid>, FILE.<pid>.2)
    and with LD_PRELOAD alone (NAME.flm, NAME.2.flm, NAME.3.flm), and holds that image's
    work, not the next one's; each image before an exec says what it wrote.
    A file an unrelated earlier process left at the name is replaced as
    before, not kept as an earlier image's."""
    exe = ctx.exe("execchain")
    for how in ("record", "preload", "preload-fixed"):
        cwd = tmp_path / how
        cwd.mkdir()
        if how == "record":
            p = ctx.run([ctx.flamme, "record", "-F", str(HZ), "-o", "chain.flm", "--", exe], cwd=str(cwd))
        else:
            out = "chain.%p.flm" if how == "preload" else "chain.flm"
            if how == "preload-fixed":
                # An earlier, unrelated run's profile at the fixed name (another pid).
                ctx.run([exe, "2"], cwd=str(cwd), env={"LD_PRELOAD": ctx.lib, "FLAMME_OUTPUT": out,
                                                      "FLAMME_HZ": str(HZ)})
            p = ctx.run([exe], cwd=str(cwd), env={"LD_PRELOAD": ctx.lib, "FLAMME_OUTPUT": out,
                                                 "FLAMME_HZ": str(HZ)})
        pids = set(re.findall(r"image \d pid=(\d+)", p.stdout))
        ctx.check(p.returncode == 0 and len(pids) == 1 and
                  re.findall(r"image (\d)", p.stdout) == ["0", "1", "2"],
                  "execchain %s: three images of one process ran and exited 0" % how,
                  "exit %d\n%s%s" % (p.returncode, p.stdout, p.stderr))
        if len(pids) != 1:
            continue
        pid = int(pids.pop())
        names = sorted(os.listdir(cwd))
        if how == "record":
            want = ["chain.flm", "chain.flm.%d" % pid, "chain.flm.%d.2" % pid]
        else:
            stem = "chain.%d" % pid if how == "preload" else "chain"
            want = [stem + ".flm", stem + ".2.flm", stem + ".3.flm"]
        ctx.check(sorted(want) == names, "execchain %s: one profile per image" % how,
                  "files %s, wanted %s" % (names, want))
        if how != "record":
            lines = [l for l in p.stderr.splitlines() if l.startswith("flamme:")]
            ctx.check(len(lines) == 3 and all(l.endswith(" (before exec)") for l in lines[:2]) and
                      lines[0].endswith("wrote " + want[0] + " (before exec)") and
                      lines[1].endswith("wrote " + want[1] + " (before exec)") and
                      lines[2].endswith("wrote " + want[2]),
                      "execchain %s: each image says what it wrote" % how, p.stderr)
        files = [str(cwd / w) for w in want if (cwd / w).exists()]
        got = image_profiles(ctx, files, pid)
        print("  %s: %s" % (how, ", ".join("image %d: %.1f%% of %d samples in its work" % (i, 100 * sh, n)
                                           for i, sh, n in got)))
        ctx.check([g[0] for g in got] == [0, 1, 2][:len(got)],
                  "execchain %s: the files are images 0, 1, 2 in order" % how, got)
        # ~0.3 s of work each at 499 Hz: ~150 samples; the rest is start-up
        # and the exec.
        for image, share, n in got:
            ctx.check(n / ctx.weight_per_record >= 60 and share >= 0.8,
                      "execchain %s: image %d's profile: >= 60 records, >= 80%% in work%d" % (how, image, image),
                      "%d samples, %.1f%%" % (n, 100 * share))


@pytest.mark.slow
@ENGINE
def test_forkwork(ctx, tmp_path):
    """Workers forked without exec (a process pool) are profiled, as perf
    follows children: under `flamme record` each writes FILE.<pid> with its
    own work (whatever way it ends: exit, _exit, its only thread, a
    systhread, returning) and nothing of the parent's; the parent's profile
    has none of theirs; the fork and exec of Unix.system leaves no file.
    FLAMME_FORK=0 leaves the workers alone; with LD_PRELOAD alone and %p in
    FLAMME_OUTPUT each writes its own NAME. In the record and preload
    ways the parent moves into a subdirectory before it forks: the relative
    name was given where it started, and every profile lands there."""
    exe = ctx.exe("forkwork")
    for how in ("record", "preload", "nofork"):
        cwd = tmp_path / how
        cwd.mkdir()
        away = cwd / "away"
        away.mkdir()
        cmd = [exe] if how == "nofork" else [exe, "chdir", "away"]
        if how == "record":
            p = ctx.run([ctx.flamme, "record", "-F", str(HZ), "-o", "p.flm", "--"] + cmd, cwd=str(cwd))
        else:
            env = {"LD_PRELOAD": ctx.lib, "FLAMME_OUTPUT": "p.%p.flm", "FLAMME_HZ": str(HZ)}
            if how == "nofork":
                env["FLAMME_FORK"] = "0"
            p = ctx.run(cmd, cwd=str(cwd), env=env)
        ctx.check(how == "nofork" or "moved to %s\n" % os.path.realpath(away) in p.stdout,
                  "forkwork %s: the parent moved into away/ before forking" % how, p.stdout)
        ctx.check(not os.listdir(away), "forkwork %s: no profile followed the parent into away/" % how,
                  sorted(os.listdir(away)))
        parent = re.search(r"parent pid=(\d+) system: exit 0", p.stdout)
        workers = re.findall(r"worker \d pid=(\d+)", p.stdout)
        ctx.check(p.returncode == 0 and parent and len(workers) == 3 and
                  len(re.findall(r"worker pid=\d+ ended: exit 0", p.stdout)) == 3,
                  "forkwork %s: the parent, its three workers and Unix.system ran and exited 0" % how,
                  "exit %d\n%s%s" % (p.returncode, p.stdout, p.stderr))
        if not parent:
            continue
        ppid = int(parent.group(1))
        names = sorted(n for n in os.listdir(cwd) if n != "away")
        if how == "record":
            mine, theirs = "p.flm", ["p.flm.%s" % w for w in workers]
        else:
            mine, theirs = "p.%d.flm" % ppid, ["p.%s.flm" % w for w in workers]
        want = sorted([mine] + (theirs if how != "nofork" else []))
        ctx.check(names == want, "forkwork %s: %s" % (how, "the parent's profile only" if how == "nofork"
                                                     else "one profile per worker, none for Unix.system"),
                  "files %s, wanted %s" % (names, want))
        if how == "record":
            ctx.check("wrote 3 profiles of child processes" in p.stderr,
                      "forkwork record: the summary counts the workers' profiles", p.stderr)
        st = stacks_of(ctx, str(cwd / mine))
        share, n = frac(st, lambda f: True, lambda f: "Forkwork.parent_work" in f)
        leaked = total(st, lambda f: "Forkwork.child_work" in f)
        print("  %s: parent %.1f%% of %d samples in parent_work, %d in child_work" % (how, 100 * share, n, leaked))
        ctx.check(leaked == 0 and n / ctx.weight_per_record >= 60 and share >= 0.8,
                  "forkwork %s: the parent's profile is its own work (>= 80%% parent_work, none of the workers')" % how,
                  "%d samples, %.1f%% parent_work, %d child_work" % (n, 100 * share, leaked))
        for w in theirs:
            f = cwd / w
            if not f.exists():
                continue
            rep = ctx.run([ctx.flamme, "report", str(f)]).stdout
            st = stacks_of(ctx, str(f))
            share, n = frac(st, lambda fr: True, lambda fr: "Forkwork.child_work" in fr)
            leaked = total(st, lambda fr: "Forkwork.parent_work" in fr)
            whole = total(st, lambda fr: fr[1] in MAIN_ROOTS or fr[1] in THREAD_ROOTS)
            print("  %s: worker %s %.1f%% of %d samples in child_work, %d in parent_work, %d whole"
                  % (how, w, 100 * share, n, leaked, whole))
            ctx.check(("pid %s," % w.split(".")[-1 if how == "record" else 1]) in rep and
                      "status: complete" in rep,
                      "forkwork %s: %s is a complete profile of that worker" % (how, w), rep[:300])
            # ~0.3 s of work at 499 Hz: ~150 samples, fewer on 2 busy cores.
            ctx.check(leaked == 0 and n / ctx.weight_per_record >= 60 and share >= 0.9 and whole == n,
                      "forkwork %s: worker %s: >= 60 records, >= 90%% child_work, none of the "
                      "parent's, every stack whole" % (how, w),
                      "%d samples, %.1f%%, %d parent_work, %d whole\n%s" % (n, 100 * share, leaked, whole,
                                                                          describe(st)))


@pytest.mark.slow
@ENGINE
def test_forkdaemon(ctx, tmp_path):
    """A worker that outlives the command `flamme record` ran (a daemon:
    fork, setsid, the parent exits): record's summary says its profile is
    still being written, not truncated; another run to the same -o is
    refused meanwhile; once the worker is done the profile is complete and
    holds its work."""
    exe = ctx.exe("forkwork")
    cwd = tmp_path / "daemon"
    cwd.mkdir()
    marker = str(tmp_path / "worker.done")
    p = ctx.run([ctx.flamme, "record", "-F", str(HZ), "-o", "p.flm", "--", exe, "daemon", marker],
                cwd=str(cwd))
    m = re.search(r"parent left worker pid=(\d+)", p.stdout)
    ctx.check(p.returncode == 0 and m, "forkdaemon: the parent exited 0", p.stdout + p.stderr)
    if not m:
        return
    pid = m.group(1)
    lines = [l for l in p.stderr.splitlines() if "p.flm.%s" % pid in l]
    ctx.check(len(lines) == 1 and lines[0].endswith("(still being written: its process runs on)"),
              "forkdaemon: record says the worker's profile is still being written", p.stderr)
    # Another run to p.flm meanwhile would move or remove the worker's
    # profile (and count it as its own): refused, naming it; nothing runs.
    q = ctx.run([ctx.flamme, "record", "-o", "p.flm", "--", exe], cwd=str(cwd))
    alive = os.path.exists("/proc/" + pid)
    ctx.check(not alive or (q.returncode == 1 and not q.stdout and
                            ("p.flm.%s is still being written by process %s" % (pid, pid)) in q.stderr),
              "forkdaemon: a second run to p.flm while the worker writes is refused, naming its file",
              "exit %d\n%s%s" % (q.returncode, q.stdout, q.stderr))
    deadline = time.time() + 60
    while os.path.exists("/proc/" + pid) and time.time() < deadline:
        time.sleep(0.1)
    f = str(cwd / ("p.flm." + pid))
    rep = ctx.run([ctx.flamme, "report", f]).stdout
    ctx.check(os.path.exists(marker) and "status: complete" in rep and "ended: exit(0)" in rep,
              "forkdaemon: once the worker is done its profile is complete", rep[:400])
    st = stacks_of(ctx, f)
    share, n = frac(st, lambda fr: True, lambda fr: "Forkwork.child_work" in fr)
    print("  forkdaemon: worker %.1f%% of %d samples in child_work" % (100 * share, n))
    ctx.check(n / ctx.weight_per_record >= 60 and share >= 0.9,
              "forkdaemon: the worker's profile: >= 60 records, >= 90% child_work",
              "%d samples, %.1f%%\n%s" % (n, 100 * share, describe(st)))


def agent_line(ctx, profs):
    """(records, writer s, the program's s) from `flamme report PROFS`."""
    p = ctx.run([ctx.flamme, "report", *profs])
    m = re.search(r"samples: (\d+) records", p.stdout)
    w = re.search(r"writer ([0-9.]+) s: [0-9.]+% of the program's ([0-9.]+) s", p.stdout)
    assert p.returncode == 0 and m and w, "flamme report %s: no samples or agent line:\n%s" % (
        " ".join(profs), p.stdout[:800] + p.stderr)
    return int(m.group(1)), float(w.group(1)), float(w.group(2))


@pytest.mark.slow
@ENGINE
def test_children(ctx, tmp_path):
    """A command that is no OCaml program (sh) starts three that are, as a
    build does: the first writes the profile, the others FILE.<pid>, and
    record sums those up in one line that says how to read them all. Read
    as one, their samples and the agent's costs add up (not one process's
    for all). A second run to the same FILE removes the first run's
    FILE.<pid> first, so that none is taken for its own. The second child
    runs in a subdirectory, as a build runs its compilers (dune: in
    _build/default): its profile is beside the others all the same."""
    cwd = tmp_path / "children"
    cwd.mkdir()
    (cwd / "sub").mkdir()
    exe = ctx.exe("split")
    script = "%s 5 > /dev/null; (cd sub && %s 5 > /dev/null); %s 5 > /dev/null" % (exe, exe, exe)
    p = ctx.run([ctx.flamme, "record", "-F", str(HZ), "-o", "prof.flm", "--", "sh", "-c", script],
                cwd=str(cwd))
    assert p.returncode == 0, "children: exit status %d:\n%s" % (p.returncode, p.stderr)
    kids = sorted(n for n in os.listdir(cwd) if re.fullmatch(r"prof\.flm\.\d+", n))
    ctx.check(len(kids) == 2 and os.path.exists(cwd / "prof.flm"),
              "children: the first OCaml process wrote prof.flm, the two others prof.flm.<pid>, "
              "the one that ran in sub/ too", sorted(os.listdir(cwd)))
    ctx.check(not os.listdir(cwd / "sub"), "children: no profile in sub/, where one of them ran",
              sorted(os.listdir(cwd / "sub")))
    lines = [l for l in p.stderr.splitlines() if l.startswith("flamme:")]
    ctx.check(len(lines) == 3 and "wrote 2 profiles of child processes" in lines[1]
              and "flamme report prof.flm prof.flm.[0-9]*" in lines[1],
              "children: one summary line for the children's profiles, with the command reading all",
              p.stderr)
    ctx.check(lines[-1].startswith("flamme: by command: split.exe x2: "),
              "children: a line says which commands wrote them", p.stderr)
    files = [str(cwd / "prof.flm")] + [str(cwd / k) for k in kids]
    each = [agent_line(ctx, [f]) for f in files]
    records, writer, prog = agent_line(ctx, files)
    print("  children: %s; read as one: %d records, writer %.3f s, the programs' %.2f s"
          % (", ".join("%d records, writer %.3f s, %.2f s" % e for e in each), records, writer, prog))
    rep = ctx.run([ctx.flamme, "report", *files]).stdout
    ctx.check("3 processes (the first: pid " in rep and "command of the last: " in rep,
              "children: read as one, the report says how many processes", rep[:400])
    ctx.check("(3 processes read as one: a domain's row adds up that domain of each)" in rep,
              "children: read as one, the GC table says its domain rows add up the processes'",
              rep[rep.find("GC:"):][:400])
    roots = {l.split(";", 1)[0] for l in ctx.run([ctx.flamme, "collapse", "--threads", *files]).stdout.splitlines()}
    ctx.check(roots == {"split.exe: main"}, "children: read as one, --threads labels name the command",
              sorted(roots))
    ctx.check(records == sum(e[0] for e in each), "children: read as one, the samples add up")
    ctx.check(abs(writer - sum(e[1] for e in each)) <= 0.003,
              "children: read as one, the writers' CPU adds up", "%.3f s" % writer)
    ctx.check(abs(prog - sum(e[2] for e in each)) <= 0.03,
              "children: read as one, the programs' CPU adds up", "%.2f s" % prog)
    p = ctx.run([ctx.flamme, "record", "-F", str(HZ), "-o", "prof.flm", "--", "sh", "-c",
                 "; ".join(["%s 5 > /dev/null" % exe] * 2)], cwd=str(cwd))
    left = [n for n in os.listdir(cwd) if re.fullmatch(r"prof\.flm\.\d+", n)]
    ctx.check(p.returncode == 0 and "removed 2 profiles prof.flm.<pid>" in p.stderr and
              len(left) == 1 and left[0] not in kids,
              "children: a second run removes the first run's children's profiles first",
              "%s\n%s" % (sorted(os.listdir(cwd)), p.stderr))


@pytest.mark.slow
@ENGINE
def test_stress(ctx):
    """Fibers whose stacks grow and move, exceptions, allocation and three
    domains, sampled at a high rate: the program must behave exactly as
    without the profiler and its stacks must still mostly reach a root."""
    exe = ctx.exe("stress")
    # Twice the default work: 100% is 1.1-1.5 s of CPU on the CI machine,
    # which a tick-limited timer (250 Hz) samples 283-384 times: too close
    # to the floor below (CI failed once at 283).
    args = ["200"]
    plain = flammetest.run([exe] + args, timeout=RUN_TIMEOUT)
    assert plain.returncode == 0 and plain.stdout.startswith("stress: "), \
        "stress without profiler failed (%d): %s" % (plain.returncode, plain.stderr)
    out = ctx.path("stress.flm")
    cmd = [ctx.flamme, "record", "-F", "1999", "-o", out, "--", exe] + args
    p = ctx.run(cmd, env=NO_BUDGET)
    assert p.returncode == 0, "%s: exit status %d:\n%s" % (" ".join(cmd), p.returncode, p.stderr)
    ctx.check(p.stdout == plain.stdout, "stress: output the same under the profiler",
              "%s\nwithout:\n%s" % (p.stdout, plain.stdout))
    report_counts(ctx, out)
    st = stacks_of(ctx, out)
    figure(ctx, "stress", st)
    share, n = frac(st, lambda f: True, lambda f: "Stress.dive" in f)
    root, _ = frac(st, lambda f: True, lambda f: len(f) > 1 and is_root(f[1]))
    print("  %d records, %.1f%% of the weight in Stress.dive, %.1f%% reach a root"
          % (ctx.last_records, 100 * share, 100 * root))
    # ~3 s of CPU at 1999 Hz; even a tick-limited timer gives > 300 records.
    ctx.check(ctx.last_records >= 300, "stress: >= 300 sample records", ctx.last_records)
    ctx.check(share >= 0.5, "stress: Stress.dive has >= 50% of the samples",
              "%.1f%%\n%s" % (100 * share, describe(st)))
    # Stacks that grow while sampled (caml_try_realloc_stack) and the effect
    # switches are the hard cases; the walker follows both.
    ctx.check(root >= 0.99, "stress: >= 99% of stacks reach a thread root",
              "%.1f%%\n%s" % (100 * root, describe([x for x in st if not is_root(x[0][1])])))


@pytest.mark.slow
@ENGINE
def test_mmapth(ctx):
    """glibc moves its mmap threshold, for the whole process, when a mapped
    block is freed: the agent's own large blocks must not move it, or the
    program's memory behaves otherwise than alone (a first run, with no
    unwind tables kept, freed a 1.9 MB table it built: the program's blocks
    of up to 1.9 MB came from the heap, and a program whose fiber stacks
    grow past 128 KB ran in 0.07 s of CPU, 1.2-2.4 s alone). mmapth says how blocks of
    a few sizes are served, at its start and after 0.2 s of work: the same
    alone, under a first run (an empty cache of tables) and a second."""
    exe = ctx.exe("mmapth")
    args = ["80"]
    plain = flammetest.run([exe] + args, timeout=RUN_TIMEOUT)
    assert plain.returncode == 0 and plain.stdout.startswith("start: "), \
        "mmapth without profiler failed (%d): %s" % (plain.returncode, plain.stderr)
    # Alone, every block asked is mapped (what the probes rely on).
    ctx.check("heap" not in plain.stdout, "mmapth: alone, every probed block is mapped", plain.stdout)
    cache = ctx.path("tables")
    for run in ("first", "second"):
        out = ctx.path("mmapth-%s.flm" % run)
        cmd = [ctx.flamme, "record", "-F", "999", "-o", out, "--", exe] + args
        p = ctx.run(cmd, env={"FLAMME_CACHE_DIR": cache})
        assert p.returncode == 0, "%s: exit status %d:\n%s" % (" ".join(cmd), p.returncode, p.stderr)
        ctx.check(p.stdout == plain.stdout,
                  "mmapth: the %s run's blocks are served as alone" % run,
                  "%s\nwithout:\n%s" % (p.stdout, plain.stdout))
    ctx.check(os.path.isdir(cache) and os.listdir(cache),
              "mmapth: the first run kept tables (so the two runs differ)", cache)


@pytest.mark.slow
@ENGINE
def test_heaptrim(ctx):
    """A program whose OCaml blocks above 128 words come and go (each a
    malloc of the runtime's, freed by the major GC's sweep) keeps its heap
    as alone: glibc does not give the heap's top back and take it again at
    every major slice. It did in 5 of 8 runs under the agent of 2026-11-29,
    whose chunk buffer, made with malloc in the main thread among the
    program's blocks, was freed there by the writer thread in mid-run:
    136,000-147,000 page faults for 600-1,400 (the program ran 5-9x longer,
    half of it in the kernel). The program counts its own page faults
    (flammetest.heaptrim_runs). OCaml 5.1.0's runtime trims so alone (some
    206,000 faults): there the runs only have to match that."""
    exe = ctx.exe("heaptrim")

    def profiled(i):
        out = ctx.path("heaptrim-%d.flm" % i)
        return ctx.run([ctx.flamme, "record", "-F", str(HZ), "-o", out, "--", exe])
    flammetest.heaptrim_runs(ctx.check, flammetest.run([exe], timeout=RUN_TIMEOUT), profiled,
                             "heaptrim %s %s" % (ctx.compiler.name, ctx.engine))


@pytest.mark.slow
@ENGINE
def test_wall(ctx):
    """Wall-clock mode (FLAMME_MODE=wall, timer engine): blocked threads are
    sampled too. The program must run unchanged (signals on threads blocked
    in read/nanosleep), the main thread's time blocked in Unix.read must be
    attributed to Blocking.reader with stacks reaching main, and the writer
    systhread must be labelled as a thread of domain 0."""
    out = ctx.path("wall.flm")
    cmd = [ctx.flamme, "record", "-F", str(HZ), "-o", out, "--", ctx.exe("blocking")]
    p = ctx.run(cmd, env={"FLAMME_MODE": "wall"})
    assert p.returncode == 0 and "blocking: got=50 " in p.stdout, "%s: exit %d, output %r:\n%s" % (
        " ".join(cmd), p.returncode, p.stdout, p.stderr)
    report_counts(ctx, out)
    st = stacks_of(ctx, out)
    figure(ctx, "blocking", st)
    labels = by_label(st)
    in_read = lambda f: f[0] == "main" and "caml_unix_read" in f
    n = total(st, in_read)
    # ~1.2 s blocked at 499 Hz: ~600 samples expected; 150 is a floor that
    # only a mode that does not sample blocked threads misses.
    assert n >= 150, "wall: only %d main-thread samples in caml_unix_read\n%s" % (
        n, describe(labels.get("main", st)))
    ok, _ = frac(st, in_read, lambda f: "Blocking.reader" in f and reaches(MAIN_ROOTS)(f))
    print("  main thread blocked in read: %d samples, %.1f%% attributed to Blocking.reader and reaching main"
          % (n, 100 * ok))
    wl = [l for l, s in labels.items() if total(s, lambda f: "caml_unix_sleep" in f or "Blocking.writer" in f)]
    print("  writer thread label(s): %s" % wl)
    ctx.check(ok >= 0.90, "wall: >= 90% of the main thread's samples in caml_unix_read contain "
              "Blocking.reader and reach main",
              "%.1f%%\n%s" % (100 * ok, describe([x for x in st if in_read(x[0])])))
    ctx.check(len(wl) == 1 and LABEL_SYSTHREAD.match(wl[0]) and LABEL_SYSTHREAD.match(wl[0]).group(2) == "0",
              "wall: the writer systhread is one 'thread TID (domain 0)' label", wl)
    # The time spent waiting is marked as such: blocked in the read system call.
    blocked, _ = frac(st, in_read, lambda f: f[-1] == "[blocked]")
    print("  main thread in read marked [blocked]: %.1f%%" % (100 * blocked))
    ctx.check(blocked >= 0.90, "wall: >= 90% of the main thread's samples in caml_unix_read end in [blocked]",
              "%.1f%%" % (100 * blocked))


@pytest.mark.slow
@ENGINE
def test_stderr_file(ctx, tmp_path):
    """The agent writes its lines only to the stderr the program started
    with. A program started with stderr closed gets descriptor 2 for the
    first file it opens, and a server puts its log over stderr: those files
    hold what they hold without flamme, not flamme's summary line. The
    profile is written all the same."""
    exe = ctx.exe("errfile")
    for how in ("open", "dup2"):
        got = {}
        for run in ("alone", "profiled"):
            d = tmp_path / ("%s_%s" % (how, run))
            d.mkdir()
            env = {} if run == "alone" else {"LD_PRELOAD": ctx.lib, "FLAMME_OUTPUT": "p.flm",
                                             "FLAMME_HZ": str(HZ)}
            # Descriptor 2 closed for "open", as `prog 2>&-` does.
            cmd = ["sh", "-c", 'exec 2>&-; exec "$0" "$@"' if how == "open" else 'exec "$0" "$@"',
                   exe, how, "file.txt"]
            p = ctx.run(cmd, cwd=str(d), env=env)
            text = (d / "file.txt").read_text() if (d / "file.txt").exists() else None
            got[run] = (p.returncode, p.stdout, text)
            if run == "profiled":
                st = stacks_of(ctx, str(d / "p.flm")) if (d / "p.flm").exists() else []
                n, fib = total(st), total(st, lambda f: "Errfile.fib" in f)
                print("  %s: file %r, %d samples, %d in fib" % (how, text, n, fib))
                ctx.check(n / ctx.weight_per_record >= 10 and fib >= 0.8 * n,
                          "stderr %s: the profile is written, its samples in Errfile.fib" % how,
                          "%d samples, %d in fib" % (n, fib))
        ctx.check(got["alone"][1] == "fd=2\n", "stderr %s: the file is descriptor 2" % how, got["alone"][1])
        ctx.check(got["profiled"] == got["alone"] and got["alone"][2] and "flamme" not in got["alone"][2],
                  "stderr %s: exit status, output and file are as without flamme" % how,
                  "alone %r, profiled %r" % (got["alone"], got["profiled"]))


def test_not_preloadable(build, ocaml_default, check):
    """An OCaml program the loader cannot preload into (statically linked;
    set-user-ID to another user) runs as always, and record says why there
    is no profile, instead of asking whether it is an OCaml 5 program."""
    static = ocaml_default("e2e/split_static", [os.path.join(HERE, "split.ml")], name="split_static",
                           flags=("-ccopt", "-static"))
    # A directory the other user can reach (pytest's own are its owner's).
    tmp_path = pathlib.Path(tempfile.mkdtemp(prefix="flamme-e2e-suid-"))
    os.chmod(str(tmp_path), 0o777)
    suid = str(tmp_path / "split_suid.exe")
    shutil.copy(ocaml_default("e2e/split", [os.path.join(HERE, "split.ml")]), suid)
    os.chmod(suid, 0o4755)
    for what, exe, user, why in (
            ("static", static, None, "it is statically linked, and only the dynamic loader preloads"),
            ("set-user-ID", suid, 65534, "it runs set-user-ID or set-group-ID, and the loader then "
                                         "ignores LD_PRELOAD")):
        if user is not None and (os.geteuid() != 0 or not shutil.which("setpriv")):
            print("  %s: needs root and setpriv to run as another user" % what)
            continue
        cmd = [build.flamme, "record", "-o", str(tmp_path / "p.flm"), "--", exe, "2"]
        if user is not None:
            cmd = ["setpriv", "--reuid=%d" % user, "--regid=%d" % user, "--clear-groups"] + cmd
        p = flammetest.run(cmd, cwd=str(tmp_path))
        lines = [l for l in p.stderr.splitlines() if l.startswith("flamme")]
        print("  %s: exit %d, %s" % (what, p.returncode, lines))
        check(p.returncode == 0 and p.stdout.startswith("split: rounds="),
              "%s: the program runs as always" % what, "exit %d\n%s%s" % (p.returncode, p.stdout, p.stderr))
        check(len(lines) == 1 and why in lines[0] and not os.path.exists(tmp_path / "p.flm"),
              "%s: one line says why there is no profile" % what, p.stderr)
    shutil.rmtree(str(tmp_path), ignore_errors=True)


def preload(ctx, name, args, env):
    return ctx.run([ctx.exe(name), *args], env=dict({"LD_PRELOAD": ctx.lib}, **env))


@pytest.mark.slow
@ENGINE
def test_robust(ctx):
    """Bad settings never stop the program: one warning line per bad
    variable, the profile is still written; an unwritable output path gives
    one error line and exit status 0."""
    for var, bad in (("FLAMME_HZ", "abc"), ("FLAMME_DEPTH", "-3")):
        out = ctx.path("robust_%s.flm" % bad.strip("-"))
        p = preload(ctx, "split", ["10"], {var: bad, "FLAMME_OUTPUT": out})
        print("  %s=%s: exit %d, stderr: %r" % (var, bad, p.returncode, p.stderr.strip()))
        if not ctx.check(p.returncode == 0 and "split: rounds=50" in p.stdout,
                         "%s=%s: the program runs to its end" % (var, bad),
                         "exit %d: %s" % (p.returncode, p.stderr)):
            continue
        lines = [l for l in p.stderr.splitlines() if var in l]
        ctx.check(len(lines) == 1, "%s=%s: one warning line naming %s" % (var, bad, var), p.stderr)
        if ctx.check(os.path.exists(out), "%s=%s: the profile is written" % (var, bad)):
            st = stacks_of(ctx, out)
            ctx.check(total(st, lambda f: "Split.run_rounds" in f) > 0,
                      "%s=%s: the profile has Split samples" % (var, bad))
    blocker = ctx.path("not_a_dir")
    open(blocker, "w").close()
    out = os.path.join(blocker, "prof.flm")
    p = preload(ctx, "split", ["10"], {"FLAMME_OUTPUT": out})
    print("  FLAMME_OUTPUT=%s: exit %d, stderr: %r" % (out, p.returncode, p.stderr.strip()))
    ctx.check(p.returncode == 0 and "split: rounds=50" in p.stdout,
              "unwritable output: the program runs to its end", "exit %d: %s" % (p.returncode, p.stderr))
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    ctx.check(len(lines) == 1 and out in lines[0], "unwritable output: one error line naming the path",
              p.stderr)
    # `flamme record` to a directory that is not one: one line naming it,
    # exit 1, before the program runs (it used to run unprofiled, the
    # agent's error in the middle of its output, and record exit 0).
    p = ctx.run([ctx.flamme, "record", "-o", out, "--", ctx.exe("split"), "10"])
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    ctx.check(p.returncode == 1 and len(lines) == 1 and out in lines[0] and "split:" not in p.stdout,
              "record to an unwritable path: one line naming it, exit 1, the program not run",
              "exit %d\n%s%s" % (p.returncode, p.stdout, p.stderr))
    # `flamme record` passes the program's exit status through: an uncaught
    # OCaml exception (int_of_string "bogus") exits with 2.
    cmd = [ctx.flamme, "record", "-o", ctx.path("status.flm"), "--", ctx.exe("split"), "bogus"]
    p = ctx.run(cmd)
    print("  record of a failing program: exit %d" % p.returncode)
    ctx.check(p.returncode == 2 and "Fatal error: exception Failure" in p.stderr,
              "record passes the program's exit status 2 and its error through",
              "got %d:\n%s" % (p.returncode, p.stderr))


@pytest.mark.slow
@ENGINE
def test_report(ctx):
    """`flamme report` states the share of complete stacks (root-most frame is
    a thread root); it must agree (±0.5 points: rounding to one decimal) with
    the share computed here from `flamme collapse` output. Uses the profiles
    of split, domains and effects when those tests ran before."""
    names = [n for n in ("split", "domains", "effects") if n in ctx.profiles]
    if not names:
        record(ctx, "split", ["30"])
        names = ["split"]
    for name in names:
        prof = ctx.profiles[name]
        p = ctx.run([ctx.flamme, "report", prof])
        assert p.returncode == 0, "report %s failed (%d): %s" % (prof, p.returncode, p.stderr.strip())
        m = re.search(r"complete stacks:\s*([0-9]+(?:\.[0-9]+)?)%", p.stdout)
        if not ctx.check(m, "report %s: a 'complete stacks: NN.N%%' line" % name, p.stdout):
            continue
        st = stacks_of(ctx, prof, threads=False)
        mine = 100.0 * total(st, lambda f: is_root(f[0])) / total(st)
        print("  %s: report says %s%%, collapse gives %.2f%%" % (name, m.group(1), mine))
        ctx.check(abs(float(m.group(1)) - mine) <= 0.5, "report %s: complete stacks agree with collapse" % name,
                  "%s%% vs %.2f%%" % (m.group(1), mine))


@pytest.mark.parametrize("engine", ENGINES[:1])
def test_no_samples(ctx):
    """A run too short for a sample (split with no work, 1 Hz) says why on
    record's stderr, with the process's CPU time and the period, and report
    says there is no stack to judge instead of "complete stacks: 0.0%". The
    first sample may still come early (its delay is a random part of a
    period): then neither is printed."""
    out = ctx.path("none.flm")
    p = ctx.run([ctx.flamme, "record", "-F", "1", "-o", out, "--", ctx.exe("split"), "0"])
    assert p.returncode == 0, "record: exit status %d: %s" % (p.returncode, p.stderr)
    rep = report_counts(ctx, out)
    hint = re.search(r"^flamme: no samples: the process used ([0-9.]+) ms of CPU in all, "
                     r"and at 1 Hz a thread is sampled once per 1000\.0 ms", p.stderr, re.M)
    if ctx.last_records:
        print("  a sample came early: %d" % ctx.last_records)
        ctx.check(not hint, "record: no 'no samples' line when there is a sample", p.stderr)
        return
    ctx.check(hint and 0 < float(hint.group(1)) < 1000, "record: a 'no samples' line with the CPU time",
              p.stderr)
    ctx.check("no samples: no stack to judge" in rep and "complete stacks:" not in rep,
              "report: no share of complete stacks without a sample", rep)


@ENGINE
def test_no_flamme_at_start_and_exit(ctx):
    """flamme never appears in its own profiles, not even where its start
    arms the threads and its stop disarms them: 20 runs of split with no
    work at 9999 Hz. Before, the end of the start (flamme_init;
    flamme_agent_running) and the stop (flamme_on_exit;__getpid,
    flamme_agent_stop;flamme_thread_flush_self) were sampled in 5 of 40
    runs of a hello-world."""
    seen = []
    for i in range(20):
        out = ctx.path("edge%d.flm" % i)
        p = ctx.run([ctx.flamme, "record", "-F", "9999", "-o", out, "--", ctx.exe("split"), "0"])
        assert p.returncode == 0, "record: exit status %d: %s" % (p.returncode, p.stderr)
        for frames, w in flammetest.parse_folded(ctx.run([ctx.flamme, "collapse", out]).stdout):
            if any(f.startswith(("flamme_", "stop_and_report")) for f in frames):
                seen.append(";".join(frames[-4:]))
    ctx.check(not seen, "no flamme frame in 20 short runs at 9999 Hz", seen[:5])


@pytest.mark.slow
@ENGINE
def test_eintr(ctx):
    """Waits that any signal would cut short (Unix.select fails with EINTR
    whatever SA_RESTART says) run to their end under the profiler, in CPU
    mode and in wall-clock mode; in wall mode the waiting time is profiled at
    the function that waited, marked [blocked]."""
    for mode in ("cpu", "wall"):
        out = ctx.path("eintr_%s.flm" % mode)
        cmd = [ctx.flamme, "record", "-F", str(HZ), "-o", out, "--", ctx.exe("selectwait")]
        p = ctx.run(cmd, env={"FLAMME_MODE": mode})
        print("  %s mode: %s" % (mode, p.stdout.strip()))
        if not ctx.check(p.returncode == 0 and "selectwait: eintr=0 " in p.stdout,
                         "%s mode: the program saw no EINTR and ran to its end" % mode,
                         "exit %d: %r\n%s" % (p.returncode, p.stdout, p.stderr)):
            continue
        if mode == "wall":
            st = stacks_of(ctx, out)
            waited = total(st, lambda f: "Selectwait.waiter" in f and f[-1] == "[blocked]")
            # ~1.2 s waiting at HZ samples/s; half of it is a floor only a
            # profiler that drops the waits misses.
            print("  wall mode: %d samples blocked under Selectwait.waiter" % waited)
            ctx.check(waited >= 0.5 * 1.2 * HZ, "wall mode: the waits are sampled blocked under "
                      "Selectwait.waiter", "%d samples\n%s" % (waited, describe(st)))


def cpu_seconds(pid):
    """User + system CPU time of process pid so far (0 once it is gone)."""
    try:
        fields = open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


@pytest.mark.slow
@ENGINE
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_interrupt(ctx, sig):
    """A program stopped by a signal (Ctrl-C under `flamme record`, a kill)
    still leaves a complete profile: the agent completes the file, then the
    program dies of that signal, and record reports its status."""
    name = signal.Signals(sig).name
    out = ctx.path("interrupt_%s.flm" % name)

    def default_disposition():
        # A shell without job control starts its background commands with
        # SIGINT ignored, and an ignored signal stays ignored across exec: a
        # test run started so gave the program a SIGINT it rightly ignored.
        signal.signal(sig, signal.SIG_DFL)

    p = subprocess.Popen([ctx.flamme, "record", "-F", str(HZ), "-o", out, "--", ctx.exe("forever")],
                         env=ctx.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=default_disposition)
    child = None
    try:
        deadline = time.time() + 20
        while child is None and time.time() < deadline:
            time.sleep(0.2)
            try:
                kids = open("/proc/%d/task/%d/children" % (p.pid, p.pid)).read().split()
            except OSError:
                kids = []
            child = int(kids[0]) if kids else None
        assert child is not None, "interrupt: the program did not start"
        # One second of the program's CPU time, not of the wall clock: on a
        # loaded machine a wall-clock second may give it a tenth of that.
        while time.time() < deadline + 30 and cpu_seconds(child) < 1.0:
            time.sleep(0.1)
        os.kill(child, sig)
        _, se = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
            # The program too: it computes for ever.
            if child is not None:
                try:
                    os.kill(child, signal.SIGKILL)
                except OSError:
                    pass
    summary = [l for l in se.splitlines() if l.startswith("flamme:")]
    print("  %s: exit %d, %s" % (name, p.returncode, summary[-1] if summary else se.strip()))
    ctx.check(p.returncode == 128 + sig, "interrupt: record exits with the program's death by %s" % name,
              "exited %d, want %d" % (p.returncode, 128 + sig))
    ctx.check(summary and "truncated" not in summary[-1], "interrupt: the profile is complete", se)
    p = ctx.run([ctx.flamme, "report", out])
    ctx.check(p.returncode == 0 and "status: complete" in p.stdout, "interrupt: report says complete",
              p.stdout)
    st = stacks_of(ctx, out)
    n = total(st, lambda f: "Forever.serve" in f)
    ctx.check(n >= 0.8 * total(st) and total(st) >= 50, "interrupt: >= 80% of >= 50 samples in Forever.serve",
              "%d of %d" % (n, total(st)))
