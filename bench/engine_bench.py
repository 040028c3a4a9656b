#!/usr/bin/env python3
"""bench/engine_bench.py — what sampling costs and what it counts, per program
and compiler (`make bench-engine`, part of `make bench`). Prints tables;
asserts nothing.

- GC hooks: gcloop (Gc.major in a loop on two domains while others come and
  go) alone and under flamme at 999 Hz: CPU seconds of each (median of the
  rounds), flamme's own functions as a share of the samples, and how long the
  major-slice hooks were paused (`flamme report`).
- CPU budget: deepfx (stacks of ~400,000 frames) alone and under flamme at
  FLAMME_DEPTH=1000000, 99 and 999 Hz: wall slowdown (fastest rounds; goal
  <= 1.2x), CPU slowdown of the process and of its main thread (medians),
  sample weight over the main thread's CPU periods (goal: within 5%),
  handler CPU as a share of the thread's, samples shortened; the agent's
  fixed cost (start-up and end) on a run of 1000 steps; and fxchain (every
  frame a stack switch) at 999 Hz: handler share, weight over CPU periods,
  samples the budget took as their pc alone.
- Engine agreement: per program and compiler, the largest difference
  (percentage points) among the top-20 leaf self-times of --engine perf and
  --engine timer at 999 Hz (goal <= 2), of auto (perf, with the threads that
  switch often moved to timers) and timer, and of each against `perf record
  -a -e cpu-clock -g` (goal <= 3; system-wide, so that perf's per-task
  events do not add their cost to every context switch of the program:
  perf_record_leaves), whose leaf is the first user-space frame of
  each sample (kernel time goes to the code that entered the kernel, as
  flamme does; a `[kernel]` leaf counts for its caller), names that share
  an address counted as one (address_aliases), each beside what sampling
  alone would give (noise_floor: two views of one run differ by a few pp
  at their largest leaf from ~1,000 samples each); and the share of
  the perf engine's weight that is a `[kernel]` leaf. One run each: the
  differences include the program's own variation from run to run, except
  timer=record and perf=record: --engine timer / perf run under perf
  record, both views of one run (flamme's own samples left out of perf's);
  tick=record: the timer engine without its dither (FLAMME_DITHER=0: each
  sample at the tick where its CPU timer fired), the same way;
  perf-user=record: --engine perf as user nobody, whose events may not
  sample the kernel (root, perf_event_paranoid 2 only); auto@99=record:
  the default (auto, 99 Hz) on a run 6 times as long (the program's first
  argument scaled), under perf record at 999 Hz.
- What a sample costs: bench/spin.ml (arithmetic, one recursion ~30 frames deep) alone
  and preloaded with each engine at 999 and 4999 Hz and at 1 Hz, rounds
  interleaved: what the agent costs once (1 Hz over alone), the process's
  CPU time added per sample beyond that (fastest run of each: this VM's CPU
  runs ~30% slower in some runs) and what
  that is at 999 samples per CPU-second; beside it what the program's own
  CPU time (its task clock) grows by under `perf record -F 999 -g`, the
  kernel's sampler, for reference.
- Against the program's own clock: ticks (after_tick, ~10% of each tick),
  cycle (Cycle.first, the first 40% of every 1001001 ns of its CPU time:
  in step with the period at 999 Hz), handoff (systhreads handing the runtime lock over at every yield: work)
  and kern (compute, page-touching and file-system phases) measure their
  own split with their threads' CPU clocks; per engine (timer, timer at
  ticks, perf, auto at 999 and 99 Hz), the profile's share minus the
  program's, lowest and highest over the rounds. Per-task perf record is no
  reference there: on handoff its own work at each context switch is CPU
  time no sample sees (doc/design.md, "What the ticks miss").
Usage: engine_bench.py [--build DIR] [--rounds N] [--only gc,budget,cost,agree,truth]
                       [--programs atomq,yielder,...]
"""
import argparse
import collections
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "..", "tests"), os.path.join(HERE, "..", "tests", "engine"),
                os.path.join(HERE, "..", "tests", "unwind")]
import engine_figures as ef  # noqa: E402
import flammetest  # noqa: E402
import unwind_stacks  # noqa: E402
from flammetest import clean_env, collapse, report, run_timed  # noqa: E402

COMPILERS = ("fp", "nofp")  # OCaml 5.3.0 with and without frame pointers


class Ctx:
    """The build under test, the compilers of make deps and a work directory;
    builds the programs it is asked for as the tests do (flammetest)."""

    def __init__(self, build, cache, work):
        self.build = flammetest.Build(build)
        self.compilers = {c.name: c for c in flammetest.find_compilers(cache)}
        self.work = work

    def make(self, comp):
        """A builder like the tests' `ocaml` fixture, for OCaml 5.3.0 COMP."""
        compiler = self.compilers.get("5.3.0-" + comp)
        if compiler is None:
            raise FileNotFoundError("no OCaml 5.3.0-%s compiler (run make deps)" % comp)
        return flammetest.builder(self.build, compiler)

    def exe(self, comp, name):
        return ef.build_program(self.make(comp), name)


def record(ctx, exe, args, prof, hz=999, engine=None, env=None):
    """(CompletedProcess, wall s, CPU s) of `flamme record` of EXE ARGS."""
    return run_timed(ef.record_cmd(ctx.build, exe, args, prof, hz, engine), env=clean_env(env),
                     cwd=ctx.work)


def bench_gc_hooks(ctx, rounds):
    print("GC hooks (gcloop 0.3, 999 Hz; goal: flamme's functions <= 0.5% of samples)")
    print("  %-5s %10s %10s %8s %12s %16s" % ("build", "cpu alone", "cpu flamme", "ratio",
                                               "flamme fns", "hooks paused"))
    for comp in COMPILERS:
        try:
            exe = ctx.exe(comp, "gcloop")
        except (FileNotFoundError, RuntimeError) as e:
            print("  %-5s %s" % (comp, e))
            continue
        alone, under, own, paused = [], [], [], ""
        for i in range(rounds):
            alone.append(run_timed([exe, "0.3"], cwd=ctx.work)[2])
            prof = os.path.join(ctx.work, "gc.flm")
            under.append(record(ctx, exe, ["0.3"], prof)[2])
            own.append(ef.own_share(ctx.build, collapse(ctx.build, prof))[0])
            m = re.search(r"hooks paused (\d+) times, (\d+) ms", report(ctx.build, prof))
            paused = "%s ms (%s)" % (m.group(2), m.group(1)) if m else "never"
        ca, cu = statistics.median(alone), statistics.median(under)
        print("  %-5s %9.2fs %9.2fs %8.3f %11.2f%% %16s" % (comp, ca, cu, cu / ca,
                                                           statistics.median(own), paused))


def bench_budget(ctx, rounds):
    print("CPU budget (deepfx, ~400,000-frame stacks, FLAMME_DEPTH=1000000; goal: <= 1.2x alone)")
    print("  wall x: fastest of the rounds each (a shared machine's load only slows runs down);"
          " main x: the main thread's CPU since main (the agent's start-up, before main, is in"
          " cpu x); weight/CPU: sample weight over the main thread's CPU periods (goal: 5%)")
    print("  %-5s %6s %10s %10s %7s %7s %7s %10s %9s %12s" % (
        "build", "Hz", "wall alone", "wall flame", "wall x", "cpu x", "main x", "weight/CPU",
        "handler", "shortened"))
    med = statistics.median
    for comp in COMPILERS:
        try:
            exe = ctx.exe(comp, "deepfx")
        except (FileNotFoundError, RuntimeError) as e:
            print("  %-5s %s" % (comp, e))
            continue
        for hz in (99, 999):
            aw, ac, at, fw, fc, ft, hs, wr, sh = [], [], [], [], [], [], [], [], ""
            for i in range(rounds):
                r, wall, cpu = run_timed([exe], cwd=ctx.work)
                t = re.search(r"thread_cpu ([0-9.]+)", r.stdout)
                aw.append(wall)
                ac.append(cpu)
                at.append(float(t.group(1)) if t else float("nan"))
                prof = os.path.join(ctx.work, "deep.flm")
                r, wall, cpu = record(ctx, exe, [], prof, hz=hz, env={"FLAMME_DEPTH": "1000000"})
                fw.append(wall)
                fc.append(cpu)
                rep = report(ctx.build, prof)
                m = re.search(r"signal handler ([0-9.]+) s", rep)
                t = re.search(r"thread_cpu ([0-9.]+)", r.stdout)
                w = ef.report_weight(rep)
                if t:
                    ft.append(float(t.group(1)))
                    if m:
                        hs.append(100.0 * float(m.group(1)) / float(t.group(1)))
                    if w:
                        wr.append(w / (float(t.group(1)) * hz))
                m = re.search(r"(\d+) samples \(weight \d+\) were shortened", rep)
                sh = "%s of %s" % (m.group(1) if m else 0, w)
            nan = float("nan")
            print("  %-5s %6d %9.2fs %9.2fs %7.2f %7.2f %7.2f %10.3f %8.1f%% %12s"
                  % (comp, hz, min(aw), min(fw), min(fw) / min(aw), med(fc) / med(ac),
                     med(ft) / med(at) if ft else nan, med(wr) if wr else nan,
                     med(hs) if hs else nan, sh))
        # What the agent costs whatever the depth: start-up (unwind rows and
        # symbols of the executable and libraries) and the end (the last
        # samples symbolized and written), on a run of 1000 steps.
        aw, ac, fw, fc = [], [], [], []
        for i in range(rounds):
            _, wall, cpu = run_timed([exe, "1000"], cwd=ctx.work)
            aw.append(wall)
            ac.append(cpu)
            prof = os.path.join(ctx.work, "deep.flm")
            _, wall, cpu = record(ctx, exe, ["1000"], prof, hz=999)
            fw.append(wall)
            fc.append(cpu)
        print("  %-5s fixed cost (deepfx 1000, 999 Hz): +%.3f s wall (fastest), +%.3f s CPU (median)"
              % (comp, min(fw) - min(aw), med(fc) - med(ac)))
        # Walks whose every frame is a stack switch (fxchain: 20,000 nested
        # handlers), each short walk ~10x what a sample earns: the budget
        # takes most samples as their pc alone.
        hs, wr, alone = [], [], ""
        for i in range(rounds):
            prof = os.path.join(ctx.work, "fxchain.flm")
            r, _, _ = record(ctx, ctx.exe(comp, "fxchain"), [], prof, hz=999, engine="timer")
            rep = report(ctx.build, prof)
            m = re.search(r"signal handler ([0-9.]+) s", rep)
            t = re.search(r"thread_cpu ([0-9.]+)", r.stdout)
            w = ef.report_weight(rep)
            if t and m:
                hs.append(100.0 * float(m.group(1)) / float(t.group(1)))
            if t and w:
                wr.append(w / (float(t.group(1)) * 999))
            m = re.search(r"(\d+) samples \(weight \d+\) were only the function", rep)
            alone = "%s of %s" % (m.group(1) if m else 0, w)
        print("  %-5s fxchain 999 Hz: handler %.1f%% of the main thread (median), weight/CPU %.3f,"
              " the pc alone: %s samples" % (comp, med(hs) if hs else float("nan"),
                                             med(wr) if wr else float("nan"), alone))


# (suite, program, args, compilers): the engine suite's kernel-heavy and
# GC-heavy programs, the unwind suite's (Atomic queue, Hashtbl and
# String.equal, deep effects, yielding systhreads), both compilers; the
# fidelity suite's (effects scheduler, work stealing, domains that join and
# allocate, C stubs), built with the fp compiler only.
AGREE = [
    ("engine", "kern", ["40"], COMPILERS),
    ("engine", "gcloop", ["0.3"], COMPILERS),
    ("unwind", "atomq", ["1"], COMPILERS),
    ("unwind", "hashstr", ["1"], COMPILERS),
    ("unwind", "effdeep", ["1"], COMPILERS),
    ("unwind", "yielder", ["1"], COMPILERS),
    ("fidelity", "split", [], ("fp",)),
    ("fidelity", "sched", [], ("fp",)),
    ("fidelity", "steal", [], ("fp",)),
    ("fidelity", "joinalloc", [], ("fp",)),
    ("fidelity", "cstub", [], ("fp",)),
]


def bench_cost(ctx, rounds):
    """What a sample costs the program, per engine: CPU time added per
    sample on bench/spin.ml, preloaded (no `flamme record` process), beyond
    what the agent costs once (the same run at 1 Hz: start-up, tables,
    writer, end)."""
    print("What a sample costs (bench/spin.ml, about 1 s of arithmetic, 5.3.0 fp, %d rounds "
          "interleaved): CPU added per sample beyond a run at 1 Hz"
          % (rounds * 3))
    exe = ctx.make("fp")("bench/spin", [os.path.join(HERE, "spin.ml")])
    args = [exe, "1000"]
    cases = [("perf", 999, {}), ("perf", 4999, {}), ("timer", 999, {}), ("timer", 4999, {}),
             ("timer", 999, {"FLAMME_DITHER": "0"}), ("timer", 1, {})]
    got = collections.defaultdict(list)
    prof = os.path.join(ctx.work, "cost.flm")
    for _ in range(rounds * 3):
        order = list(range(len(cases))) + [None]
        random.shuffle(order)
        for i in order:
            env = {}
            if i is not None:
                eng, hz, extra = cases[i]
                env = dict(extra, LD_PRELOAD=ctx.build.lib, FLAMME_ENGINE=eng,
                           FLAMME_HZ=str(hz), FLAMME_OUTPUT=prof)
            p, _, cpu = run_timed(args, env=clean_env(env), cwd=ctx.work)
            m = re.search(r"flamme: (\d+) samples", p.stderr)
            if p.returncode == 0 and (i is None or m):
                got[i].append((cpu, int(m.group(1)) if m else 0))
    # This VM's CPU runs ~30% slower in some runs (the host's other work):
    # each case's fastest run is taken, and its median sample count.
    low = {i: (min(c for c, _ in v), statistics.median(n for _, n in v)) for i, v in got.items()}
    once = len(cases) - 1
    if None not in low or once not in low:
        print("  no run")
        return
    print("  %-22s %6.1f ms once (a run at 1 Hz over the run alone; fastest runs)"
          % ("the agent", 1e3 * (low[once][0] - low[None][0])))
    for i, (eng, hz, extra) in enumerate(cases[:-1]):
        label = "%s%s %d Hz" % (eng, " at ticks" if extra else "", hz)
        if i not in low or low[i][1] <= low[once][1]:
            print("  %-22s no run" % label)
            continue
        us = 1e6 * (low[i][0] - low[once][0]) / (low[i][1] - low[once][1])
        print("  %-22s %6.1f us a sample (%d samples): %.1f%% of the CPU at 999 a CPU-second"
              % (label, us, low[i][1], us * 999 / 1e4))
    if shutil.which("perf") is None:
        return
    own = {"alone": [], "perf record": []}
    for _ in range(rounds * 3):
        for label in own:
            cmd = ["perf", "stat", "-x,", "-e", "task-clock"] + args
            if label != "alone":
                cmd = ["perf", "record", "-q", "-F", "999", "-g", "-o",
                       os.path.join(ctx.work, "cost.data"), "--"] + cmd
            p = subprocess.run(cmd, capture_output=True, text=True, env=clean_env(), cwd=ctx.work)
            m = re.search(r"^([\d.]+),msec,task-clock", p.stderr, re.M)
            if m:
                own[label].append(float(m.group(1)) / 1e3)
    if own["alone"] and own["perf record"]:
        a, r = min(own["alone"]), min(own["perf record"])
        print("  %-22s %6.1f us a sample (the program's own CPU %.3f s for %.3f s alone, ~999 "
              "samples a CPU-second): %+.1f%%" % ("perf record -F 999", 1e6 * (r - a) / (999 * a),
                                                  r, a, 100 * (r - a) / a))


def bench_exe(ctx, suite, prog, comp):
    """The program's executable, built here if needed; None when it cannot
    be (no compiler, or a fidelity program make did not build)."""
    try:
        if suite == "engine":
            return ctx.exe(comp, prog)
        if suite == "unwind":
            return unwind_stacks.build_program(ctx.make(comp), ctx.build, prog)
    except (FileNotFoundError, RuntimeError) as e:
        print("  %-10s %-5s %s" % (prog, comp, str(e).splitlines()[0]))
        return None
    path = ctx.build.path("fidelity", prog, prog + ".exe")
    return path if os.access(path, os.X_OK) else None


def same_name(sym):
    """A symbol as both tools may spell it: OCaml's `Mod.f_123` without its
    stamp and `Mod.fun_123` as `Mod.(fun)` (flamme's names), glibc's
    aliases (`__GI___fstatat64`, `fstatat`) and versions
    (`pthread_cond_signal@@GLIBC_2.3.2`) alike."""
    if "." in sym and not sym.startswith("."):
        sym = re.sub(r"_\d+$", "", sym).replace("__", ".")
        sym = re.sub(r"\.fun$", ".(fun)", sym)
    sym = re.sub(r"@@?[A-Z_]+[0-9.]*$", "", sym)  # perf's versioned names: f@@GLIBC_2.3.2
    sym = re.sub(r"^(__GI_)?_*", "", sym)
    return re.sub(r"(64)?(_ifunc)?$", "", sym) or sym


def code_begin_aliases(exe):
    """{`Mod.code_begin`: the function at the same address}: perf names a
    module's first function by the module's start marker."""
    p = subprocess.run(["nm", "--defined-only", exe], capture_output=True, text=True)
    at = {}
    for line in p.stdout.splitlines():
        f = line.split()
        if len(f) == 3 and f[1] in "Tt" and f[2].startswith("caml"):
            at.setdefault(f[0], []).append(f[2][4:])
    out = {}
    for names in at.values():
        funcs = [n for n in names if not n.endswith((".code_begin", ".code_end"))]
        for n in names:
            if n.endswith(".code_begin") and funcs:
                out[n] = out[n.replace("__", ".")] = funcs[0]
    return out


def debug_file(path):
    """PATH's detached debug file by its build id (libc6-dbg and the like),
    or None."""
    r = subprocess.run(["readelf", "-n", path], capture_output=True, text=True)
    m = re.search(r"Build ID: ([0-9a-f]{2})([0-9a-f]+)", r.stdout)
    f = m and "/usr/lib/debug/.build-id/%s/%s.debug" % (m.group(1), m.group(2))
    return f if f and os.path.exists(f) else None


def address_aliases(exe):
    """{name: the name both tools are compared under} for functions that
    share an address with others in EXE or a library it loads (glibc's
    `__memcpy_avx512_unaligned_erms` is `__memmove_avx512_unaligned_erms`):
    flamme and perf may each pick a different one of such names for the
    same code, which is no disagreement. The first name in sort order
    stands for all, a module's start or end marker last."""
    r = subprocess.run(["ldd", exe], capture_output=True, text=True)
    files = [exe] + re.findall(r"=> (/\S+)", r.stdout)
    out = {}
    for f in files:
        at = {}
        for src in (f, debug_file(f)):
            if not src:
                continue
            for args in (["nm", "--defined-only", src], ["nm", "-D", "--defined-only", src]):
                p = subprocess.run(args, capture_output=True, text=True)
                for line in p.stdout.splitlines():
                    w = line.split()
                    # OCaml's names are matched by same_name and
                    # code_begin_aliases, not here.
                    # A symbol's old versions (one @) lie elsewhere:
                    # pthread_cond_signal@GLIBC_2.2.5 is not the default.
                    if (len(w) == 3 and w[1] in "TtWi" and not re.match(r"caml[A-Z]", w[2])
                            and ("@" not in w[2] or "@@" in w[2])):
                        at.setdefault(w[0], set()).add(re.sub(r"@.*$", "", w[2]))
        for names in at.values():
            if len(names) > 1:
                first = min(names, key=lambda n: (bool(re.search(r"(\.|__)code_(begin|end)$", n)), n))
                for n in names:
                    out[n] = first
    return out


def renamed(shares, aliases=None):
    out = {}
    for k, v in shares.items():
        n = same_name((aliases or {}).get(re.sub(r"@@?[A-Z_]+[0-9.]*$", "", k), k))
        out[n] = out.get(n, 0.0) + v
    return out


def perf_record_leaves(ctx, exe, cmd, env=None):
    """({leaf: %}, samples) from `perf record -a -e cpu-clock -g` at 999 Hz while CMD
    (EXE and its arguments, or a `flamme record` of it: the same run seen by
    both) runs, the samples of EXE's threads only (by their name; the
    flamme command's samples and those of libflamme.so's own functions,
    handler and writer, are left out), the leaf being each sample's first
    user-space frame; None without perf.

    System-wide (per-CPU timers), not perf's default per-task events: those
    are switched out and in with the thread at every context switch, which
    costs the thread CPU time in the kernel each time. On a program whose
    threads switch at every Thread.yield that is most of its kernel time
    (yielder at scale 2, user+sys: 3.25-3.30 s alone, 4.6-4.7 s under
    per-task perf record, 6.1-6.5 s under --engine perf), so the reference
    would show its own cost, not the program. Per-CPU timers cost nothing at
    a switch (3.5-3.6 s): they sample whatever runs, at 999 Hz of each CPU's
    time."""
    if not shutil.which("perf"):
        return None
    data = os.path.join(ctx.work, "perf.data")
    for wide in (["-a"], []):  # per-task only where system-wide is not allowed (not root)
        r = flammetest.run(["perf", "record", "-q"] + wide + ["-e", "cpu-clock", "-F", "999", "-g", "-o",
                                                              data, "--"] + cmd,
                           env=clean_env(env), cwd=ctx.work)
        if r.returncode == 0:
            break
    if r.returncode != 0:
        return None
    p = subprocess.run(["perf", "script", "-i", data, "-F", "comm,period,ip,sym,dso"],
                       capture_output=True, text=True, timeout=flammetest.RUN_TIMEOUT)
    alias = code_begin_aliases(exe)
    comm = os.path.basename(exe)[:15]  # the kernel's TASK_COMM_LEN less its NUL
    shares, total, n = {}, 0, 0
    for block in p.stdout.split("\n\n"):
        lines = [line for line in block.splitlines() if line.strip()]
        head = lines[0].split() if lines else []
        if len(lines) < 2 or len(head) < 2 or not head[-1].isdigit() or head[0] != comm:
            continue
        if any("libflamme" in line and "flamme_tramp" not in line for line in lines[1:]):
            continue  # the agent's own time (every thread starts in flamme_tramp)
        period = int(head[-1])
        leaf = "[kernel only]"
        for line in lines[1:]:
            f = line.split(None, 1)
            if len(f) == 2 and "[kernel.kallsyms]" not in f[1]:
                leaf = f[1].rsplit(" (", 1)[0]
                leaf = alias.get(leaf, leaf)
                break
        shares[leaf] = shares.get(leaf, 0) + period
        total += period
        n += 1
    if not total:
        return None
    return {k: 100.0 * v / total for k, v in shares.items()}, n


def noise_floor(a, b, na, nb, rounds=200):
    """What ef.disagreement of A and B ({leaf: %} from NA and NB samples)
    would be from sampling alone: its 95th percentile over ROUNDS pairs of
    NA and NB samples drawn from one profile, their mean. A leaf's share
    from n samples varies by sqrt(p(1-p)/n): at 1,000 samples a 30% leaf by
    1.4 pp, so two views of one run differ by a few pp at their largest
    leaf without any bias. Sample records, not weights: the timer engine's
    records may weigh several periods, which only widens the spread."""
    keys = sorted(set(a) | set(b))
    w = [a.get(k, 0.0) + b.get(k, 0.0) for k in keys]
    rng = random.Random(1)
    ds = []
    for _ in range(rounds):
        views = []
        for n in (max(na, 1), max(nb, 1)):
            c = collections.Counter(rng.choices(keys, w, k=n))
            views.append({k: 100.0 * v / n for k, v in c.items()})
        ds.append(ef.disagreement(*views)[0])
    ds.sort()
    return ds[int(0.95 * (len(ds) - 1))]


# The columns that see one run both ways (flamme under perf record):
# (column, --engine or None for auto, Hz, uid to run as, factor on the
# program's first argument). perf-user: user nobody, whose perf events may
# not sample the kernel (root, perf_event_paranoid 2 only). auto@99: the
# default, on a run 6 times as long for as many samples as the others.
SAME_RUN = (("timer", "timer", 999, None, 1, {}), ("tick", "timer", 999, None, 1, {"FLAMME_DITHER": "0"}),
            ("perf", "perf", 999, None, 1, {}), ("perf-user", "perf", 999, 65534, 1, {}),
            ("auto@99", None, 99, None, 6, {}))


def bench_agreement(ctx, programs=None):
    print("Engine agreement (999 Hz; largest difference among the top-20 leaf self-times, in"
          " percentage points, and its leaf; a [kernel] leaf counts for the function that entered"
          " the kernel; each cell: difference/noise leaf, noise being what sampling alone gives"
          " (noise_floor); goals: perf~timer <= 2, each ~ perf record <= 3; record~record: two"
          " runs of perf record, what the program's own variation gives the columns that compare"
          " runs (~); timer=record,"
          " tick=record (timer, FLAMME_DITHER=0) and perf=record: that engine run under"
          " system-wide perf record, both views of one run, free of the program's own variation)")
    print("  %-10s %-5s %-22s %-22s %-22s %-22s %-22s %-22s %-22s %-22s %-22s %-22s %8s" % (
        "program", "build", "perf~timer", "auto~timer", "perf~record", "timer~record",
        "record~record", "timer=record", "tick=record", "perf=record", "perf-user=record", "auto@99=record",
        "[kernel]"))
    for suite, prog, args, comps in AGREE:
        if programs and prog not in programs:
            continue
        for comp in comps:
            exe = bench_exe(ctx, suite, prog, comp)
            if not exe:
                if suite == "fidelity":
                    print("  %-10s %-5s not built (make %s-progs)" % (prog, comp, suite))
                continue
            sh, kern, err = {}, 0.0, ""
            alias = address_aliases(exe)
            for eng in ("perf", "timer", "auto"):
                prof = os.path.join(ctx.work, "agree-%s.flm" % eng)
                env = {"LD_LIBRARY_PATH": os.path.dirname(exe)}
                r = record(ctx, exe, args, prof, hz=999, engine=None if eng == "auto" else eng,
                           env=env)[0]
                if r.returncode != 0:
                    err = r.stderr.strip()[-200:]
                    break
                st = collapse(ctx.build, prof)
                sh[eng] = (renamed(ef.leaf_shares(st), alias),
                           ef.report_records(report(ctx.build, prof)) or 1)
                if eng == "perf":
                    kern = ef.kernel_share(st)
            if len(sh) < 3:
                print("  %-10s %-5s failed to record: %s" % (prog, comp, err))
                continue
            env = {"LD_LIBRARY_PATH": os.path.dirname(exe)}
            ref = perf_record_leaves(ctx, exe, [exe] + args, env)
            ref = (renamed(ref[0], alias), ref[1]) if ref else None
            # A second run of the reference: how far two runs of the program
            # itself are apart, the bound of every column that compares runs.
            ref2 = perf_record_leaves(ctx, exe, [exe] + args, env) if ref else None
            ref2 = (renamed(ref2[0], alias), ref2[1]) if ref2 else None
            same = {}
            for col, eng, hz, user, scale, extra in SAME_RUN:
                if user is not None:
                    if os.geteuid() != 0 or not shutil.which("setpriv") or ef.paranoid() != 2:
                        continue
                    os.chmod(ctx.work, 0o777)
                a = ["%g" % (scale * float(x)) for x in args[:1]] + list(args[1:])
                prof = os.path.join(ctx.work, "agree-same-%s.flm" % col)
                ref1 = perf_record_leaves(ctx, exe, ef.record_cmd(ctx.build, exe, a, prof, hz, eng,
                                                                  user=user), dict(env, **extra))
                if ref1:
                    same[col] = ((renamed(ref1[0], alias), ref1[1]),
                                 (renamed(ef.leaf_shares(collapse(ctx.build, prof)), alias),
                                  ef.report_records(report(ctx.build, prof)) or 1))

            def fmt(a, b):
                if b is None:
                    return "-"
                pp, leaf = ef.disagreement(a[0], b[0])
                return "%4.1f/%3.1f %s" % (pp, noise_floor(a[0], b[0], a[1], b[1]), (leaf or "")[:12])
            print("  %-10s %-5s %-22s %-22s %-22s %-22s %-22s %-22s %-22s %-22s %-22s %-22s %7.1f%%" % (
                prog, comp, fmt(sh["perf"], sh["timer"]), fmt(sh["auto"], sh["timer"]),
                fmt(sh["perf"], ref), fmt(sh["timer"], ref), fmt(ref2, ref) if ref2 else "-",
                *(fmt(same[c[0]][1], same[c[0]][0]) if c[0] in same else "-" for c in SAME_RUN),
                kern))


# Programs that measure their own split of CPU time with the thread's CPU
# clock, the truth no sampler gives: (program, arguments, what is compared,
# the program's own figure from its output (None: not printed), the
# profile's figure from its stacks as a fraction of all samples). kern:
# the phase whose share is the furthest off, its figures.
def _kern_own(out):
    cpu = {ph: c for ph, (c, _) in ef.kern_own(out).items()}
    total = sum(cpu.values())
    return {k: 100.0 * v / total for k, v in cpu.items()} if total else None


def _kern_prof(st):
    return {ph: 100.0 * flammetest.share(st, lambda fr, ph=ph: "Kern." + ph in fr)
            for ph in ef.KERN_PHASES}


TRUTH = (
    ("ticks", ["1"], "after_tick", ef.ticks_own, ef.ticks_share),
    ("cycle", ["1001001", "1"], "Cycle.first", ef.cycle_own, ef.cycle_share),
    ("handoff", ["4"], "Handoff.work", ef.handoff_own, ef.handoff_share),
    ("kern", ["40"], "phases", _kern_own, _kern_prof),
)
# (column, --engine or None for auto, Hz, extra environment).
TRUTH_RUNS = (("timer", "timer", 999, {}), ("tick", "timer", 999, {"FLAMME_DITHER": "0"}),
              ("perf", "perf", 999, {}), ("auto", None, 999, {}), ("auto@99", None, 99, {}))


def bench_truth(ctx, rounds):
    print("Against the program's own clock (programs that measure their split of CPU time"
          " with their threads' CPU clocks; each cell: the profile's share of all samples minus"
          " the program's own share, in percentage points, over %d rounds; kern: the phase"
          " furthest off)" % rounds)
    print("  %-8s %-5s %-13s %-8s %s" % ("program", "build", "what", "own %",
                                         " ".join("%-16s" % c[0] for c in TRUTH_RUNS)))
    for prog, args, what, own_of, prof_of in TRUTH:
        for comp in COMPILERS:
            try:
                exe = ctx.exe(comp, prog)
            except (FileNotFoundError, RuntimeError) as e:
                print("  %-8s %-5s %s" % (prog, comp, str(e).splitlines()[0]))
                continue
            owns, cells = [], []
            for col, eng, hz, extra in TRUTH_RUNS:
                gaps = []
                for _ in range(rounds):
                    prof = os.path.join(ctx.work, "truth.flm")
                    r = record(ctx, exe, args, prof, hz=hz, engine=eng, env=extra)[0]
                    if r.returncode != 0:
                        break
                    own = own_of(r.stdout)
                    if own is None:  # the program printed no split
                        break
                    got = prof_of(collapse(ctx.build, prof))
                    if isinstance(own, dict):  # kern: the phase furthest off
                        ph = max(own, key=lambda k: abs(got.get(k, 0.0) - own[k]))
                        owns.append(own[ph])
                        gaps.append(got.get(ph, 0.0) - own[ph])
                    else:
                        owns.append(own)
                        gaps.append(got - own)
                cells.append("%+.1f..%+.1f" % (min(gaps), max(gaps)) if gaps else "failed")
            print("  %-8s %-5s %-13s %-8s %s" % (prog, comp, what,
                                                 "%.1f" % statistics.median(owns) if owns else "-",
                                                 " ".join("%-16s" % c for c in cells)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--cache", default=flammetest.CACHE, help="where make deps put the OCaml compilers")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", default="", help="comma-separated: gc, budget, cost, agree, truth")
    ap.add_argument("--programs", default="", help="agree: only these programs (comma-separated)")
    a = ap.parse_args()
    only = set(a.only.split(",")) if a.only else None
    want = lambda part: only is None or part in only  # noqa: E731
    with tempfile.TemporaryDirectory(prefix="flamme-engine-bench-") as tmp:
        ctx = Ctx(a.build, a.cache, tmp)
        if want("gc"):
            bench_gc_hooks(ctx, a.rounds)
        if want("budget"):
            bench_budget(ctx, a.rounds)
        if want("cost"):
            bench_cost(ctx, a.rounds)
        if want("truth"):
            bench_truth(ctx, a.rounds)
        if want("agree"):
            bench_agreement(ctx, set(a.programs.split(",")) if a.programs else None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
