"""tests/fidelity/fidlib.py — shared helpers of the fidelity suite
(tests/fidelity/run.py) and the overhead benchmark (bench/fidelity_bench.py).

Owns: how a fidelity program is located, run (with or without the agent),
and how its profile is read back (`flamme collapse --threads`, `flamme
report`, the `flamme record` summary line). No assertions here.
"""
import os
import re
import subprocess
import time

# A stack is complete when its root-most frame is one of these (the same
# rule as `flamme report` / the record summary).
ROOTS = {"_start", "__libc_start_main", "__libc_start_call_main", "main",
         "clone3", "clone", "start_thread", "_dl_start_user"}

SUMMARY = re.compile(r"^flamme: (\d+) samples, (\d+) threads, (\d+) lost, "
                     r"complete ([0-9.]+)%, engine (\w+)")
STATS = re.compile(r"handler cost: median (\d+) ns, p99 (\d+) ns over (\d+) samples")
RUN_TIMEOUT = 300  # seconds; a hang is a failure


class Ctx:
    """Paths of the build: the flamme command, the agent, the programs."""

    def __init__(self, build, work):
        self.build = build
        self.flamme = os.path.abspath(os.path.join(build, "flamme"))
        self.lib = os.path.abspath(os.path.join(build, "libflamme.so"))
        self.work = work

    def exe(self, name):
        path = os.path.abspath(os.path.join(self.build, "fidelity", name, name + ".exe"))
        if not os.access(path, os.X_OK):
            raise FileNotFoundError("program not built: %s (run `make fidelity-progs`)" % path)
        return path


def clean_env(extra=None):
    """The caller's environment without any FLAMME_* / LD_PRELOAD, plus extra."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("FLAMME_") and k != "LD_PRELOAD"}
    if extra:
        env.update(extra)
    return env


class Run:
    """One finished process: rc, stdout, stderr, wall and CPU seconds
    (user+sys of the process and the children it waited for)."""

    def __init__(self, rc, out, err, wall, cpu):
        self.rc, self.out, self.err, self.wall, self.cpu = rc, out, err, wall, cpu


def run(cmd, env, cwd):
    """Runs cmd to completion; returns a Run. Raises RuntimeError on timeout."""
    outp = os.path.join(cwd, "stdout.txt")
    errp = os.path.join(cwd, "stderr.txt")
    with open(outp, "w") as fo, open(errp, "w") as fe:
        t0 = time.monotonic()
        p = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=fo, stderr=fe)
        deadline = t0 + RUN_TIMEOUT
        while True:
            pid, status, ru = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                p.kill()
                p.wait()
                raise RuntimeError("timed out after %ds: %s" % (RUN_TIMEOUT, " ".join(cmd)))
            time.sleep(0.005)
        wall = time.monotonic() - t0
    p.returncode = os.waitstatus_to_exitcode(status)  # reaped by wait4; keep Popen quiet
    with open(outp) as fo, open(errp) as fe:
        return Run(p.returncode, fo.read(), fe.read(), wall, ru.ru_utime + ru.ru_stime)


class Stack:
    __slots__ = ("label", "frames", "weight")

    def __init__(self, label, frames, weight):
        self.label, self.frames, self.weight = label, frames, weight

    def complete(self):
        return bool(self.frames) and self.frames[0] in ROOTS


def collapse(ctx, profile):
    """The profile's stacks from `flamme collapse --threads` (frames root first)."""
    p = subprocess.run([ctx.flamme, "collapse", "--threads", profile],
                       capture_output=True, text=True, timeout=RUN_TIMEOUT)
    if p.returncode != 0:
        raise RuntimeError("flamme collapse %s failed: %s" % (profile, p.stderr.strip()))
    stacks = []
    for line in p.stdout.splitlines():
        if not line.strip():
            continue
        path, _, w = line.rpartition(" ")
        parts = path.split(";")
        stacks.append(Stack(parts[0], parts[1:], int(w)))
    return stacks


def report_figures(ctx, profile):
    """From `flamme report`: dict with records, weight, lost, complete (%)."""
    p = subprocess.run([ctx.flamme, "report", profile], capture_output=True, text=True,
                       timeout=RUN_TIMEOUT)
    if p.returncode != 0:
        raise RuntimeError("flamme report %s failed: %s" % (profile, p.stderr.strip()))
    fig = {}
    m = re.search(r"samples: (\d+) records, weight (\d+); lost: (\d+)", p.stdout)
    if m:
        fig.update(records=int(m.group(1)), weight=int(m.group(2)), lost=int(m.group(3)))
    m = re.search(r"complete stacks: ([0-9.]+)%", p.stdout)
    if m:
        fig["complete"] = float(m.group(1))
    return fig


def handler_stats(stderr):
    """(median ns, p99 ns, samples) from FLAMME_STATS=1 output, or None."""
    m = STATS.search(stderr)
    return tuple(int(x) for x in m.groups()) if m else None


def incomplete_top(stacks, n=5):
    """The n heaviest incomplete stacks as printable lines (leaf-side kept)."""
    bad = sorted((s for s in stacks if not s.complete()), key=lambda s: -s.weight)[:n]
    out = []
    for s in bad:
        fr = s.frames
        text = ";".join(fr if len(fr) <= 40 else fr[:20] + ["..(%d frames).." % (len(fr) - 40)] + fr[-20:])
        out.append("%6d  %s;%s" % (s.weight, s.label, text))
    return out
