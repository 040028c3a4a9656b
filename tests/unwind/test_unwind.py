"""tests/unwind/test_unwind.py — whole stacks on real-style OCaml 5
programs, each built with every compiler make deps provides (make
unwind-test, part of make test), checked the way a user reads a profile:

  atomq     lock-free queue over Atomic on three domains (caml_atomic_cas,
            exchange, fetch_and_add, 5.4's *_field: noalloc calls on the C
            stack)
  hashstr   Hashtbl with string keys, String.equal, caml_modify
  effdeep   effects with deep handlers: perform/continue/discontinue, nested
  nestfx    effect handlers nested 40 deep (and 2,000 deep), effects
            forwarded outwards through them, caml_hash under all of them
  growstack fibers of a round-robin scheduler in deep non-tail recursion:
            their stacks grow (copied, the old one freed) again and again
  yielder   systhreads that Thread.yield
  breakwalk C stubs without unwind info that leave garbage in rbp
  dlprog    a plugin library dlopen'ed, run and dlclose'd 60 times
  vclock    clock reads (Unix.gettimeofday, Unix.time) through the vDSO
  gcalloc   allocation-heavy code on two domains (binary trees, Map, Buffer)
  rewrite   a symbolic simplifier: hash-consing, structural compare/hash
  sched     an Eio-style fiber scheduler: Fork/Yield/Suspend, channels,
            generators from effects, discontinue of blocked fibers
  fxexn     fibers that end with an exception: raised in the task, or by
            discontinue (a task that fails or is cancelled)
  cbraise   exceptions that end a callback from C, or that a handler
            further up catches (built without -g: the inlined raise; with
            -g: caml_raise_exn)
  steal     fork-join over Chase-Lev deques (Atomic) on three domains
  churn     a domain per batch, two domains busy with the major GC
  dthreads  systhreads in domains, Mutex/Condition and Thread.yield
  cback     C stubs: noalloc, qsort calling back into OCaml, a C fold,
            a noalloc stub in assembly without CFI
  minicc    a small compiler: lexer, parser, checker, codegen, interpreter
  (rows_kept: hashstr again, with its unwind tables kept between
            processes, read back, and overwritten on disk)

Every program, every compiler, at 999 Hz (as the issue measured): stacks
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
"""
import html
import json
import os
import re
import struct
import subprocess

import pytest

import flammetest
from flammetest import ROOTS, clean_env, decode_pprof, record, summary
from unwind_stacks import MARKERS, build_program, incomplete_top, share, stacks

HERE = os.path.dirname(os.path.abspath(__file__))
HZ = 999
GOAL = 99.0  # % complete of a part of a profile (a few dozen samples)


def goal(compiler):
    """% complete of a whole profile: the issue's goals."""
    return 99.9 if compiler.fp else 99.5


@pytest.fixture(scope="session")
def program(build, ocaml):
    """program(name) -> exe: tests/unwind/<name>.ml built with this compiler."""
    return lambda name: build_program(ocaml, build, name)


def recorded_raw(build, exe, args, prof, cwd, env=None):
    """Records EXE ARGS at HZ into PROF; returns (stacks, summary dict).
    Fails the test when the program fails."""
    p = record(build, [exe] + list(args), prof, ["-F", str(HZ)], env=clean_env(env), cwd=cwd)
    assert p.returncode == 0, "%s exited %d: %s" % (exe, p.returncode, p.stderr[-500:])
    summ = summary(p.stderr)
    print("    " + " ".join("%s %s" % kv for kv in (summ or {}).items()))
    return stacks(build, prof), summ


def leaf_in(names):
    return lambda s: bool(s.frames) and s.frames[-1] in names


def incomplete_addresses(build, prof, n=5):
    """The n heaviest incomplete stacks by address (collapse --addresses):
    where a name is missing ([exe] with no symbol), the address says where
    the walk was."""
    rows = [(w, f) for f, w in flammetest.collapse(build, prof, "--threads", "--addresses")
            if len(f) > 1 and f[1] in ("[broken]", "[truncated]")]
    rows.sort(key=lambda r: -r[0])
    return ["%6d  %s" % (w, ";".join(f if len(f) <= 12 else f[:4] + [".."] + f[-8:]))
            for w, f in rows[:n]]


def common_checks(check, st, label, want, build=None, prof=None):
    pc, tot = share(st)
    print("    %s: %d samples, complete %.2f%%" % (label, tot, pc))
    check(tot >= 200, "%s: >= 200 samples" % label, tot)
    # The goal is a rate: one incomplete sample among ~800 (99.87%) is what
    # a 99.9% rate gives more often than not, and says nothing either way;
    # two or more fail. Each incomplete stack is printed by address too.
    lost = sum(s.weight for s in st if not s.complete())
    if lost and build and prof:
        print("    incomplete, by address:\n" + "\n".join(incomplete_addresses(build, prof)))
    check(pc >= want or lost <= 1,
          "%s: >= %.1f%% of the samples complete (or a single sample short)" % (label, want),
          "%.2f%%; heaviest incomplete:\n%s" % (pc, "\n".join(incomplete_top(st))))
    # The C start-up frames are there whatever the compiler (point 7). A
    # sample may land in the runtime's own start-up (caml_sys_init, ...,
    # before caml_start_program): every engine's first expiry comes within
    # one period of the start.
    main = [s for s in st if s.label == "main" and s.complete() and "caml_main" in s.frames]
    bad = []
    for s in main:
        after = s.frames[s.frames.index("caml_main") + 1:]
        if after[-1:] == ["[kernel]"]:
            after = after[:-1]
        # (A sample in caml_main's own code, between its calls, has it as
        # leaf; kernel time there, a page fault, adds a [kernel] leaf.)
        if not (not after or after[:1] == ["caml_startup_common"] and
                ("caml_program" not in after or after[1:2] == ["caml_start_program"])):
            bad.append(";".join(s.frames[:8]))
    check(not bad, "%s: main thread stacks go through caml_startup_common" % label, bad[:1])


def recorded(build, program, compiler, check, tmp_path, name, args=()):
    prof = str(tmp_path / (name + ".flm"))
    st, summ = recorded_raw(build, program(name), args, prof, str(tmp_path))
    common_checks(check, st, "%s/%s" % (name, compiler.name), goal(compiler), build, prof)
    return st, summ


@pytest.mark.slow
def test_atomq(build, program, compiler, check, tmp_path):
    st, _ = recorded(build, program, compiler, check, tmp_path, "atomq")
    # OCaml 5.4 reaches an Atomic.t through its field: caml_atomic_cas_field
    # and the like, called the same way.
    prims = {p + f for p in ("caml_atomic_cas", "caml_atomic_exchange", "caml_atomic_fetch_add")
             for f in ("", "_field")}
    pc, tot = share(st, leaf_in(prims))
    print("    in the caml_atomic_* primitives: %d samples, complete %.2f%%" % (tot, pc))
    check(tot >= 10 and pc >= GOAL, "atomq: the atomic primitives are sampled, >= %g%% complete" % GOAL,
          "%d samples, %.2f%% complete" % (tot, pc))
    under = sum(s.weight for s in st if s.frames and s.frames[-1] in prims and
                s.frames[-2] in ("Atomq.push", "Atomq.pop", "Atomq.producer", "Atomq.consumer"))
    check(under >= 0.95 * tot, "atomq: >= 95% of the atomic primitives directly under Atomq code",
          "%d of %d" % (under, tot))


@pytest.mark.slow
def test_rows_kept(build, program, compiler, check, tmp_path):
    """Unwind tables kept between processes (writer/cfi_cache.h), on
    hashstr, whose noalloc calls need the program's own rows without frame
    pointers: the first run writes the program's table, the second reads it
    back (the file touched, nothing new written) with stacks as whole, a
    table whose rules were overwritten is not used (whole stacks again, and
    the table written again as the first run wrote it), FLAMME_CACHE=0
    keeps nothing."""
    exe = program("hashstr")
    cache = tmp_path / "rows"
    env = {"FLAMME_CACHE_DIR": str(cache)}
    xs = os.stat(exe)

    def tables():
        return sorted(cache.glob("*.rows")) if cache.exists() else []

    def mine():
        """The unwind tables (magic FLMROWS; the program's kept symbols,
        FLMSYMS, have the same key) whose header (struct hdr: dev, ino, size
        at 32) names exe."""
        out = []
        for p in tables():
            with open(p, "rb") as f:
                head = f.read(128)
            dev, ino, size = struct.unpack_from("<QQQ", head, 32)
            if head[:8] == b"FLMROWS\0" and (dev, ino, size) == (xs.st_dev, xs.st_ino, xs.st_size):
                out.append(p)
        return out

    def run(n, extra=None):
        prof = str(tmp_path / ("%d.flm" % n))
        st, _ = recorded_raw(build, exe, [], prof, str(tmp_path), dict(env, **(extra or {})))
        common_checks(check, st, "hashstr/%s run %d" % (compiler.name, n), goal(compiler),
                      build, prof)

    run(1)
    t = mine()
    check(len(t) == 1, "hashstr: the first run keeps the program's table", tables())
    if len(t) != 1:
        return
    first, names, at = t[0].read_bytes(), tables(), t[0].stat().st_mtime_ns
    run(2)
    check(tables() == names and t[0].stat().st_mtime_ns > at,
          "hashstr: the second run reads the table back (touched, nothing new)",
          (tables(), names, t[0].stat().st_mtime_ns, at))
    # The header (128 bytes) ends with the rows and the distinct rules; the
    # rules, 16 bytes each, end the file (after 4-byte offsets, 2-byte ids).
    n, nrules = struct.unpack_from("<QQ", first, 112)
    check(len(first) == 128 + 6 * n + 16 * nrules and 1 < nrules < n,
          "hashstr: the table is rows and their distinct rules", (len(first), n, nrules))
    with open(t[0], "r+b") as f:
        f.seek(128 + 6 * n)
        f.write(b"\x07" * (16 * nrules))
    run(3)
    check(t[0].read_bytes() == first, "hashstr: an overwritten table is not used, and written again")
    other = tmp_path / "none"
    run(4, {"FLAMME_CACHE": "0", "FLAMME_CACHE_DIR": str(other)})
    check(not other.exists(), "hashstr: FLAMME_CACHE=0 keeps nothing")


@pytest.mark.slow
def test_hashstr(build, program, compiler, check, tmp_path):
    st, _ = recorded(build, program, compiler, check, tmp_path, "hashstr")
    for prim in ("caml_string_equal", "caml_hash", "caml_modify"):
        pc, tot = share(st, lambda s: prim in s.frames)
        print("    under %s: %d samples, complete %.2f%%" % (prim, tot, pc))
        check(tot >= 5 and pc >= GOAL, "hashstr: %s sampled, >= %g%% complete" % (prim, GOAL),
              "%d samples, %.2f%% complete" % (tot, pc))


@pytest.mark.slow
def test_effdeep(build, program, compiler, check, tmp_path):
    st, _ = recorded(build, program, compiler, check, tmp_path, "effdeep")
    work = [s for s in st if "Effdeep.work" in s.frames]
    tot = sum(s.weight for s in work)
    # Work in the generator fiber sits under the consumer's handler, which
    # sits under the Ask handler (two nested fibers), down to main.
    nested = sum(s.weight for s in work if s.complete() and "Effdeep.go" in s.frames and
                 s.frames.count("caml_runstack") >= 2)
    print("    Effdeep.work: %d samples, %d in the generator under two fibers and a root"
          % (tot, nested))
    check(tot >= 50 and nested >= 0.5 * tot,
          "effdeep: fiber stacks reach the handlers and main (>= half of Effdeep.work)",
          "%d of %d" % (nested, tot))


@pytest.mark.slow
def test_perfdeep(build, program, compiler, check, tmp_path):
    """A fiber 3,000 frames deep performing in a tight loop, its handler
    continuing at once: samples land inside caml_perform's stack switch,
    where the domain state already names the parent while rsp (frame
    pointers: rbp too) is still on the fiber, which the chain from the
    parent no longer holds. The walk went on by checked copies until their
    allowance ran out: 34-47 (5.3.0 fp) and 7 (5.1.0 fp) of ~750 samples
    came out [broken] under caml_perform, in every run tried (no-fp: none; its
    rows take the walk to the parent there). Walked whole (no budget), every
    stack reaches main, those in caml_perform through the fiber's frames
    (frame pointers) or the handler's (no-fp)."""
    prof = str(tmp_path / "perfdeep.flm")
    st, _ = recorded_raw(build, program("perfdeep"), [], prof, str(tmp_path),
                         env={"FLAMME_BUDGET": "0"})
    common_checks(check, st, "perfdeep/%s" % compiler.name, goal(compiler), build, prof)
    switching = [s for s in st if s.frames and s.frames[-1] in ("caml_perform", "caml_resume")]
    tot = sum(s.weight for s in switching)
    broken = sum(s.weight for s in st if s.frames[:1] == ["[broken]"])
    whole = sum(s.weight for s in switching if s.complete())
    print("    in caml_perform/caml_resume: %d samples, %d whole; [broken] in all: %d"
          % (tot, whole, broken))
    check(tot >= 20, "perfdeep: samples inside the stack switches (>= 20)", tot)
    check(broken <= 1, "perfdeep: no stack [broken] (a single sample allowed)",
          "%d\n%s" % (broken, "\n".join(incomplete_addresses(build, prof))))
    check(whole >= 0.99 * tot, "perfdeep: >= 99% of the switch samples reach main whole",
          "%d of %d" % (whole, tot))


@pytest.mark.slow
def test_nestfx(build, program, compiler, check, tmp_path):
    st, _ = recorded(build, program, compiler, check, tmp_path, "nestfx", ["4", "40"])
    # The body runs under every layer: 40 fibers, each one caml_runstack
    # frame, down to main (a walk used to stop at the 15th fiber, [broken]).
    for name, pred in (("Nestfx.work", leaf_in({"Nestfx.work"})),
                       ("caml_hash", lambda s: "caml_hash" in s.frames)):
        sel = [s for s in st if pred(s)]
        tot = sum(s.weight for s in sel)
        under = sum(s.weight for s in sel if s.complete() and "Nestfx.body" in s.frames and
                    s.frames.count("caml_runstack") == 40)
        print("    %s: %d samples, %d whole under the 40 layers" % (name, tot, under))
        check(tot >= 50 and under >= GOAL / 100 * tot,
              "nestfx: %s stacks reach main through all 40 handlers (>= %g%%)" % (name, GOAL),
              "%d of %d" % (under, tot))
    # 2,000 layers: stacks deeper than the budget walks; each is whole or
    # says it is cut ([truncated]), never [broken], and a cut one still
    # holds more than a window of stacks.
    prof = str(tmp_path / "nestfx-2000.flm")
    st, _ = recorded_raw(build, program("nestfx"), ["1", "2000"], prof, str(tmp_path))
    tot = sum(s.weight for s in st)
    broken = sum(s.weight for s in st if s.frames[:1] == ["[broken]"])
    cut = [s for s in st if s.frames[:1] == ["[truncated]"]]
    cutw = sum(s.weight for s in cut)
    deep = sum(s.weight for s in cut if s.frames.count("caml_runstack") >= 32)
    # Short walks here cost several times what the budget earns a sample
    # (the chain changes every round, each stack read with system calls):
    # past an overdraft the budget takes samples as their pc alone.
    alone = sum(s.weight for s in cut if len([f for f in s.frames[1:] if f != "[kernel]"]) == 1)
    walked = cutw - alone
    print("    2,000 layers: %d samples, %d [broken], %d [truncated] (%d the pc alone, %d of the "
          "others through >= 32 fibers)" % (tot, broken, cutw, alone, deep))
    # (A sample inside a stack switch, as each round makes and ends 2,000
    # fibers, may still be: 1 in ~20 runs here; the walk used to stop at
    # the 15th stack, [broken] in ~99% of the samples.)
    check(tot >= 200 and broken <= max(1, 0.005 * tot),
          "nestfx 2,000 layers: no stack [broken] (at most one, or 0.5%)", broken)
    check(cutw >= 0.5 * tot and walked >= 50 and deep >= 0.9 * walked,
          "nestfx 2,000 layers: most stacks cut, >= 90% of those walked through >= 32 fibers",
          "%d cut of %d, %d walked, %d through >= 32 fibers" % (cutw, tot, walked, deep))


@pytest.mark.slow
def test_growstack(build, program, compiler, check, tmp_path):
    """Fibers whose stacks grow: caml_try_realloc_stack copies a stack to
    one twice the size, points the C-stack links at the new one, frees the
    old (an munmap for a large one) and only then names the new one current.
    A sample in that free walked onto the new stack while the stack ranges
    named the old: `[broken];Growstack.weigh;...;caml_try_realloc_stack;
    cfree;__munmap`, 3-6% of this program's samples (no-fp and fp), as in the
    OCaml compiler's own backend recursions. glibc's mmap threshold is fixed
    at 8 KB so that every grown stack is freed with an munmap, as stacks
    of 32 MB and more are anyway (the threshold otherwise climbs to the size
    of the largest block freed). FLAMME_BUDGET=0: the ~700-frame stacks of
    fresh fibers at 999 Hz cost the handler more than its 2%, and shortened
    stacks would hide what this test looks at."""
    prof = str(tmp_path / "growstack.flm")
    env = {"MALLOC_MMAP_THRESHOLD_": "8192", "FLAMME_BUDGET": "0"}
    st, _ = recorded_raw(build, program("growstack"), ["300", "700"], prof, str(tmp_path), env)
    common_checks(check, st, "growstack/" + compiler.name, goal(compiler), build, prof)
    grow = [s for s in st if "caml_try_realloc_stack" in s.frames]
    freeing = [s for s in grow if any("free" in f or "munmap" in f
                                      for f in s.frames[s.frames.index("caml_try_realloc_stack") + 1:])]
    pc, tot = share(grow)
    fpc, ftot = share(freeing)
    def grown_by_weigh(f):
        """The runtime's stack check called from Growstack.weigh."""
        i = f.index("caml_call_realloc_stack") if "caml_call_realloc_stack" in f else 0
        return i > 0 and f[i - 1] == "Growstack.weigh"
    under = sum(s.weight for s in grow if s.complete() and grown_by_weigh(s.frames))
    print("    growing a stack: %d samples, complete %.2f%%, %d freeing the old one (%.2f%%), "
          "%d whole under Growstack.weigh" % (tot, pc, ftot, fpc, under))
    check(ftot >= 20 and fpc >= GOAL,
          "growstack: samples freeing the old stack (>= 20) are >= %g%% complete" % GOAL,
          "%d samples, %.2f%% complete" % (ftot, fpc))
    check(under >= GOAL / 100 * tot,
          "growstack: >= %g%% of the stack growth whole under the function that grew it" % GOAL,
          "%d of %d" % (under, tot))


@pytest.mark.slow
def test_yielder(build, program, compiler, check, tmp_path):
    st, _ = recorded(build, program, compiler, check, tmp_path, "yielder")
    tot = sum(s.weight for s in st if s.label != "main" and "Yielder.worker" in s.frames)
    # Thread.yield: the runtime's yield goes through caml_c_call.
    pc, ytot = share([s for s in st if "caml_thread_yield" in s.frames])
    print("    systhread samples in Yielder.worker: %d; under caml_thread_yield: %d, "
          "complete %.2f%%" % (tot, ytot, pc))
    check(tot >= 50, "yielder: the systhreads are sampled (>= 50)", tot)
    check(ytot == 0 or pc >= GOAL, "yielder: Thread.yield stacks >= %g%% complete" % GOAL, "%.2f%%" % pc)


def rooted_or_marked(frames):
    return bool(frames) and (frames[0] in ROOTS or frames[0] in MARKERS)


@pytest.mark.slow
def test_breakwalk(build, program, compiler, check, tmp_path):
    prof = str(tmp_path / "breakwalk.flm")
    st, _ = recorded_raw(build, program("breakwalk"), [], prof, str(tmp_path))
    for fn in ("brk_spin_fake", "brk_spin_zero", "brk_spin_junk"):
        sel = [s for s in st if s.frames and s.frames[-1] == fn]
        tot = sum(s.weight for s in sel)
        marked = sum(s.weight for s in sel if s.frames[0] in MARKERS)
        print("    leaf %s: %d samples, %d under [broken]/[truncated]" % (fn, tot, marked))
        check(tot >= 20, "breakwalk: %s sampled (>= 20)" % fn, tot)
        # The walk breaks there, except in the stub's prologue and before
        # its ret (rbp is a proper frame, or the caller is at rsp) where it
        # must be whole and right.
        check(marked >= 0.9 * tot, "breakwalk: %s still breaks walks (>= 90%% marked)" % fn,
              "only %d of %d" % (marked, tot))
        wrong = [";".join(s.frames) for s in sel if s.frames[0] not in MARKERS and
                 not (s.complete() and s.frames[-2] == "Breakwalk.in_" + fn[9:])]
        check(not wrong, "breakwalk: %s's stacks are marked or whole" % fn,
              "%d neither, e.g. %s" % (len(wrong), wrong[:1]))
    pc, tot = share(st, lambda s: "Breakwalk.plain" in s.frames)
    print("    Breakwalk.plain: %d samples, complete %.2f%%" % (tot, pc))
    check(tot >= 100 and pc >= GOAL, "breakwalk: the OCaml part is >= %g%% complete" % GOAL,
          "%d samples, %.2f%%" % (tot, pc))
    all_views_marked(build, check, prof, str(tmp_path))


def all_views_marked(build, check, prof, tmp):
    """Every verb and export of PROF shows each stack either from a thread
    root or under [broken]/[truncated]: collapse (with and without
    threads), export folded/speedscope/pprof, svg (the frames right above
    "all"), report (nothing "other" beside complete, truncated and broken)
    and diff."""
    def flamme(*args):
        p = subprocess.run([build.flamme] + list(args), capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, "flamme %s: %s" % (" ".join(args[:2]), p.stderr[-300:])
        return p.stdout

    def folded(text, what, labelled, cols=1):
        bad = [line[:200] for line in text.splitlines()
               if not rooted_or_marked(line.rsplit(" ", cols)[0].split(";")[1 if labelled else 0:])]
        check(not bad, "breakwalk views: %s: every stack rooted or marked (%d lines)"
              % (what, len(text.splitlines())), bad[:2])
    folded(flamme("collapse", prof), "collapse", False)
    folded(flamme("collapse", "--threads", prof), "collapse --threads", True)
    folded(flamme("export", prof, "--format", "folded", "--threads"), "export folded", True)
    folded(flamme("diff", prof, prof, "--folded"), "diff --folded", False, cols=2)
    sp = os.path.join(tmp, "views.speedscope.json")
    flamme("export", prof, "--format", "speedscope", "-o", sp)
    doc = json.load(open(sp))
    names = [f["name"] for f in doc["shared"]["frames"]]
    samples = [[names[i] for i in smp] for p in doc["profiles"] for smp in p.get("samples", [])]
    bad = [";".join(s[:6]) for s in samples if not rooted_or_marked(s)]
    check(not bad, "breakwalk views: speedscope: every sample rooted or marked (%d)" % len(samples), bad[:2])
    pp = os.path.join(tmp, "views.pb.gz")
    flamme("export", prof, "--format", "pprof", "-o", pp)
    pprof = decode_pprof(pp)
    fn, loc = pprof["functions"], pprof["locations"]
    frames = [[fn[loc[l]["functions"][-1]][0] for l in reversed(locs)] for locs, _, _ in pprof["samples"]]
    bad = [";".join(f[:6]) for f in frames if not rooted_or_marked(f)]
    check(not bad, "breakwalk views: pprof: every sample rooted or marked (%d)" % len(frames), bad[:2])
    svg = os.path.join(tmp, "views.svg")
    flamme("svg", prof, "-o", svg)
    roots = re.findall(r'<g s="\d+" n="\d+" m="\d+" d="1"><title>([^\n<]*)', open(svg).read())
    check(roots and all(rooted_or_marked([html.unescape(r)]) for r in roots),
          "breakwalk views: svg: every flame above all starts at a root or a marker", roots[:5])
    m = re.search(r"truncated: ([0-9.]+)%  broken: ([0-9.]+)%  other: ([0-9.]+)%", flamme("report", prof))
    check(m and float(m.group(3)) == 0.0, "breakwalk views: report: no 'other' incomplete stacks",
          m and m.group(0))


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["path", "bare"])
def test_dlprog(build, program, compiler, check, tmp_path, mode):
    """A library loaded, run for ~30 ms and unloaded, over and over: its
    frames are named (not [unknown]) and unwound (the plugin has no frame
    pointers: only its unwind tables lead out of it)."""
    exe = program("dlprog")
    st, _ = recorded_raw(build, exe, ["1", mode], str(tmp_path / "dlprog.flm"), str(tmp_path),
                         env={"LD_LIBRARY_PATH": os.path.dirname(exe)})
    allw = sum(s.weight for s in st)
    unknown = sum(s.weight for s in st if "[unknown]" in s.frames)
    pc, tot = share(st, lambda s: any(f.startswith("dlw_") for f in s.frames))
    print("    %s: %d samples in the plugin (of %d), complete %.2f%%; %d with an [unknown] frame"
          % (mode, tot, allw, pc, unknown))
    check(tot >= 0.5 * allw, "dlprog %s: the plugin is sampled and named (>= half the samples)" % mode,
          "%d of %d" % (tot, allw))
    check(unknown <= 0.01 * allw, "dlprog %s: <= 1%% of the samples with [unknown] frames" % mode, unknown)
    # Unwind rows built in the program's thread are flamme's time, not
    # sampled; the dlopen wrapper the program's own dlopen runs under is
    # left out of its stacks.
    # What is left is the few instructions of the interposers before they
    # jump to the real function (issue 8: flamme's own functions <= 0.5%).
    own = [s for s in st if any(f.startswith("flamme_") for f in s.frames)]
    ownw = sum(s.weight for s in own)
    check(ownw <= 0.005 * allw, "dlprog %s: flamme's functions in <= 0.5%% of the program's samples"
          % mode, "%d of %d: %s" % (ownw, allw, "; ".join(";".join(s.frames[-6:]) for s in own[:3])))
    # By full path the rows exist before dlopen returns; by bare name
    # (dlopen forwarded untouched) before dlsym returns the function the
    # program calls (98.2-99.7% without frame pointers when only the
    # writer's sweep, every 20 ms, picked the library up).
    check(pc >= GOAL, "dlprog %s: plugin stacks >= %.1f%% complete" % (mode, GOAL), "%.2f%%" % pc)


@pytest.mark.slow
def test_vclock(build, program, compiler, check, tmp_path):
    """Clock reads end in the vDSO: stacks through it are whole, and each
    entry point has one name (its unnamed internal code folds into it)."""
    st, _ = recorded(build, program, compiler, check, tmp_path, "vclock")
    vd = [s for s in st if any(f.startswith("__vdso_") or f == "[[vdso]]" for f in s.frames)]
    tot = sum(s.weight for s in vd)
    anon = sum(s.weight for s in vd if "[[vdso]]" in s.frames)
    print("    in the vDSO: %d samples, %d with an unnamed [[vdso]] frame" % (tot, anon))
    check(tot >= 50, "vclock: the vDSO is sampled (>= 50)", tot)
    check(anon == 0, "vclock: no sample shows the vDSO as [[vdso]]", anon)
    # A "[kernel]" leaf: the vDSO's fallback system call.
    user = [(s, s.frames[:-1] if s.frames[-1] == "[kernel]" else s.frames) for s in vd]
    ok = sum(s.weight for s, fr in user if s.complete() and
             fr[-1].startswith("__vdso_") and fr[-2].startswith("caml_unix_"))
    check(ok >= 0.99 * tot, "vclock: >= 99% of the vDSO stacks whole under the Unix primitive",
          "%d of %d" % (ok, tot))


def ordered(frames, names):
    """True if names occur in frames in this order (root first), not
    necessarily adjacent."""
    i = 0
    for f in frames:
        if i < len(names) and f == names[i]:
            i += 1
    return i == len(names)


def placed(check, st, label, what, pred, chain, least, within=None, share=0.99):
    """Of the samples matching pred, at least `least` exist and `share`
    (99%) are whole with the frames of chain in that order (root first)."""
    sel = [s for s in st if pred(s) and (within is None or within(s))]
    tot = sum(s.weight for s in sel)
    ok = sum(s.weight for s in sel if s.complete() and ordered(s.frames, chain))
    print("    %s: %d samples, %d whole under %s" % (what, tot, ok, " .. ".join(chain)))
    check(tot >= least, "%s: %s sampled (>= %d)" % (label, what, least), tot)
    check(ok >= share * tot, "%s: %s: >= %g%% whole under %s" % (label, what, 100 * share,
                                                                ";".join(chain)),
          "only %d of %d" % (ok, tot))


def has(*names):
    return lambda s: any(f in names for f in s.frames)


GC_FUNS = ("caml_empty_minor_heap", "caml_empty_minor_heaps_once", "caml_major_collection_slice",
           "caml_alloc_shr", "caml_shared_try_alloc", "caml_do_some_marking_work",
           "major_collection_slice", "caml_collect_major_slice", "caml_minor_collection")


def adjacent(check, st, label, what, fn, caller, below, least):
    """Samples where fn runs one of below right under it (or one frame
    further: fn doubled; below None: any sample in fn): at least `least`, and 99% of them whole
    with caller right above fn, and fn there once (a word of fn's frame
    read as a return address named fn again, or junk, or broke the walk)."""
    sel = []
    for s in st:
        if fn not in s.frames:
            continue
        i = s.frames.index(fn)
        if below is None or any(f in below for f in s.frames[i + 1:i + 3]):
            sel.append((s, i))
    tot = sum(s.weight for s, _ in sel)
    ok = sum(s.weight for s, i in sel if s.complete() and i > 0 and s.frames[i - 1] == caller and
             s.frames.count(fn) == 1)
    print("    %s: %d samples, %d whole with %s;%s" % (what, tot, ok, caller, fn))
    check(tot >= least, "%s: %s sampled (>= %d)" % (label, what, least), tot)
    bad = sorted(((s.weight, ";".join(s.frames[-12:])) for s, i in sel
                  if not (s.complete() and i > 0 and s.frames[i - 1] == caller and
                          s.frames.count(fn) == 1)), reverse=True)[:3]
    check(ok >= 0.99 * tot, "%s: %s: >= 99%% whole, right under %s, %s once" % (label, what, caller, fn),
          "only %d of %d; e.g. %s" % (ok, tot, bad))


@pytest.mark.slow
def test_trygc(build, program, compiler, check, tmp_path):
    """Calls into the runtime from inside `try` bodies: OCaml emits the
    calls of caml_call_gc and caml_ml_array_bound_error after the body,
    where its CFI leaves out the trap frames (16 bytes a level). The rows
    are mended from the frame descriptors (writer/cfi_build.c,
    mend_call_sites). Before, without frame pointers the fill's collections
    were [broken] (12% of the program whole), and with them each sample
    named Trygc.fill twice."""
    st, _ = recorded(build, program, compiler, check, tmp_path, "trygc")
    label = "trygc/" + compiler.name
    adjacent(check, st, label, "collections entered from two nested trys", "Trygc.fill",
             "Trygc.fill_round", ("caml_call_gc",), 100)
    adjacent(check, st, label, "bound checks raising inside a try", "Trygc.probe",
             "Trygc.probe_round", None, 10)


@pytest.mark.slow
def test_raisebt(build, program, compiler, check, tmp_path):
    """Raises while a backtrace is recorded (Printexc.record_backtrace):
    caml_raise_exn moves to the C stack to call caml_stash_backtrace with
    rows that still describe the OCaml stack (runtime_hooks/switch_rows.c
    mends them). Before: without frame pointers 29% of the program whole
    (every stash sample [broken]); with them a junk frame under
    caml_raise_exn, and raises from C [broken] (78% whole). Each sample in
    the stash must be whole, with caml_raise_exn right under the function
    that raised and all 41 levels of its recursion. OCaml 5.1 loses the
    OCaml stack pointer for a raise from C (switch_rows.h): from OCaml only."""
    from_c = tuple(int(x) for x in compiler.version.split(".")[:2]) >= (5, 2)
    st, _ = recorded(build, program, compiler, check, tmp_path, "raisebt",
                     [] if from_c else ["1.5", "ocaml"])
    label = "raisebt/" + compiler.name
    paths = [("Raisebt.search_round", "Raisebt.descend", "raises from OCaml")]
    if from_c:
        paths.append(("Raisebt.parse_round", "Raisebt.read_field", "raises from C (int_of_string)"))
    for round_fn, raiser, what in paths:
        sel = [s for s in st if "caml_stash_backtrace" in s.frames and
               (round_fn in s.frames or not s.complete())]
        # An incomplete stack may have lost the round: it counts against both.
        tot = sum(s.weight for s in sel)
        def right(s):
            if not s.complete() or s.frames.count("caml_raise_exn") != 1:
                return False
            i = s.frames.index("caml_raise_exn")
            return s.frames[i - 1] == raiser and s.frames.count(raiser) == 41
        ok = sum(s.weight for s in sel if right(s))
        bad = sorted(((s.weight, ";".join(s.frames[-8:])) for s in sel if not right(s)),
                     reverse=True)[:3]
        print("    %s: %d samples in the stash, %d whole under all 41 %s" % (what, tot, ok, raiser))
        check(tot >= 50, "%s: %s: the backtrace stash sampled (>= 50)" % (label, what), tot)
        check(ok >= 0.99 * tot,
              "%s: %s: >= 99%% whole, caml_raise_exn right under %s, 41 levels" % (label, what, raiser),
              "only %d of %d; e.g. %s" % (ok, tot, bad))


@pytest.mark.slow
def test_shortdeep(build, program, compiler, check, tmp_path):
    """A short program (0.15 s) whose work sits under a 120-level
    recursion, at 999 Hz: the handler's budget must let its stacks be
    walked whole once and replayed after (agent/budget.h, a thread's first
    credit; a stack a short walk takes whole no longer replaces a deeper
    one in the memo). Before, 0-7% of the leaf's samples were whole (the
    rest [truncated] at 64 frames); now 100%, with the program's rows kept
    and without (FLAMME_CACHE=0). Each whole sample has all 120 levels (the
    leaf is a tail call)."""
    prof = str(tmp_path / "shortdeep.flm")
    st, _ = recorded_raw(build, program("shortdeep"), [], prof, str(tmp_path))
    label = "shortdeep/" + compiler.name
    leaf = [s for s in st if s.frames and s.frames[-1] == "Shortdeep.leaf_work"]
    tot = sum(s.weight for s in leaf)
    whole = sum(s.weight for s in leaf if s.complete() and s.frames.count("Shortdeep.eval") == 120)
    broken = sum(s.weight for s in st if s.frames[:1] == ["[broken]"])
    print("    leaf samples %d, whole under all 120 evals %d, [broken] %d" % (tot, whole, broken))
    check(tot >= 50, "%s: the leaf's work sampled (>= 50)" % label, tot)
    check(whole >= 0.9 * tot, "%s: >= 90%% of the leaf's samples whole, under all 120 evals" % label,
          "%d of %d" % (whole, tot))
    check(broken == 0, "%s: no stack [broken]" % label, broken)


def manyfns_source(chains=40, depth=80):
    """OCaml source: CHAINS chains of DEPTH distinct functions, each chain's
    leaf working for its share of the run, each chain run once: a program
    of many functions, as a compiler is, whose stacks are 80 deep."""
    out = ["(* manyfns: generated by tests/unwind/test_unwind.py *)", "let sink = ref 0",
           "let[@inline never] work n =",
           "  let a = ref 1 in",
           "  for i = 1 to n do a := (!a * 1103515245 + i) land 0x3fffffff done;",
           "  sink := !sink + !a"]
    for c in range(chains):
        out.append("let[@inline never] f%d_%d n = work n; 1" % (c, depth))
        for d in range(depth - 1, -1, -1):
            out.append("let[@inline never] f%d_%d n = 1 + f%d_%d n" % (c, d, c, d + 1))
    out.append("let () =")
    out.append("  let n = int_of_string Sys.argv.(1) in")
    out += ["  ignore (f%d_0 n);" % c for c in range(chains)]
    out.append('  Printf.printf "%d\\n" !sink')
    return "\n".join(out) + "\n"


@pytest.mark.slow
def test_manyfns(build, ocaml, compiler, check, tmp_path):
    """A 0.2 s program through 3,240 distinct functions, 81 frames deep, at
    999 Hz: naming each new frame (its symbol, its line, its record) is a
    one-time cost of the program's code, like its symbol tables, and is not
    charged to the handlers' budget. Charged, it shortened samples to 64
    frames (3-41% a run: 5.3.0 fp 34-36%, no-fp 3-25%, 5.1.0 fp 36-41%;
    tables kept, idle machine) to save nothing: the frames are named
    whether the stacks are whole or not. Nor is compressing the names:
    the run's one chunk, ~270 KB, is nearly all FRAME records, and its 2-4
    ms charged left 33-90% of the stacks whole in about half the runs
    (5.1.0 fp, 7 of 12). The runs after a first one (its tables kept):
    two of three >= 95% whole (27 of 27 runs were whole beside a busy
    loop; a busy machine slows the writer's other work, still charged)."""
    src = tmp_path / "manyfns.ml"
    src.write_text(manyfns_source())
    exe = ocaml("unwind/manyfns", [str(src)])
    label = "manyfns/" + compiler.name
    shares = []
    for i in range(4):
        prof = str(tmp_path / ("manyfns%d.flm" % i))
        st, _ = recorded_raw(build, exe, ["2500000"], prof, str(tmp_path))
        if i == 0:
            continue  # writes the kept tables
        tot = sum(s.weight for s in st)
        whole = sum(s.weight for s in st if s.complete() and "[truncated]" not in s.frames)
        shares.append(whole / tot if tot else 0.0)
        print("    run %d: %d samples, %d whole" % (i, tot, whole))
    check(sorted(shares)[1] >= 0.95, "%s: >= 95%% of the samples whole (two of three runs)" % label,
          " ".join("%.1f%%" % (100 * x) for x in shares))


@pytest.mark.slow
def test_gcalloc(build, program, compiler, check, tmp_path):
    """Allocation-heavy code on two domains: the collectors' frames sit
    under the OCaml function that allocated, on both domains."""
    st, _ = recorded(build, program, compiler, check, tmp_path, "gcalloc")
    label = "gcalloc/" + compiler.name

    # A domain also collects where no OCaml runs yet or any more (a minor
    # collection it serves as its thread starts: domain_thread_func;
    # caml_empty_minor_heaps_once): such a stack is whole but under no
    # OCaml function, so it is left out. Incomplete stacks are never left out.
    # The main thread also collects, correctly attributed, outside the
    # rounds: in Stdlib's and Std_exit's own code (a channel allocated at
    # start, flush_all at exit), in Domain.spawn/join, and at a poll point
    # of Gcalloc's top-level loop between rounds, where it serves the other
    # domain's stop-the-world request (Gcalloc (init);handle_incoming;...:
    # 4 of 67 samples once in CI). Its whole stacks outside Gcalloc's own
    # code, under those calls or right under the top level are left out too.
    def outside_rounds(s):
        if ("Gcalloc (init)" not in s.frames or "Stdlib.Domain.spawn" in s.frames
                or "Stdlib.Domain.join" in s.frames):
            return True
        i = s.frames.index("Gcalloc (init)")
        return i + 1 < len(s.frames) and not s.frames[i + 1].startswith("Gcalloc.")

    # Domain 1 likewise, at the poll point of its own loop between rounds
    # (Stdlib.Domain.body;Gcalloc.(fun);caml_call_gc;...) and in the
    # Stdlib's code as it ends (Stdlib.Domain.body;Stdlib.Domain.do_at_exit):
    # 1-2 of ~80 GC samples in 3 of 22 runs (5.3.0 no-fp); CI once found 2
    # of 59, and the 97% below failed.
    def outside_domain_rounds(s):
        if "Stdlib.Domain.body" not in s.frames:
            return True
        i = s.frames.index("Stdlib.Domain.body")
        return (i + 1 < len(s.frames) and not s.frames[i + 1].startswith("Gcalloc.")) or (
            i + 2 < len(s.frames) and not s.frames[i + 2].startswith("Gcalloc."))

    def ocaml_gc(s, d):
        return s.label.startswith(d) and not (s.complete() and (
            "caml_start_program" not in s.frames or
            (outside_rounds(s) if d == "main" else outside_domain_rounds(s))))
    for dom in ("main", "domain 1"):
        placed(check, st, label, "GC work in %s" % dom, has(*GC_FUNS), ["Gcalloc.one_round"],
               20, lambda s, d=dom: ocaml_gc(s, d), share=0.97)
    placed(check, st, label, "Gcalloc.make", has("Gcalloc.make"), ["Gcalloc.trees"], 50)


@pytest.mark.slow
def test_rewrite(build, program, compiler, check, tmp_path):
    """Symbolic rewriting: structural hashing and comparison (runtime C
    called from OCaml) right under the OCaml function that called them
    (hashstr covers caml_modify)."""
    st, _ = recorded(build, program, compiler, check, tmp_path, "rewrite")
    label = "rewrite/" + compiler.name
    for what, prims, least in (("caml_hash", ("caml_hash",), 20),
                               ("structural compare", ("compare_val", "caml_compare",
                                                       "caml_equal", "caml_string_compare"), 20)):
        # Called straight from OCaml (the program or the Stdlib's Hashtbl
        # and List): the frame above the primitive is that OCaml function.
        placed(check, st, label, what, has(*prims), ["main", "Rewrite (init)"], least)
        callers = {}
        for s in st:
            if not has(*prims)(s):
                continue
            i = min(s.frames.index(p) for p in prims if p in s.frames) - 1
            while i > 0 and s.frames[i] == "caml_c_call":
                i -= 1
            callers[s.frames[i]] = callers.get(s.frames[i], 0) + s.weight
        odd = {c: n for c, n in callers.items() if not c.startswith(("Rewrite", "Stdlib."))}
        check(sum(odd.values()) <= 0.01 * sum(callers.values()),
              "%s: %s called from OCaml (the program or the Stdlib; >= 99%%)" % (label, what), odd)


@pytest.mark.slow
def test_sched(build, program, compiler, check, tmp_path):
    """A fiber scheduler: work in fibers (two levels: scheduler, generator)
    reaches the scheduler and main through caml_runstack."""
    st, _ = recorded(build, program, compiler, check, tmp_path, "sched")
    label = "sched/" + compiler.name
    placed(check, st, label, "producers' crunch", lambda s: ordered(s.frames, [
        "Sched.producer", "Sched.crunch"]), ["main", "Sched.run", "caml_runstack",
                                            "Sched.producer", "caml_runstack", "Sched.crunch"], 50)
    # The consumers' loop is a tail call: Sched.consumer itself is gone.
    placed(check, st, label, "consumers' crunch", lambda s: "Sched.crunch" in s.frames and
           "Sched.producer" not in s.frames, ["main", "Sched.run", "caml_runstack",
                                              "Sched.crunch"], 20)


@pytest.mark.slow
def test_fxexn(build, program, compiler, check, tmp_path):
    """Fibers that end with an exception (raised in the task, or by
    discontinue at its Yield): the samples between the raise and the parent
    stack were [broken] (no-fp) or had a junk [unknown] frame (fp), 1.7-2.6%
    of the program on every compiler. Every stack whole, no [unknown]
    frame, the tasks under caml_runstack and the loop that ran them, and
    caml_runstack's own samples (its exception handler among them) whole."""
    st, _ = recorded(build, program, compiler, check, tmp_path, "fxexn")
    label = "fxexn/" + compiler.name
    junk = sum(s.weight for s in st if "[unknown]" in s.frames)
    check(junk == 0, "%s: no [unknown] frame" % label,
          [";".join(s.frames[-6:]) for s in st if "[unknown]" in s.frames][:3])
    placed(check, st, label, "tasks started", has("Fxexn.task"), ["main", "Fxexn.run_batch",
                                                                  "caml_runstack", "Fxexn.task"],
           50, lambda s: "Stdlib.Queue.iter" not in s.frames)
    placed(check, st, label, "tasks resumed", has("Fxexn.task"), ["main", "Stdlib.Queue.iter",
                                                                  "caml_runstack", "Fxexn.task"],
           50, lambda s: "Stdlib.Queue.iter" in s.frames)
    placed(check, st, label, "caml_runstack itself", leaf_in(("caml_runstack", "caml_raise_exn")),
           ["main", "Fxexn (init)", "caml_runstack"], 20)


@pytest.mark.slow
@pytest.mark.parametrize("debug", [False, True], ids=["nodebug", "debug"])
def test_cbraise(build, ocaml, compiler, check, tmp_path, debug):
    """Exceptions that end a callback from C, and that a handler two
    functions up catches. Without -g (ocamlopt's default) the raise is
    inlined: rsp moved to the trap, a jump to the handler; with -g (dune's
    default) caml_raise_exn's ret goes there. Before, without frame
    pointers, samples in caml_start_program's way back to C were
    `[broken];[unknown];caml_start_program` (11-18% of them; 44-56% with
    -g, 4.7-5.5% of the program) and samples in the raise
    `[broken];Cbraise.search`; with them junk frames (caml_start_program
    twice; with -g `Cbraise.checked;[unknown];caml_start_program;
    caml_raise_exn`, 0.9% of the program)."""
    sources = [os.path.join(HERE, "cbraise_stubs.c"), os.path.join(HERE, "cbraise.ml")]
    exe = ocaml("unwind/cbraise" + ("-g" if debug else ""), sources,
                flags=("-g",) if debug else ())
    prof = str(tmp_path / "cbraise.flm")
    st, _ = recorded_raw(build, exe, [], prof, str(tmp_path))
    label = "cbraise%s/%s" % ("-g" if debug else "", compiler.name)
    common_checks(check, st, label, goal(compiler), build, prof)
    junk = [";".join(s.frames[-6:]) for s in st
            if "[unknown]" in s.frames or s.frames.count("caml_start_program") > 2]
    check(not junk, "%s: no [unknown] frame, caml_start_program at most twice" % label, junk[:3])
    placed(check, st, label, "the way back to C", leaf_in(("caml_start_program",)),
           ["main", "Cbraise.visits", "cbraise_visit", "caml_callback_exn", "caml_start_program"],
           20, lambda s: "Cbraise.searches" not in s.frames)
    placed(check, st, label, "the callback", has("Cbraise.checked"),
           ["main", "Cbraise.visits", "cbraise_visit", "caml_callback_exn", "caml_start_program",
            "Cbraise.checked"], 20)
    placed(check, st, label, "the search", has("Cbraise.search"),
           ["main", "Cbraise.searches", "Cbraise.find", "Cbraise.search"], 50)


@pytest.mark.slow
def test_steal(build, program, compiler, check, tmp_path):
    """Work stealing over three domains: fib runs on every domain and each
    stack reaches its thread root through the worker loop or main."""
    st, _ = recorded(build, program, compiler, check, tmp_path, "steal")
    label = "steal/" + compiler.name
    doms = sorted({s.label for s in st if "Steal.fib" in s.frames})
    print("    Steal.fib sampled on: %s" % ", ".join(doms))
    check(len(doms) >= 2, "%s: fib sampled on >= 2 threads" % label, doms)
    placed(check, st, label, "fib on the workers", has("Steal.fib"), ["Steal.worker"], 20,
           lambda s: s.label != "main")
    placed(check, st, label, "fib on main", has("Steal.fib"), ["main", "Steal.pfib"], 20,
           lambda s: s.label == "main")


@pytest.mark.slow
def test_churn(build, program, compiler, check, tmp_path):
    """Domains that come and go while two others keep the major GC busy."""
    st, summ = recorded(build, program, compiler, check, tmp_path, "churn")
    label = "churn/" + compiler.name
    # Domain ids are reused: count threads in the record summary.
    check(summ and summ["threads"] >= 20, "%s: >= 20 threads sampled" % label, summ)
    # 50: the 30 batches are a fixed amount of work, 90-91 samples on a
    # fast machine (CI once failed the 100 this asked for).
    placed(check, st, label, "batches", has("Churn.handle_batch"), ["start_thread"], 50)
    placed(check, st, label, "Gc.major", has("caml_gc_major", "caml_finish_major_cycle"),
           ["Churn.compactor"], 10)


@pytest.mark.slow
def test_dthreads(build, program, compiler, check, tmp_path):
    """Systhreads inside domains that take turns with Thread.yield."""
    st, _ = recorded(build, program, compiler, check, tmp_path, "dthreads")
    label = "dthreads/" + compiler.name
    labels = {s.label for s in st if "Dthreads.serve" in s.frames}
    print("    threads running Dthreads.serve: %d" % len(labels))
    check(len(labels) >= 6, "%s: serve sampled on >= 6 threads" % label, len(labels))
    placed(check, st, label, "serve", has("Dthreads.serve"), ["start_thread", "Dthreads.serve"], 100)
    pc, tot = share([s for s in st if "caml_thread_yield" in s.frames])
    print("    under caml_thread_yield: %d samples, complete %.2f%%" % (tot, pc))
    check(tot == 0 or pc >= 99.0, "%s: Thread.yield stacks >= 99%% complete" % label, "%.2f%%" % pc)


@pytest.mark.slow
def test_cback(build, program, compiler, check, tmp_path):
    """C stubs and callbacks: the OCaml comparison called by glibc's qsort
    sits under qsort, the stub and the OCaml caller; the fold's closure
    under the C fold; the noalloc checksum, and the noalloc hash in
    assembly without CFI, under their caller."""
    st, _ = recorded(build, program, compiler, check, tmp_path, "cback")
    label = "cback/" + compiler.name
    placed(check, st, label, "comparisons called back from qsort", has("Cback.by_weight"),
           ["Cback.one_round", "cb_sort_keys", "qsort_r", "cmp_ocaml", "caml_callback2",
            "Cback.by_weight"], 20)
    placed(check, st, label, "fold steps", has("Cback.step"), ["Cback.one_round", "cb_fold", "Cback.step"], 20)
    placed(check, st, label, "noalloc checksum", has("cb_checksum"), ["Cback.one_round", "cb_checksum"], 20)
    # No FDE covers it: its rows are derived from its code (writer/cfi_synth.c).
    placed(check, st, label, "noalloc hash in assembly without CFI", has("cb_asm_hash"),
           ["Cback.one_round", "cb_asm_hash"], 20)


@pytest.mark.slow
def test_cback_nest(build, program, compiler, check, tmp_path):
    """OCaml and C calling each other 70 deep (a C fold whose OCaml closure
    folds again): the walk crosses between the OCaml stack and the system
    stack 140 times (it used to stop after 64 crossings, [broken]); it may
    come back to a stack only above where it left it. Stacks ~500 frames
    deep at 999 Hz: at the default budget how many walks are whole varies
    between runs of this 0.6-0.9 s program (23-271 of Cback.bottom's in 38
    local runs of the old and new agents, but 0 in one clean-clone CI run
    and in one local run, cause not found), so the budget is off here: the
    check is the crossings'. Every stack reaches main through all 70 folds,
    and none is [broken]."""
    prof = str(tmp_path / "cback-nest.flm")
    st, _ = recorded_raw(build, program("cback"), ["4", "nest"], prof, str(tmp_path),
                         env={"FLAMME_BUDGET": "100"})
    label = "cback nest/" + compiler.name
    tot = sum(s.weight for s in st)
    broken = sum(s.weight for s in st if s.frames[:1] == ["[broken]"])
    sel = [s for s in st if "Cback.bottom" in s.frames and s.complete()]
    whole = sum(s.weight for s in sel)
    deep = sum(s.weight for s in sel if s.frames.count("cb_fold") == 70)
    print("    %d samples, %d [broken]; Cback.bottom whole: %d, %d of them under all 70 C folds"
          % (tot, broken, whole, deep))
    check(tot >= 200 and broken <= max(1, 0.005 * tot),
          "%s: no stack [broken] (at most one, or 0.5%%)" % label, broken)
    check(deep >= 20 and deep == whole,
          "%s: >= 20 whole samples of the bottom's work, each under all 70 C folds" % label,
          "%d of %d" % (deep, whole))


@pytest.mark.slow
def test_cback_fiber(build, program, compiler, check, tmp_path):
    """cback with every other ten rounds inside an effect handler: a
    callback from C hides the fiber's parent for its duration
    (runtime/callback.c keeps it in a continuation among the local roots),
    and the walk finds it there (before: [broken] right under
    caml_runstack; whole: 0% of the program's samples in a fiber). In the
    few instructions where the parent is hidden but not registered, the
    parent the fiber had in the thread's previous sample stands (with frame
    pointers, caml_runstack's frame links to its caller anyway)."""
    prof = str(tmp_path / "cback-fiber.flm")
    st, _ = recorded_raw(build, program("cback"), ["1", "fiber"], prof, str(tmp_path))
    label = "cback fiber/" + compiler.name
    common_checks(check, st, label, goal(compiler), build, prof)
    infiber = lambda s: "caml_runstack" in s.frames
    placed(check, st, label, "comparisons called back from qsort in a fiber",
           lambda s: "Cback.by_weight" in s.frames and infiber(s),
           ["caml_runstack", "Cback.one_round", "cb_sort_keys", "qsort_r", "cmp_ocaml",
            "caml_callback2", "Cback.by_weight"], 10)
    placed(check, st, label, "fold steps in a fiber",
           lambda s: "Cback.step" in s.frames and infiber(s),
           ["caml_runstack", "Cback.one_round", "cb_fold", "Cback.step"], 10)


@pytest.mark.slow
def test_minicc(build, program, compiler, check, tmp_path):
    """A compiler: every phase is sampled with a whole stack under main."""
    st, _ = recorded(build, program, compiler, check, tmp_path, "minicc")
    for phase in ("Minicc.lex", "Minicc.parse", "Minicc.codegen", "Minicc.run"):
        placed(check, st, "minicc/" + compiler.name, phase, has(phase), ["main", "Minicc (init)", phase], 10)
