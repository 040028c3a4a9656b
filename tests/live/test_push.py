"""tests/live/test_push.py — `flamme push` against a local stand-in for
Grafana Pyroscope's HTTP ingest API (make live-test, part of make test).

No real Pyroscope server is reachable from the tests: a receiver on
127.0.0.1 records each request, and the checks hold it to the documented API
(POST /ingest; query name=APP{labels}, from, until, format=pprof, sampleRate,
spyName, units, aggregationType; a multipart/form-data body whose part
"profile" is the pprof). The pprof bodies are decoded with `go tool pprof`
(Debian golang-go) and their totals compared with each segment's. What a
user checks:

* `flamme push FILE...` sends one request per profile, named after the
  program with host, pid and command labels, over the segment's own time span;
* the pprof holds exactly the segment's samples (go tool pprof's total),
  with a thread label;
* `flamme push --watch DIR --delete` sends the segments of a running program
  as they complete, in order, and deletes each once the server took it;
* a server that refuses (HTTP 500) or is not there: one line naming the file
  and the reason, non-zero exit, the file kept.

What is pushed does not depend on the compiler: the program is built with
the default one.
"""
import email.parser
import email.policy
import glob
import http.server
import os
import re
import shutil
import subprocess
import threading
import time
import urllib.parse

import pytest

import flammetest
from livelib import HZ, flamme, phases_main, report_weight, segment_facts


class Receiver(http.server.BaseHTTPRequestHandler):
    requests = []
    status = 200

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        Receiver.requests.append(dict(method="POST", path=self.path, headers=dict(self.headers),
                                      body=body))
        self.send_response(Receiver.status)
        self.end_headers()
        self.wfile.write(b"refused by the test\n" if Receiver.status != 200 else b"")

    def log_message(self, *a):
        pass


@pytest.fixture
def server():
    """The receiver's URL; Receiver.requests cleared, status 200."""
    Receiver.requests, Receiver.status = [], 200
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield "http://127.0.0.1:%d" % srv.server_address[1]
    srv.shutdown()
    Receiver.status = 200


def parts(req):
    """{name: (filename, bytes)} of a multipart/form-data request."""
    ctype = req["headers"].get("Content-Type", "")
    msg = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
        b"Content-Type: " + ctype.encode() + b"\r\n\r\n" + req["body"])
    out = {}
    if msg.is_multipart():
        for p in msg.iter_parts():
            out[p.get_param("name", header="content-disposition")] = (
                p.get_filename(), p.get_payload(decode=True))
    return ctype, out


def pprof_total(data, work):
    """(total of the first sample type, labels seen) by `go tool pprof -raw`."""
    path = os.path.join(work, "body.pb.gz")
    with open(path, "wb") as f:
        f.write(data)
    env = dict(os.environ, HOME=work, GOCACHE=os.path.join(work, "gocache"), GOFLAGS="-mod=mod")
    p = subprocess.run(["go", "tool", "pprof", "-raw", path], capture_output=True, text=True,
                       timeout=120, env=env)
    if p.returncode != 0:
        return None, p.stderr
    total, labels, in_samples = 0, set(), False
    for line in p.stdout.splitlines():
        if line.startswith("Samples:"):
            in_samples = True
            continue
        if in_samples and line and not line[0].isspace() and ":" in line and not line[0].isdigit():
            in_samples = False  # next section (Locations)
        if not in_samples:
            continue
        m = re.match(r"^\s+(\d+)\s+\d+:", line)
        if m:
            total += int(m.group(1))
        for k in re.findall(r"(\w+):\[", line):
            labels.add(k)
    return total, labels


def check_request(check, req, build, f, work, what):
    """The documented API, for one request carrying profile F."""
    u = urllib.parse.urlsplit(req["path"])
    q = dict(urllib.parse.parse_qsl(u.query))
    seg, hdr, samples = segment_facts(f)
    check(req["method"] == "POST" and u.path == "/ingest", "%s: POST /ingest" % what, req["path"])
    m = re.match(r"^([\w.:/-]+)\{(.*)\}$", q.get("name", ""))
    labels = dict(kv.split("=", 1) for kv in m.group(2).split(",")) if m else {}
    check(m and m.group(1) == "phases_main.exe" and labels.get("pid") == str(hdr["pid"]) and
          labels.get("command") == "phases_main.exe" and labels.get("host") and
          labels.get("env") == "test",
          "%s: name is the program with host, pid, command and --label labels" % what, q.get("name", ""))
    want = {"format": "pprof", "sampleRate": str(HZ), "spyName": "flamme", "units": "samples",
            "aggregationType": "sum"}
    check(all(q.get(k) == v for k, v in want.items()), "%s: format, sampleRate, spyName, units, "
          "aggregationType" % what, str(q))
    lo, hi = seg[-1][1], seg[-1][2]
    rt = hdr["realtime"] + (lo - hdr["mono"])
    rt_end = hdr["realtime"] + (hi - hdr["mono"])
    check(q.get("from") == str(rt // 10**9) and q.get("until") == str(-(-rt_end // 10**9)),
          "%s: from/until are the segment's bounds in Unix seconds" % what,
          "%s..%s vs %d..%d" % (q.get("from"), q.get("until"), rt // 10**9, -(-rt_end // 10**9)))
    ctype, ps = parts(req)
    check(ctype.startswith("multipart/form-data") and "profile" in ps,
          "%s: multipart/form-data with a 'profile' part" % what, "%s %s" % (ctype, list(ps)))
    if "profile" in ps:
        total, lbls = pprof_total(ps["profile"][1], work)
        w = report_weight(build, [f])[1]
        check(total == w and "thread" in (lbls or set()),
              "%s: go tool pprof reads the body: total %s == the segment's %s samples, thread labels"
              % (what, total, w), str(lbls))


def segment_env(build, out):
    return flammetest.clean_env({"LD_PRELOAD": build.lib, "FLAMME_PERIOD": "0.5", "FLAMME_HZ": str(HZ),
                                 "FLAMME_OUTPUT": out})


@pytest.mark.slow
def test_push_watch(build, ocaml_default, server, check, tmp_path):
    """--watch while the program runs: segments are sent as they complete."""
    exe = phases_main(ocaml_default)
    d = str(tmp_path / "segs")
    os.makedirs(d)
    w = subprocess.Popen([build.flamme, "push", "--watch", d, "--delete", "--interval", "0.2",
                          "--url", server, "--label", "env=test"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    prog = subprocess.Popen([exe, "1.0"], env=segment_env(build, os.path.join(d, "seg.%p.flm")),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen_during = 0
    while prog.poll() is None:
        time.sleep(0.1)
        seen_during = max(seen_during, len(Receiver.requests))
    prog.communicate()
    deadline = time.time() + 20
    while glob.glob(os.path.join(d, "*.flm")) and time.time() < deadline:
        time.sleep(0.2)
    w.terminate()
    _, werr = w.communicate(timeout=30)
    check(w.returncode == 0 and not werr.strip(), "push --watch stops cleanly on SIGTERM",
          "rc %s: %s" % (w.returncode, werr))
    n = len(Receiver.requests)
    check(n >= 4 and seen_during >= 2, "--watch sent segments while the program ran",
          "%d requests, %d during the run" % (n, seen_during))
    check(not glob.glob(os.path.join(d, "*.flm")), "--delete removed every segment sent", str(os.listdir(d)))
    froms = [int(dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(r["path"]).query))["from"])
             for r in Receiver.requests]
    check(froms == sorted(froms), "segments sent in order", str(froms))


@pytest.mark.slow
def test_push_watch_unfinished(build, ocaml_default, server, check, tmp_path):
    """--watch --delete on a profile caught while it is written (as a
    program's new segment is: empty after its open, then cut within its
    header or a chunk): nothing said, nothing sent, the file kept; once it
    is whole it is sent whole and deleted. A file that stays unreadable
    after it stopped changing gets one line and is kept."""
    exe = phases_main(ocaml_default)
    src = tmp_path / "src"
    os.makedirs(src)
    flammetest.run([exe, "0.3"], env=segment_env(build, str(src / "one.%p.flm")), timeout=120)
    made = sorted(glob.glob(str(src / "*.flm")))
    assert made, "no profile written"
    with open(made[0], "rb") as f:
        data = f.read()
    d = tmp_path / "watch"
    os.makedirs(d)
    target = str(d / "a.flm")
    w = subprocess.Popen([build.flamme, "push", "--watch", str(d), "--delete", "--interval", "0.1",
                          "--url", server, "--label", "env=test"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    waited = []
    for cut in (0, 10, len(data) // 2, len(data) - 5):
        with open(target, "wb") as f:
            f.write(data[:cut])
        time.sleep(0.5)
        waited.append((cut, len(Receiver.requests), os.path.exists(target)))
    check(all(n == 0 and kept for _, n, kept in waited),
          "a profile cut at 0, 10, half and all but 5 bytes is waited for (not sent, kept)",
          str(waited))
    with open(target, "wb") as f:
        f.write(data)
    deadline = time.time() + 10
    while os.path.exists(target) and time.time() < deadline:
        time.sleep(0.1)
    # The same name again (a pid the system gave out again): a new profile.
    with open(target, "wb") as f:
        f.write(data)
    deadline = time.time() + 10
    while os.path.exists(target) and time.time() < deadline:
        time.sleep(0.1)
    again = len(Receiver.requests)
    bad = str(d / "b.flm")
    with open(bad, "wb") as f:
        f.write(b"not a profile\n")
    old = time.time() - 10
    os.utime(bad, (old, old))
    time.sleep(1.0)
    w.terminate()
    _, werr = w.communicate(timeout=30)
    n = len(Receiver.requests)
    total = None
    if n >= 1:
        total = pprof_total(parts(Receiver.requests[0])[1].get("profile", (None, b""))[1],
                            str(tmp_path))[0]
    want = report_weight(build, made[:1])[1]
    check(n == 2 and total == want and not os.path.exists(target),
          "once whole, it is sent whole (pprof total == the profile's samples) and deleted",
          "%d requests, total %s of %s, kept %s" % (n, total, want, os.path.exists(target)))
    check(again == 2, "a new file under a name already sent and deleted is sent too",
          "%d requests after it" % again)
    lines = werr.strip().splitlines()
    check(len(lines) == 1 and bad in lines[0] and "not a flamme profile" in lines[0] and
          os.path.exists(bad), "a settled unreadable file: one line naming it, kept", werr)


@pytest.mark.slow
def test_push_watch_keep(build, ocaml_default, server, check, tmp_path):
    """--watch without --delete: a profile is sent once however many passes
    see it; the same name written over with another profile is sent again."""
    exe = phases_main(ocaml_default)
    src = tmp_path / "src"
    os.makedirs(src)
    flammetest.run([exe, "0.3"], env=segment_env(build, str(src / "one.%p.flm")), timeout=120)
    made = sorted(glob.glob(str(src / "*.flm")))
    assert len(made) >= 2, "fewer than two segments written"
    d = tmp_path / "watch"
    os.makedirs(d)
    target = str(d / "a.flm")
    shutil.copyfile(made[0], target)
    w = subprocess.Popen([build.flamme, "push", "--watch", str(d), "--interval", "0.1",
                          "--url", server, "--label", "env=test"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(1.0)
    first = len(Receiver.requests)
    shutil.copyfile(made[1], target + ".tmp")
    os.rename(target + ".tmp", target)
    time.sleep(1.0)
    w.terminate()
    _, werr = w.communicate(timeout=30)
    bodies = [parts(r)[1].get("profile", (None, b""))[1] for r in Receiver.requests]
    check(first == 1, "a kept profile is sent once in ten passes", "%d requests" % first)
    check(len(bodies) == 2 and bodies[0] != bodies[1] and os.path.exists(target) and
          not werr.strip(),
          "the name written over with another segment: that one is sent too, the file kept",
          "%d requests, bodies differ: %s, stderr %r" % (len(bodies), len(set(bodies)) == 2, werr))


@pytest.mark.slow
def test_push_watch_killed(build, ocaml_default, server, check, tmp_path):
    """--watch --once --delete on the segment of a program that sleeps (the
    file stops changing): it is left alone, however long unchanged. Once
    the program dies of SIGKILL, the segment never gets its end record:
    what it holds is sent (one line says so) and deleted, not left in the
    directory for ever."""
    exe = phases_main(ocaml_default)
    d = str(tmp_path / "segs")
    os.makedirs(d)
    env = segment_env(build, os.path.join(d, "seg.%p.flm"))
    env["FLAMME_PERIOD"] = "60"
    prog = subprocess.Popen([exe, "0.5", "60"], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    # Asleep: the segment holds samples and has not changed for 2.5 s.
    peek = str(tmp_path / "peek.flm")
    deadline, stable, seg = time.time() + 30, None, None
    while time.time() < deadline:
        time.sleep(0.2)
        segs = glob.glob(os.path.join(d, "*.flm"))
        if len(segs) != 1:
            continue
        seg = segs[0]
        st = os.stat(seg)
        if stable is None or stable[0] != (st.st_size, st.st_mtime_ns):
            stable = ((st.st_size, st.st_mtime_ns), time.time())
        elif time.time() - stable[1] > 2.5:
            break
    shutil.copyfile(seg, peek)
    want = report_weight(build, [peek])[1]
    push = [build.flamme, "push", "--watch", d, "--once", "--delete", "--url", server,
            "--label", "env=test"]
    idle = flammetest.run(push, timeout=60)
    check(want and idle.returncode == 0 and not Receiver.requests and os.path.exists(seg) and
          not idle.stderr.strip(),
          "a sleeping program's unchanged segment is left for later: not sent, kept, nothing said",
          "weight %s, rc %d, %d requests, kept %s, stderr %r" % (
              want, idle.returncode, len(Receiver.requests), os.path.exists(seg), idle.stderr))
    prog.kill()
    prog.wait()
    gone = flammetest.run(push, timeout=60)
    n = len(Receiver.requests)
    total = None
    if n:
        total = pprof_total(parts(Receiver.requests[-1])[1].get("profile", (None, b""))[1],
                            str(tmp_path))[0]
    lines = gone.stderr.strip().splitlines()
    check(gone.returncode == 0 and n == 1 and total == want and not os.path.exists(seg),
          "killed: its segment is sent (pprof total == its samples) and deleted",
          "rc %d, %d requests, total %s of %s, kept %s" % (gone.returncode, n, total, want,
                                                          os.path.exists(seg)))
    check(len(lines) == 1 and seg in lines[0] and "ended without finishing" in lines[0],
          "one line names the incomplete segment and why it is sent", gone.stderr)


@pytest.mark.slow
def test_push_files(build, ocaml_default, server, check, tmp_path):
    """FILE...: profiles kept, the first and the last (shorter) segment's
    requests checked against the API; then a server that refuses and one
    that is not there."""
    exe = phases_main(ocaml_default)
    p = flammetest.run([exe, "1.0"], env=segment_env(build, str(tmp_path / "seg.%p.flm")), timeout=120)
    files = sorted(glob.glob(str(tmp_path / "*.flm")))
    assert files, "no segment written: " + p.stderr
    rc, out, err = flamme(build, "push", "--url", server, "--label", "env=test", *files)
    check(rc == 0 and len(Receiver.requests) == len(files),
          "push FILE... sends one request per profile",
          "rc %d, %d requests for %d files: %s" % (rc, len(Receiver.requests), len(files), err))
    for i, (req, f) in enumerate(zip(Receiver.requests, files)):
        if i in (0, len(files) - 1):
            check_request(check, req, build, f, str(tmp_path), "segment %d" % (i + 1))
    # Refused, then unreachable: one line each, exit 1, files kept.
    Receiver.status = 500
    rc, out, err = flamme(build, "push", "--url", server, files[0])
    lines = err.strip().splitlines()
    check(rc == 1 and len(lines) == 1 and "HTTP 500" in lines[0] and files[0] in lines[0] and
          os.path.exists(files[0]), "a refusing server: one line, exit 1", err)
    rc, out, err = flamme(build, "push", "--url", "http://127.0.0.1:1", files[0])
    lines = err.strip().splitlines()
    check(rc == 1 and len(lines) == 1 and files[0] in lines[0], "no server: one line, exit 1", err)
