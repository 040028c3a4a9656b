"""tests/engine/engine_figures.py — what the engine suite
(tests/engine/test_engine.py) and its benchmark (bench/engine_bench.py)
share: the engine programs and how to build them, what the programs that
time themselves print, and the figures read from their profiles
(flamme's own share, leaf shares, how far two profiles' leaves disagree,
the report's sample counts).

Builds and runs go through tests/flammetest.py. No assertions here; no
pytest either (the benchmark runs without it).
"""
import os
import re
import subprocess

import flammetest

HERE = os.path.dirname(os.path.abspath(__file__))
CPUTIME = os.path.join(HERE, "..", "fidelity", "cputime_stubs.c")

# Each engine program: (sources in link order, libraries).
PROGRAMS = {
    "gcloop": ([os.path.join(HERE, "gcloop.ml")], ()),
    "deepfx": ([CPUTIME, os.path.join(HERE, "deepfx.ml")], ()),
    "fxchain": ([CPUTIME, os.path.join(HERE, "fxchain.ml")], ()),
    "kern": ([CPUTIME, os.path.join(HERE, "kern_stubs.c"), os.path.join(HERE, "kern.ml")], ()),
    "handoff": ([CPUTIME, os.path.join(HERE, "handoff.ml")], ("unix", "threads")),
    "stitch": ([os.path.join(HERE, "stitch.ml")], ()),
    "memo": ([os.path.join(HERE, "memo_stubs.c"), os.path.join(HERE, "memo.ml")], ()),
    "memo_fx": ([os.path.join(HERE, "memo_fx.ml")], ()),
    "ticks": ([os.path.join(HERE, "ticks_stubs.c"), os.path.join(HERE, "ticks.ml")], ()),
    "cycle": ([os.path.join(HERE, "ticks_stubs.c"), os.path.join(HERE, "cycle.ml")], ()),
}


def build_program(make, name):
    """Builds engine program NAME with MAKE (the `ocaml` fixture, or
    flammetest.builder's); returns the executable's path."""
    sources, libs = PROGRAMS[name]
    return make("engine/" + name, sources, libs=libs)


# What ticks.ml, handoff.ml and kern.ml measure of their own CPU time with
# their threads' CPU clocks (the truth a profile is held to), from their
# output, and the matching figures of a profile's stacks.
KERN_PHASES = ("compute", "touch", "files")


def ticks_own(out):
    """after_tick's share (%) of ticks.ml's CPU time, or None."""
    m = re.search(r"after_tick ([0-9.]+)% of the CPU time", out)
    return float(m.group(1)) if m else None


def ticks_share(st):
    """The share (%) of the samples in after_tick."""
    return 100.0 * flammetest.share(st, lambda fr: any(f.endswith("after_tick") for f in fr))


def cycle_own(out):
    """first's share (%) of cycle.ml's CPU time, or None."""
    m = re.search(r"cycle: \d+ cycles of \d+ ns, first ([0-9.]+)% of the CPU time", out)
    return float(m.group(1)) if m else None


def cycle_share(st):
    """The share (%) of the samples in Cycle.first."""
    return 100.0 * flammetest.share(st, lambda fr: any(f.endswith("Cycle.first") for f in fr))


def handoff_own(out):
    """Handoff.work's share (%) of handoff.ml's loops' CPU time, or None."""
    m = re.search(r"own: work ([0-9.]+)%", out)
    return float(m.group(1)) if m else None


def handoff_share(st):
    """The share (%) of the samples in Handoff.work."""
    return 100.0 * flammetest.share(st, flammetest.has_frame("work"))


def kern_own(out):
    """{phase: (CPU s, system s)} of kern.ml's phases."""
    return {m.group(1): (float(m.group(2)), float(m.group(3)))
            for m in re.finditer(r"kern: phase (\w+) cpu ([0-9.]+) sys ([0-9.]+)", out)}


def engine_used(stderr):
    """The engine `flamme record`'s summary line names ("engine perf"), or
    "?" when it names none."""
    m = re.search(r"engine (\w+)", stderr)
    return m.group(1) if m else "?"


def record_cmd(build, exe, args, prof, hz=999, engine=None, user=None):
    """The command of `flamme record -F HZ [--engine ENGINE] -o PROF -- EXE
    ARGS`, run as uid and gid USER if given (root only)."""
    cmd = [build.flamme, "record", "-F", str(hz), "-o", prof]
    if engine:
        cmd += ["--engine", engine]
    if user is not None:
        cmd = ["setpriv", "--reuid=%d" % user, "--regid=%d" % user, "--clear-groups"] + cmd
    return cmd + ["--", exe] + list(args)


def paranoid():
    """/proc/sys/kernel/perf_event_paranoid, or None."""
    try:
        with open("/proc/sys/kernel/perf_event_paranoid") as f:
            return int(f.read())
    except (OSError, ValueError):
        return None


_own = {}


def own_functions(build):
    """Names of the functions defined in libflamme.so (its symbol table):
    its local ones and flamme_*; not the interposed libc names
    (pthread_create, sigaction, ...), which a profile cannot tell from
    libc's own."""
    if build.lib not in _own:
        p = subprocess.run(["nm", "--defined-only", build.lib], capture_output=True,
                           text=True, check=True)
        _own[build.lib] = {f[2] for f in (l.split() for l in p.stdout.splitlines())
                           if len(f) == 3 and (f[1] == "t" or
                                               (f[1] in "TW" and f[2].startswith("flamme_")))}
    return _own[build.lib]


def own_share(build, st):
    """(percentage of the weight whose stack holds a libflamme.so function,
    that weight, the total weight)."""
    own = own_functions(build)
    total = flammetest.total(st)
    mine = flammetest.total(st, lambda fr: any(f in own for f in fr))
    return 100.0 * mine / total if total else 0.0, mine, total


KERNEL = "[kernel]"


def leaf_of(fr):
    """The user function a stack's time is charged to: its leaf, or for a
    `[kernel]` leaf the function that entered the kernel."""
    return fr[-2] if fr[-1] == KERNEL and len(fr) > 1 else fr[-1]


def leaf_shares(st):
    """{leaf function (see leaf_of): percentage of the weight}."""
    total = flammetest.total(st) or 1
    out = {}
    for fr, w in st:
        leaf = leaf_of(fr)
        out[leaf] = out.get(leaf, 0) + w
    return {k: 100.0 * v / total for k, v in out.items()}


def kernel_share(st):
    """Percentage of the weight under a `[kernel]` leaf."""
    return 100.0 * flammetest.share(st, lambda fr: fr[-1] == KERNEL)


def disagreement(a, b, top=20):
    """(largest difference in percentage points, its leaf) among the top
    leaves of two {leaf: %} maps (the top `top` of each)."""
    keys = set(sorted(a, key=a.get, reverse=True)[:top]) | set(sorted(b, key=b.get, reverse=True)[:top])
    worst = (0.0, None)
    for k in keys:
        d = abs(a.get(k, 0.0) - b.get(k, 0.0))
        if d > worst[0]:
            worst = (d, k)
    return worst


SAMPLES = re.compile(r"samples: (\d+) records, weight (\d+)")


def report_weight(text):
    """The sample weight `flamme report` prints, or None."""
    m = SAMPLES.search(text)
    return int(m.group(2)) if m else None


def report_records(text):
    """The number of sample records `flamme report` prints, or None."""
    m = SAMPLES.search(text)
    return int(m.group(1)) if m else None
