"""tests/live/test_attach.py — `flamme attach PID` (make live-test, part of make test).

tests/live/phases_main.ml (a Hashtbl phase, then an Atomic phase, on the main
thread and a domain) runs with the agent dormant: preloaded with
FLAMME_AUTOSTART=0, and linked with the flamme library without calling
Flamme.start (phases_lib.exe SECS -); every compiler. What a user checks:

* nothing is written until `flamme attach PID --duration 1 -o FILE`; then a
  complete profile covering about that second, while the program was in its
  Hashtbl phase (5 s long: an attach on a loaded machine may take seconds to
  start), with stacks reaching main; the program's output is its own;
* attaching while another attach runs, to a process without the agent, and
  to a dead pid: one line each, exit status 2 (default compiler);
* another user cannot attach (the agent checks the peer's uid): one line,
  no profile.
"""
import os
import shutil
import subprocess
import tempfile
import time

import pytest

import flammetest
from livelib import HZ, collapse, phases_lib, phases_main, report_weight, segment_facts, weight


def attach(build, pid, *args, user=None):
    """`flamme attach PID ARGS` (as uid USER): (exit status, stderr)."""
    cmd = [build.flamme, "attach", str(pid), *args]
    if user:
        cmd = ["setpriv", "--reuid=%d" % user, "--regid=%d" % user, "--clear-groups"] + cmd
    p = flammetest.run(cmd, timeout=60)
    return p.returncode, p.stderr


def dormant_env(build):
    return flammetest.clean_env({"LD_PRELOAD": build.lib, "FLAMME_AUTOSTART": "0"})


@pytest.mark.slow
@pytest.mark.parametrize("how", ["preloaded", "linked library"])
def test_attach(build, ocaml, compiler, how, check, tmp_path):
    if how == "preloaded":
        cmd, env = [phases_main(ocaml), "5"], dormant_env(build)
    else:
        cmd, env = [phases_lib(build, compiler), "5", "-", "0", "0"], flammetest.clean_env()
    work = str(tmp_path)
    prog = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(0.6)
    out = os.path.join(work, "attached.flm")
    check(not [f for f in os.listdir(work) if f.endswith(".flm")],
          "the dormant agent writes nothing before attach", str(os.listdir(work)))
    t0 = time.monotonic()
    rc, err = attach(build, prog.pid, "--duration", "1", "-F", str(HZ), "-o", out)
    took = time.monotonic() - t0
    so, se = prog.communicate(timeout=60)
    check(rc == 0 and "attached to %d" % prog.pid in err and out in err,
          "attach --duration 1 succeeds with one summary line", err)
    check(prog.returncode == 0 and so.strip() in ("phases: done 0", "phases: done 1") and not se.strip(),
          "the program's own output and status", "%s %r %r" % (prog.returncode, so, se))
    assert os.path.exists(out), "no profile written"
    seg, hdr, samples = segment_facts(out)
    rc2, w, st, rep = report_weight(build, [out])
    check(st == "complete" and w and w > 20, "a complete profile with samples", rep[:500])
    times = [s[2] for s in samples]
    span = (max(times) - hdr["mono"]) / 1e9 if times else 0
    check(times and min(times) >= hdr["mono"] and 0.5 <= span <= took + 0.2,
          "samples cover the attached second only", "span %.2f s, attach took %.2f s" % (span, took))
    rc3, stacks, _ = collapse(build, [out])
    tot = flammetest.total(stacks)
    h = weight(stacks, "Phases.hash_phase")
    a = weight(stacks, "Phases.atomic_phase")
    reach = sum(c for f, c in stacks if "main" in f or "domain_thread_func" in f)
    check(h > 4 * max(a, 1) and reach >= 0.9 * tot,
          "it shows the phase the program was in (Hashtbl), stacks reaching main",
          "hash %d atomic %d, %d/%d reach a root" % (h, a, reach, tot))


def test_attach_refused(build, ocaml_default, check, tmp_path):
    """Attaching twice, to a dead pid, to a process without the agent."""
    exe = phases_main(ocaml_default)
    prog = subprocess.Popen([exe, "2"], env=dormant_env(build), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    time.sleep(0.5)
    first_out = str(tmp_path / "first.flm")
    first = subprocess.Popen([build.flamme, "attach", str(prog.pid), "--duration", "1.5", "-o", first_out],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(0.5)
    rc, err = attach(build, prog.pid, "--duration", "0.2", "-o", str(tmp_path / "second.flm"))
    check(rc == 2 and len(err.strip().splitlines()) == 1 and "already attached" in err,
          "attaching twice: one line, exit 2", "%d %r" % (rc, err))
    _, ferr = first.communicate(timeout=60)
    check(first.returncode == 0 and os.path.exists(first_out),
          "the first attach is not disturbed by the second", ferr)
    prog.communicate(timeout=60)
    rc, err = attach(build, prog.pid)
    check(rc == 2 and len(err.strip().splitlines()) == 1 and "no such process" in err,
          "a dead pid: one line, exit 2", "%d %r" % (rc, err))
    sl = subprocess.Popen(["sleep", "5"])
    try:
        rc, err = attach(build, sl.pid)
    finally:
        sl.kill()
        sl.wait()
    check(rc == 2 and len(err.strip().splitlines()) == 1 and "no dormant flamme agent" in err,
          "a process without the agent: one line, exit 2", "%d %r" % (rc, err))


def test_attach_other_user(build, ocaml_default, check):
    """The program runs as nobody, the attacher as uid 65533: refused;
    root may attach."""
    exe = phases_main(ocaml_default)
    work = tempfile.mkdtemp(prefix="flamme-attach-")  # pytest's tmp_path is private to root
    os.chmod(work, 0o777)
    prog = subprocess.Popen(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", exe, "2"],
                            env=dormant_env(build), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        time.sleep(0.6)
        x = os.path.join(work, "x.flm")
        rc, err = attach(build, prog.pid, "--duration", "0.3", "-o", x, user=65533)
        check(rc == 2 and len(err.strip().splitlines()) == 1 and "not allowed" in err and
              not os.path.exists(x), "another user: one line, exit 2, nothing written", "%d %r" % (rc, err))
        r = os.path.join(work, "root.flm")
        rc, err = attach(build, prog.pid, "--duration", "0.3", "-o", r)
        check(rc == 0 and os.path.exists(r), "root may attach", err)
    finally:
        prog.communicate(timeout=60)
        shutil.rmtree(work, ignore_errors=True)
