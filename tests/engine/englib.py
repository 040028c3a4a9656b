"""tests/engine/englib.py — shared helpers of the engine suite
(tests/engine/run.py) and its benchmark (bench/engine_bench.py).

Owns: where an engine program is (build/engine/{fp,nofp}/<p>/<p>.exe), how
it is run under `flamme record` or alone, and how its profile is read back
(`flamme collapse`, `flamme report`). No assertions here.
"""
import os
import re
import subprocess
import sys

# Running a program without the caller's FLAMME_* / LD_PRELOAD, with its CPU
# time: the fidelity suite's helpers.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fidelity"))
from fidlib import RUN_TIMEOUT, clean_env, run  # noqa: E402,F401
import fidlib  # noqa: E402

COMPILERS = ("fp", "nofp")


class Ctx(fidlib.Ctx):
    """Paths of the build, for programs built with either compiler."""

    def __init__(self, build, work):
        super().__init__(build, work)
        self._own = None

    def exe(self, comp, name):
        path = os.path.abspath(os.path.join(self.build, "engine", comp, name, name + ".exe"))
        if not os.access(path, os.X_OK):
            raise FileNotFoundError("program not built: %s (run `make engine-progs`)" % path)
        return path

    def own_functions(self):
        """Names of the functions defined in libflamme.so (its symbol table):
        its local ones and flamme_*; not the interposed libc names
        (pthread_create, sigaction, ...), which a profile cannot tell from
        libc's own."""
        if self._own is None:
            p = subprocess.run(["nm", "--defined-only", self.lib], capture_output=True,
                               text=True, check=True)
            self._own = {f[2] for f in (l.split() for l in p.stdout.splitlines())
                         if len(f) == 3 and (f[1] == "t" or
                                             (f[1] in "TW" and f[2].startswith("flamme_")))}
        return self._own


def record(ctx, exe, args, prof, hz=999, engine=None, env=None, user=None):
    """`flamme record` of exe (as uid and gid `user` if given: root only);
    returns the Run."""
    cmd = [ctx.flamme, "record", "-F", str(hz), "-o", prof]
    if engine:
        cmd += ["--engine", engine]
    if user is not None:
        cmd = ["setpriv", "--reuid=%d" % user, "--regid=%d" % user, "--clear-groups"] + cmd
    return run(cmd + ["--", exe] + list(args), clean_env(env), ctx.work)


def stacks(ctx, prof, threads=False):
    """[(frames root first, weight)] from `flamme collapse`."""
    cmd = [ctx.flamme, "collapse"] + (["--threads"] if threads else []) + [prof]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=RUN_TIMEOUT)
    if p.returncode != 0:
        raise RuntimeError("flamme collapse %s failed: %s" % (prof, p.stderr.strip()))
    out = []
    for line in p.stdout.splitlines():
        path, _, w = line.rpartition(" ")
        if path:
            out.append((path.split(";"), int(w)))
    return out


def own_share(ctx, st):
    """Percentage of the weight whose stack holds a libflamme.so function."""
    own = ctx.own_functions()
    total = sum(w for _, w in st)
    mine = sum(w for fr, w in st if any(f in own for f in fr))
    return 100.0 * mine / total if total else 0.0, mine, total


KERNEL = "[kernel]"


def leaf_of(fr):
    """The user function a stack's time is charged to: its leaf, or for a
    `[kernel]` leaf the function that entered the kernel."""
    return fr[-2] if fr[-1] == KERNEL and len(fr) > 1 else fr[-1]


def leaf_shares(st):
    """{leaf function (see leaf_of): percentage of the weight}."""
    total = sum(w for _, w in st) or 1
    out = {}
    for fr, w in st:
        leaf = leaf_of(fr)
        out[leaf] = out.get(leaf, 0) + w
    return {k: 100.0 * v / total for k, v in out.items()}


def kernel_share(st):
    """Percentage of the weight under a `[kernel]` leaf."""
    total = sum(w for _, w in st) or 1
    return 100.0 * sum(w for fr, w in st if fr[-1] == KERNEL) / total


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


def report(ctx, prof):
    p = subprocess.run([ctx.flamme, "report", prof], capture_output=True, text=True,
                       timeout=RUN_TIMEOUT)
    if p.returncode != 0:
        raise RuntimeError("flamme report %s failed: %s" % (prof, p.stderr.strip()))
    return p.stdout


def report_weight(text):
    m = re.search(r"samples: (\d+) records, weight (\d+)", text)
    return int(m.group(2)) if m else None


def report_records(text):
    m = re.search(r"samples: (\d+) records, weight (\d+)", text)
    return int(m.group(1)) if m else None
