"""tests/live/test_timeline.py — timelines in the tools people already open
(make timeline-test, part of make test): `flamme export --format perf-script`
and speedscope's per-thread profiles.

tests/live/phases_main.ml (main thread and one domain, a Hashtbl phase then an
Atomic phase) is built by every compiler and profiled. What a user checks:

* the perf-script text follows `perf script`'s layout: a header per sample
  "COMM PID/TID SECONDS.MICROS: PERIOD EVENT:", frames leaf first as
  "<tab>ADDR FUNCTION (MODULE)", a blank line after each sample, samples in
  time order; one block per sample record, periods adding up to the report's
  weight, one COMM per thread, stacks ending at a thread root;
* speedscope's own format from `export --threads` puts each thread where it
  began: the domain's profile starts when the domain was spawned, after the
  main thread's, and its samples and idle time fill its span exactly;
* speedscope (npm, $(FLAMME_CACHE)/speedscope, make deps; in headless
  chromium) opens both and shows one profile per thread, named by thread
  label, pid and tid (what it opens does not depend on the compiler: the
  default one only).
"""
import http.server
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading

import pytest

import flammetest
from livelib import HZ, flamme, phases_main

HEADER = re.compile(r"^(\S+) (\d+)/(\d+) (\d+)\.(\d{6}): (\d+) (cpu-clock|wall-clock):$")
FRAME = re.compile(r"^\t *([0-9a-f]+) (.+) \((\S+)\)$")
SPEEDSCOPE = os.path.join(os.environ.get("FLAMME_CACHE", os.path.expanduser("~/.cache/flamme")),
                          "speedscope/node_modules/speedscope/dist/release")


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


def profile_phases(build, exe, out):
    """Profiles phases_main.exe 2.0 into OUT: (CompletedProcess, pid,
    sample records, weight) from `flamme report`."""
    p = flammetest.run([exe, "2.0"], env=flammetest.clean_env(
        {"LD_PRELOAD": build.lib, "FLAMME_HZ": str(HZ), "FLAMME_OUTPUT": out}), timeout=120)
    rc, rep, err = flamme(build, "report", out)
    w = re.search(r"samples: (\d+) records, weight (\d+)", rep)
    pid = re.search(r"pid (\d+)", rep)
    return p, int(pid.group(1)) if pid else 0, (int(w.group(1)), int(w.group(2))) if w else (0, 0)


@pytest.mark.slow
def test_exports(build, ocaml, check, tmp_path):
    prof = str(tmp_path / "p.flm")
    p, pid, (records, weight) = profile_phases(build, phases_main(ocaml), prof)
    check(p.returncode == 0, "program ran", p.stderr)
    rc, text, err = flamme(build, "export", "--format", "perf-script", prof)
    check(rc == 0, "export --format perf-script", err)
    blocks, problems = parse_perf_script(text)
    check(not problems, "every line follows perf script's layout", "; ".join(problems[:5]))
    check(len(blocks) == records, "one block per sample record", "%d blocks, %d records" % (len(blocks), records))
    period = 1000000000 // HZ
    check(sum(b[4] for b in blocks) == weight * period,
          "periods add up to the report's weight x the sampling period",
          "%d vs %d" % (sum(b[4] for b in blocks), weight * period))
    times = [b[3] for b in blocks]
    check(times == sorted(times), "samples in time order")
    check(all(b[1] == pid for b in blocks), "every header names the program's pid")
    comms = {}
    for b in blocks:
        comms.setdefault(b[2], set()).add(b[0])
    check(all(len(c) == 1 for c in comms.values()) and
          comms.get(pid) == {"main"} and any(c == {"domain-1"} for c in comms.values()),
          "one COMM per thread: main for the pid, domain-1 for the domain", str(comms))
    rooted = sum(1 for b in blocks if b[5] and b[5][-1][1] in flammetest.ROOTS)
    check(rooted >= 0.9 * len(blocks), "frames are leaf first (the last is a thread root)",
          "%d of %d" % (rooted, len(blocks)))
    main_hash = sum(1 for b in blocks if b[2] == pid and any(f[1] == "Phases.hash_phase" for f in b[5]))
    dom_hash = sum(1 for b in blocks if b[2] != pid and any(f[1] == "Phases.hash_phase" for f in b[5]))
    check(main_hash + dom_hash >= 10, "the Hashtbl phase is there", "main %d, domain %d" % (main_hash, dom_hash))
    # speedscope export with each thread's start
    rc, js, err = flamme(build, "export", "--format", "speedscope", "--threads", prof)
    profs = {x["name"]: x for x in json.loads(js)["profiles"]}
    mainp = profs.get("main")
    domp = next((x for n, x in profs.items() if n.startswith("domain ")), None)
    if check(mainp and domp, "speedscope has the main and the domain profiles", str(list(profs))):
        check(domp["startValue"] > mainp["startValue"],
              "the domain's profile starts after main's (its real start)",
              "main %d, domain %d" % (mainp["startValue"], domp["startValue"]))
        for x in (mainp, domp):
            check(sum(x["weights"]) == x["endValue"] - x["startValue"] and
                  len(x["weights"]) == len(x["samples"]),
                  "%s: samples and idle time fill its span exactly" % x["name"])


class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *a):
        pass


def speedscope_dom(www, name):
    """The DOM speedscope shows after loading www/name, from headless chromium."""
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                          lambda *a, **k: Quiet(*a, directory=www, **k))
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    port = srv.server_address[1]
    url = "http://127.0.0.1:%d/index.html#profileURL=http://127.0.0.1:%d/%s" % (port, port, name)
    profile_dir = tempfile.mkdtemp(prefix="flamme-chromium-")
    try:
        p = subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu",
                            "--disable-background-networking", "--no-first-run",
                            "--user-data-dir=" + profile_dir,
                            "--virtual-time-budget=20000", "--dump-dom", url],
                           capture_output=True, text=True, timeout=120)
        return p.stdout
    finally:
        srv.shutdown()
        shutil.rmtree(profile_dir, ignore_errors=True)


@pytest.mark.browser
def test_speedscope_opens(build, ocaml_default, check, tmp_path):
    assert os.path.exists(os.path.join(SPEEDSCOPE, "index.html")), \
        "speedscope is not installed in %s: run make deps" % SPEEDSCOPE
    www = str(tmp_path / "www")
    shutil.copytree(SPEEDSCOPE, www)
    prof = str(tmp_path / "p.flm")
    p, pid, _ = profile_phases(build, phases_main(ocaml_default), prof)
    assert p.returncode == 0, p.stderr
    rc, text, err = flamme(build, "export", "--format", "perf-script", prof)
    assert rc == 0, err
    rc, js, err = flamme(build, "export", "--format", "speedscope", "--threads", prof)
    assert rc == 0, err
    with open(os.path.join(www, "p.perf"), "w") as f:
        f.write(text)
    with open(os.path.join(www, "p.speedscope.json"), "w") as f:
        f.write(js)
    nthreads = len({b[2] for b in parse_perf_script(text)[0]})
    dom = speedscope_dom(www, "p.perf")
    m = re.search(r"pid: %d tid: \d+ <span[^>]*>\(1/(\d+)\)</span>" % pid, dom)
    check(m and int(m.group(1)) == nthreads and "domain-1 pid: %d tid: " % pid in dom and
          "main pid: %d tid: %d" % (pid, pid) in dom,
          "speedscope (headless chromium) opens the perf-script text: one profile per thread",
          "%s threads expected; DOM: %s" % (nthreads, dom[-1500:]))
    dom = speedscope_dom(www, "p.speedscope.json")
    check(re.search(r"\(1/%d\)" % len(json.loads(js)["profiles"]), dom) and "domain 1" in dom,
          "speedscope opens the --threads export: one profile per thread", dom[-1500:])
