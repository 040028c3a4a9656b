#!/usr/bin/env python3
"""tests/live/attach.py — `flamme attach PID` (make live-test).

tests/live/phases_main.ml (a Hashtbl phase, then an Atomic phase, on the main
thread and a domain) runs with the agent dormant: preloaded with
FLAMME_AUTOSTART=0, and linked with the flamme library without calling
Flamme.start (phases_lib.exe SECS -); both 5.3.0 compilers. What a user
checks:

* nothing is written until `flamme attach PID --duration 1 -o FILE`; then a
  complete profile covering about that second, while the program was in its
  Hashtbl phase (5 s long: an attach on a loaded machine may take seconds to
  start), with stacks reaching main; the program's output is its own;
* attaching while another attach runs, to a process without the agent, and
  to a dead pid: one line each, exit status 2;
* another user cannot attach (the agent checks the peer's uid): one line,
  no profile.

Last line: "attach: N passed, N failed". Exit status 1 on any failure.
Usage: attach.py --build DIR
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run as live  # noqa: E402

check, flamme = live.check, live.flamme
HZ = 499


def attach(build, pid, *args, user=None):
    cmd = [os.path.join(build, "flamme"), "attach", str(pid)] + list(args)
    if user:
        cmd = ["setpriv", "--reuid=%d" % user, "--regid=%d" % user, "--clear-groups"] + cmd
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    return p.returncode, p.stderr


def one_attach(build, work, what, cmd, env):
    prog = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(0.6)
    out = os.path.join(work, what.replace(" ", "-") + ".flm")
    check(not [f for f in os.listdir(work) if f.endswith(".flm")],
          "%s: the dormant agent writes nothing before attach" % what, str(os.listdir(work)))
    t0 = time.monotonic()
    rc, err = attach(build, prog.pid, "--duration", "1", "-F", str(HZ), "-o", out)
    took = time.monotonic() - t0
    so, se = prog.communicate(timeout=60)
    check(rc == 0 and "attached to %d" % prog.pid in err and out in err,
          "%s: attach --duration 1 succeeds with one summary line" % what, err)
    check(prog.returncode == 0 and so.strip() in ("phases: done 0", "phases: done 1") and not se.strip(),
          "%s: the program's own output and status" % what, "%s %r %r" % (prog.returncode, so, se))
    if not os.path.exists(out):
        check(False, "%s: profile written" % what)
        return
    seg, hdr, samples = live.segment_facts(out)
    rc2, w, st, rep = live.report_weight(build, [out])
    check(st == "complete" and w and w > 20, "%s: a complete profile with samples" % what, rep[:500])
    times = [s[2] for s in samples]
    span = (max(times) - hdr["mono"]) / 1e9 if times else 0
    check(times and min(times) >= hdr["mono"] and 0.5 <= span <= took + 0.2,
          "%s: samples cover the attached second only" % what, "span %.2f s, attach took %.2f s" % (span, took))
    rc3, stacks, _ = live.collapse(build, [out])
    tot = sum(c for _, c in stacks)
    h = live.weight(stacks, "Phases.hash_phase")
    a = live.weight(stacks, "Phases.atomic_phase")
    reach = sum(c for f, c in stacks if "main" in f or "domain_thread_func" in f)
    check(h > 4 * max(a, 1) and reach >= 0.9 * tot,
          "%s: it shows the phase the program was in (Hashtbl), stacks reaching main" % what,
          "hash %d atomic %d, %d/%d reach a root" % (h, a, reach, tot))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    a = ap.parse_args()
    build = os.path.abspath(a.build)
    lib = os.path.join(build, "libflamme.so")
    work = tempfile.mkdtemp(prefix="flamme-attach-")
    os.chmod(work, 0o755)
    for comp in ("fp", "nofp"):
        d = os.path.join(work, comp)
        os.makedirs(d)
        env = live.clean_env({"LD_PRELOAD": lib, "FLAMME_AUTOSTART": "0"})
        one_attach(build, d, comp + " preloaded",
                   [os.path.join(build, "live", comp, "phases_main.exe"), "5"], env)
        d = os.path.join(work, comp + "-lib")
        os.makedirs(d)
        one_attach(build, d, comp + " linked library",
                   [os.path.join(build, "live", comp, "phases_lib.exe"), "5", "-", "0", "0"],
                   live.clean_env({}))
    exe = os.path.join(build, "live", "fp", "phases_main.exe")
    env = live.clean_env({"LD_PRELOAD": lib, "FLAMME_AUTOSTART": "0"})
    prog = subprocess.Popen([exe, "2"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    time.sleep(0.5)
    first = subprocess.Popen([os.path.join(build, "flamme"), "attach", str(prog.pid), "--duration",
                              "1.5", "-o", os.path.join(work, "first.flm")],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(0.5)
    rc, err = attach(build, prog.pid, "--duration", "0.2", "-o", os.path.join(work, "second.flm"))
    check(rc == 2 and len(err.strip().splitlines()) == 1 and "already attached" in err,
          "attaching twice: one line, exit 2", "%d %r" % (rc, err))
    _, ferr = first.communicate(timeout=60)
    check(first.returncode == 0 and os.path.exists(os.path.join(work, "first.flm")),
          "the first attach is not disturbed by the second", ferr)
    prog.communicate(timeout=60)
    rc, err = attach(build, prog.pid)
    check(rc == 2 and len(err.strip().splitlines()) == 1 and "no such process" in err,
          "a dead pid: one line, exit 2", "%d %r" % (rc, err))
    sl = subprocess.Popen(["sleep", "5"])
    rc, err = attach(build, sl.pid)
    sl.kill()
    sl.wait()
    check(rc == 2 and len(err.strip().splitlines()) == 1 and "no dormant flamme agent" in err,
          "a process without the agent: one line, exit 2", "%d %r" % (rc, err))
    # Another user: the program runs as nobody, the attacher as uid 65533.
    odir = os.path.join(work, "other")
    os.makedirs(odir)
    os.chmod(odir, 0o777)
    env = live.clean_env({"LD_PRELOAD": lib, "FLAMME_AUTOSTART": "0"})
    prog = subprocess.Popen(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", exe, "2"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    time.sleep(0.6)
    rc, err = attach(build, prog.pid, "--duration", "0.3", "-o", os.path.join(odir, "x.flm"), user=65533)
    check(rc == 2 and len(err.strip().splitlines()) == 1 and "not allowed" in err and
          not os.path.exists(os.path.join(odir, "x.flm")),
          "another user: one line, exit 2, nothing written", "%d %r" % (rc, err))
    rc, err = attach(build, prog.pid, "--duration", "0.3", "-o", os.path.join(odir, "root.flm"))
    check(rc == 0 and os.path.exists(os.path.join(odir, "root.flm")), "root may attach", err)
    prog.communicate(timeout=60)
    shutil.rmtree(work, ignore_errors=True)
    print("attach: %d passed, %d failed" % (live.passed, live.failed))
    sys.exit(1 if live.failed else 0)


if __name__ == "__main__":
    main()
