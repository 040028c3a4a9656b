#!/usr/bin/env python3
"""tests/top/run.py — `flamme top` (make top-test).

tests/top/phases.ml runs Phases.phase_a for SECS seconds on the main
thread, then Phases.phase_b for SECS more in a second domain, prints its
phase changes and exits 3. Built
with both 5.3.0 compilers (fp, nofp). What a user checks:

* the live view, in a terminal (tmux, driven with send-keys and read with
  capture-pane): phase_a is the top function by self time while it runs,
  phase_b after it; key 2 sorts by total (the order changes: frames every
  stack has come first, phase_b below them) and 1 back by self; t shows
  one thread (main, waiting for the domain that runs phase_b: no phase_b),
  t again the next ones up to domain 1 (phase_b on top), a all of them, w
  another window; q closes the view and the
  terminal is as before (normal screen, cursor shown, the same stty
  settings), and the shell gets the program's exit status; Ctrl-C ends the
  program as without flamme (status 130) and restores the terminal too;
* stdout not a terminal: one plain table per second naming the same
  functions in the same order of phases, the program's own output and
  status kept; `flamme top FILE` follows a profile being written until it
  is complete, or until no process holds it (its program killed); `--once --window all` on a finished profile has the top
  functions of `flamme report`, with the same shares;
* bad input (missing file, not a profile, unknown option, bad --sort):
  one line on stderr, exit status 2.

No timing is asserted: the view is polled until what is checked appears,
with generous limits. Last line: "top: N passed, N failed". Exit status 1
on any failure.
Usage: run.py --build DIR
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

SECS = 3  # per phase
passed = failed = 0


def check(cond, what, detail=""):
    global passed, failed
    if cond:
        passed += 1
        print("ok " + what)
    else:
        failed += 1
        print("FAIL " + what + (": " + detail if detail else ""))
    return cond


def clean_env(extra=None):
    e = {k: v for k, v in os.environ.items() if not k.startswith("FLAMME_") and k != "LD_PRELOAD"}
    e.update(extra or {})
    return e


ROW = re.compile(r"^\s+(\d+\.\d)%\s+(\d+\.\d)%\s+(\d+\.\d+)\s+(\d+\.\d+)\s+(\S.*?)\s*$")


def parse_table(lines):
    """The header facts and rows [(self%, total%, name)] of one view."""
    head = lines[0] if lines else ""
    facts = lines[1] if len(lines) > 1 else ""
    rows = []
    for ln in lines:
        m = ROW.match(ln)
        if m:
            rows.append((float(m.group(1)), float(m.group(2)), m.group(5)))
    return head, facts, rows


def split_tables(text):
    """Plain-mode output: one list of lines per table (the program's own
    lines between tables are left out)."""
    tables, cur = [], None
    for ln in text.splitlines():
        if ln.startswith("flamme top: "):
            cur = [ln]
            tables.append(cur)
        elif cur is not None and ln.startswith("  "):
            cur.append(ln)
    return tables


def phases_seen(tables):
    """The sequence of top-by-self functions, consecutive repeats merged."""
    seq = []
    for t in tables:
        _, facts, rows = parse_table(t)
        if "sort self" in facts and rows:
            name = rows[0][2]
            if not seq or seq[-1] != name:
                seq.append(name)
    return seq


def in_order(seq, a, b):
    """a was on top, then b, and a never again after b."""
    if a not in seq or b not in seq[seq.index(a):]:
        return False
    j = seq.index(b, seq.index(a))
    return a not in seq[j:]


class Tmux:
    def __init__(self, sock, cwd):
        self.base = ["tmux", "-L", sock, "-f", "/dev/null"]
        self.env = clean_env({"TERM": "xterm-256color"})
        subprocess.run(self.base + ["new-session", "-d", "-s", "t", "-x", "120", "-y", "40", "-c", cwd,
                                    "sh"], env=self.env, check=True)
        self.run("set-option", "-g", "status", "off")

    def run(self, *args):
        return subprocess.run(self.base + list(args), env=self.env, capture_output=True, text=True).stdout

    def keys(self, *k):
        self.run("send-keys", "-t", "t", *k)

    def pane(self):
        return self.run("capture-pane", "-p", "-t", "t").splitlines()

    def fmt(self, f):
        return self.run("display-message", "-p", "-t", "t", f).strip()

    def wait(self, pred, limit=20.0):
        """The first pane for which pred holds, or None after limit seconds."""
        end = time.monotonic() + limit
        while time.monotonic() < end:
            p = self.pane()
            if pred(p):
                return p
            time.sleep(0.2)
        return None

    def kill(self):
        subprocess.run(self.base + ["kill-server"], env=self.env, capture_output=True)


def view(p):
    """Lines of the view on pane p (empty when it is not shown)."""
    for i, ln in enumerate(p):
        if ln.startswith("flamme top: ") and i + 1 < len(p) and re.match(r"^  (\d+\.\d s|waiting)", p[i + 1]):
            return p[i:]
    return []


def top_self(p):
    _, facts, rows = parse_table(view(p))
    return rows[0][2] if "sort self" in facts and rows else None


def thread_shown(p):
    """The thread (or "all threads") the view on pane p shows."""
    v = view(p)
    m = re.match(r"^  \d+\.\d s  (?:last \S+ s|since start)  (.*?)  sort (?:self|total)", v[1]) if len(v) > 1 else None
    return m.group(1) if m else None


def test_tty(flamme, exe, work, comp):
    what = comp + " tty"
    t = Tmux("flamme-top-%d-%s" % (os.getpid(), comp), work)
    try:
        t.keys("stty -g > stty.before; echo BEFORE-TOP; %s top --window 1 -- %s %d; echo TOP-RC=$?; "
               "stty -g > stty.after" % (flamme, exe, SECS), "Enter")
        seq = []

        def watch(p):
            n = top_self(p)
            if n and (not seq or seq[-1] != n):
                seq.append(n)
            return n == "Phases.phase_b"
        p = t.wait(watch, 30)
        check(p is not None and "Phases.phase_a" in seq and t.fmt("#{alternate_on}") == "1",
              "%s: phase_a, then phase_b, is the top function by self time (alternate screen)" % what,
              "tops seen %s" % seq)
        if p is None:
            return
        # Sort by total: frames in every stack first, phase_b below them.
        t.keys("2")
        p = t.wait(lambda p: "sort total" in "".join(view(p)[:3]) and parse_table(view(p))[2], 10)
        rows = parse_table(view(p))[2] if p else []
        names = [r[2] for r in rows]
        ok = rows and rows[0][2] != "Phases.phase_b" and "Phases.phase_b" in names and \
            all(rows[i][1] >= rows[i + 1][1] for i in range(len(rows) - 1)) and \
            rows[0][1] >= rows[names.index("Phases.phase_b")][1]
        check(ok, "%s: key 2 sorts by total (another first row, phase_b lower, %%total descending)" % what,
              "\n".join(view(p) if p else []))
        t.keys("1")
        p = t.wait(lambda p: top_self(p) is not None, 10)
        check(p is not None and top_self(p) == "Phases.phase_b", "%s: key 1 sorts by self again" % what,
              "\n".join(view(p) if p else []))
        # One thread at a time: main waits in Domain.join while domain 1
        # runs phase_b.
        t.keys("t")
        p = t.wait(lambda p: thread_shown(p) == "main", 10)
        names = [r[2] for r in parse_table(view(p))[2]] if p else []
        check(p is not None and "Phases.phase_b" not in names,
              "%s: key t shows one thread: main, without phase_b" % what,
              "\n".join(view(p) if p else t.pane()[:3]))
        shown = "main"
        for _ in range(8):
            if shown == "domain 1":
                break
            t.keys("t")
            p = t.wait(lambda p, was=shown: thread_shown(p) not in (None, was), 10)
            shown = thread_shown(p) if p else None
        check(p is not None and shown == "domain 1" and top_self(p) == "Phases.phase_b",
              "%s: key t steps on to domain 1, where phase_b is on top" % what,
              "\n".join(view(p) if p else t.pane()[:3]))
        t.keys("a", "w")
        p = t.wait(lambda p: len(view(p)) > 1 and "last 5 s  all threads" in view(p)[1], 10)
        check(p is not None, "%s: keys a and w: all threads, a 5 s window" % what, "\n".join(t.pane()[:3]))
        t.keys("q")
        p = t.wait(lambda p: any(ln.startswith("TOP-RC=") for ln in p), 30)
        alt, cursor = t.fmt("#{alternate_on}"), t.fmt("#{cursor_flag}")
        time.sleep(0.3)
        before = open(os.path.join(work, "stty.before")).read() if os.path.exists(
            os.path.join(work, "stty.before")) else "?"
        after = open(os.path.join(work, "stty.after")).read() if os.path.exists(
            os.path.join(work, "stty.after")) else "!"
        check(p is not None and "TOP-RC=3" in p and "BEFORE-TOP" in p and not view(p) and alt == "0" and
              cursor == "1" and before == after,
              "%s: q quits; the terminal is restored (screen, cursor, stty) and the status is the program's"
              % what, "alt %s cursor %s stty %s/%s pane:\n%s" % (alt, cursor, before.strip(), after.strip(),
                                                               "\n".join(p or t.pane())))
    finally:
        t.kill()


def test_ctrl_c(flamme, exe, work):
    """Ctrl-C in the view: the program gets SIGINT from the terminal as
    without flamme (its status: 130), the terminal is restored."""
    t = Tmux("flamme-top-%d-c" % os.getpid(), work)
    try:
        t.keys("stty -g > c.before; %s top -- %s 30; echo TOP-RC=$?; stty -g > c.after" % (flamme, exe), "Enter")
        p = t.wait(lambda p: top_self(p) is not None, 30)
        t.keys("C-c")
        q = t.wait(lambda p: any(ln.startswith("TOP-RC=") for ln in p), 30)
        time.sleep(0.3)
        same = [open(os.path.join(work, f)).read() if os.path.exists(os.path.join(work, f)) else f
                for f in ("c.before", "c.after")]
        check(p is not None and q is not None and "TOP-RC=130" in q and not view(q) and
              t.fmt("#{alternate_on}") == "0" and t.fmt("#{cursor_flag}") == "1" and same[0] == same[1],
              "Ctrl-C: the program ends of SIGINT (status 130), the terminal is restored",
              "\n".join(q or t.pane()))
    finally:
        t.kill()


def test_plain(flamme, exe, comp):
    what = comp + " plain"
    p = subprocess.run([flamme, "top", "--window", "1", "--", exe, str(SECS)], capture_output=True, text=True,
                       env=clean_env(), timeout=120)
    tables = split_tables(p.stdout)
    seq = phases_seen(tables)
    check(in_order(seq, "Phases.phase_a", "Phases.phase_b"),
          "%s: one table a second, phase_a then phase_b on top" % what, "tops %s\n%s" % (seq, p.stdout[-3000:]))
    own = [ln for ln in p.stdout.splitlines() if ln.startswith("phases:")]
    check(p.returncode == 3 and tables and "program exited 3" in tables[-1][0] and
          own[:2] == ["phases: a", "phases: b"] and len(own) == 3 and own[2] in ("phases: done 0", "phases: done 1"),
          "%s: the program's own output and exit status (3); the last table says it exited" % what,
          "rc %d stderr %r" % (p.returncode, p.stderr))


def test_file(flamme, exe, work, comp):
    what = comp + " FILE"
    out = os.path.join(work, comp + "-follow.flm")
    rec = subprocess.Popen([flamme, "record", "-o", out, "--", exe, str(SECS)], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, env=clean_env())
    end = time.monotonic() + 30
    while not os.path.exists(out) and time.monotonic() < end and rec.poll() is None:
        time.sleep(0.05)
    p = subprocess.run([flamme, "top", "--window", "1", out], capture_output=True, text=True, timeout=120)
    rec.wait(timeout=60)
    tables = split_tables(p.stdout)
    seq = phases_seen(tables)
    check(p.returncode == 0 and in_order(seq, "Phases.phase_a", "Phases.phase_b") and tables and
          "profile complete" in tables[-1][0],
          "%s: follows a profile being written until it is complete, phase_a then phase_b" % what,
          "rc %d tops %s stderr %r" % (p.returncode, seq, p.stderr))
    # A finished profile, whole run: the same figures as flamme report.
    once = subprocess.run([flamme, "top", "--once", "--window", "all", out], capture_output=True, text=True)
    rep = subprocess.run([flamme, "report", out], capture_output=True, text=True)
    rows = parse_table(split_tables(once.stdout)[0])[2] if split_tables(once.stdout) else []
    rrows = []
    sect = False
    for ln in rep.stdout.splitlines():
        if ln.startswith("top functions by self time"):
            sect = True
        elif sect and not ln.startswith("  "):
            break
        elif sect:
            m = re.match(r"^\s+(\d+\.\d)%\s+(\d+\.\d)%\s+\d+\s+(\S.*?)\s*$", ln)
            if m:
                rrows.append((float(m.group(1)), float(m.group(2)), m.group(3)))
    k = min(5, len(rows), len(rrows))
    check(once.returncode == 0 and k >= 2 and rows[:k] == rrows[:k] and
          {r[2] for r in rows[:2]} == {"Phases.phase_a", "Phases.phase_b"},
          "%s: --once --window all gives report's top functions by self (phase_a, phase_b first)" % what,
          "top %s\nreport %s" % (rows[:k], rrows[:k]))


def test_killed(flamme, build, exe, work):
    """A profile whose program dies of SIGKILL never gets its end record: the
    plain view of it ends once no process holds the file, and says so."""
    out = os.path.join(work, "killed.flm")
    prog = subprocess.Popen([exe, "30"], stdout=subprocess.DEVNULL, env=clean_env(
        {"LD_PRELOAD": os.path.join(build, "libflamme.so"), "FLAMME_OUTPUT": out, "FLAMME_QUIET": "1"}))
    end = time.monotonic() + 30
    while not os.path.exists(out) and time.monotonic() < end:
        time.sleep(0.05)
    top = subprocess.Popen([flamme, "top", "--window", "all", out], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)
    time.sleep(2)
    prog.kill()
    prog.wait()
    try:
        so, se = top.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        top.kill()
        so, se = top.communicate()
    tables = split_tables(so)
    last = parse_table(tables[-1]) if tables else ("", "", [])
    check(top.returncode == 0 and "no process writes it" in last[0] and last[2] and
          last[2][0][2] == "Phases.phase_a",
          "killed program: the view of its profile ends, says no process writes it, shows phase_a",
          "rc %s stderr %r last %r" % (top.returncode, se, last))


def test_bad(flamme, work):
    notprof = os.path.join(work, "notes.txt")
    with open(notprof, "w") as f:
        f.write("hello\n")
    cases = [
        ("missing file", [os.path.join(work, "nope.flm")], "nope.flm"),
        ("not a profile", [notprof], "not a flamme profile"),
        ("unknown option", ["--bogus", notprof], "--bogus"),
        ("bad --sort", ["--sort", "cpu", notprof], "--sort"),
        ("bad --window", ["--window", "x", notprof], "--window"),
        ("nothing to watch", [], "no FILE"),
    ]
    for name, args, needle in cases:
        p = subprocess.run([flamme, "top"] + args, capture_output=True, text=True, timeout=30)
        lines = p.stderr.splitlines()
        check(p.returncode == 2 and len(lines) == 1 and needle in lines[0] and not p.stdout,
              "bad input (%s): one line, exit status 2" % name, "rc %d stderr %r" % (p.returncode, p.stderr))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    a = ap.parse_args()
    build = os.path.abspath(a.build)
    flamme = os.path.join(build, "flamme")
    if not shutil.which("tmux"):
        print("FAIL tmux not found: run 'make deps' (Debian package tmux)")
        print("top: 0 passed, 1 failed")
        return 1
    work = tempfile.mkdtemp(prefix="flamme-top-")
    try:
        test_bad(flamme, work)
        test_killed(flamme, build, os.path.join(build, "top", "fp", "phases.exe"), work)
        test_ctrl_c(flamme, os.path.join(build, "top", "nofp", "phases.exe"), work)
        for comp in ("fp", "nofp"):
            exe = os.path.join(build, "top", comp, "phases.exe")
            d = os.path.join(work, comp)
            os.makedirs(d)
            test_tty(flamme, exe, d, comp)
            test_plain(flamme, exe, comp)
            test_file(flamme, exe, work, comp)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("top: %d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
