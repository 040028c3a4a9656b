"""tests/torture/test_torture.py — the profiled program is never harmed, its
profile never silently lost (part of make test with the CI budget; make
torture with a long one).

Owns: the torture checks. Each program tests/torture/<name>.ml (sleeps,
cancel and seccomp: tests/signal's) is built with every compiler make deps
provides, with its <name>_stubs.c when it exists and the libraries named on its `torture-libs:` line (unix, threads,
flamme = the OCaml library of the same compiler); make builds
tests/torture/lib*.c into build/torture/lib*.so (TEST_DEPS).

Each case runs a program ALONE (no agent) and then PROFILED (LD_PRELOAD of
libflamme.so) under one configuration: compiler x engine and mode (perf,
timer, itimer in CPU mode; timer in wall mode). Both runs happen in a fresh
working directory; what the program did must be the same: its stdout, its
stderr (minus the agent's own `flamme:` lines), the files it left in its
directory (names and contents) and how it ended (exit status or signal). A
run that does not end within the case's timeout is a hang. Then the profile
of the profiled process is read with `flamme report`: it must be complete
(or, for a case that cannot complete one, such as SIGKILL, the report must
say it is incomplete), and the case's own check runs on it.

Cases are (program, configuration) pairs, one pytest test each, taken
round-robin so that a short budget still covers every program, each under a
different configuration; a longer budget covers the whole matrix. The budget
(seconds of running programs, builds not counted; TORTURE_BUDGET in the
environment, default 150, what CI runs) is shared by the session's pairs:
a pair that would start after it is spent is skipped. The reference (alone)
result of a program is computed once per compiler. TORTURE_LIB=SO preloads
another build of the agent (e.g. to see a case fail before its fix);
TORTURE_KEEP=1 keeps the working directories of passing pairs.

Adding a case: tests/torture/<name>.ml (+ <name>_stubs.c, `torture-libs:`
line for unix/threads/flamme), then an entry in CASES below.
"""
import hashlib
import os
import re
import resource
import shutil
import signal
import subprocess
import time

import pytest

import flammetest
from conftest import compilers

HERE = os.path.dirname(os.path.abspath(__file__))
BUDGET = float(os.environ.get("TORTURE_BUDGET", "150"))  # TORTURE_CI_BUDGET of mk/torture.mk
ENGINES = (("perf", "cpu"), ("timer", "cpu"), ("itimer", "cpu"), ("timer", "wall"))
HZ = "499"


class Case:
    """One program and what is expected of it.
    args: argv after the program ({build} = the build directory, absolute);
    env: extra environment for both runs; timeout: seconds per run;
    profile: "complete" (default), "incomplete" (the report must say so),
    or None (no profile expected); kill_after: SIGKILL the program after so
    many seconds (both runs); rss_slack_mb: the profiled run's peak RSS may
    exceed the alone run's by at most this much; check(build, profile, cfg):
    returns None or a failure message; ended: a regular expression the
    report's `ended:` line (how the run ended) must match; min_records: the
    profile must hold at least this many sample records; label: shown
    instead of the name (several cases of one program); nofile: the
    descriptor limit (RLIMIT_NOFILE) of both runs; configs(cfg): whether
    the case runs under cfg = (compiler, engine, mode)."""

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
    Case("exec_fail", ended=r"^exec", check=lambda build, prof, cfg: function_records(
        build, prof, "after_failed_exec", 20)),
    Case("fork_lock", timeout=90),
    Case("closefds", ended=r"^exit\(0\)$", min_records=20),
    # Wall mode at 499 Hz on 300 threads takes ~30 s on a loaded 2-core machine.
    Case("threads_fds", nofile=256, configs=lambda cfg: cfg[2] == "cpu"),
    Case("main_pthread_exit", ended=r"main thread called pthread_exit", min_records=20),
    # The linked agent writes a profile in the run alone too: put it beside.
    Case("threads_idle", env={"FLAMME_AUTOSTART": "0", "FLAMME_OUTPUT": "../prof/p.%p.flm"},
         ended=r"profiling stopped", check=lambda build, prof, cfg: function_records(
             build, prof, "busy_in_new_thread", 20)),
    # The program owns SIGPROF and ITIMER_PROF (it prints whether its own
    # ticks matched its CPU time); flamme samples it too, except with the
    # itimer engine, which the program's own ITIMER_PROF replaces.
    Case("own_sigprof", check=lambda build, prof, cfg: None if cfg[1] == "itimer" else
         function_records(build, prof, "Own_sigprof.burn", 20)),
    # Blocking calls of C code that does not retry on EINTR (tests/signal).
    Case("sleeps", args=["usleep", "pause", "sigsuspend", "sigtimedwait", "epoll_pwait2",
                         "rcvtimeo_read", "rcvtimeo_recv", "rcvtimeo_late", "rcvtimeo_dup",
                         "rcvtimeo_accept", "sndtimeo_write", "sndtimeo_send"]),
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


# Programs of another group, run here too: where their sources are.
SIGNAL = os.path.join(HERE, "..", "signal")
SOURCE_DIR = {"sleeps": SIGNAL, "cancel": SIGNAL, "seccomp": SIGNAL}


def torture_libs(name):
    """The words of the program's `torture-libs:` line."""
    src = os.path.join(SOURCE_DIR.get(name, HERE), name + ".ml")
    m = re.search(r"torture-libs:([a-z ]*)", open(src).read())
    return m.group(1).split() if m else []


_exes = {}


def build_program(build, compiler, name):
    """tests/torture/NAME.ml built with COMPILER (cached per session)."""
    key = (compiler.name, name)
    if key not in _exes:
        d = SOURCE_DIR.get(name, HERE)
        stubs = os.path.join(d, name + "_stubs.c")
        sources = ([stubs] if os.path.exists(stubs) else []) + [os.path.join(d, name + ".ml")]
        words = torture_libs(name)
        flags, deps = ["-g"], ()
        if "flamme" in words:
            _, largs, deps = flammetest.flamme_library(build, compiler)
            flags += largs
        _exes[key] = flammetest.builder(build, compiler)(
            "torture/" + name, sources, libs=[w for w in words if w != "flamme"], flags=flags, deps=deps)
    return _exes[key]


def schedule(cases, configs):
    """(case, config) pairs, round-robin: round r gives case i config (i + r)."""
    out = []
    for r in range(len(configs)):
        for i, c in enumerate(cases):
            cfg = configs[(i + r) % len(configs)]
            if c.configs is None or c.configs(cfg):
                out.append((c, cfg))
    return out


def pytest_generate_tests(metafunc):
    if "pair" in metafunc.fixturenames:
        configs = [(c, eng, mode) for c in compilers(metafunc.config) for eng, mode in ENGINES]
        pairs = schedule(CASES, configs)
        metafunc.parametrize("pair", pairs, ids=["%s-%s-%s-%s" % (c.label, cfg[0].name, cfg[1], cfg[2])
                                                 for c, cfg in pairs])


class Budget:
    """Seconds of torture runs spent in this session."""
    spent = 0.0


_alone = {}  # (case label, compiler name) -> Result


def report(build, profile):
    p = subprocess.run([build.flamme, "report", profile], capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout, p.stderr


def function_records(build, profile, name, least):
    """None if at least `least` samples have function `name` on their stack."""
    n = flammetest.total(flammetest.collapse(build, profile), lambda f: any(name in x for x in f))
    return None if n >= least else "%d samples in %s, expected at least %d" % (n, name, least)


def ended_line(rep):
    m = re.search(r"^  ended: (.*)$", rep, re.M)
    return m.group(1) if m else "(no ended: line)"


def records(rep):
    m = re.search(r"samples: (\d+) records", rep)
    return int(m.group(1)) if m else 0


def fresh_dir(tmp):
    for sub in ("cwd", "prof"):
        os.makedirs(os.path.join(tmp, sub))
    return tmp


@pytest.mark.slow
def test_torture(build, pair, check, tmp_path, tmp_path_factory):
    case, (compiler, engine, mode) = pair
    if Budget.spent >= BUDGET:
        pytest.skip("torture budget of %gs spent (TORTURE_BUDGET)" % BUDGET)
    exe = build_program(build, compiler, case.name)
    lib = os.path.abspath(os.environ.get("TORTURE_LIB") or build.lib)
    t0 = time.monotonic()
    try:
        run_pair(build, lib, exe, case, compiler, engine, mode, check, str(tmp_path), tmp_path_factory)
    finally:
        Budget.spent += time.monotonic() - t0
    if not check.failures and not os.environ.get("TORTURE_KEEP"):
        shutil.rmtree(str(tmp_path), ignore_errors=True)


def run_pair(build, lib, exe, case, compiler, engine, mode, check, tmp, tmp_path_factory):
    what = "%s %s %s %s" % (case.label, compiler.name, engine, mode)
    args = [a.replace("{build}", build.dir) for a in case.args]
    env = base_env()
    env.update(case.env)
    key = (case.label, compiler.name)
    if key not in _alone:
        d = fresh_dir(str(tmp_path_factory.mktemp("%s-%s-alone" % (case.label, compiler.name))))
        _alone[key] = run_prog(exe, args, env, os.path.join(d, "cwd"), case.timeout,
                               case.kill_after, case.nofile)
    a = _alone[key]
    assert not a.hung, "%s: the program alone did not end within %ds" % (what, case.timeout)
    d = fresh_dir(tmp)
    penv = dict(env)
    penv.update({"LD_PRELOAD": lib, "FLAMME_ENGINE": engine, "FLAMME_MODE": mode,
                 "FLAMME_HZ": HZ, "FLAMME_OUTPUT": os.path.join(d, "prof", "p.%p.flm")})
    b = run_prog(exe, args, penv, os.path.join(d, "cwd"), case.timeout, case.kill_after, case.nofile)
    if not check(not b.hung, "%s: ends (within %ds)" % (what, case.timeout),
                 "hung; alone: %s" % describe_status(a.status)):
        return
    check(a.status == b.status, "%s: ends as it does alone" % what,
          "%s, alone %s" % (describe_status(b.status), describe_status(a.status)))
    check(a.stdout == b.stdout, "%s: the same stdout" % what,
          "%d bytes alone, %d profiled: %r" % (len(a.stdout), len(b.stdout), b.stdout[-200:]))
    check(strip_agent_lines(a.stderr) == strip_agent_lines(b.stderr), "%s: the same stderr" % what,
          "alone %r, profiled %r" % (a.stderr[-200:], b.stderr[-200:]))
    check(a.files == b.files, "%s: the same files" % what,
          sorted(set(a.files.items()) ^ set(b.files.items()))[:6])
    if case.rss_slack_mb is not None:
        check(b.maxrss_kb - a.maxrss_kb <= case.rss_slack_mb * 1024,
              "%s: peak RSS within %d MB of the run alone" % (what, case.rss_slack_mb),
              "%d MB profiled, %d MB alone" % (b.maxrss_kb // 1024, a.maxrss_kb // 1024))
    if not case.profile:
        return
    profile = os.path.join(d, "prof", "p.%d.flm" % b.pid)
    if not check(os.path.exists(profile), "%s: a profile" % what, "none at %s" % profile):
        return
    rc, rep, err = report(build, profile)
    m = re.search(r"status: (.*)", rep)
    if not check(rc == 0 and m, "%s: flamme report reads it" % what, "rc %d: %s" % (rc, err.strip()[:200])):
        return
    status = m.group(1)
    if case.profile == "complete":
        check(status.startswith("complete"), "%s: the profile is complete" % what, status)
    else:
        check(status.startswith("incomplete"), "%s: the report says the profile is incomplete" % what, status)
    if case.ended:
        check(re.search(case.ended, ended_line(rep)), "%s: the report says how the run ended (/%s/)"
              % (what, case.ended), ended_line(rep))
    if case.min_records:
        check(records(rep) >= case.min_records, "%s: >= %d sample records" % (what, case.min_records),
              records(rep))
    if case.check:
        msg = case.check(build, profile, (compiler, engine, mode))
        check(msg is None, "%s: the case's own check" % what, msg or "")
