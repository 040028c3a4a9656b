"""tests/top/test_top.py — `flamme top` (make top-test, part of make test).

tests/top/phases.ml runs Phases.phase_a for SECS seconds on the main
thread, then Phases.phase_b for SECS more in a second domain, prints its
phase changes and exits 3. Built with every compiler. What a user checks:

* the live view, in a terminal (tmux, driven with send-keys and read with
  capture-pane): phase_a is the top function by self time while it runs,
  phase_b after it; key 2 sorts by total (the order changes: frames every
  stack has come first, phase_b below them) and 1 back by self; t shows
  one thread (main, waiting for the domain that runs phase_b: no phase_b),
  t again the next ones up to domain 1 (phase_b on top), a all of them, w
  another window; q closes the view and the
  terminal is as before (normal screen, cursor shown, the same stty
  settings), and the shell gets the program's exit status; Ctrl-C ends the
  program as without flamme (status 130) and restores the terminal too
  (default compiler);
* stdout not a terminal: one plain table per second naming the same
  functions in the same order of phases, the program's own output and
  status kept; `flamme top FILE` follows a profile being written until it
  is complete, or until no process holds it (its program killed: default
  compiler); `--once --window all` on a finished profile has the top
  functions of `flamme report`, with the same shares;
* bad input (missing file, not a profile, unknown option, bad --sort):
  one line on stderr, exit status 2.

No timing is asserted: the view is polled until what is checked appears,
with generous limits.
"""
import os
import re
import shutil
import subprocess
import threading
import time

import pytest

import flammetest

HERE = os.path.dirname(os.path.abspath(__file__))
SECS = 3  # per phase

pytestmark = pytest.mark.skipif(not shutil.which("tmux"), reason="tmux not found: run make deps")


def phases(ocaml):
    return ocaml("top", [os.path.join(HERE, "phases.ml")], libs=("unix",))


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
        self.env = flammetest.clean_env({"TERM": "xterm-256color"})
        subprocess.run(self.base + ["new-session", "-d", "-s", "t", "-x", "120", "-y", "40", "-c", cwd,
                                    "sh"], env=self.env, check=True)
        self.run("set-option", "-g", "status", "off")
        # Keys sent before the shell prints its prompt are echoed ahead of
        # it, and its output then shares the prompt's line ("# BEFORE-TOP",
        # seen in one CI run, which failed test_tty's last check).
        end = time.monotonic() + 10.0
        while time.monotonic() < end and not any(ln.strip() for ln in self.pane()):
            time.sleep(0.05)

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


@pytest.fixture
def tmux(tmp_path):
    """tmux(name) -> a Tmux session in tmp_path, killed at the test's end."""
    sessions = []

    def make(name):
        t = Tmux("flamme-top-%d-%s" % (os.getpid(), re.sub(r"\W", "-", name)), str(tmp_path))
        sessions.append(t)
        return t
    yield make
    for t in sessions:
        t.kill()


def read(path, missing):
    return open(path).read() if os.path.exists(path) else missing


@pytest.mark.slow
def test_tty(build, ocaml, compiler, tmux, check, tmp_path):
    exe = phases(ocaml)
    t = tmux(compiler.name)
    t.keys("stty -g > stty.before; echo BEFORE-TOP; %s top --window 1 -- %s %d; echo TOP-RC=$?; "
           "stty -g > stty.after" % (build.flamme, exe, SECS), "Enter")
    seq = []

    def watch(p):
        n = top_self(p)
        if n and (not seq or seq[-1] != n):
            seq.append(n)
        return n == "Phases.phase_b"
    p = t.wait(watch, 30)
    check(p is not None and "Phases.phase_a" in seq and t.fmt("#{alternate_on}") == "1",
          "phase_a, then phase_b, is the top function by self time (alternate screen)",
          "tops seen %s" % seq)
    assert p is not None, "the view never showed phase_b on top"
    # Sort by total: frames in every stack first, phase_b below them.
    t.keys("2")
    p = t.wait(lambda p: "sort total" in "".join(view(p)[:3]) and parse_table(view(p))[2], 10)
    rows = parse_table(view(p))[2] if p else []
    names = [r[2] for r in rows]
    ok = rows and rows[0][2] != "Phases.phase_b" and "Phases.phase_b" in names and \
        all(rows[i][1] >= rows[i + 1][1] for i in range(len(rows) - 1)) and \
        rows[0][1] >= rows[names.index("Phases.phase_b")][1]
    check(ok, "key 2 sorts by total (another first row, phase_b lower, %total descending)",
          "\n".join(view(p) if p else []))
    t.keys("1")
    p = t.wait(lambda p: top_self(p) is not None, 10)
    check(p is not None and top_self(p) == "Phases.phase_b", "key 1 sorts by self again",
          "\n".join(view(p) if p else []))
    # One thread at a time: main waits in Domain.join while domain 1 runs
    # phase_b.
    t.keys("t")
    p = t.wait(lambda p: thread_shown(p) == "main", 10)
    names = [r[2] for r in parse_table(view(p))[2]] if p else []
    check(p is not None and "Phases.phase_b" not in names, "key t shows one thread: main, without phase_b",
          "\n".join(view(p) if p else t.pane()[:3]))
    shown = "main"
    for _ in range(8):
        if shown == "domain 1":
            break
        t.keys("t")
        p = t.wait(lambda p, was=shown: thread_shown(p) not in (None, was), 10)
        shown = thread_shown(p) if p else None
    check(p is not None and shown == "domain 1" and top_self(p) == "Phases.phase_b",
          "key t steps on to domain 1, where phase_b is on top", "\n".join(view(p) if p else t.pane()[:3]))
    t.keys("a", "w")
    p = t.wait(lambda p: len(view(p)) > 1 and "last 5 s  all threads" in view(p)[1], 10)
    check(p is not None, "keys a and w: all threads, a 5 s window", "\n".join(t.pane()[:3]))
    t.keys("q")
    p = t.wait(lambda p: any(ln.startswith("TOP-RC=") for ln in p), 30)
    alt, cursor = t.fmt("#{alternate_on}"), t.fmt("#{cursor_flag}")
    time.sleep(0.3)
    before = read(str(tmp_path / "stty.before"), "?")
    after = read(str(tmp_path / "stty.after"), "!")
    check(p is not None and "TOP-RC=3" in p and "BEFORE-TOP" in p and not view(p) and alt == "0" and
          cursor == "1" and before == after,
          "q quits; the terminal is restored (screen, cursor, stty) and the status is the program's",
          "alt %s cursor %s stty %s/%s pane:\n%s" % (alt, cursor, before.strip(), after.strip(),
                                                   "\n".join(p or t.pane())))


@pytest.mark.slow
def test_ctrl_c(build, ocaml_default, tmux, check, tmp_path):
    """Ctrl-C in the view: the program gets SIGINT from the terminal as
    without flamme (its status: 130), the terminal is restored."""
    exe = phases(ocaml_default)
    t = tmux("c")
    t.keys("stty -g > c.before; %s top -- %s 30; echo TOP-RC=$?; stty -g > c.after" % (build.flamme, exe),
           "Enter")
    p = t.wait(lambda p: top_self(p) is not None, 30)
    t.keys("C-c")
    q = t.wait(lambda p: any(ln.startswith("TOP-RC=") for ln in p), 30)
    time.sleep(0.3)
    same = [read(str(tmp_path / f), f) for f in ("c.before", "c.after")]
    check(p is not None and q is not None and "TOP-RC=130" in q and not view(q) and
          t.fmt("#{alternate_on}") == "0" and t.fmt("#{cursor_flag}") == "1" and same[0] == same[1],
          "Ctrl-C: the program ends of SIGINT (status 130), the terminal is restored",
          "\n".join(q or t.pane()))


@pytest.mark.slow
def test_plain(build, ocaml, check):
    exe = phases(ocaml)
    p = flammetest.run([build.flamme, "top", "--window", "1", "--", exe, str(SECS)], timeout=120)
    tables = split_tables(p.stdout)
    seq = phases_seen(tables)
    check(in_order(seq, "Phases.phase_a", "Phases.phase_b"),
          "one table a second, phase_a then phase_b on top", "tops %s\n%s" % (seq, p.stdout[-3000:]))
    own = [ln for ln in p.stdout.splitlines() if ln.startswith("phases:")]
    check(p.returncode == 3 and tables and "program exited 3" in tables[-1][0] and
          own[:2] == ["phases: a", "phases: b"] and len(own) == 3 and own[2] in ("phases: done 0", "phases: done 1"),
          "the program's own output and exit status (3); the last table says it exited",
          "rc %d stderr %r" % (p.returncode, p.stderr))


def report_top(text):
    """The rows [(self%, total%, name)] of `flamme report`'s top functions by self time."""
    rows, sect = [], False
    for ln in text.splitlines():
        if ln.startswith("top functions by self time"):
            sect = True
        elif sect and not ln.startswith("  "):
            break
        elif sect:
            m = re.match(r"^\s+(\d+\.\d)%\s+(\d+\.\d)%\s+\d+\s+(\S.*?)\s*$", ln)
            if m:
                rows.append((float(m.group(1)), float(m.group(2)), m.group(3)))
    return rows


@pytest.mark.slow
def test_file(build, ocaml, check, tmp_path):
    exe = phases(ocaml)
    out = str(tmp_path / "follow.flm")
    rec = subprocess.Popen([build.flamme, "record", "-o", out, "--", exe, str(SECS)], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, env=flammetest.clean_env())
    end = time.monotonic() + 30
    while not os.path.exists(out) and time.monotonic() < end and rec.poll() is None:
        time.sleep(0.05)
    p = flammetest.run([build.flamme, "top", "--window", "1", out], timeout=120)
    rec.wait(timeout=60)
    tables = split_tables(p.stdout)
    seq = phases_seen(tables)
    check(p.returncode == 0 and in_order(seq, "Phases.phase_a", "Phases.phase_b") and tables and
          "profile complete" in tables[-1][0],
          "follows a profile being written until it is complete, phase_a then phase_b",
          "rc %d tops %s stderr %r" % (p.returncode, seq, p.stderr))
    # A finished profile, whole run: the same figures as flamme report.
    once = flammetest.run([build.flamme, "top", "--once", "--window", "all", out])
    rows = parse_table(split_tables(once.stdout)[0])[2] if split_tables(once.stdout) else []
    rrows = report_top(flammetest.report(build, out))
    k = min(5, len(rows), len(rrows))
    check(once.returncode == 0 and k >= 2 and rows[:k] == rrows[:k] and
          {r[2] for r in rows[:2]} == {"Phases.phase_a", "Phases.phase_b"},
          "--once --window all gives report's top functions by self (phase_a, phase_b first)",
          "top %s\nreport %s" % (rows[:k], rrows[:k]))
    # The same profile caught as its program has just created the file
    # (empty, then the header): waited for, not "not a flamme profile".
    fresh = str(tmp_path / "fresh.flm")
    open(fresh, "wb").close()
    with open(out, "rb") as f:
        data = f.read()

    def fill():
        time.sleep(0.4)
        with open(fresh, "r+b") as f:
            f.write(data)
    th = threading.Thread(target=fill)
    th.start()
    late = flammetest.run([build.flamme, "top", "--once", "--window", "all", fresh])
    th.join()
    lrows = parse_table(split_tables(late.stdout)[0])[2] if split_tables(late.stdout) else []
    check(late.returncode == 0 and k >= 2 and lrows[:k] == rows[:k],
          "a file caught before its header is waited for, then shown as the finished profile",
          "rc %d stderr %r rows %s" % (late.returncode, late.stderr, lrows[:k]))


@pytest.mark.slow
def test_killed(build, ocaml_default, check, tmp_path):
    """A profile whose program dies of SIGKILL never gets its end record: the
    plain view of it ends once no process holds the file, and says so."""
    exe = phases(ocaml_default)
    out = str(tmp_path / "killed.flm")
    prog = subprocess.Popen([exe, "30"], stdout=subprocess.DEVNULL, env=flammetest.clean_env(
        {"LD_PRELOAD": build.lib, "FLAMME_OUTPUT": out, "FLAMME_QUIET": "1"}))
    end = time.monotonic() + 30
    while not os.path.exists(out) and time.monotonic() < end:
        time.sleep(0.05)
    top = subprocess.Popen([build.flamme, "top", "--window", "all", out], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
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


@pytest.mark.parametrize("name,args,needle", [
    ("missing file", ["{work}/nope.flm"], "nope.flm"),
    ("not a profile", ["{notprof}"], "not a flamme profile"),
    ("unknown option", ["--bogus", "{notprof}"], "--bogus"),
    ("bad --sort", ["--sort", "cpu", "{notprof}"], "--sort"),
    ("bad --window", ["--window", "x", "{notprof}"], "--window"),
    ("nothing to watch", [], "no FILE"),
])
def test_bad_input(build, tmp_path, name, args, needle):
    notprof = tmp_path / "notes.txt"
    notprof.write_text("hello\n")
    args = [a.format(work=tmp_path, notprof=notprof) for a in args]
    p = flammetest.run([build.flamme, "top", *args], timeout=30)
    lines = p.stderr.splitlines()
    assert p.returncode == 2 and len(lines) == 1 and needle in lines[0] and not p.stdout, \
        "bad input (%s): not one line and exit status 2: rc %d stderr %r" % (name, p.returncode, p.stderr)
