#!/usr/bin/env python3
"""tests/live/timeline.py — timelines in the tools people already open
(make live-test): `flamme export --format perf-script` and speedscope's
per-thread profiles.

tests/live/phases_main.ml (main thread and one domain, a Hashtbl phase then an
Atomic phase) is built by both 5.3.0 compilers and profiled. What a user
checks:

* the perf-script text follows `perf script`'s layout: a header per sample
  "COMM PID/TID SECONDS.MICROS: PERIOD EVENT:", frames leaf first as
  "<tab>ADDR FUNCTION (MODULE)", a blank line after each sample, samples in
  time order; one block per sample record, periods adding up to the report's
  weight, one COMM per thread, stacks ending at a thread root;
* speedscope (npm, in headless chromium) opens it and shows one profile per
  thread, named by thread label, pid and tid;
* speedscope's own format from `export --threads` puts each thread where it
  began: the domain's profile starts when the domain was spawned, after the
  main thread's, and its samples and idle time fill its span exactly.

Last line: "timeline: N passed, N failed". Exit status 1 on any failure.
Usage: timeline.py --build DIR [--speedscope DIR]
"""
import argparse
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run as live  # noqa: E402  (check, flamme and the pass/fail counts)

check, flamme = live.check, live.flamme
HZ = 499
ROOTS = {"_start", "__libc_start_main", "__libc_start_call_main", "main", "start_thread", "clone",
         "clone3"}
HEADER = re.compile(r"^(\S+) (\d+)/(\d+) (\d+)\.(\d{6}): (\d+) (cpu-clock|wall-clock):$")
FRAME = re.compile(r"^\t *([0-9a-f]+) (.+) \((\S+)\)$")


def parse_perf_script(text):
    """[(comm, pid, tid, time_us, period, [(addr, function, module)])], problems."""
    blocks, problems = [], []
    cur = None
    for n, line in enumerate(text.split("\n"), 1):
        if line == "":
            if cur:
                blocks.append(cur)
            cur = None
            continue
        if cur is None:
            m = HEADER.match(line)
            if not m:
                problems.append("line %d: not a sample header: %r" % (n, line[:120]))
                continue
            cur = (m.group(1), int(m.group(2)), int(m.group(3)),
                   int(m.group(4)) * 1000000 + int(m.group(5)), int(m.group(6)), [])
        else:
            m = FRAME.match(line)
            if not m:
                problems.append("line %d: not a frame line: %r" % (n, line[:120]))
                continue
            cur[5].append((m.group(1), m.group(2), m.group(3)))
    if cur:
        problems.append("the last sample has no blank line after it")
    return blocks, problems


class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *a):
        pass


def speedscope_dom(www, name, work):
    """The DOM speedscope shows after loading www/name, from headless chromium."""
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                          lambda *a, **k: Quiet(*a, directory=www, **k))
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    port = srv.server_address[1]
    url = "http://127.0.0.1:%d/index.html#profileURL=http://127.0.0.1:%d/%s" % (port, port, name)
    try:
        p = subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu",
                            "--disable-background-networking", "--no-first-run",
                            "--user-data-dir=" + tempfile.mkdtemp(dir=work),
                            "--virtual-time-budget=20000", "--dump-dom", url],
                           capture_output=True, text=True, timeout=120)
        return p.stdout
    finally:
        srv.shutdown()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--speedscope", default=os.path.join(
        os.environ.get("FLAMME_CACHE", os.path.expanduser("~/.cache/flamme")),
        "speedscope/node_modules/speedscope/dist/release"))
    a = ap.parse_args()
    build = os.path.abspath(a.build)
    work = tempfile.mkdtemp(prefix="flamme-timeline-")
    www = os.path.join(work, "www")
    have_ss = check(os.path.exists(os.path.join(a.speedscope, "index.html")),
                    "speedscope is installed (make deps)", a.speedscope)
    if have_ss:
        shutil.copytree(a.speedscope, www)
    else:
        os.makedirs(www)
    for comp in ("fp", "nofp"):
        exe = os.path.join(build, "live", comp, "phases_main.exe")
        prof = os.path.join(work, comp + ".flm")
        env = {k: v for k, v in os.environ.items() if not k.startswith("FLAMME_") and k != "LD_PRELOAD"}
        env.update(LD_PRELOAD=os.path.join(build, "libflamme.so"), FLAMME_HZ=str(HZ),
                   FLAMME_OUTPUT=prof)
        p = subprocess.run([exe, "2.0"], env=env, capture_output=True, text=True, timeout=120)
        check(p.returncode == 0, "%s: program ran" % comp, p.stderr)
        rc, rep, err = flamme(build, "report", prof)
        w = re.search(r"samples: (\d+) records, weight (\d+)", rep)
        records, weight = (int(w.group(1)), int(w.group(2))) if w else (0, 0)
        pid = int(re.search(r"pid (\d+)", rep).group(1))
        # perf-script
        rc, text, err = flamme(build, "export", "--format", "perf-script", prof)
        check(rc == 0, "%s: export --format perf-script" % comp, err)
        blocks, problems = parse_perf_script(text)
        check(not problems, "%s: every line follows perf script's layout" % comp, "; ".join(problems[:5]))
        check(len(blocks) == records, "%s: one block per sample record" % comp,
              "%d blocks, %d records" % (len(blocks), records))
        period = 1000000000 // HZ
        check(sum(b[4] for b in blocks) == weight * period,
              "%s: periods add up to the report's weight x the sampling period" % comp,
              "%d vs %d" % (sum(b[4] for b in blocks), weight * period))
        times = [b[3] for b in blocks]
        check(times == sorted(times), "%s: samples in time order" % comp)
        check(all(b[1] == pid for b in blocks), "%s: every header names the program's pid" % comp)
        comms = {}
        for b in blocks:
            comms.setdefault(b[2], set()).add(b[0])
        check(all(len(c) == 1 for c in comms.values()) and
              comms.get(pid) == {"main"} and any(c == {"domain-1"} for c in comms.values()),
              "%s: one COMM per thread: main for the pid, domain-1 for the domain" % comp, str(comms))
        rooted = sum(1 for b in blocks if b[5] and b[5][-1][1] in ROOTS)
        check(rooted >= 0.9 * len(blocks), "%s: frames are leaf first (the last is a thread root)" % comp,
              "%d of %d" % (rooted, len(blocks)))
        main_hash = sum(1 for b in blocks if b[2] == pid and any(f[1] == "Phases.hash_phase" for f in b[5]))
        dom_hash = sum(1 for b in blocks if b[2] != pid and any(f[1] == "Phases.hash_phase" for f in b[5]))
        check(main_hash + dom_hash >= 10, "%s: the Hashtbl phase is there" % comp,
              "main %d, domain %d" % (main_hash, dom_hash))
        # speedscope export with each thread's start
        rc, js, err = flamme(build, "export", "--format", "speedscope", "--threads", prof)
        doc = json.loads(js)
        profs = {x["name"]: x for x in doc["profiles"]}
        mainp = profs.get("main")
        domp = next((x for n, x in profs.items() if n.startswith("domain ")), None)
        if check(mainp and domp, "%s: speedscope has the main and the domain profiles" % comp, str(list(profs))):
            check(domp["startValue"] > mainp["startValue"],
                  "%s: the domain's profile starts after main's (its real start)" % comp,
                  "main %d, domain %d" % (mainp["startValue"], domp["startValue"]))
            for x in (mainp, domp):
                check(sum(x["weights"]) == x["endValue"] - x["startValue"] and
                      len(x["weights"]) == len(x["samples"]),
                      "%s: %s: samples and idle time fill its span exactly" % (comp, x["name"]))
        if not have_ss:
            continue
        with open(os.path.join(www, comp + ".perf"), "w") as f:
            f.write(text)
        with open(os.path.join(www, comp + ".speedscope.json"), "w") as f:
            f.write(js)
        nthreads = len(comms)
        dom = speedscope_dom(www, comp + ".perf", work)
        m = re.search(r"pid: %d tid: \d+ <span[^>]*>\(1/(\d+)\)</span>" % pid, dom)
        check(m and int(m.group(1)) == nthreads and "domain-1 pid: %d tid: " % pid in dom and
              "main pid: %d tid: %d" % (pid, pid) in dom,
              "%s: speedscope (headless chromium) opens the perf-script text: one profile per "
              "thread" % comp, "%s threads expected; DOM: %s" % (nthreads, dom[-1500:]))
        dom = speedscope_dom(www, comp + ".speedscope.json", work)
        check(re.search(r"\(1/%d\)" % len(doc["profiles"]), dom) and "domain 1" in dom,
              "%s: speedscope opens the --threads export: one profile per thread" % comp, dom[-1500:])
    shutil.rmtree(work, ignore_errors=True)
    print("timeline: %d passed, %d failed" % (live.passed, live.failed))
    sys.exit(1 if live.failed else 0)


if __name__ == "__main__":
    main()
