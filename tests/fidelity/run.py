#!/usr/bin/env python3
"""tests/fidelity/run.py — profile fidelity tests (`make fidelity-test`).

Owns: the fidelity checks. Called by mk/fidelity.mk after the programs in
tests/fidelity/*.ml were built into build/fidelity/<name>/<name>.exe. Each
test records one program with `flamme record` the way a user would and checks
what a user would: that sampled stacks go all the way to the thread's root
(`_start`, `clone3`, ...) on every kind of OCaml 5 program (deep recursion,
effect handlers, continuations resumed on another domain, domain churn,
systhreads, C stubs calling glibc, a domain blocked in join), that the asked
sampling rate is delivered, and that a known CPU split is reproduced.

Thresholds (never lowered to make a run pass): complete stacks >= 99% of the
sample records (the figure `flamme record` prints); rate within 5% of the asked
one; split within 2 percentage points. A failing test prints its 5 heaviest
incomplete stacks. Prints per program: samples, completeness, delivered Hz
(sample weight per CPU-second of the whole process), lost; ends with
`fidelity: N passed, N failed` and exits 1 if anything failed.
Usage: run.py [--build DIR] [--only NAME,...] [--skip NAME,...] [--engines perf,timer] [--keep]
              [--compiler OCAMLOPT]
"""
import argparse
import os
import re
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fidlib  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import ocaml_compiler  # noqa: E402

HZ = 999
COMPLETE_MIN = 99.0
RATE_TOL = 0.05
SPLIT_TOL_PP = 2.0


class Failure(Exception):
    pass


class Skip(Exception):
    pass


def check(cond, msg, rec=None):
    """Raises Failure(msg) if not cond; with rec, appends its worst stacks."""
    if not cond:
        if rec is not None:
            top = fidlib.incomplete_top(rec.stacks)
            if top:
                msg += "\n    top incomplete stacks (weight, thread;root..leaf):\n    " + \
                    "\n    ".join(top)
        raise Failure(msg)


class Rec:
    """One `flamme record` run: summary figures, stacks, program output."""


def record(ctx, name, engine, args=(), depth=None, hz=HZ, env=None):
    wd = os.path.join(ctx.work, "%s-%s" % (name, engine))
    os.makedirs(wd, exist_ok=True)
    prof = os.path.join(wd, name + ".flm")
    cmd = [ctx.flamme, "record", "-F", str(hz), "-o", prof, "--engine", engine]
    if depth:
        cmd += ["--depth", str(depth)]
    cmd += ["--", ctx.exe(name)] + [str(a) for a in args]
    r = fidlib.run(cmd, fidlib.clean_env(env), wd)
    check(r.rc == 0, "%s exited with status %d; stderr:\n%s" % (name, r.rc, r.err[-2000:]))
    m = None
    for line in r.err.splitlines():
        m = fidlib.SUMMARY.match(line) or m
    check(m is not None, "no `flamme:` summary line from flamme record; stderr:\n" + r.err[-2000:])
    rec = Rec()
    rec.name, rec.out, rec.err = name, r.out, r.err
    rec.records, rec.nthreads, rec.lost = int(m.group(1)), int(m.group(2)), int(m.group(3))
    rec.complete, rec.engine = float(m.group(4)), m.group(5)
    rec.stacks = fidlib.collapse(ctx, prof)
    rec.weight = sum(s.weight for s in rec.stacks)
    rec.cpu = r.cpu
    rec.hz = rec.weight / r.cpu if r.cpu > 0 else 0.0
    print("  %-10s engine %-5s %6d samples (weight %6d), complete %5.1f%%, delivered %6.1f Hz, "
          "lost %d, %d threads" % (name, rec.engine, rec.records, rec.weight, rec.complete,
                                   rec.hz, rec.lost, rec.nthreads))
    if rec.lost:
        print("    note: %d samples lost (ring full)" % rec.lost)
    return rec


def check_complete(rec):
    check(rec.records > 0, "%s: no samples" % rec.name)
    check(rec.complete >= COMPLETE_MIN,
          "%s: complete stacks %.1f%% < %.0f%%" % (rec.name, rec.complete, COMPLETE_MIN), rec)


def weight_where(stacks, pred):
    return sum(s.weight for s in stacks if pred(s))


# ---------------------------------------------------------------- tests


def t_deep(ctx, engine):
    """20,000-deep non-tail recursion, CPU at the bottom: complete stacks that
    hold all 20,001 frames of the recursive function. The walker is under
    test, not the CPU budget (which shortens most such samples at 999 Hz):
    FLAMME_BUDGET=0."""
    rec = record(ctx, "deep", engine, depth=25000, env={"FLAMME_BUDGET": "0"})
    check_complete(rec)
    at_bottom = [s for s in rec.stacks if s.frames and s.frames[-1] == "Deep.burn"]
    w = sum(s.weight for s in at_bottom)
    check(w >= 0.9 * rec.weight, "only %d of %d samples have Deep.burn as leaf" % (w, rec.weight))
    full = sum(s.weight for s in at_bottom if s.frames.count("Deep.descend") >= 20000)
    counts = sorted({s.frames.count("Deep.descend") for s in at_bottom})
    print("    Deep.descend frames per Deep.burn stack: %s" % counts[:8])
    check(full >= 0.99 * w, "only %d of %d Deep.burn samples hold >= 20000 Deep.descend frames "
          "(counts seen: %s)" % (full, w, counts[:8]), rec)


def t_sched(ctx, engine):
    """Round-robin fiber scheduler (Effect.Deep, Yield after every slice):
    fiber stacks link back through the scheduler to _start."""
    rec = record(ctx, "sched", engine)
    check_complete(rec)
    comp = [s for s in rec.stacks if "Sched.compute" in s.frames]
    w = sum(s.weight for s in comp)
    check(w > 0.5 * rec.weight, "Sched.compute has only %d of %d samples" % (w, rec.weight))
    via = sum(s.weight for s in comp if "Sched.scheduler" in s.frames)
    print("    Sched.compute samples with Sched.scheduler on the stack: %d of %d" % (via, w))
    bad = sorted((s for s in comp if "Sched.scheduler" not in s.frames), key=lambda s: -s.weight)
    check(via >= 0.99 * w, "only %d of %d Sched.compute samples have Sched.scheduler below them; "
          "e.g. %s" % (via, w, [";".join(s.frames) for s in bad[:3]]))


def t_steal(ctx, engine):
    """Work-stealing pool over 2 domains, continuations resumed on the other
    domain: complete stacks on both domains, fiber frames on both."""
    rec = record(ctx, "steal", engine)
    check_complete(rec)
    m = re.search(r"(\d+) migrations", rec.out)
    check(m and int(m.group(1)) > 0, "no continuation was resumed on another domain: %r" % rec.out)
    for label in ("main", "domain 1"):
        w = weight_where(rec.stacks, lambda s: s.label == label and "Steal.crunch" in s.frames
                         and "Steal.task" in s.frames)
        check(w > 0, "no Steal.task;Steal.crunch samples on thread '%s'" % label)


def t_churn(ctx, engine):
    """400 domains spawned and joined two at a time: complete stacks, 0 lost."""
    rec = record(ctx, "churn", engine)
    check_complete(rec)
    check(rec.lost == 0, "churn: %d samples lost" % rec.lost)
    # 400 domain threads (plus their backup threads) were registered.
    check(rec.nthreads >= 401, "profile lists %d threads; 400 domains were spawned" % rec.nthreads)


def t_threads(ctx, engine):
    """Three systhreads in each of two domains, yielding the domain lock to
    each other: complete stacks; systhreads of both domains sampled."""
    rec = record(ctx, "threads", engine)
    check_complete(rec)
    for d in (0, 1):
        pat = re.compile(r"^thread \d+ \(domain %d\)$" % d)
        n = len({s.label for s in rec.stacks if pat.match(s.label) and "Threads.grind" in s.frames})
        check(n >= 2, "Threads.grind sampled on %d systhreads of domain %d (3 run there)" % (n, d))


CSTUB_CALLERS = {"Cstub.call_memmove": "fid_memmove_loop", "Cstub.call_malloc": "fid_malloc_loop"}


def t_cstub(ctx, engine):
    """OCaml loop -> C stub -> glibc memmove/malloc/free: complete stacks, and
    below the OCaml caller every sample shows the stub before anything else
    (glibc frames are unwound with CFI; skipping the stub would be a lie)."""
    rec = record(ctx, "cstub", engine)
    check_complete(rec)
    inside, ok, bad, libc_seen = 0, 0, [], set()
    for s in rec.stacks:
        for caller, stub in CSTUB_CALLERS.items():
            if caller not in s.frames:
                continue
            below = [f for f in s.frames[s.frames.index(caller) + 1:] if f != "caml_c_call"]
            if not below:
                continue
            inside += s.weight
            if below[0] == stub:
                ok += s.weight
                libc_seen.update(below[1:2])
            else:
                bad.append(s)
    print("    samples below the OCaml callers: %d, stub directly below: %d; glibc callees seen: %s"
          % (inside, ok, ", ".join(sorted(libc_seen))))
    check(any("memmove" in f or "memcpy" in f for f in libc_seen), "no sample inside glibc memmove")
    check(any("malloc" in f for f in libc_seen), "no sample inside glibc malloc")
    bad.sort(key=lambda s: -s.weight)
    check(ok >= 0.99 * inside,
          "only %d of %d samples below the OCaml caller show the C stub first; heaviest without:\n    %s"
          % (ok, inside, "\n    ".join("%6d  %s" % (s.weight, ";".join(s.frames[-6:])) for s in bad[:5])))


def t_joinalloc(ctx, engine):
    """Domain 0 blocked in Domain.join while domain 1 allocates: the backup
    thread's GC work is sampled, stacks complete."""
    rec = record(ctx, "joinalloc", engine)
    check_complete(rec)
    w = weight_where(rec.stacks, lambda s: s.label == "backup (domain 0)")
    print("    backup (domain 0) samples: %d" % w)
    check(w > 0, "no samples labelled 'backup (domain 0)'; threads: %s"
          % sorted({s.label for s in rec.stacks}))


def thread_cpu(rec):
    m = re.search(r"thread_cpu ([0-9.]+)", rec.out)
    check(m is not None, "%s printed no thread_cpu: %r" % (rec.name, rec.out))
    return float(m.group(1))


def t_rate(ctx, engine):
    """A busy thread at 999 Hz: perf delivers 999 samples per CPU-second,
    the timer engine's weights add up to 999 per CPU-second (±5%)."""
    rec = record(ctx, "rate", engine)
    if rec.engine != engine:
        raise Skip("asked engine %s, got %s (perf_event_open refused?)" % (engine, rec.engine))
    cpu = thread_cpu(rec)
    w = weight_where(rec.stacks, lambda s: s.label == "main")
    got = w / cpu
    print("    main thread: weight %d over %.3f CPU-s = %.1f Hz (asked %d)" % (w, cpu, got, HZ))
    check(abs(got - HZ) <= RATE_TOL * HZ, "delivered %.1f Hz, asked %d (tolerance ±%.0f%%)"
          % (got, HZ, 100 * RATE_TOL))


def t_split(ctx, engine):
    """Three functions taking 50/30/20% of the CPU by construction land
    within ±2 percentage points."""
    rec = record(ctx, "split", engine)
    check_complete(rec)
    print("    program's own measure: %s" % rec.out.strip())
    errs = []
    for fn, want in (("Split.share_a", 50.0), ("Split.share_b", 30.0), ("Split.share_c", 20.0)):
        got = 100.0 * weight_where(rec.stacks, lambda s: fn in s.frames) / rec.weight
        print("    %s: %.2f%% (constructed %.0f%%)" % (fn, got, want))
        if abs(got - want) > SPLIT_TOL_PP:
            errs.append("%s %.2f%% vs %.0f%%" % (fn, got, want))
    check(not errs, "split off by more than %.0f points: %s" % (SPLIT_TOL_PP, "; ".join(errs)))


# (name, function, engines it runs under: None = every --engines entry;
# rate and split are about one engine's rate and run under their own list)
TESTS = [
    ("deep", t_deep, None),
    ("sched", t_sched, None),
    ("steal", t_steal, None),
    ("churn", t_churn, None),
    ("threads", t_threads, None),
    ("cstub", t_cstub, None),
    ("joinalloc", t_joinalloc, None),
    ("rate", t_rate, ["perf", "timer"]),
    ("split", t_split, ["perf"]),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--only", default="")
    ap.add_argument("--skip", default="", help="comma-separated test names not to run")
    ap.add_argument("--engines", default="perf,timer")
    ap.add_argument("--keep", action="store_true", help="keep the profiles (prints where)")
    ap.add_argument("--compiler", default="",
                    help="the ocamlopt that built the programs (named in the output)")
    a = ap.parse_args()
    only = set(filter(None, a.only.split(",")))
    skip = set(filter(None, a.skip.split(",")))
    compiler = ocaml_compiler.describe(a.compiler)
    print("fidelity: programs built by %s" % compiler, flush=True)
    engines = [e for e in a.engines.split(",") if e]
    work = tempfile.mkdtemp(prefix="flamme-fidelity-")
    ctx = fidlib.Ctx(a.build, work)
    passed = failed = skipped = 0
    failures = []
    for name, fn, only_engines in TESTS:
        if (only and name not in only) or name in skip:
            continue
        for eng in (only_engines if only_engines else engines):
            title = "%s [%s]" % (name, eng)
            print("== %s: %s" % (title, " ".join(fn.__doc__.split())))
            sys.stdout.flush()
            try:
                fn(ctx, eng)
                passed += 1
                print("PASS %s" % title)
            except Skip as e:
                skipped += 1
                print("SKIP %s: %s" % (title, e))
            except (Failure, RuntimeError, FileNotFoundError) as e:
                failed += 1
                failures.append(title)
                print("FAIL %s: %s" % (title, e))
            sys.stdout.flush()
    if a.keep:
        print("profiles kept in %s" % work)
    else:
        shutil.rmtree(work, ignore_errors=True)
    if skipped:
        print("fidelity: %d skipped" % skipped)
    if failures:
        print("fidelity: failed: %s" % ", ".join(failures))
    print("fidelity: %d passed, %d failed (%s)" % (passed, failed, compiler))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
