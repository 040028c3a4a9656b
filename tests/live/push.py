#!/usr/bin/env python3
"""tests/live/push.py — `flamme push` against a local stand-in for Grafana
Pyroscope's HTTP ingest API (make live-test).

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

Last line: "push: N passed, N failed". Exit status 1 on any failure.
Usage: push.py --build DIR
"""
import argparse
import email.parser
import email.policy
import glob
import http.server
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run as live  # noqa: E402  (check, flamme, segment_facts, the pass/fail counts)

check, flamme = live.check, live.flamme
HZ = 499


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
    f = tempfile.NamedTemporaryFile(dir=work, suffix=".pb.gz", delete=False)
    f.write(data)
    f.close()
    env = dict(os.environ, HOME=work, GOCACHE=os.path.join(work, "gocache"), GOFLAGS="-mod=mod")
    p = subprocess.run(["go", "tool", "pprof", "-raw", f.name], capture_output=True, text=True,
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


def report_weight(build, f):
    rc, w, st, out = live.report_weight(build, [f])
    return w


def check_request(req, build, f, work, what):
    """The documented API, for one request carrying profile f."""
    u = urllib.parse.urlsplit(req["path"])
    q = dict(urllib.parse.parse_qsl(u.query))
    seg, hdr, samples = live.segment_facts(f)
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
        w = report_weight(build, f)
        check(total == w and "thread" in (lbls or set()),
              "%s: go tool pprof reads the body: total %s == the segment's %s samples, thread labels"
              % (what, total, w), str(lbls))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    a = ap.parse_args()
    build = os.path.abspath(a.build)
    work = tempfile.mkdtemp(prefix="flamme-push-")
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    url = "http://127.0.0.1:%d" % srv.server_address[1]
    lib = os.path.join(build, "libflamme.so")
    for comp in ("fp", "nofp"):
        exe = os.path.join(build, "live", comp, "phases_main.exe")
        d = os.path.join(work, comp)
        os.makedirs(d)
        env = live.clean_env({"LD_PRELOAD": lib, "FLAMME_PERIOD": "0.5", "FLAMME_HZ": str(HZ),
                              "FLAMME_OUTPUT": os.path.join(d, "seg.%p.flm")})
        # --watch while the program runs: segments are sent as they complete.
        Receiver.requests, Receiver.status = [], 200
        w = subprocess.Popen([os.path.join(build, "flamme"), "push", "--watch", d, "--delete",
                              "--interval", "0.2", "--url", url, "--label", "env=test"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        prog = subprocess.Popen([exe, "1.0"], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
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
        check(w.returncode == 0 and not werr.strip(), "%s: push --watch stops cleanly on SIGTERM" % comp,
              "rc %s: %s" % (w.returncode, werr))
        n = len(Receiver.requests)
        check(n >= 4 and seen_during >= 2, "%s: --watch sent segments while the program ran" % comp,
              "%d requests, %d during the run" % (n, seen_during))
        check(not glob.glob(os.path.join(d, "*.flm")), "%s: --delete removed every segment sent" % comp,
              str(os.listdir(d)))
        froms = [int(dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(r["path"]).query))["from"])
                 for r in Receiver.requests]
        check(froms == sorted(froms), "%s: segments sent in order" % comp, str(froms))
        # FILE... : profiles kept, every request checked against the API.
        d2 = os.path.join(work, comp + "-files")
        os.makedirs(d2)
        env["FLAMME_OUTPUT"] = os.path.join(d2, "seg.%p.flm")
        p = subprocess.run([exe, "1.0"], env=env, capture_output=True, text=True, timeout=120)
        files = sorted(glob.glob(os.path.join(d2, "*.flm")))
        Receiver.requests = []
        rc, out, err = flamme(build, "push", "--url", url, "--label", "env=test", *files)
        check(rc == 0 and len(Receiver.requests) == len(files) and files,
              "%s: push FILE... sends one request per profile" % comp,
              "rc %d, %d requests for %d files: %s" % (rc, len(Receiver.requests), len(files), err))
        for i, (req, f) in enumerate(zip(Receiver.requests, files)):
            if i in (0, len(files) - 1):  # the first and the last (shorter) segment
                check_request(req, build, f, work, "%s segment %d" % (comp, i + 1))
        # Refused, then unreachable: one line each, exit 1, files kept.
        Receiver.status = 500
        rc, out, err = flamme(build, "push", "--url", url, files[0])
        lines = err.strip().splitlines()
        check(rc == 1 and len(lines) == 1 and "HTTP 500" in lines[0] and files[0] in lines[0] and
              os.path.exists(files[0]), "%s: a refusing server: one line, exit 1" % comp, err)
        rc, out, err = flamme(build, "push", "--url", "http://127.0.0.1:1", files[0])
        lines = err.strip().splitlines()
        check(rc == 1 and len(lines) == 1 and files[0] in lines[0],
              "%s: no server: one line, exit 1" % comp, err)
        Receiver.status = 200
    srv.shutdown()
    shutil.rmtree(work, ignore_errors=True)
    print("push: %d passed, %d failed" % (live.passed, live.failed))
    sys.exit(1 if live.failed else 0)


if __name__ == "__main__":
    main()
