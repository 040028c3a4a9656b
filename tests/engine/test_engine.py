"""tests/engine/test_engine.py — what sampling costs the program and what it
counts (issue 8, points 4-6), on programs built with every compiler
(make engine-test, part of make test):

- gcloop: Gc.major in a loop on two domains while others come and go; the
  runtime then runs millions of empty major slices a second. flamme's own
  functions (its GC hooks) must stay <= 0.5% of the samples.
- deepfx: an effects scheduler whose stack grows to ~400,000 frames, at
  FLAMME_DEPTH=1000000, 99 and 999 Hz (timer engine, which counts kernel
  time too): the sample weight matches the main thread's CPU time within 5%
  (+1 period: where the first and last periods fall), the handler's own
  time not counted; `flamme report` says how many samples the budget
  shortened.
- kern: three phases of equal CPU time, user only, page faults of a growing
  heap, stat(2) calls (tests/engine/kern.ml). Under --engine perf, --engine
  timer, and auto at 99 and 999 Hz (perf: root may sample the kernel): each
  phase's share of the weight matches its share of the thread's CPU time
  (user and kernel) within 3 pp (+3 samples), the top-20 leaves (a
  `[kernel]` leaf counting for the function that entered the kernel; each
  run's phases weighed alike, as their length varies from run to run) agree
  across engines and rates within 5 pp, or the sampling noise of a run with
  few samples (the benchmark prints how close), and the kernel's time is a
  `[kernel]` leaf under the function that entered it: the page faults under
  Kern.touch (perf, which knows each period's mode), the system calls under
  libc's stat wrapper (every engine). Without kernel sampling rights (as
  user nobody): at perf_event_paranoid 2, --engine perf and auto at 999 Hz
  use the perf engine, which counts the kernel's periods from the event's
  count (the phases' shares still match their CPU time, kernel included;
  `flamme report` says where that time goes), auto at 99 Hz the timer
  engine; at 3 or more, the timer engine, and --engine perf says why
  (default compiler only: the subject is the engine).
- a short gcloop at 1 Hz: the report's "of the program's N s" is the
  program's CPU time (all its domains), not the samples' weight.
- handoff: four systhreads that hand the runtime lock over at every
  Thread.yield. auto at 999 Hz (perf) moves them to CPU timers, the report
  says so, and their top-20 leaves agree with --engine timer's within 15 pp
  (the timer's own spread on it is ~14 pp; perf is 25-35 pp off);
  --engine perf keeps them on perf; kern's main thread stays on perf under
  auto.
"""
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile

import pytest

import engine_figures as ef
import flmfile  # noqa: E402
import flammetest  # noqa: E402
from flammetest import clean_env, collapse, report, run


def record_hz(build, exe, args, prof, hz, engine=None, env=None, user=None, cwd=None):
    """Records EXE ARGS into PROF at HZ (see ef.record_cmd); returns the
    CompletedProcess."""
    return run(ef.record_cmd(build, exe, args, prof, hz, engine, user), env=clean_env(env), cwd=cwd)


@pytest.mark.slow
def test_gcloop(build, ocaml, compiler, check, tmp_path):
    comp = compiler.name
    prof = str(tmp_path / "gcloop.flm")
    r = record_hz(build, ef.build_program(ocaml, "gcloop"), ["0.15"], prof, 999, cwd=tmp_path)
    check(r.returncode == 0 and "gcloop: checksum" in r.stdout, "%s gcloop: runs under flamme" % comp,
          r.stderr.strip()[-300:])
    if r.returncode != 0:
        return
    pct, mine, total = ef.own_share(build, collapse(build, prof))
    print("  %s gcloop: %d of %d samples in flamme's functions (%.2f%%)" % (comp, mine, total, pct))
    check(total >= 500, "%s gcloop: enough samples to judge (%d)" % (comp, total))
    check(pct <= 0.5, "%s gcloop: flamme's own functions <= 0.5%% of samples" % comp,
          "%.2f%% (%d of %d)" % (pct, mine, total))


def test_share_of_a_short_run(build, ocaml, compiler, check, tmp_path):
    """The report's "% of the program's N s" on a run of a few tenths of a
    second at 1 Hz (a sample or two): N is the program's CPU time, every
    domain's, those that ended included. The samples' weight (1 s each
    here) is no measure of it."""
    comp = compiler.name
    prof = str(tmp_path / "short.flm")
    exe = ef.build_program(ocaml, "gcloop")
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = record_hz(build, exe, ["0.015"], prof, 1, cwd=tmp_path)
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    check(r.returncode == 0 and "gcloop: checksum" in r.stdout, "%s short gcloop: runs under flamme"
          % comp, r.stderr.strip()[-300:])
    if r.returncode != 0:
        return
    # flamme record, the program and the agent: the record command's own
    # few milliseconds are in the slack.
    cpu = r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime
    rep = report(build, prof)
    h = re.search(r"signal handler ([0-9.]+) s of CPU(?:, start-up ([0-9.]+) s)?, writer ([0-9.]+) s: "
                  r"[0-9.]+% of the program's ([0-9.]+) s", rep)
    check(h is not None, "%s short gcloop: the report gives the agent's share of the program's CPU"
          % comp, rep[:700])
    if not h:
        return
    agent = float(h.group(1)) + float(h.group(2) or 0) + float(h.group(3))
    prog = float(h.group(4))
    print("  %s short gcloop at 1 Hz: CPU %.3f s (record, program, agent), agent %.3f s, "
          "report: the program's %.2f s" % (comp, cpu, agent, prog))
    check(abs(prog - (cpu - agent)) <= 0.1 * cpu + 0.02,
          "%s short gcloop: the program's CPU in the report within 10%% of what it used" % comp,
          "%.2f s for %.3f s" % (prog, cpu - agent))


def held_to_cpu(build, ocaml, check, tmp_path, name, what, hz, env=None):
    """Records engine program NAME (timer engine, HZ), which prints its
    main thread's CPU time (thread_cpu), and checks what the budget
    promises whatever the stack: the samples' weight within 5% of that
    time less the handler's, and the handler at most 5% of it. Returns
    (the report, that CPU time), or None when the program did not run."""
    prof = str(tmp_path / (name + ".flm"))
    r = record_hz(build, ef.build_program(ocaml, name), [], prof, hz, engine="timer", env=env,
                  cwd=tmp_path)
    m = re.search(r"thread_cpu ([0-9.]+)", r.stdout)
    check(r.returncode == 0 and m is not None, "%s: runs under flamme" % what,
          r.stderr.strip()[-300:])
    if r.returncode != 0 or m is None:
        return None
    rep = report(build, prof)
    weight = ef.report_weight(rep)
    h = re.search(r"signal handler ([0-9.]+) s of CPU", rep)
    handler = float(h.group(1)) if h else 0.0
    cpu = float(m.group(1))
    expect = (cpu - handler) * hz
    print("  %s: weight %d, main thread CPU %.3f s - handler %.3f s = %.0f periods"
          % (what, weight or 0, cpu, handler, expect))
    check(weight is not None and abs(weight - expect) <= 0.05 * expect + 1,
          "%s: sample weight within 5%% of the program's CPU time" % what,
          "%s vs %.0f" % (weight, expect))
    check(handler <= 0.05 * cpu, "%s: handler CPU <= 5%% of the thread's" % what,
          "%.3f of %.3f s" % (handler, cpu))
    return rep, cpu


@pytest.mark.slow
@pytest.mark.parametrize("hz", [99, 999])
def test_deepfx(build, ocaml, compiler, check, tmp_path, hz):
    comp = compiler.name
    got = held_to_cpu(build, ocaml, check, tmp_path, "deepfx", "%s deepfx %d Hz" % (comp, hz), hz,
                      env={"FLAMME_DEPTH": "1000000"})
    if got is None:
        return
    rep, cpu = got
    check("were shortened" in rep, "%s deepfx %d Hz: report says samples were shortened" % (comp, hz))
    w = re.search(r"writer ([0-9.]+) s: ([0-9.]+)% of the program's ([0-9.]+) s", rep)
    check(w is not None, "%s deepfx %d Hz: report gives the writer's CPU and the agent's share"
          % (comp, hz), rep[:600])
    if w:
        writer = float(w.group(1))
        print("  %s deepfx %d Hz: writer %.3f s, agent %s%% of %s s" % (comp, hz, writer, w.group(2),
                                                                   w.group(3)))
        # Mostly fixed (symbol tables, the executable's line table): a share
        # of a 0.4 s run says little, so only that it was measured.
        check(0 < writer < cpu, "%s deepfx %d Hz: writer CPU measured (above 0, below the thread's)"
              % (comp, hz), "%.3f of %.3f s" % (writer, cpu))
    # The unwind tables built before main are in the program's thread: the
    # agent's share counts them.
    st = re.search(r"start-up ([0-9.]+) s, writer", rep)
    check(st is not None and 0 < float(st.group(1)) < cpu,
          "%s deepfx %d Hz: report gives the agent's start-up CPU" % (comp, hz), rep[:600])


@pytest.mark.slow
@pytest.mark.parametrize("hz", [999])
def test_fxchain_budget(build, ocaml, compiler, check, tmp_path, hz):
    """Walks that are all stack switches (fxchain.ml: 20,000 nested
    handlers, one frame each, the thread mostly in C allocating them): a
    64-frame walk reads ~60 stacks with system calls, ~200 us, ten times
    what the budget earns a sample at 999 Hz. Before, the handler took
    20-30% of the program (the OCaml testsuite's evenodd.ml alike); now
    samples past the overdraw are the interrupted function alone, their
    weight kept, and the report says so."""
    comp = compiler.name
    got = held_to_cpu(build, ocaml, check, tmp_path, "fxchain", "%s fxchain" % comp, hz)
    if got is None:
        return
    rep = got[0]
    leaf = re.search(r"(\d+) samples \(weight (\d+)\) were only the function that ran", rep)
    print("  %s fxchain: %s" % (comp, leaf.group(0) if leaf else "no sample the pc alone"))
    check(leaf is not None and int(leaf.group(2)) > 0,
          "%s fxchain: report says which samples were the interrupted function alone" % comp,
          rep[:900])


def check_own_share(check, what, pct, own, n, rel=0.0):
    """Checks that a profile's share PCT (%, of N samples) of a function is
    what the program measured of its own CPU time there (OWN %): within
    3 pp, REL of OWN, or four standard errors of a share of N samples
    (at 99 Hz ~300 samples: 6.9 pp for 10%). Three (0.27% of runs each)
    over the suite's ~25 such checks failed a CI run now and then by
    chance: test_cycle's perf engine gave 36.4% for 39.9% (3.2 standard
    errors, 2026-12-01), while 56 runs here, 50 of them beside busy
    processes, gave 36.0-42.3% for 39.8-40.0%. The failures they guard
    against are tens of pp off: all samples at one place of the cycle (0%
    or 100%), at ticks (after_tick 0.3-3.6% for 11%)."""
    q = min(max(own / 100.0, 0.0), 1.0)
    tol = max(3.0, rel * own, 400.0 * (q * (1.0 - q) / max(n, 1)) ** 0.5)
    rel_said = " %d%%," % round(100 * rel) if rel else ""
    check(abs(pct - own) <= tol, "%s (within %.1f pp: 3 pp,%s four standard errors)"
          % (what, tol, rel_said), "%.1f%% for %.1f%%" % (pct, own))


# What `flamme report` says of threads sampled at ticks for going to sleep
# too often for a dither chain.
SWITCHERS = "went to sleep too often for that were sampled at ticks"


@pytest.mark.slow
@pytest.mark.parametrize("hz", [99, 999])
def test_ticks(build, ocaml, compiler, check, tmp_path, hz):
    """A program in step with the kernel's tick (ticks.ml: the first tenth
    of every tick in after_tick, ~10% of its CPU time, which it measures
    itself): the timer engine's CPU timers fire at ticks only, yet it gives
    after_tick its share, as its samples are taken at random instants of
    the thread's CPU time after them (the dither). With FLAMME_DITHER=0
    they are taken at the ticks, and after_tick is hardly ever seen: the
    program does what the test needs."""
    comp = compiler.name
    exe = ef.build_program(ocaml, "ticks")
    seconds = "3" if hz == 99 else "1"

    def after_share(env, what):
        prof = str(tmp_path / ("ticks-%s.flm" % what))
        r = record_hz(build, exe, [seconds], prof, hz, engine="timer", env=env, cwd=tmp_path)
        own = ef.ticks_own(r.stdout)
        ok = r.returncode == 0 and own is not None
        check(ok, "%s ticks %d Hz %s: runs under flamme" % (comp, hz, what), r.stderr.strip()[-300:])
        if not ok:
            return None, None, 0
        said = ("at random points of each thread's CPU time" if env is None
                else "CPU timers sampled at the kernel's ticks")
        rep = report(build, prof)
        check(said in rep, "%s ticks %d Hz %s: `flamme report` says how the CPU "
              "timers sampled" % (comp, hz, what), "no '%s'" % said)
        if env is None:
            check(SWITCHERS not in rep, "%s ticks %d Hz: the thread, which never sleeps, kept its "
                  "dither chain (the report names no thread sampled at ticks)" % (comp, hz),
                  rep[rep.find(SWITCHERS) - 60:][:300])
        st = collapse(build, prof)
        pct = ef.ticks_share(st)
        print("  %s ticks %d Hz %s: after_tick %.1f%% of %d (%s)"
              % (comp, hz, what, pct, flammetest.total(st), r.stdout.strip()))
        return pct, own, flammetest.total(st)

    pct, own, n = after_share(None, "timer")
    if pct is not None:
        check_own_share(check, "%s ticks %d Hz: the timer engine gives after_tick its share of "
                        "the CPU time" % (comp, hz), pct, own, n, 0.4)
    pct, own, n = after_share({"FLAMME_DITHER": "0"}, "at-ticks")
    if pct is not None:
        if own < 5.0:
            print("  %s ticks %d Hz at-ticks: after_tick had %.1f%% of the CPU time (the machine "
                  "is busy): too little to tell ticks apart" % (comp, hz, own))
        else:
            check(pct < own / 3, "%s ticks %d Hz: with FLAMME_DITHER=0 the samples are at ticks "
                  "(after_tick under a third of its share)" % (comp, hz), "%.1f%% for %.1f%%"
                  % (pct, own))


def record_beside_neighbour(build, exe, args, prof, cwd, neighbour_args):
    """Records EXE ARGS with the timer engine at 999 Hz into PROF, pinned
    to one CPU with neighbour.py NEIGHBOUR_ARGS; returns the run."""
    cpu = min(os.sched_getaffinity(0))

    def pin():
        os.sched_setaffinity(0, {cpu})

    neighbour = subprocess.Popen([sys.executable, os.path.join(ef.HERE, "neighbour.py")] +
                                 neighbour_args, preexec_fn=pin)
    try:
        return subprocess.run(ef.record_cmd(build, exe, args, prof, 999, "timer"), env=clean_env(),
                              cwd=cwd, capture_output=True, text=True,
                              timeout=flammetest.RUN_TIMEOUT, preexec_fn=pin)
    finally:
        neighbour.kill()
        neighbour.wait()


def busy_run(build, ocaml, comp, check, tmp_path, name, args, neighbour_args, own_of):
    """Records engine program NAME with ARGS beside neighbour.py
    NEIGHBOUR_ARGS (record_beside_neighbour); returns (profile, what
    OWN_OF reads of its output, the run), or None when it failed."""
    prof = str(tmp_path / (name + "-busy.flm"))
    r = record_beside_neighbour(build, ef.build_program(ocaml, name), args, prof, tmp_path,
                                neighbour_args)
    own = own_of(r.stdout)
    check(r.returncode == 0 and own is not None, "%s %s busy: runs under flamme" % (comp, name),
          r.stderr.strip()[-300:])
    return (prof, own, r) if own is not None else None


@pytest.mark.slow
def test_ticks_busy(build, ocaml, compiler, check, tmp_path):
    """ticks.ml on a CPU it shares with a process that preempts it
    thousands of times a second (neighbour.py): its thread still never
    sleeps, so the timer engine keeps its dither chain, whose checks wait
    for the thread's CPU time, and after_tick keeps its share. (Judged on
    its switches alone it was sampled at ticks: 0.3-3.6% for the program's
    11-12%, as in CI runs of test_ticks where the program had all its CPU.)"""
    comp = compiler.name
    got = busy_run(build, ocaml, comp, check, tmp_path, "ticks", ["1"], ["4"], ef.ticks_own)
    if not got:
        return
    prof, own, r = got
    rep = report(build, prof)
    check(SWITCHERS not in rep, "%s ticks busy: the thread kept its dither chain (the report names "
          "no thread sampled at ticks)" % comp, rep[rep.find(SWITCHERS) - 60:][:300])
    st = collapse(build, prof)
    pct, n = ef.ticks_share(st), flammetest.total(st)
    print("  %s ticks busy: after_tick %.1f%% of %d (%s)" % (comp, pct, n, r.stdout.strip()))
    check_own_share(check, "%s ticks busy: the timer engine gives after_tick its share of the "
                    "CPU time" % comp, pct, own, n, 0.4)


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["timer", "perf"])
def test_cycle(build, ocaml, compiler, check, tmp_path, engine):
    """A program in step with the sampling period in its own CPU time
    (cycle.ml: the first 40% of every period in Cycle.first, which it
    measures itself): each engine gives Cycle.first its share. The timer
    engine's samples fall at random points of the thread's CPU time, each
    standing for the periods whose marks it passed; had the periods been
    counted on a fixed grid, which stays in step with the program, a sample
    early in its period would weigh 1.5 on average and one late 0.5, and
    Cycle.first would get what the grid's place gave it (30.9-50.6% for
    40.0% with the grid of build 96523c7). The perf engine sets, every
    fourth overflow, the gap for the next four, so that the fourth falls at
    a random point of four periods of the thread's CPU time; at a fixed
    period every sample fell at one place of the cycle (0% or 100%, build
    8228088), and with a block's gap drawn within an eighth of a period
    the spread of Cycle.first's share tripled."""
    comp = compiler.name
    hz = 999
    exe = ef.build_program(ocaml, "cycle")
    prof = str(tmp_path / "cycle.flm")
    r = record_hz(build, exe, [str(10 ** 9 // hz), "2"], prof, hz, engine=engine, cwd=tmp_path)
    own = ef.cycle_own(r.stdout)
    check(r.returncode == 0 and own is not None, "%s cycle %s: runs under flamme" % (comp, engine),
          r.stderr.strip()[-300:])
    if own is None:
        return
    used = ef.engine_used(r.stderr)
    if used != engine:
        # perf events refused here (--engine perf says why): nothing of
        # the perf engine to judge.
        check(engine == "perf" and "perf_event_open refused" in r.stderr,
              "%s cycle: --engine %s used (or says why not)" % (comp, engine), r.stderr[-300:])
        return
    st = collapse(build, prof)
    pct, n = ef.cycle_share(st), flammetest.total(st)
    print("  %s cycle %s %d Hz: Cycle.first %.1f%% of %d (%s)" % (comp, engine, hz, pct, n,
                                                                 r.stdout.strip()))
    check(n >= 1000, "%s cycle %s: enough samples to judge (%d)" % (comp, engine, n))
    check_own_share(check, "%s cycle: the %s engine gives Cycle.first its share of the CPU time"
                    % (comp, engine), pct, own, n)


@pytest.mark.slow
def test_cycle_busy(build, ocaml, compiler, check, tmp_path):
    """cycle.ml under the timer engine on a CPU it shares with a process
    that never sleeps (neighbour.py busy). Nearly all of its time is in
    its own clock reads, system calls, so that the scheduler takes the CPU
    from it inside one again and again: a dither check that took such a
    thread for asleep left its samples to its next CPU timer expiry, at a
    tick, and Cycle.first got 9.9-51.7% for its 40% (8 runs, 2026-12-01;
    37.1-41.2% since)."""
    comp = compiler.name
    got = busy_run(build, ocaml, comp, check, tmp_path, "cycle", [str(10 ** 9 // 999), "2"],
                   ["8", "busy"], ef.cycle_own)
    if not got:
        return
    prof, own, r = got
    st = collapse(build, prof)
    pct, n = ef.cycle_share(st), flammetest.total(st)
    print("  %s cycle busy: Cycle.first %.1f%% of %d (%s)" % (comp, pct, n, r.stdout.strip()))
    check(n >= 1000, "%s cycle busy: enough samples to judge (%d)" % (comp, n))
    check_own_share(check, "%s cycle busy: the timer engine gives Cycle.first its share of the"
                    " CPU time" % comp, pct, own, n)


def recorded_report(build, ocaml, comp, check, tmp_path, name, args, env=None):
    """Records engine program NAME with ARGS at 999 Hz (it prints "NAME: "
    when it ends well), with ENV; returns (profile, its `flamme report`,
    the samples that replayed frames from their thread's last whole
    stack), or None when the program failed."""
    prof = str(tmp_path / (name + ".flm"))
    r = record_hz(build, ef.build_program(ocaml, name), args, prof, 999, env=env, cwd=tmp_path)
    check(r.returncode == 0 and name + ": " in r.stdout, "%s %s: runs under flamme" % (comp, name),
          r.stderr.strip()[-300:])
    if r.returncode != 0:
        return None
    rep = report(build, prof)
    m = re.search(r"(\d+) samples replayed frames of their thread's previous", rep)
    return prof, rep, int(m.group(1)) if m else 0


@pytest.mark.slow
def test_stitch(build, ocaml, compiler, check, tmp_path):
    """Deep recursion at 999 Hz: a walk stops where it meets the thread's
    last whole stack (agent/memo.h) and takes the older frames from there
    when the stack below that frame is still the same, and only then.
    stitch.ml alternates recursions 3000 frames deep that never call each
    other, two of them the same frames at the same addresses under
    different callers. At FLAMME_BUDGET=20: under the default 2% the
    writer's CPU time, which the machine's state moves (2026-11-27, one CI
    run and one local run: 0.021-0.023 s of writer CPU, 56-58% whole;
    84-95% on a quiet machine), decides how many walks are whole, which is
    bench-compiler's business."""
    comp = compiler.name
    depth = 3000
    got = recorded_report(build, ocaml, comp, check, tmp_path, "stitch", ["1.0", str(depth)],
                          env={"FLAMME_BUDGET": "20"})
    if not got:
        return
    prof, rep, joined = got
    m = re.search(r"(\d+) samples \(weight \d+\) were shortened", rep)
    shortened = int(m.group(1)) if m else 0
    total = mixed = whole = spins = exact = 0
    for fr, w in collapse(build, prof):
        total += w
        a = sum(1 for f in fr if f.startswith("Stitch.down_a"))
        b = sum(1 for f in fr if f.startswith("Stitch.down_b"))
        v1 = any(f.startswith("Stitch.via_1") for f in fr)
        v2 = any(f.startswith("Stitch.via_2") for f in fr)
        leaf = fr[-2] if len(fr) > 1 and fr[-1].startswith("Stitch.work") else fr[-1]
        if ((a and b) or (v1 and v2) or (b and (v1 or v2)) or
                (leaf.startswith("Stitch.spin_1") and v2) or (leaf.startswith("Stitch.spin_2") and v1)):
            mixed += w
        if flammetest.is_complete(fr):
            whole += w
            if leaf.startswith("Stitch.spin_"):
                spins += w
                # down_x depth .. down_x 1, then spin_x (down_x 0 tail-calls
                # it); down_a under the via_N of its spin_N
                if (a or b) == depth and (not a or (v1 and leaf.startswith("Stitch.spin_1")) or
                                          (v2 and leaf.startswith("Stitch.spin_2"))):
                    exact += w
    print("  %s stitch: %d samples, %d shortened, %d joined the last whole stack; %d whole, "
          "%d mixed, %d of %d whole spin stacks with exactly %d frames of recursion"
          % (comp, total, shortened, joined, whole, mixed, exact, spins, depth))
    check(total >= 500, "%s stitch: enough samples (%d)" % (comp, total))
    # Each phase's first sample walks the whole stack; the next ones replay
    # all but a few leaf frames: 99.8-100% joined and whole in six runs
    # (at the default budget without the memo or the completion before
    # it, 29-37% were whole).
    check(joined >= 0.9 * total, "%s stitch: >= 90%% of the samples joined their thread's last "
          "whole stack" % comp, "%d of %d\n%s" % (joined, total, rep[:1500]))
    check(whole >= 0.9 * total, "%s stitch: >= 90%% of the samples reach a thread root" % comp,
          "%d of %d\n%s" % (whole, total, rep[:1500]))
    check(mixed == 0, "%s stitch: no stack mixes two phases" % comp, "%d samples" % mixed)
    check(spins > 0 and exact == spins,
          "%s stitch: every whole stack in a spin_ has exactly %d frames of its recursion "
          "(and down_a its phase's caller)" % (comp, depth), "%d of %d" % (exact, spins))


def levels_by_leaf(build, prof, want, level):
    """For each leaf function in WANT (name -> levels of the function LEVEL
    its whole stacks must have): [whole, whole with exactly that many, all]
    sample weights, the total weight, and up to three stacks that had
    another count."""
    seen = {leaf: [0, 0, 0] for leaf in want}
    total = 0
    bad = []
    for fr, w in collapse(build, prof):
        total += w
        leaf = next((f for f in reversed(fr) if f in want), None)
        if leaf is None:
            continue
        seen[leaf][2] += w
        if flammetest.is_complete(fr):
            seen[leaf][0] += w
            levels = sum(1 for f in fr if f.startswith(level))
            if levels == want[leaf]:
                seen[leaf][1] += w
            elif len(bad) < 3:
                bad.append("%s: %d levels of %s" % (leaf, levels, level))
    return seen, total, bad


def memo_case(build, ocaml, comp, check, tmp_path, name, args, want, level):
    """Records engine program NAME (ARGS) and checks that each leaf of WANT
    (name -> levels of function LEVEL) has exactly its levels in every whole
    stack, that most samples are whole, and that most replayed frames from
    the memo. At FLAMME_BUDGET=20, as test_stitch: under the default 2% the
    machine's speed decides how many deep samples the budget shortens
    (2026-11-27, memo, 21 local runs of the three compilers with this
    stop's build and stop 26's: 57-73% of memo_spin_deep whole in 4 of
    them, and one CI failure at 73%), which is not what these tests are
    about."""
    got = recorded_report(build, ocaml, comp, check, tmp_path, name, args,
                          env={"FLAMME_BUDGET": "20"})
    if not got:
        return
    prof, rep, joined = got
    seen, total, bad = levels_by_leaf(build, prof, want, level)
    print("  %s %s: %d samples, %d joined the last whole stack; %s (whole, with their own "
          "depth, all)" % (comp, name, total, joined, seen))
    for leaf in seen:
        check(seen[leaf][2] >= 100, "%s %s: %s sampled (>= 100)" % (comp, name, leaf), seen[leaf])
        check(seen[leaf][0] >= 0.75 * seen[leaf][2],
              "%s %s: >= 75%% of the %s samples whole" % (comp, name, leaf),
              "%s\n%s" % (seen[leaf], rep[:1200]))
        check(seen[leaf][1] == seen[leaf][0],
              "%s %s: every whole %s stack has exactly %d levels of %s"
              % (comp, name, leaf, want[leaf], level), "%s %s" % (seen[leaf], bad))
    check(joined >= total // 2, "%s %s: most samples joined their thread's last whole stack"
          % (comp, name), "%d of %d" % (joined, total))


@pytest.mark.slow
def test_memo_noalloc(build, ocaml, compiler, check, tmp_path):
    """A recursion at two depths from one call site, spinning at its bottom
    in C through a [@@noalloc] external: below the shallow bottom the OCaml
    stack still holds the deep recursion's return addresses in their slots.
    Every whole stack has the recursion depth of its own leaf: the stack
    memo (agent/memo.h) replays no frame across the [@@noalloc] switch."""
    deep, shallow = 2000, 1000
    memo_case(build, ocaml, compiler.name, check, tmp_path, "memo",
              ["1.0", str(deep), str(shallow)],
              {"memo_spin_deep": deep + 1, "memo_spin_shallow": shallow + 1}, "Memo.down")


@pytest.mark.slow
def test_memo_effects(build, ocaml, compiler, check, tmp_path):
    """A generator fiber resumed in turn from two depths of the main stack's
    recursion, from one call site: the fiber's frames are the same, its link
    to the parent stack is not. Every whole stack has the depth its own
    leaf was resumed from: the memo replays no frame across the fiber's
    switch to its parent."""
    deep, shallow = 600, 200
    # resume_at deep .. 1; resume_at 0 tail-calls continue
    memo_case(build, ocaml, compiler.name, check, tmp_path, "memo_fx",
              ["1.0", str(deep), str(shallow)],
              {"Memo_fx.spin_deep": deep, "Memo_fx.spin_shallow": shallow}, "Memo_fx.resume_at")


KERN_PHASES = ef.KERN_PHASES
# libc's wrappers of the memory system calls: [kernel] under them is the
# call's own time, not a page fault's.
MEMORY_CALL = re.compile(r"_*(munmap|mmap(64)?|mremap|madvise|mprotect|brk|sbrk)$")

KERN_RUNS = (("perf", "perf", 999), ("timer", "timer", 999), ("auto", None, 99), ("auto", None, 999))


def kern_phases(st, kernel_apart=False):
    """{phase: [weight, weight under [kernel], {function above [kernel]: weight},
    {leaf (ef.leaf_of; `[kernel]` itself if KERNEL_APART): weight}]}."""
    out = {ph: [0, 0, {}, {}] for ph in KERN_PHASES}
    for fr, w in st:
        for ph in KERN_PHASES:
            if "Kern." + ph in fr:
                o = out[ph]
                o[0] += w
                leaf = ef.KERNEL if kernel_apart and fr[-1] == ef.KERNEL else ef.leaf_of(fr)
                o[3][leaf] = o[3].get(leaf, 0) + w
                if fr[-1] == ef.KERNEL and len(fr) > 1:
                    o[1] += w
                    o[2][fr[-2]] = o[2].get(fr[-2], 0) + w
    return out


def phase_leaf_shares(ph, share):
    """{leaf: %} of a run with each phase weighed share[phase] (%) instead
    of its own length: the program's phases last a little longer or shorter
    from run to run (page faults cost what the machine makes them cost),
    which is not the profiler's doing."""
    out = {}
    for p in KERN_PHASES:
        w, leaves = ph[p][0], ph[p][3]
        for leaf, lw in leaves.items():
            out[leaf] = out.get(leaf, 0.0) + share[p] * lw / w
    return out


MOVED = re.compile(r"(\d+) threads left the perf engine for a CPU timer[^\n]*\n"
                   r"[^\n]*?(?:; tids:([\d ]+))?$", re.M)


def moved_tids(rep):
    """The tids `flamme report` says auto moved off perf."""
    m = MOVED.search(rep)
    return set(m.group(2).split()) if m and m.group(2) else set()


def kern_runs(build, exe, comp, check, work, prefix="", user=None):
    """Records kern under each of KERN_RUNS (as USER, when USER is given:
    --engine perf at 999 Hz and auto at 999 and 99 Hz) and checks each
    profile and every pair that places kernel time alike."""
    runs = KERN_RUNS if user is None else (("perf", "perf", 999), ("auto", None, 999),
                                           ("auto", None, 99))
    # perf_event_paranoid 2 lets a user's events count the kernel's time
    # but not overflow there; 3 and more (Debian's and Ubuntu's patches)
    # refuse them.
    user_perf = user is not None and ef.paranoid() == 2
    runs_seen = {}
    for label, eng, hz in runs:
        what = "%s%s kern %s %d Hz" % (prefix, comp, label, hz)
        prof = os.path.join(work, "kern-%s-%d.flm" % (label, hz))
        r = record_hz(build, exe, ["30"], prof, hz, engine=eng, user=user, cwd=work)
        cpu = ef.kern_own(r.stdout)
        check(r.returncode == 0 and len(cpu) == 3, what + ": runs under flamme", r.stderr.strip()[-300:])
        if r.returncode != 0 or len(cpu) != 3:
            continue
        used = ef.engine_used(r.stderr)
        if user is None and eng is None:
            # Root may sample the kernel: auto uses perf at any rate (CPU
            # timers fire at ticks, which are not random instants).
            check(used == "perf", what + ": auto uses the perf engine where it may sample the"
                  " kernel", r.stderr.strip()[-300:])
        elif user_perf and eng is None and hz <= 100:
            check(used == "timer", what + ": without kernel sampling, auto up to 100 Hz uses the"
                  " timer engine (it puts a system call's time on its caller)",
                  r.stderr.strip()[-300:])
        elif user_perf:
            check(used == "perf", what + ": perf events without kernel sampling: the perf engine"
                  " (the kernel's time from the event's count)", r.stderr.strip()[-300:])
        elif user is not None:
            check(used == "timer" and (eng is None or "perf_event_open refused" in r.stderr),
                  what + ": perf events refused: the timer engine (--engine perf says why)",
                  r.stderr.strip()[-300:])
        elif eng is not None:
            check(used == eng, what + ": engine %s used" % eng, used)
        rep = report(build, prof)
        if used == "perf":
            said = "could not sample the kernel" in rep
            check(said == user_perf, what + ": the report says where kernel time goes only when"
                  " perf events may not sample the kernel", rep[-400:])
            # A thread that never waits: perf's cost per switch is no
            # reason to leave it (the runtime's helper threads may).
            main = re.search(r"^\s+main\s+(\d+)\s", rep, re.M)
            check(main and main.group(1) not in moved_tids(rep),
                  what + ": the main thread stays on the perf engine",
                  "main %s, moved %s" % (main.group(1) if main else "?", moved_tids(rep)))
        # Kernel time placed on the next user-mode sample: a few samples
        # carry each phase's kernel periods, in whichever function they
        # fall; the runs agree on how much, not on where.
        counted = used == "perf" and user_perf
        ph = kern_phases(collapse(build, prof), kernel_apart=counted)
        wsum = sum(ph[p][0] for p in KERN_PHASES) or 1
        csum = sum(cpu[p][0] for p in KERN_PHASES)
        # 3 pp, plus 3 samples: where the phase's first and last fall
        # (a timer engine sample may weigh several periods: few signals on
        # a loaded machine).
        nrec = ef.report_records(rep) or 1
        tol = 3.0 + 300.0 / nrec
        # Counted kernel periods go to the next user-mode record, few in
        # phases 90% in the kernel: under CI's parallel load the touch
        # phase lost 4.0 and 5.2 pp to the files phase in two of four runs
        # (quiet reruns: within 0.3 pp); a broken count is off by tens.
        if counted:
            tol += 3.0
        for p in KERN_PHASES:
            got, want = 100.0 * ph[p][0] / wsum, 100.0 * cpu[p][0] / csum
            ksh = 100.0 * ph[p][1] / ph[p][0] if ph[p][0] else 0.0
            print("  %s %s: %.1f%% of the weight (CPU time: %.1f%%), %.1f%% of it [kernel]"
                  " (system time: %.1f%%)" % (what, p, got, want, ksh,
                                              100.0 * cpu[p][1] / cpu[p][0]))
            check(abs(got - want) <= tol,
                  "%s: %s's share of samples = its share of CPU time, kernel included, within"
                  " %.1f pp" % (what, p, tol), "%.1f%% vs %.1f%%" % (got, want))
        # The system calls: [kernel] under libc's wrapper, below Kern.files.
        files = ph["files"]
        check(files[0] and files[1] >= 0.4 * files[0],
              what + ": stat(2) time is a [kernel] leaf (>= 40% of the files phase)",
              "%d of %d" % (files[1], files[0]))
        # (The phase's clock reads are system calls too, from the vDSO.)
        # Without kernel overflows the kernel's periods go to the thread's
        # next user-mode sample, wherever in the loop that falls.
        ocaml = sum(w for f, w in files[2].items() if f.startswith(("Kern.", "caml")))
        top = max(files[2], key=files[2].get) if files[2] else ""
        if not counted:
            check(files[1] and ocaml <= 0.1 * files[1] and not top.startswith(("Kern.", "caml")),
                  what + ": the system calls' [kernel] sits under the libc function that made them"
                  " (<= 10% under OCaml or runtime code)", str(files[2]))
        # The compute phase's only system calls are its clock reads: ~1% of
        # it on a quiet machine, 6-18% measured while the 2-core VM ran
        # others' tests (its own system time says how much).
        csys = 100.0 * cpu["compute"][1] / cpu["compute"][0] if cpu["compute"][0] else 0.0
        # Plus 2 periods: at 99 Hz the phase has ~30 samples, and perf
        # (auto as root) flags each one that falls in a clock read: CI
        # once had 2 of 30.
        climit = max(5.0, csys + 3.0)
        check(ph["compute"][1] <= climit / 100.0 * max(ph["compute"][0], 1) + 2,
              what + ": the user-only phase is [kernel] no more than its own system time (its"
              " clock reads; + 3 pp, at least 5%%, + 2 periods): <= %.1f%%" % climit,
              "%d of %d" % (ph["compute"][1], ph["compute"][0]))
        if used == "perf":
            # Page faults: [kernel] right under the function that touched
            # the page.
            # The phase's other [kernel] is munmap(2) giving back what the
            # GC freed (the pages' release), under libc's wrapper: 15-18%
            # of it at 999 Hz here (2026-12-01, 5.3.0 no-fp, four runs),
            # so at 99 Hz (~30 samples) "70% of all of it under touch"
            # failed once in CI (20 of 30, 10 under __munmap).
            touch = ph["touch"]
            calls = sum(w for f, w in touch[2].items() if MEMORY_CALL.match(f))
            faults = touch[1] - calls
            sys_pct = 100.0 * cpu["touch"][1] / cpu["touch"][0]
            ksh = 100.0 * faults / touch[0] if touch[0] else 0.0
            # getrusage's system time is tick-sampled (and skewed on a
            # loaded machine): only a bound.
            check(ksh >= 20.0 and sys_pct >= 20.0,
                  what + ": the page faults are >= 20% of the touch phase, as [kernel] (less"
                  " the memory system calls') and as system time",
                  "[kernel] %.1f%%, system time %.1f%%" % (ksh, sys_pct))
            print("  %s: page faults' [kernel] %d, %d of it under Kern.touch; under what: %s"
                  % (what, faults, touch[2].get("Kern.touch", 0),
                     sorted(touch[2].items(), key=lambda kv: -kv[1])[:4]))
            # Counted (no kernel overflows), munmap's periods go to the
            # thread's next user-mode record, the GC's code after the call
            # (pool_sweep, caml_*), not libc's wrapper: 0-22% of the
            # phase's [kernel] in 12 runs here, 33.5% in one CI run
            # (2026-11-30).
            need = 50 if counted else 70
            check(faults > 0 and touch[2].get("Kern.touch", 0) >= need / 100.0 * faults,
                  what + ": >= %d%% of the page faults' [kernel] sits right under Kern.touch" % need,
                  str(touch[2]))
        runs_seen["%s %d Hz" % (label, hz)] = (ph, {p: 100.0 * cpu[p][0] / csum for p in cpu}, nrec,
                                               counted)
    keys = sorted(runs_seen)
    for i, a in enumerate(keys):
        for b in keys[i + 1:]:
            if runs_seen[a][3] != runs_seen[b][3]:
                # Timers (as kernel-sampling perf) put a system call's time
                # on its caller, the counting perf engine on its loop.
                print("  %s%s kern: %s and %s place kernel time differently: not compared"
                      % (prefix, comp, a, b))
                continue
            share = {p: (runs_seen[a][1][p] + runs_seen[b][1][p]) / 2 for p in KERN_PHASES}
            pp, leaf = ef.disagreement(phase_leaf_shares(runs_seen[a][0], share),
                                       phase_leaf_shares(runs_seen[b][0], share))
            # 5 pp, or twice the sampling noise of the run with fewer
            # samples (a leaf's share varies by up to 50/sqrt(n) pp).
            n = min(runs_seen[a][2], runs_seen[b][2])
            tol = max(5.0, 150.0 / n ** 0.5)
            print("  %s%s kern: top-20 leaves of %s and %s differ by at most %.1f pp (%s; %d"
                  " samples in the smaller run)" % (prefix, comp, a, b, pp, leaf, n))
            check(pp <= tol, "%s%s kern: top-20 leaves of %s and %s agree within %.1f pp"
                  % (prefix, comp, a, b, tol), "%.1f pp at %s" % (pp, leaf))


@pytest.mark.slow
def test_kern(build, ocaml, compiler, check, tmp_path):
    kern_runs(build, ef.build_program(ocaml, "kern"), compiler.name, check, str(tmp_path))


@pytest.mark.slow
def test_kern_busy(build, ocaml, compiler, check, tmp_path):
    """kern.ml under the timer engine at 999 Hz on a CPU it shares with a
    process that never sleeps (neighbour.py busy): the program is preempted
    for whole slices, in its system calls too, and each phase keeps its
    share of the samples. A dither check that found the thread back from a
    preemption in a system call took it for asleep there and left the
    samples to the thread's next CPU timer expiry, which on this 2-core VM
    came up to 80 ms of its CPU time later: 4 of 8 runs gave 2.4-9.0 pp of
    the compute phase to the touch phase (2026-12-01, 5.3.0 fp). The
    thread's first sample, at its first expiry, stood for 3-73 periods."""
    comp = compiler.name
    exe = ef.build_program(ocaml, "kern")
    prof = str(tmp_path / "kern-busy.flm")
    r = record_beside_neighbour(build, exe, ["30"], prof, tmp_path, ["6", "busy"])
    cpu = ef.kern_own(r.stdout)
    check(r.returncode == 0 and len(cpu) == 3, "%s kern busy: runs under flamme" % comp,
          r.stderr.strip()[-300:])
    if r.returncode != 0 or len(cpu) != 3:
        return
    ph = kern_phases(collapse(build, prof))
    wsum = sum(ph[p][0] for p in KERN_PHASES) or 1
    csum = sum(cpu[p][0] for p in KERN_PHASES)
    for p in KERN_PHASES:
        got, want = 100.0 * ph[p][0] / wsum, 100.0 * cpu[p][0] / csum
        print("  %s kern busy %s: %.1f%% of the weight (CPU time: %.1f%%)" % (comp, p, got, want))
        # Fixed: within 0.3 pp in 8 of 8 runs; a sample taken where the
        # phase changes may carry a few periods of the one before.
        check(abs(got - want) <= 2.0, "%s kern busy: %s's share of samples = its share of CPU"
              " time within 2 pp" % (comp, p), "%.1f%% vs %.1f%%" % (got, want))
    # When the samples are: none stands for more than 10 ms of the thread's
    # CPU time, and the first (it carries what ran before it) for more than
    # 5. Seen fixed: the first 1, the others at most 4 (5 beside two busy
    # loops on both CPUs). Before, 30-260 after the first; and the first,
    # taken at the thread's first CPU timer expiry, came 3-73 ms of its CPU
    # time late (the chain now starts at the arming).
    with open(prof, "rb") as f:
        recs = sorted(flmfile.samples(f.read()), key=lambda r: r[5])
    tids = {}
    for one in recs:
        tids[one[1]] = tids.get(one[1], 0) + one[2]
    main = max(tids, key=tids.get) if tids else None
    ws = [one[2] for one in recs if one[1] == main]
    print("  %s kern busy: %d samples, first of weight %s, the largest after it %s"
          % (comp, len(ws), ws[0] if ws else "-", sorted(ws[1:])[-3:]))
    check(len(ws) > 100 and ws[0] <= 5 and max(ws) <= 10, "%s kern busy: no sample of the"
          " thread stands for more than 10 periods, its first for more than 5" % comp,
          "%d samples, first %d, largest weights %s" % (len(ws), ws[0] if ws else 0,
                                                       sorted(ws)[-5:]))


@pytest.mark.slow
def test_kern_no_kernel_rights(build, ocaml_default, default_compiler, check):
    """Perf events that may not sample the kernel: an unprivileged user
    where perf_event_paranoid >= 2 (root may always)."""
    lvl = ef.paranoid()
    if not (os.geteuid() == 0 and lvl is not None and lvl >= 2 and shutil.which("setpriv")):
        pytest.skip("needs root, setpriv and perf_event_paranoid >= 2; have euid %d, paranoid %s"
                    % (os.geteuid(), lvl))
    exe = ef.build_program(ocaml_default, "kern")
    # pytest's own temporary directories are private to root.
    work = tempfile.mkdtemp(prefix="flamme-engine-nobody-")
    try:
        os.chmod(work, 0o777)
        kern_runs(build, exe, default_compiler.name, check, work, prefix="nobody: ", user=65534)
    finally:
        shutil.rmtree(work, ignore_errors=True)


@pytest.mark.slow
def test_handoff(build, ocaml, compiler, check, tmp_path):
    """Systhreads that hand the runtime lock over at every Thread.yield:
    under auto at 999 Hz the perf engine's cost per context switch would
    triple their kernel time, so auto moves them to CPU timers (and says
    so), and the profile agrees with the timer engine's; --engine perf is
    left as asked. The program measures each thread's CPU time in work and
    in its whole loop itself: with the timer engine and auto (the threads on
    CPU timers, sampled at ticks) work's share of the samples is held to
    that, from 15 pp below to 18 pp above. Which way ticks lean depends on
    the machine: on the 2-core VMs of 2026-11 they gave work 1-12 pp more
    (bench-engine, "Against the program's own clock"; perf record alone
    1-2), as part of a switch's CPU time is never under a tick
    (doc/design.md, "What the ticks miss"); on the 2-core microVM of
    2026-11-28 (a page fault 11-15 us, a pipe round trip between threads on
    the two CPUs 22 us) 1.3-12.5 pp less (20 runs, both engines, three
    compilers; stop 27's agent the same). The check is for what would be wrong on any machine:
    sampling these threads as other threads are, with a chain of checks,
    gave work a fifth of its share (some 35 pp below)."""
    comp = compiler.name
    exe = ef.build_program(ocaml, "handoff")
    res = {}
    for label, eng in (("timer", "timer"), ("auto", None), ("perf", "perf")):
        what = "%s handoff %s 999 Hz" % (comp, label)
        prof = str(tmp_path / ("handoff-%s.flm" % label))
        # perf only has to keep its threads: a shorter run (it is slow).
        r = record_hz(build, exe, ["1" if label == "perf" else "4"], prof, 999, engine=eng,
                      cwd=tmp_path)
        check(r.returncode == 0 and "handoff: total" in r.stdout, what + ": runs under flamme",
              r.stderr.strip()[-300:])
        if r.returncode != 0:
            return
        own = ef.handoff_own(r.stdout)
        st = collapse(build, prof)
        if label != "perf":
            check(own is not None, "%s: the program prints its own split" % what,
                  r.stdout.strip()[-300:])
        if label != "perf" and own is not None:
            pct = ef.handoff_share(st)
            print("  %s: work %.1f%% of the samples; the program measured %.1f%%"
                  % (what, pct, own))
            gap = pct - own
            check(-15.0 <= gap <= 18.0,
                  "%s: work's share of the samples from 15 pp below to 18 pp above its share of "
                  "the CPU time, as the program measured it" % what,
                  "%.1f%% for %.1f%%" % (pct, own))
        rep = report(build, prof)
        moved = MOVED.search(rep)
        if label == "timer":
            at_ticks = re.search(r"(\d+) threads that " + re.escape(SWITCHERS), rep)
            check(at_ticks is not None and int(at_ticks.group(1)) >= 3,
                  "%s: the report says the >= 3 yielding threads were sampled at ticks, not "
                  "dithered" % what, at_ticks.group(0) if at_ticks else "no such line")
        res[label] = (ef.engine_used(r.stderr), int(moved.group(1)) if moved else 0,
                      ef.leaf_shares(st), ef.report_records(rep) or 1)
    if res["auto"][0] != "perf":
        pytest.skip("%s handoff: auto at 999 Hz uses %s here (no perf events with kernel samples)"
                    % (comp, res["auto"][0]))
    check(res["auto"][1] >= 3, "%s handoff auto 999 Hz: the report says the >= 3 yielding"
          " threads left the perf engine for CPU timers" % comp, "%d moved" % res["auto"][1])
    check(res["perf"][0] == "perf" and res["perf"][1] == 0,
          "%s handoff --engine perf: every thread stays on perf (as asked)" % comp,
          "engine %s, %d moved" % res["perf"][:2])
    pp, leaf = ef.disagreement(res["auto"][2], res["timer"][2])
    # 15 pp: the timer engine's own Handoff.work share spread from 38.7% to
    # 52.4% over seven runs on the loaded 2-core VM (few signals, each
    # weighing several periods), and auto spends its first ~100 ms on perf;
    # --engine perf is 25-35 pp off (Handoff.work ~15%).
    n = min(res["auto"][3], res["timer"][3])
    tol = max(15.0, 150.0 / n ** 0.5)
    print("  %s handoff: top-20 leaves of auto and timer differ by at most %.1f pp (%s; %d samples"
          " in the smaller run); Handoff.work %.1f%% auto, %.1f%% timer, %.1f%% perf"
          % (comp, pp, leaf, n, res["auto"][2].get("Handoff.work", 0),
             res["timer"][2].get("Handoff.work", 0), res["perf"][2].get("Handoff.work", 0)))
    check(pp <= tol, "%s handoff: top-20 leaves of auto and timer at 999 Hz agree within %.1f pp"
          % (comp, tol), "%.1f pp at %s" % (pp, leaf))
