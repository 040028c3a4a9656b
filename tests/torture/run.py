#!/usr/bin/env python3
"""tests/torture/run.py — the profiled program is never harmed, its profile
never silently lost.

Owns: the torture checks. Called by `make torture` / `make torture-ci`
(mk/torture.mk) once tests/torture/*.ml are built with both compilers into
build/torture/<cc>/<name>/<name>.exe.

Each case runs a program ALONE (no agent) and then PROFILED (LD_PRELOAD of
libflamme.so) under one configuration: compiler (fp, nofp) x engine and mode
(perf, timer, itimer in CPU mode; timer in wall mode). Both runs happen in a
fresh working directory; what the program did must be the same: its stdout,
its stderr (minus the agent's own `flamme:` lines), the files it left in its
directory (names and contents) and how it ended (exit status or signal).
A run that does not end within the case's timeout is a hang. Then the
profile of the profiled process is read with `flamme report`: it must be
complete (or, for a case that cannot complete one, such as SIGKILL, the
report must say it is incomplete), and the case's own check runs on it.

Cases are (program, configuration) pairs, taken round-robin so that a short
budget still covers every program, each under a different configuration;
a longer budget covers the whole matrix. The reference (alone) result of a
program is computed once per compiler.

Prints one line per pair and ends with `torture: N passed, N failed`; exits
1 if anything failed.
Usage: run.py [--build DIR] [--budget SECONDS] [--only NAME,...] [--keep] [--lib SO]
(TORTURE_CCS="fp" in the environment limits the runs to one compiler; --lib
runs another build of the agent, e.g. to see a case fail before its fix.)

Adding a case: tests/torture/<name>.ml (+ <name>_stubs.c, `torture-libs:`
line for unix/threads/flamme), then an entry in CASES below.
"""
import argparse
import hashlib
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HZ = "499"
CONFIGS = [(cc, eng, mode) for cc in os.environ.get("TORTURE_CCS", "fp nofp").split()
           for eng, mode in (("perf", "cpu"), ("timer", "cpu"), ("itimer", "cpu"), ("timer", "wall"))]


class Case:
    """One program and what is expected of it.
    args: argv after the program ({build} = the build directory, absolute);
    env: extra environment for both runs; timeout: seconds per run;
    profile: "complete" (default), "incomplete" (the report must say so),
    or None (no profile expected); kill_after: SIGKILL the program after so
    many seconds (both runs); rss_slack_mb: the profiled run's peak RSS may
    exceed the alone run's by at most this much; check(ctx, profile, cfg):
    returns None or a failure message; ended: a regular expression the
    report's `ended:` line (how the run ended) must match; min_records: the
    profile must hold at least this many sample records; label: shown
    instead of the name (several cases of one program); nofile: the
    descriptor limit (RLIMIT_NOFILE) of both runs."""

    def __init__(self, name, args=(), env=None, timeout=60, profile="complete", kill_after=None,
                 rss_slack_mb=None, check=None, configs=None, ended=None, min_records=0,
                 label=None, nofile=None):
        self.name, self.args, self.env, self.timeout = name, list(args), env or {}, timeout
        self.ended, self.min_records, self.label = ended, min_records, label or name
        self.nofile = nofile
        self.profile, self.kill_after, self.rss_slack_mb = profile, kill_after, rss_slack_mb
        self.check, self.configs = check, configs


CASES = [
    Case("basic", ended=r"^exit\(0\)$"),
    Case("stack_overflow", env={"OCAMLRUNPARAM": "l=64k"}),
    Case("domains200"),
    Case("threads5000", rss_slack_mb=96, timeout=120),
    Case("exit_domain", ended=r"^exit\(3\)$"),
    Case("sigkill", kill_after=1.5, profile="incomplete"),
    Case("forkexec"),
    Case("thread_cancel"),
    Case("dlopen_loop", args=["{build}/torture/libtorture_work.so"]),
    Case("exec_fail", ended=r"^exec", check=lambda ctx, prof, cfg: function_records(
        ctx, prof, "after_failed_exec", 20)),
    Case("fork_lock", timeout=90),
    Case("closefds", ended=r"^exit\(0\)$", min_records=20),
    # Wall mode at 499 Hz on 300 threads takes ~30 s on a loaded 2-core machine.
    Case("threads_fds", nofile=256, configs=lambda cfg: cfg[2] == "cpu"),
    Case("main_pthread_exit", ended=r"main thread called pthread_exit", min_records=20),
    # The linked agent writes a profile in the run alone too: put it beside.
    Case("threads_idle", env={"FLAMME_AUTOSTART": "0", "FLAMME_OUTPUT": "../prof/p.%p.flm"},
         ended=r"profiling stopped", check=lambda ctx, prof, cfg: function_records(
             ctx, prof, "busy_in_new_thread", 20)),
    # The program owns SIGPROF and ITIMER_PROF (it prints whether its own
    # ticks matched its CPU time); flamme samples it too, except with the
    # itimer engine, which the program's own ITIMER_PROF replaces.
    Case("own_sigprof", check=lambda ctx, prof, cfg: None if cfg[1] == "itimer" else
         function_records(ctx, prof, "Own_sigprof.burn", 20)),
    # Blocking calls of C code that does not retry on EINTR (tests/signal).
    Case("sleeps", args=["usleep", "pause", "sigsuspend", "sigtimedwait", "epoll_pwait2",
                         "rcvtimeo_read", "rcvtimeo_recv"]),
    # Threads cancelled inside poll; a poll in a signal handler during a poll.
    Case("cancel", args=["6", "0.5"]),
    # A seccomp filter refuses process_vm_readv while profiling; C code with
    # a garbage frame pointer.
    Case("seccomp", args=["late"], label="seccomp-late"),
] + [
    # Every way a process ends completes the profile up to the end and says how.
    Case("dies", args=[how], label="dies-" + how, ended=ended, min_records=20)
    for how, ended in (("exit", r"^exit\(4\)$"), ("uncaught", r"^exit\(2\)$"),
                       ("_exit", r"^_exit\(5\)$"), ("pipe", r"signal 13 \(SIGPIPE\)"),
                       ("abort", r"signal 6 \(SIGABRT\)"), ("segv", r"signal 11 \(SIGSEGV\)"),
                       ("bus", r"signal 7 \(SIGBUS\)"), ("fpe", r"signal 8 \(SIGFPE\)"),
                       ("term", r"signal 15 \(SIGTERM\)"))
]


class Result:
    def __init__(self, stdout, stderr, status, files, maxrss_kb, pid, hung):
        self.stdout, self.stderr, self.status = stdout, stderr, status
        self.files, self.maxrss_kb, self.pid, self.hung = files, maxrss_kb, pid, hung


def describe_status(st):
    if st is None:
        return "hung"
    if os.WIFSIGNALED(st):
        return "signal %d%s" % (os.WTERMSIG(st), " (core)" if os.WCOREDUMP(st) else "")
    if os.WIFEXITED(st):
        return "exit %d" % os.WEXITSTATUS(st)
    return "status 0x%x" % st


CORE = re.compile(r"^core(\.\d+)?$")


def snapshot(d):
    """{relative path: sha256 of contents} of every file under d; a core
    dump counts by its presence (and is removed: they are big)."""
    out = {}
    for root, _, files in os.walk(d):
        for f in files:
            p = os.path.join(root, f)
            if CORE.match(f):
                out["core"] = "a core dump"
                os.unlink(p)
                continue
            try:
                with open(p, "rb") as fh:
                    out[os.path.relpath(p, d)] = hashlib.sha256(fh.read()).hexdigest()[:16]
            except OSError as e:
                out[os.path.relpath(p, d)] = "unreadable: %s" % e.strerror
    return out


def limits(nofile):
    resource.setrlimit(resource.RLIMIT_CORE, (resource.RLIM_INFINITY,) * 2)
    if nofile:
        resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))


def run_prog(exe, args, env, cwd, timeout, kill_after, nofile=None):
    """Runs exe in cwd; returns a Result. The program's own process group
    is killed on a hang."""
    out_path, err_path = os.path.join(cwd, "..", "stdout"), os.path.join(cwd, "..", "stderr")
    with open(out_path, "wb") as o, open(err_path, "wb") as e:
        # Core dumps allowed, so that "the same core dump" is checked too.
        p = subprocess.Popen([exe] + args, cwd=cwd, env=env, stdout=o, stderr=e,
                             stdin=subprocess.DEVNULL, start_new_session=True,
                             preexec_fn=lambda: limits(nofile))
        start = time.monotonic()
        status, rusage, hung, killed = None, None, False, False
        while True:
            pid, st, ru = os.wait4(p.pid, os.WNOHANG)
            if pid == p.pid:
                status, rusage = st, ru
                break
            el = time.monotonic() - start
            if kill_after is not None and not killed and el >= kill_after:
                os.kill(p.pid, signal.SIGKILL)
                killed = True
            if el >= timeout:
                hung = True
                os.killpg(p.pid, signal.SIGKILL)
                _, st, ru = os.wait4(p.pid, 0)
                status, rusage = None, ru
                break
            time.sleep(0.02)
        p.returncode = 0  # reaped by wait4 above
    with open(out_path, "rb") as o:
        so = o.read()
    with open(err_path, "rb") as e:
        se = e.read()
    return Result(so, se, status, snapshot(cwd), rusage.ru_maxrss if rusage else 0, p.pid, hung)


def base_env():
    env = dict(os.environ)
    for k in list(env):
        if k.startswith("FLAMME_") or k in ("LD_PRELOAD", "OCAMLRUNPARAM"):
            del env[k]
    return env


def strip_agent_lines(err):
    return b"\n".join(l for l in err.split(b"\n") if not l.startswith(b"flamme: "))


class Ctx:
    def __init__(self, build, work, keep):
        self.build = os.path.abspath(build)
        self.flamme = os.path.join(self.build, "flamme")
        self.lib = os.path.join(self.build, "libflamme.so")
        self.work, self.keep = work, keep
        self.alone = {}  # (case name, cc) -> Result
        self.n = 0

    def exe(self, case, cc):
        return os.path.join(self.build, "torture", cc, case.name, case.name + ".exe")

    def fresh_dir(self, label):
        self.n += 1
        d = os.path.join(self.work, "%03d-%s" % (self.n, label))
        os.makedirs(os.path.join(d, "cwd"))
        os.makedirs(os.path.join(d, "prof"))
        return d

    def report(self, profile):
        p = subprocess.run([self.flamme, "report", profile], capture_output=True, text=True,
                           timeout=60)
        return p.returncode, p.stdout, p.stderr


def run_case(ctx, case, cfg):
    """Returns None (passed) or a failure message."""
    cc, engine, mode = cfg
    exe = ctx.exe(case, cc)
    if not os.access(exe, os.X_OK):
        return "program not built: %s (make torture-build)" % exe
    args = [a.replace("{build}", ctx.build) for a in case.args]
    env = base_env()
    env.update(case.env)
    key = (case.label, cc)
    if key not in ctx.alone:
        d = ctx.fresh_dir("%s-%s-alone" % (case.label, cc))
        ctx.alone[key] = run_prog(exe, args, env, os.path.join(d, "cwd"), case.timeout,
                                  case.kill_after, case.nofile)
        if ctx.alone[key].hung:
            return "the program alone did not end within %ds" % case.timeout
    a = ctx.alone[key]
    d = ctx.fresh_dir("%s-%s-%s-%s" % (case.label, cc, engine, mode))
    penv = dict(env)
    penv.update({"LD_PRELOAD": ctx.lib, "FLAMME_ENGINE": engine, "FLAMME_MODE": mode,
                 "FLAMME_HZ": HZ, "FLAMME_OUTPUT": os.path.join(d, "prof", "p.%p.flm")})
    b = run_prog(exe, args, penv, os.path.join(d, "cwd"), case.timeout, case.kill_after,
                 case.nofile)
    problems = []
    if b.hung:
        problems.append("hung (no end within %ds; alone: %s)" % (case.timeout, describe_status(a.status)))
    elif a.status != b.status:
        problems.append("ended with %s, alone with %s" % (describe_status(b.status),
                                                          describe_status(a.status)))
    if a.stdout != b.stdout:
        problems.append("stdout differs (%d bytes alone, %d profiled): %r" %
                        (len(a.stdout), len(b.stdout), b.stdout[-200:]))
    if strip_agent_lines(a.stderr) != strip_agent_lines(b.stderr):
        problems.append("stderr differs: alone %r, profiled %r" % (a.stderr[-200:], b.stderr[-200:]))
    if a.files != b.files:
        diff = sorted(set(a.files.items()) ^ set(b.files.items()))
        problems.append("files differ: %s" % diff[:6])
    if case.rss_slack_mb is not None and b.maxrss_kb - a.maxrss_kb > case.rss_slack_mb * 1024:
        problems.append("peak RSS %d MB profiled, %d MB alone (slack %d MB)" %
                        (b.maxrss_kb // 1024, a.maxrss_kb // 1024, case.rss_slack_mb))
    profile = os.path.join(d, "prof", "p.%d.flm" % b.pid)
    if case.profile and not b.hung:
        if not os.path.exists(profile):
            problems.append("no profile at %s" % profile)
        else:
            rc, rep, err = ctx.report(profile)
            m = re.search(r"status: (.*)", rep)
            status = m.group(1) if m else ""
            if rc != 0 or not m:
                problems.append("flamme report failed (%d): %s" % (rc, err.strip()[:200]))
            elif case.profile == "complete" and not status.startswith("complete"):
                problems.append("profile not complete: %s" % status)
            elif case.profile == "incomplete" and not status.startswith("incomplete"):
                problems.append("report does not say the profile is incomplete: %s" % status)
            elif case.ended and not re.search(case.ended, ended_line(rep)):
                problems.append("report says the run ended %r, expected /%s/" %
                                (ended_line(rep), case.ended))
            elif case.min_records and records(rep) < case.min_records:
                problems.append("%d sample records, expected at least %d" %
                                (records(rep), case.min_records))
            elif case.check:
                msg = case.check(ctx, profile, cfg)
                if msg:
                    problems.append(msg)
    if not problems and not ctx.keep:
        shutil.rmtree(d, ignore_errors=True)
    return "; ".join(problems) or None


def function_records(ctx, profile, name, least):
    """None if at least `least` samples have function `name` on their stack."""
    p = subprocess.run([ctx.flamme, "collapse", profile], capture_output=True, text=True,
                       timeout=60)
    n = sum(int(l.rsplit(" ", 1)[1]) for l in p.stdout.splitlines() if name in l)
    return None if n >= least else "%d samples in %s, expected at least %d" % (n, name, least)


def ended_line(report):
    m = re.search(r"^  ended: (.*)$", report, re.M)
    return m.group(1) if m else "(no ended: line)"


def records(report):
    m = re.search(r"samples: (\d+) records", report)
    return int(m.group(1)) if m else 0


def schedule(cases):
    """(case, config) pairs, round-robin: round r gives case i config (i + r)."""
    out = []
    for r in range(len(CONFIGS)):
        for i, c in enumerate(cases):
            cfg = CONFIGS[(i + r) % len(CONFIGS)]
            if c.configs is None or c.configs(cfg):
                out.append((c, cfg))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--budget", type=float, default=900, help="seconds (a pair started in time runs to its end)")
    ap.add_argument("--only", default="")
    ap.add_argument("--keep", action="store_true", help="keep the working directories of passing runs")
    ap.add_argument("--lib", help="the agent to preload (default BUILD/libflamme.so), e.g. an older build")
    o = ap.parse_args()
    cases = CASES
    if o.only:
        want = set(o.only.split(","))
        cases = [c for c in CASES if c.name in want or c.label in want]
        if not cases:
            print("torture: no case named %s" % o.only, file=sys.stderr)
            return 2
    work = tempfile.mkdtemp(prefix="flamme-torture-")
    ctx = Ctx(o.build, work, o.keep)
    if o.lib:
        ctx.lib = os.path.abspath(o.lib)
    pairs = schedule(cases)
    start = time.monotonic()
    passed = failed = 0
    for case, cfg in pairs:
        if time.monotonic() - start >= o.budget:
            break
        t0 = time.monotonic()
        try:
            msg = run_case(ctx, case, cfg)
        except Exception as e:  # a harness error is a failure of that pair, not the end of the run
            msg = "harness error: %r" % e
        label = "%-16s %-4s %-6s %-4s" % (case.label, *cfg)
        if msg:
            failed += 1
            print("FAIL %s %5.1fs  %s" % (label, time.monotonic() - t0, msg), flush=True)
        else:
            passed += 1
            print("ok   %s %5.1fs" % (label, time.monotonic() - t0), flush=True)
    print("torture: %d of %d (program, configuration) pairs in %.0fs" %
          (passed + failed, len(pairs), time.monotonic() - start))
    print("torture: %d passed, %d failed" % (passed, failed))
    if failed or o.keep:
        print("torture: working directories kept in %s" % work)
    else:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
