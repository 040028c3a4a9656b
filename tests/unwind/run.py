#!/usr/bin/env python3
"""tests/unwind/run.py — whole stacks on real-style OCaml 5 programs, each
built with BOTH compilers (build/unwind/{fp,nofp}/, mk/unwind.mk), checked
the way a user reads a profile:

  atomq     lock-free queue over Atomic on three domains (caml_atomic_cas,
            exchange, fetch_and_add: noalloc calls on the C stack)
  hashstr   Hashtbl with string keys, String.equal, caml_modify
  effdeep   effects with deep handlers: perform/continue/discontinue, nested
  yielder   systhreads that Thread.yield
  breakwalk C stubs without unwind info that leave garbage in rbp
  dlprog    a plugin library dlopen'ed, run and dlclose'd 60 times
  vclock    clock reads (Unix.gettimeofday, Unix.time) through the vDSO
  gcalloc   allocation-heavy code on two domains (binary trees, Map, Buffer)
  rewrite   a symbolic simplifier: hash-consing, structural compare/hash
  sched     an Eio-style fiber scheduler: Fork/Yield/Suspend, channels,
            generators from effects, discontinue of blocked fibers
  steal     fork-join over Chase-Lev deques (Atomic) on three domains
  churn     a domain per batch, two domains busy with the major GC
  dthreads  systhreads in domains, Mutex/Condition and Thread.yield
  cback     C stubs: noalloc, qsort calling back into OCaml, a C fold
  minicc    a small compiler: lexer, parser, checker, codegen, interpreter

Every program, both compilers, at 999 Hz (as the issue measured): stacks
reach their thread's root (>= 99.9% of samples with frame pointers, >= 99.5%
without: the issue's goals), the frames each kind of program is about (the
runtime primitives called straight from OCaml, GC work, fibers, callbacks,
systhreads) are sampled and sit under the OCaml function that called them,
and the frames between the C start-up and OCaml (caml_startup_common,
caml_callback_exn) are the same with and without frame pointers. For
breakwalk: every stack whose root-most frame is not a thread root says so
([broken] or [truncated]) in every verb and export (collapse, folded,
speedscope, pprof, svg, report, diff); the OCaml part stays complete. For
dlprog: the plugin's frames keep their names after it is unloaded, and its
stacks are whole.

Usage: run.py --build DIR [--only a,b] [--hz N].  Ends with
"unwind: N passed, N failed".
"""
import argparse
import html
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fidelity"))
import fidlib  # noqa: E402

MARKERS = {"[broken]", "[truncated]"}
GOAL = 99.0  # % complete of a part of a profile (a few dozen samples)
GOALS = {"fp": 99.9, "nofp": 99.5}  # % complete of a whole profile: the goals


def exe(build, variant, name):
    p = os.path.abspath(os.path.join(build, "unwind", variant, name, name + ".exe"))
    if not os.access(p, os.X_OK):
        raise FileNotFoundError("not built: %s (make unwind-progs)" % p)
    return p


def record(ctx, path, args, out, hz):
    cmd = [ctx.flamme, "record", "-F", str(hz), "-o", out, "--", path] + args
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=fidlib.RUN_TIMEOUT,
                       cwd=ctx.work, env=fidlib.clean_env())
    if p.returncode != 0:
        raise AssertionError("%s exited %d: %s" % (path, p.returncode, p.stderr[-500:]))
    LAST_SUMMARY[0] = [l for l in p.stderr.splitlines() if l.startswith("flamme:")][-1]
    return LAST_SUMMARY[0]


LAST_SUMMARY = [""]


def share(stacks, pred=None):
    """(% complete, weight) of the stacks matching pred."""
    sel = [s for s in stacks if pred is None or pred(s)]
    tot = sum(s.weight for s in sel)
    ok = sum(s.weight for s in sel if s.complete())
    return (100.0 * ok / tot if tot else 0.0), tot


def check(cond, msg):
    if not cond:
        raise AssertionError(msg)


def leaf_in(names):
    return lambda s: bool(s.frames) and s.frames[-1] in names


def common_checks(ctx, stacks, label, goal):
    pc, tot = share(stacks)
    print("    %s: %d samples, complete %.2f%%" % (label, tot, pc))
    if pc < goal:
        print("\n".join("      " + l for l in fidlib.incomplete_top(stacks)))
    check(tot >= 200, "%s: only %d samples" % (label, tot))
    check(pc >= goal, "%s: %.2f%% complete, want >= %.1f%%" % (label, pc, goal))
    # The C start-up frames are there whatever the compiler (point 7). A
    # sample may land in the runtime's own start-up (caml_sys_init, ...,
    # before caml_start_program): every engine's first expiry comes within
    # one period of the start.
    main = [s for s in stacks if s.label == "main" and s.complete() and "caml_main" in s.frames]
    for s in main:
        i = s.frames.index("caml_main")
        after = s.frames[i + 1:]
        # (A sample in caml_main's own code, between its calls, has it as leaf.)
        check(not after or after[:1] == ["caml_startup_common"] and
              ("caml_program" not in after or after[1:2] == ["caml_start_program"]),
              "%s: main thread stack lacks caml_startup_common: %s" % (label, ";".join(s.frames[:8])))


def t_atomq(ctx, v, tmp, hz):
    out = os.path.join(tmp, "atomq-%s.flm" % v)
    print("    " + record(ctx, exe(ctx.build, v, "atomq"), [], out, hz))
    st = fidlib.collapse(ctx, out)
    common_checks(ctx, st, "atomq/" + v, GOALS[v])
    prims = {"caml_atomic_cas", "caml_atomic_exchange", "caml_atomic_fetch_add"}
    pc, tot = share(st, leaf_in(prims))
    print("    in %s: %d samples, complete %.2f%%" % ("/".join(sorted(prims)), tot, pc))
    check(tot >= 10 and pc >= GOAL, "atomic primitives: %d samples, %.2f%% complete" % (tot, pc))
    under = sum(s.weight for s in st if s.frames and s.frames[-1] in prims and
                s.frames[-2] in ("Atomq.push", "Atomq.pop", "Atomq.producer", "Atomq.consumer"))
    check(under >= 0.95 * tot, "atomic primitives not directly under Atomq code (%d of %d)"
          % (under, tot))


def t_hashstr(ctx, v, tmp, hz):
    out = os.path.join(tmp, "hashstr-%s.flm" % v)
    print("    " + record(ctx, exe(ctx.build, v, "hashstr"), [], out, hz))
    st = fidlib.collapse(ctx, out)
    common_checks(ctx, st, "hashstr/" + v, GOALS[v])
    for prim in ("caml_string_equal", "caml_hash", "caml_modify"):
        pc, tot = share(st, lambda s: prim in s.frames)
        print("    under %s: %d samples, complete %.2f%%" % (prim, tot, pc))
        check(tot >= 5 and pc >= GOAL, "%s: %d samples, %.2f%% complete" % (prim, tot, pc))


def t_effdeep(ctx, v, tmp, hz):
    out = os.path.join(tmp, "effdeep-%s.flm" % v)
    print("    " + record(ctx, exe(ctx.build, v, "effdeep"), [], out, hz))
    st = fidlib.collapse(ctx, out)
    common_checks(ctx, st, "effdeep/" + v, GOALS[v])
    work = [s for s in st if "Effdeep.work" in s.frames]
    tot = sum(s.weight for s in work)
    # Work in the generator fiber sits under the consumer's handler, which
    # sits under the Ask handler (two nested fibers), down to main.
    nested = sum(s.weight for s in work if s.complete() and "Effdeep.go" in s.frames and
                 s.frames.count("caml_runstack") >= 2)
    print("    Effdeep.work: %d samples, %d in the generator under two fibers and a root"
          % (tot, nested))
    check(tot >= 50 and nested >= 0.5 * tot, "fiber stacks do not reach the handlers and main")


def t_yielder(ctx, v, tmp, hz):
    out = os.path.join(tmp, "yielder-%s.flm" % v)
    print("    " + record(ctx, exe(ctx.build, v, "yielder"), [], out, hz))
    st = fidlib.collapse(ctx, out)
    common_checks(ctx, st, "yielder/" + v, GOALS[v])
    threads = [s for s in st if s.label != "main" and "Yielder.worker" in s.frames]
    tot = sum(s.weight for s in threads)
    # Thread.yield: the runtime's yield goes through caml_c_call.
    yld = [s for s in st if "caml_thread_yield" in s.frames]
    pc, ytot = share(yld)
    print("    systhread samples in Yielder.worker: %d; under caml_thread_yield: %d, "
          "complete %.2f%%" % (tot, ytot, pc))
    check(tot >= 50, "systhreads barely sampled")
    check(ytot == 0 or pc >= GOAL, "Thread.yield stacks %.2f%% complete" % pc)


def rooted_or_marked(frames):
    return bool(frames) and (frames[0] in fidlib.ROOTS or frames[0] in MARKERS)


def t_breakwalk(ctx, v, tmp, hz):
    out = os.path.join(tmp, "breakwalk-%s.flm" % v)
    print("    " + record(ctx, exe(ctx.build, v, "breakwalk"), [], out, hz))
    st = fidlib.collapse(ctx, out)
    spins = ("brk_spin_fake", "brk_spin_zero", "brk_spin_junk")
    for fn in spins:
        sel = [s for s in st if s.frames and s.frames[-1] == fn]
        tot = sum(s.weight for s in sel)
        marked = sum(s.weight for s in sel if s.frames[0] in MARKERS)
        print("    leaf %s: %d samples, %d under [broken]/[truncated]" % (fn, tot, marked))
        check(tot >= 20, "%s barely sampled" % fn)
        # The walk breaks there, except in the stub's prologue and before
        # its ret (rbp is a proper frame, or the caller is at rsp) where it
        # must be whole and right.
        check(marked >= 0.9 * tot, "%s: only %d of %d stacks broken: the stub no longer "
              "breaks walks" % (fn, marked, tot))
        wrong = [";".join(s.frames) for s in sel if s.frames[0] not in MARKERS and
                 not (s.complete() and s.frames[-2] == "Breakwalk.in_" + fn[9:])]
        check(not wrong, "%s: %d stacks neither marked nor whole, e.g. %s"
              % (fn, len(wrong), wrong[:1]))
    pc, tot = share(st, lambda s: "Breakwalk.plain" in s.frames)
    print("    Breakwalk.plain: %d samples, complete %.2f%%" % (tot, pc))
    check(tot >= 100 and pc >= GOAL, "the OCaml part: %.2f%% complete" % pc)
    n = all_views_marked(ctx, out, tmp)
    print("    every verb and export: %d stacks, each rooted or marked" % n)


def export_mod():
    """tests/export/run.py's pprof reader (a small protobuf decoder)."""
    global _EXPORT
    if _EXPORT is None:
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "export", "run.py")
        spec = importlib.util.spec_from_file_location("flamme_export_tests", path)
        _EXPORT = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(_EXPORT)
        shutil.rmtree(_EXPORT.TMP, ignore_errors=True)
    return _EXPORT


_EXPORT = None


def all_views_marked(ctx, out, tmp):
    """Every verb and export of the profile `out` shows each stack either
    from a thread root or under [broken]/[truncated]: collapse (with and
    without threads), export folded/speedscope/pprof, svg (the frames right
    above "all"), report (nothing "other" beside complete, truncated and
    broken) and diff. Returns the number of stacks checked."""
    def run(*args):
        p = subprocess.run([ctx.flamme] + list(args), capture_output=True, text=True,
                           timeout=fidlib.RUN_TIMEOUT)
        check(p.returncode == 0, "flamme %s: %s" % (" ".join(args[:2]), p.stderr[-300:]))
        return p.stdout
    checked = 0

    def folded(text, what, labelled, cols=1):
        nonlocal checked
        for line in text.splitlines():
            frames = line.rsplit(" ", cols)[0].split(";")[1 if labelled else 0:]
            check(rooted_or_marked(frames), "%s: unmarked %s" % (what, line[:200]))
            checked += 1
    folded(run("collapse", out), "collapse", False)
    folded(run("collapse", "--threads", out), "collapse --threads", True)
    folded(run("export", out, "--format", "folded", "--threads"), "export folded", True)
    folded(run("diff", out, out, "--folded"), "diff --folded", False, cols=2)
    sp = os.path.join(tmp, "views.speedscope.json")
    run("export", out, "--format", "speedscope", "-o", sp)
    doc = json.load(open(sp))
    names = [f["name"] for f in doc["shared"]["frames"]]
    for prof in doc["profiles"]:
        for smp in prof.get("samples", []):
            check(rooted_or_marked([names[i] for i in smp]),
                  "speedscope: unmarked sample %s" % ";".join(names[i] for i in smp[:6]))
            checked += 1
    pp = os.path.join(tmp, "views.pb.gz")
    run("export", out, "--format", "pprof", "-o", pp)
    prof = export_mod().decode_pprof(pp)
    fn, loc = prof["functions"], prof["locations"]
    for locs, _, _ in prof["samples"]:
        frames = [fn[loc[l]["functions"][-1]][0] for l in reversed(locs)]
        check(rooted_or_marked(frames), "pprof: unmarked %s" % ";".join(frames[:6]))
        checked += 1
    svg = os.path.join(tmp, "views.svg")
    run("svg", out, "-o", svg)
    roots = re.findall(r'<g s="\d+" n="\d+" m="\d+" d="1"><title>([^\n<]*)', open(svg).read())
    check(roots, "svg: no frame above all")
    for r in roots:
        check(rooted_or_marked([html.unescape(r)]), "svg: a flame starts at %s" % r)
    m = re.search(r"truncated: ([0-9.]+)%  broken: ([0-9.]+)%  other: ([0-9.]+)%", run("report", out))
    check(m and float(m.group(3)) == 0.0, "report: %s" % (m and m.group(0)))
    return checked


def t_dlprog(ctx, v, tmp, hz):
    """A library loaded, run for ~30 ms and unloaded, over and over: its
    frames are named (not [unknown]) and unwound (the plugin has no frame
    pointers: only its unwind tables lead out of it)."""
    path = exe(ctx.build, v, "dlprog")
    for mode in ("path", "bare"):
        out = os.path.join(tmp, "dlprog-%s-%s.flm" % (v, mode))
        env = fidlib.clean_env({"LD_LIBRARY_PATH": os.path.dirname(path)})
        cmd = [ctx.flamme, "record", "-F", str(hz), "-o", out, "--", path, "1", mode]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=fidlib.RUN_TIMEOUT,
                           cwd=ctx.work, env=env)
        check(p.returncode == 0, "dlprog %s exited %d: %s" % (mode, p.returncode, p.stderr[-300:]))
        st = fidlib.collapse(ctx, out)
        allw = sum(s.weight for s in st)
        unknown = sum(s.weight for s in st if "[unknown]" in s.frames)
        pc, tot = share(st, lambda s: any(f.startswith("dlw_") for f in s.frames))
        print("    %s: %d samples in the plugin (of %d), complete %.2f%%; %d with an [unknown] frame"
              % (mode, tot, allw, pc, unknown))
        check(tot >= 0.5 * allw, "%s: plugin barely sampled or not named (%d of %d)"
              % (mode, tot, allw))
        check(unknown <= 0.01 * allw, "%s: %d samples with [unknown] frames" % (mode, unknown))
        # By full path the rows exist before dlopen returns; by bare name the
        # writer picks the library up within a sweep (20 ms) of the load.
        goal = GOAL if mode == "path" else 90.0
        check(pc >= goal, "%s: plugin stacks %.2f%% complete, want >= %.1f%%" % (mode, pc, goal))


def t_vclock(ctx, v, tmp, hz):
    """Clock reads end in the vDSO: stacks through it are whole, and each
    entry point has one name (its unnamed internal code folds into it)."""
    out = os.path.join(tmp, "vclock-%s.flm" % v)
    print("    " + record(ctx, exe(ctx.build, v, "vclock"), [], out, hz))
    st = fidlib.collapse(ctx, out)
    common_checks(ctx, st, "vclock/" + v, GOALS[v])
    vd = [s for s in st if any(f.startswith("__vdso_") or f == "[[vdso]]" for f in s.frames)]
    tot = sum(s.weight for s in vd)
    anon = sum(s.weight for s in vd if "[[vdso]]" in s.frames)
    print("    in the vDSO: %d samples, %d with an unnamed [[vdso]] frame" % (tot, anon))
    check(tot >= 50, "vDSO barely sampled (%d)" % tot)
    check(anon == 0, "%d samples show the vDSO as [[vdso]]" % anon)
    # A "[kernel]" leaf: the vDSO's fallback system call.
    user = [(s, s.frames[:-1] if s.frames[-1] == "[kernel]" else s.frames) for s in vd]
    ok = sum(s.weight for s, fr in user if s.complete() and
             fr[-1].startswith("__vdso_") and fr[-2].startswith("caml_unix_"))
    check(ok >= 0.99 * tot, "vDSO stacks not whole under the Unix primitive (%d of %d)"
          % (ok, tot))


def ordered(frames, names):
    """1 if names occur in frames in this order (root first), not
    necessarily adjacent."""
    i = 0
    for f in frames:
        if i < len(names) and f == names[i]:
            i += 1
    return i == len(names)


def placed(st, label, what, pred, chain, least, within=None):
    """Of the samples matching pred, at least `least` exist and 99% are
    whole with the frames of chain in that order (root first)."""
    sel = [s for s in st if pred(s) and (within is None or within(s))]
    tot = sum(s.weight for s in sel)
    ok = sum(s.weight for s in sel if s.complete() and ordered(s.frames, chain))
    print("    %s: %d samples, %d whole under %s" % (what, tot, ok, " .. ".join(chain)))
    check(tot >= least, "%s: %s barely sampled (%d)" % (label, what, tot))
    check(ok >= 0.99 * tot, "%s: %s: only %d of %d whole under %s"
          % (label, what, ok, tot, ";".join(chain)))


def has(*names):
    return lambda s: any(f in names for f in s.frames)


def recorded(ctx, v, tmp, hz, name, args=()):
    out = os.path.join(tmp, "%s-%s.flm" % (name, v))
    print("    " + record(ctx, exe(ctx.build, v, name), list(args), out, hz))
    st = fidlib.collapse(ctx, out)
    common_checks(ctx, st, "%s/%s" % (name, v), GOALS[v])
    return st


GC_FUNS = ("caml_empty_minor_heap", "caml_empty_minor_heaps_once", "caml_major_collection_slice",
           "caml_alloc_shr", "caml_shared_try_alloc", "caml_do_some_marking_work",
           "major_collection_slice", "caml_collect_major_slice", "caml_minor_collection")


def t_gcalloc(ctx, v, tmp, hz):
    """Allocation-heavy code on two domains: the collectors' frames sit
    under the OCaml function that allocated, on both domains."""
    st = recorded(ctx, v, tmp, hz, "gcalloc")
    # A domain also collects where no OCaml runs yet or any more (a minor
    # collection it serves as its thread starts: domain_thread_func;
    # caml_empty_minor_heaps_once): such a stack is whole but under no
    # OCaml function, so it is left out. Incomplete stacks are never left out.
    def ocaml_gc(s, d):
        return s.label.startswith(d) and not (s.complete() and "caml_start_program" not in s.frames)
    for dom in ("main", "domain 1"):
        placed(st, "gcalloc/" + v, "GC work in %s" % dom, has(*GC_FUNS), ["Gcalloc.one_round"],
               20, lambda s, d=dom: ocaml_gc(s, d))
    placed(st, "gcalloc/" + v, "Gcalloc.make", has("Gcalloc.make"), ["Gcalloc.trees"], 50)


def t_rewrite(ctx, v, tmp, hz):
    """Symbolic rewriting: structural hashing and comparison (runtime C
    called from OCaml) right under the OCaml function that called them
    (hashstr covers caml_modify)."""
    st = recorded(ctx, v, tmp, hz, "rewrite")
    for what, prims, least in (("caml_hash", ("caml_hash",), 20),
                               ("structural compare", ("compare_val", "caml_compare",
                                                       "caml_equal", "caml_string_compare"), 20)):
        # Called straight from OCaml (the program or the Stdlib's Hashtbl
        # and List): the frame above the primitive is that OCaml function.
        placed(st, "rewrite/" + v, what, has(*prims), ["main", "Rewrite (init)"], least)
        sel = [s for s in st if has(*prims)(s)]
        callers = {}
        for s in sel:
            i = min(s.frames.index(p) for p in prims if p in s.frames) - 1
            while i > 0 and s.frames[i] == "caml_c_call":
                i -= 1
            callers[s.frames[i]] = callers.get(s.frames[i], 0) + s.weight
        odd = {c: n for c, n in callers.items() if not c.startswith(("Rewrite", "Stdlib."))}
        check(sum(odd.values()) <= 0.01 * sum(callers.values()),
              "rewrite/%s: %s called from %s" % (v, what, odd))


def t_sched(ctx, v, tmp, hz):
    """A fiber scheduler: work in fibers (two levels: scheduler, generator)
    reaches the scheduler and main through caml_runstack."""
    st = recorded(ctx, v, tmp, hz, "sched")
    placed(st, "sched/" + v, "producers' crunch", lambda s: ordered(s.frames, [
        "Sched.producer", "Sched.crunch"]), ["main", "Sched.run", "caml_runstack",
                                            "Sched.producer", "caml_runstack", "Sched.crunch"], 50)
    # The consumers' loop is a tail call: Sched.consumer itself is gone.
    placed(st, "sched/" + v, "consumers' crunch", lambda s: "Sched.crunch" in s.frames and
           "Sched.producer" not in s.frames, ["main", "Sched.run", "caml_runstack",
                                              "Sched.crunch"], 20)


def t_steal(ctx, v, tmp, hz):
    """Work stealing over three domains: fib runs on every domain and each
    stack reaches its thread root through the worker loop or main."""
    st = recorded(ctx, v, tmp, hz, "steal")
    doms = sorted({s.label for s in st if "Steal.fib" in s.frames})
    print("    Steal.fib sampled on: %s" % ", ".join(doms))
    check(len(doms) >= 2, "steal/%s: fib sampled on %d threads only" % (v, len(doms)))
    placed(st, "steal/" + v, "fib on the workers", has("Steal.fib"), ["Steal.worker"], 20,
           lambda s: s.label != "main")
    placed(st, "steal/" + v, "fib on main", has("Steal.fib"), ["main", "Steal.pfib"], 20,
           lambda s: s.label == "main")


def t_churn(ctx, v, tmp, hz):
    """Domains that come and go while two others keep the major GC busy."""
    st = recorded(ctx, v, tmp, hz, "churn")
    # Domain ids are reused: count threads in the record summary.
    m = re.search(r"(\d+) threads", LAST_SUMMARY[0])
    check(m and int(m.group(1)) >= 20, "churn/%s: few threads sampled (%s)" % (v, LAST_SUMMARY[0]))
    placed(st, "churn/" + v, "batches", has("Churn.handle_batch"), ["start_thread"], 100)
    placed(st, "churn/" + v, "Gc.major", has("caml_gc_major", "caml_finish_major_cycle"),
           ["Churn.compactor"], 10)


def t_dthreads(ctx, v, tmp, hz):
    """Systhreads inside domains that take turns with Thread.yield."""
    st = recorded(ctx, v, tmp, hz, "dthreads")
    labels = {s.label for s in st if "Dthreads.serve" in s.frames}
    print("    threads running Dthreads.serve: %d" % len(labels))
    check(len(labels) >= 6, "dthreads/%s: serve sampled on %d threads" % (v, len(labels)))
    placed(st, "dthreads/" + v, "serve", has("Dthreads.serve"), ["start_thread", "Dthreads.serve"],
           100)
    yld = [s for s in st if "caml_thread_yield" in s.frames]
    pc, tot = share(yld)
    print("    under caml_thread_yield: %d samples, complete %.2f%%" % (tot, pc))
    check(tot == 0 or pc >= 99.0, "Thread.yield stacks %.2f%% complete" % pc)


def t_cback(ctx, v, tmp, hz):
    """C stubs and callbacks: the OCaml comparison called by glibc's qsort
    sits under qsort, the stub and the OCaml caller; the fold's closure
    under the C fold; the noalloc checksum under its caller."""
    st = recorded(ctx, v, tmp, hz, "cback")
    placed(st, "cback/" + v, "comparisons called back from qsort", has("Cback.by_weight"),
           ["Cback.one_round", "cb_sort_keys", "qsort_r", "cmp_ocaml", "caml_callback2",
            "Cback.by_weight"], 20)
    placed(st, "cback/" + v, "fold steps", has("Cback.step"),
           ["Cback.one_round", "cb_fold", "Cback.step"], 20)
    placed(st, "cback/" + v, "noalloc checksum", has("cb_checksum"),
           ["Cback.one_round", "cb_checksum"], 20)


def t_minicc(ctx, v, tmp, hz):
    """A compiler: every phase is sampled with a whole stack under main."""
    st = recorded(ctx, v, tmp, hz, "minicc")
    for phase in ("Minicc.lex", "Minicc.parse", "Minicc.codegen", "Minicc.run"):
        placed(st, "minicc/" + v, phase, has(phase), ["main", "Minicc (init)", phase], 10)


TESTS = [("atomq", t_atomq), ("hashstr", t_hashstr), ("effdeep", t_effdeep),
         ("yielder", t_yielder), ("breakwalk", t_breakwalk), ("dlprog", t_dlprog),
         ("vclock", t_vclock), ("gcalloc", t_gcalloc), ("rewrite", t_rewrite),
         ("sched", t_sched), ("steal", t_steal), ("churn", t_churn), ("dthreads", t_dthreads),
         ("cback", t_cback), ("minicc", t_minicc)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--only", default="")
    ap.add_argument("--hz", type=int, default=999)
    a = ap.parse_args()
    only = set(a.only.split(",")) if a.only else None
    passed = failed = 0
    with tempfile.TemporaryDirectory(prefix="flamme-unwind.") as tmp:
        ctx = fidlib.Ctx(a.build, tmp)
        for name, fn in TESTS:
            if only and name not in only:
                continue
            for v in ("fp", "nofp"):
                print("== %s (%s)" % (name, v))
                try:
                    fn(ctx, v, tmp, a.hz)
                    print("PASS %s/%s" % (name, v))
                    passed += 1
                except (AssertionError, RuntimeError, FileNotFoundError,
                        subprocess.SubprocessError) as e:
                    print("FAIL %s/%s: %s" % (name, v, e))
                    failed += 1
    print("unwind: %d passed, %d failed" % (passed, failed))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
