"""tests/fidelity/test_fidelity.py — profile fidelity (make fidelity-test,
part of make test).

Each test records one program of tests/fidelity/ with `flamme record` the way
a user would and checks what a user would: that sampled stacks go all the way
to the thread's root (`_start`, `clone3`, ...) on every kind of OCaml 5
program (deep recursion, effect handlers, continuations resumed on another
domain, domain churn, systhreads, C stubs calling glibc, a domain blocked in
join), that the asked sampling rate is delivered, and that a known CPU split
is reproduced.

Thresholds (never lowered to make a run pass): complete stacks >= 99% of the
sample records (the figure `flamme record` prints); rate within 5% of the
asked one; split within 2 percentage points. A failing test prints its 5
heaviest incomplete stacks. Prints per program: samples, completeness,
delivered Hz (sample weight per CPU-second of the whole process), lost.

Per compiler (tests/conftest.py) and engine: with the default compiler the
program tests run on perf and timer; with the others on timer only (the
walk depends on the compiler, the engine does not), and rate (the engine's
delivered rate, compiler-independent) with the default compiler only. split
runs on perf with every compiler.
"""
import os
import re

import pytest

import flammetest
from flammetest import is_complete

HERE = os.path.dirname(os.path.abspath(__file__))
HZ = 999
COMPLETE_MIN = 99.0
RATE_TOL = 0.05
SPLIT_TOL_PP = 2.0

# tests/fidelity/<name>.ml: (C stubs, libraries)
PROGS = {"deep": ((), ()), "sched": ((), ()), "steal": ((), ()), "churn": ((), ()),
         "threads": ((), ("unix", "threads")), "cstub": (("cstub_stubs.c",), ()),
         "joinalloc": ((), ()), "rate": (("cputime_stubs.c",), ()), "split": (("cputime_stubs.c",), ())}
# -fno-builtin: memmove/malloc in the stubs must stay calls into glibc.
CFLAGS = ("-ccopt", "-fno-builtin", "-ccopt", "-fno-omit-frame-pointer")


class Rec:
    """One `flamme record` run: the summary line's figures (records,
    nthreads, lost, complete, engine), the stacks of `collapse --threads`
    (frames[0] is the thread's label), their weight, the program's output."""


def record(build, ocaml, tmp_path, name, engine, depth=None, env=None):
    stubs, libs = PROGS[name]
    exe = ocaml("fidelity/" + name, [os.path.join(HERE, s) for s in stubs] + [os.path.join(HERE, name + ".ml")],
                libs=libs, flags=CFLAGS)
    prof = str(tmp_path / (name + ".flm"))
    args = ["-F", str(HZ), "--engine", engine] + (["--depth", str(depth)] if depth else [])
    r, _, cpu = flammetest.run_timed([build.flamme, "record", *args, "-o", prof, "--", exe],
                                     env=flammetest.clean_env(env), cwd=str(tmp_path))
    assert r.returncode == 0, "%s exited with status %d; stderr:\n%s" % (name, r.returncode, r.stderr[-2000:])
    s = flammetest.summary(r.stderr)
    assert s, "no `flamme:` summary line from flamme record; stderr:\n" + r.stderr[-2000:]
    rec = Rec()
    rec.name, rec.out = name, r.stdout
    rec.records, rec.nthreads, rec.lost = s["samples"], s["threads"], s["lost"]
    rec.complete, rec.engine = s["complete"], s["engine"]
    rec.stacks = flammetest.collapse(build, prof, "--threads")
    rec.weight = flammetest.total(rec.stacks)
    hz = rec.weight / cpu if cpu > 0 else 0.0
    print("  %-10s engine %-5s %6d samples (weight %6d), complete %5.1f%%, delivered %6.1f Hz, "
          "lost %d, %d threads" % (name, rec.engine, rec.records, rec.weight, rec.complete,
                                   hz, rec.lost, rec.nthreads))
    if rec.lost:
        print("    note: %d samples lost (flamme report says where)" % rec.lost)
    return rec


def incomplete_top(rec, n=5):
    """The n heaviest incomplete stacks (label;root..leaf, long ones cut in
    the middle), for failure messages."""
    bad = sorted((s for s in rec.stacks if not is_complete(s[0], labelled=True)), key=lambda s: -s[1])[:n]
    lines = []
    for f, w in bad:
        fr = f[1:] if len(f) <= 41 else f[1:21] + ["..(%d frames).." % (len(f) - 41)] + f[-20:]
        lines.append("%6d  %s;%s" % (w, f[0], ";".join(fr)))
    return "\n    top incomplete stacks (weight, thread;root..leaf):\n    " + "\n    ".join(lines) if lines else ""


def check_complete(check, rec):
    assert rec.records > 0, "%s: no samples" % rec.name
    check(rec.complete >= COMPLETE_MIN, "%s: complete stacks >= %.0f%%" % (rec.name, COMPLETE_MIN),
          "%.1f%%%s" % (rec.complete, incomplete_top(rec)))


def weight_where(rec, pred):
    return sum(w for f, w in rec.stacks if pred(f[0], f[1:]))


def plan(name, compiler, default, engine):
    """None when test NAME runs with COMPILER and ENGINE, else why not."""
    if compiler.name == default.name or name == "split":
        return None
    if name == "rate":
        return "the engine's delivered rate does not depend on the compiler: runs with %s only" % default
    if engine == "timer":
        return None
    return "the perf engine runs with %s only" % default


@pytest.fixture
def rec(request, build, compiler, default_compiler, ocaml, engine, tmp_path):
    """rec(**kw): records this test's program (test_NAME) with the engine."""
    name = request.function.__name__[len("test_"):]
    why = plan(name, compiler, default_compiler, engine)
    if why:
        pytest.skip(why)
    return lambda **kw: record(build, ocaml, tmp_path, name, engine, **kw)


ENGINES = pytest.mark.parametrize("engine", ["perf", "timer"])


@pytest.mark.slow
@ENGINES
def test_deep(rec, check):
    """20,000-deep non-tail recursion, CPU at the bottom: complete stacks that
    hold all 20,001 frames of the recursive function. The walker is under
    test, not the CPU budget (which shortens most such samples at 999 Hz):
    FLAMME_BUDGET=0."""
    r = rec(depth=25000, env={"FLAMME_BUDGET": "0"})
    check_complete(check, r)
    at_bottom = [(f, w) for f, w in r.stacks if len(f) > 1 and f[-1] == "Deep.burn"]
    w = sum(x for _, x in at_bottom)
    check(w >= 0.9 * r.weight, "deep: >= 90% of the samples have Deep.burn as leaf", "%d of %d" % (w, r.weight))
    full = sum(x for f, x in at_bottom if f.count("Deep.descend") >= 20000)
    counts = sorted({f.count("Deep.descend") for f, _ in at_bottom})
    print("    Deep.descend frames per Deep.burn stack: %s" % counts[:8])
    check(full >= 0.99 * w, "deep: >= 99% of the Deep.burn samples hold >= 20000 Deep.descend frames",
          "%d of %d (counts seen: %s)%s" % (full, w, counts[:8], incomplete_top(r)))


@pytest.mark.slow
@ENGINES
def test_sched(rec, check):
    """Round-robin fiber scheduler (Effect.Deep, Yield after every slice):
    fiber stacks link back through the scheduler to _start."""
    r = rec()
    check_complete(check, r)
    comp = [(f, w) for f, w in r.stacks if "Sched.compute" in f]
    w = sum(x for _, x in comp)
    check(w > 0.5 * r.weight, "sched: Sched.compute has > 50% of the samples", "%d of %d" % (w, r.weight))
    via = sum(x for f, x in comp if "Sched.scheduler" in f)
    print("    Sched.compute samples with Sched.scheduler on the stack: %d of %d" % (via, w))
    bad = sorted(((f, x) for f, x in comp if "Sched.scheduler" not in f), key=lambda s: -s[1])
    check(via >= 0.99 * w, "sched: >= 99% of the Sched.compute samples have Sched.scheduler below them",
          "%d of %d; e.g. %s" % (via, w, [";".join(f[1:]) for f, _ in bad[:3]]))


@pytest.mark.slow
@ENGINES
def test_steal(rec, check):
    """Work-stealing pool over 2 domains, continuations resumed on the other
    domain: complete stacks on both domains, fiber frames on both."""
    r = rec()
    check_complete(check, r)
    m = re.search(r"(\d+) migrations", r.out)
    check(m and int(m.group(1)) > 0, "steal: continuations were resumed on another domain", r.out)
    for label in ("main", "domain 1"):
        w = weight_where(r, lambda lab, f: lab == label and "Steal.crunch" in f and "Steal.task" in f)
        check(w > 0, "steal: Steal.task;Steal.crunch samples on thread '%s'" % label)


@pytest.mark.slow
@ENGINES
def test_churn(rec, check):
    """400 domains spawned and joined two at a time: complete stacks, 0 lost."""
    r = rec()
    check_complete(check, r)
    check(r.lost == 0, "churn: no sample lost", r.lost)
    # 400 domain threads (plus their backup threads) were registered.
    check(r.nthreads >= 401, "churn: the profile lists the 400 spawned domains' threads", r.nthreads)


@pytest.mark.slow
@ENGINES
def test_threads(rec, check):
    """Three systhreads in each of two domains, yielding the domain lock to
    each other: complete stacks; systhreads of both domains sampled."""
    r = rec()
    check_complete(check, r)
    for d in (0, 1):
        pat = re.compile(r"^thread \d+ \(domain %d\)$" % d)
        n = len({f[0] for f, _ in r.stacks if pat.match(f[0]) and "Threads.grind" in f})
        check(n >= 2, "threads: Threads.grind sampled on >= 2 of the 3 systhreads of domain %d" % d, n)


CSTUB_CALLERS = {"Cstub.call_memmove": "fid_memmove_loop", "Cstub.call_malloc": "fid_malloc_loop"}


@pytest.mark.slow
@ENGINES
def test_cstub(rec, check):
    """OCaml loop -> C stub -> glibc memmove/malloc/free: complete stacks, and
    below the OCaml caller every sample shows the stub before anything else
    (glibc frames are unwound with CFI; skipping the stub would be a lie)."""
    r = rec()
    check_complete(check, r)
    inside, ok, bad, libc_seen = 0, 0, [], set()
    for f, w in r.stacks:
        frames = f[1:]
        for caller, stub in CSTUB_CALLERS.items():
            if caller not in frames:
                continue
            below = [x for x in frames[frames.index(caller) + 1:] if x != "caml_c_call"]
            if not below:
                continue
            inside += w
            if below[0] == stub:
                ok += w
                libc_seen.update(below[1:2])
            else:
                bad.append((frames, w))
    print("    samples below the OCaml callers: %d, stub directly below: %d; glibc callees seen: %s"
          % (inside, ok, ", ".join(sorted(libc_seen))))
    check(any("memmove" in f or "memcpy" in f for f in libc_seen), "cstub: samples inside glibc memmove")
    check(any("malloc" in f for f in libc_seen), "cstub: samples inside glibc malloc")
    bad.sort(key=lambda s: -s[1])
    check(ok >= 0.99 * inside, "cstub: >= 99% of the samples below the OCaml caller show the C stub first",
          "%d of %d; heaviest without:\n    %s" % (ok, inside, "\n    ".join(
              "%6d  %s" % (w, ";".join(f[-6:])) for f, w in bad[:5])))


@pytest.mark.slow
@ENGINES
def test_joinalloc(rec, check):
    """Domain 0 blocked in Domain.join while domain 1 allocates: the backup
    thread's GC work is sampled, stacks complete."""
    r = rec()
    check_complete(check, r)
    w = weight_where(r, lambda lab, f: lab == "backup (domain 0)")
    print("    backup (domain 0) samples: %d" % w)
    check(w > 0, "joinalloc: samples labelled 'backup (domain 0)'", sorted({f[0] for f, _ in r.stacks}))


@pytest.mark.slow
@ENGINES
def test_rate(rec, engine):
    """A busy thread at 999 Hz: perf delivers 999 samples per CPU-second,
    the timer engine's weights add up to 999 per CPU-second (±5%)."""
    r = rec()
    if r.engine != engine:
        pytest.skip("asked engine %s, got %s (perf_event_open refused?)" % (engine, r.engine))
    m = re.search(r"thread_cpu ([0-9.]+)", r.out)
    assert m, "rate printed no thread_cpu: %r" % r.out
    cpu = float(m.group(1))
    w = weight_where(r, lambda lab, f: lab == "main")
    got = w / cpu
    print("    main thread: weight %d over %.3f CPU-s = %.1f Hz (asked %d)" % (w, cpu, got, HZ))
    assert abs(got - HZ) <= RATE_TOL * HZ, "delivered %.1f Hz, asked %d (tolerance ±%.0f%%)" % (
        got, HZ, 100 * RATE_TOL)


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["perf"])
def test_split(rec, check):
    """Three functions taking 50/30/20% of the CPU by construction land
    within ±2 percentage points (perf engine, every compiler)."""
    r = rec()
    check_complete(check, r)
    print("    program's own measure: %s" % r.out.strip())
    for fn, want in (("Split.share_a", 50.0), ("Split.share_b", 30.0), ("Split.share_c", 20.0)):
        got = 100.0 * weight_where(r, lambda lab, f: fn in f) / r.weight
        print("    %s: %.2f%% (constructed %.0f%%)" % (fn, got, want))
        check(abs(got - want) <= SPLIT_TOL_PP, "split: %s within %.0f points of %.0f%%" % (fn, SPLIT_TOL_PP, want),
              "%.2f%%" % got)
