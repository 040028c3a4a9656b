#!/usr/bin/env python3
"""bench/size_bench.py — what a sample costs on disk (make bench-size).

Records real OCaml test programs (tests/e2e: two domains, an effects
scheduler, a 6000-deep recursion, a single-domain deep recursion again with the handler budget off, split) built with both
compilers (frame pointers and without) at -F 999, and prints for each the
file's bytes per sample record, before zlib (the chunks' raw_len, headers
included) and after (the file's size), plus the format version written.
A figure, never an assertion: the lead compares runs across changes.
Usage: size_bench.py --build BUILD [--flamme PATH] [--percent P]
"""
import argparse
import os
import re
import struct
import subprocess
import sys
import tempfile

# (label, program, env): deep-nb is deep with the handler budget off, so
# every sample keeps its 6000 frames (the budget shortens them to 64).
PROGS = [("domains", "domains", {}), ("effects", "effects", {}), ("deep", "deep", {}),
         ("deep-nb", "deep", {"FLAMME_BUDGET": "0"}), ("split", "split", {})]
COMPILERS = [("fp", "e2e"), ("nofp", "nofp")]


def raw_bytes(path):
    """Header size + 16 per chunk + the chunks' raw_len: the file as it
    would be without zlib."""
    data = open(path, "rb").read()
    hsize = struct.unpack_from("<I", data, 12)[0]
    off, total = hsize, hsize
    while off + 16 <= len(data):
        _, raw, zlen, _ = struct.unpack_from("<IIII", data, off)
        total += 16 + raw
        off += 16 + zlen
    return total


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--flamme", help="flamme command to record with (default BUILD/flamme)")
    ap.add_argument("--percent", default="100", help="program run length, percent of its default")
    a = ap.parse_args()
    flamme = os.path.abspath(a.flamme or os.path.join(a.build, "flamme"))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for cc, sub in COMPILERS:
            for name, prog, env in PROGS:
                exe = os.path.join(a.build, sub, prog, prog + ".exe")
                if not os.path.exists(exe):
                    sys.exit("bench-size: %s missing (make its target first)" % exe)
                out = os.path.join(tmp, "%s-%s.flm" % (cc, name))
                p = subprocess.run([flamme, "record", "-F", "999", "-o", out, "--", exe, a.percent],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                   env=dict(os.environ, **env))
                if p.returncode != 0:
                    sys.exit("bench-size: recording %s (%s) failed: %s" % (name, cc, p.stderr.strip()))
                rep = subprocess.run([flamme, "report", out], capture_output=True, text=True).stdout
                m = re.search(r"samples: (\d+) records, weight (\d+)", rep)
                if not m:
                    sys.exit("bench-size: no sample count in `flamme report %s`" % out)
                n = int(m.group(1))
                data = open(out, "rb").read(12)
                ver = "%d.%d" % struct.unpack_from("<HH", data, 8)
                rows.append((cc, name, ver, n, raw_bytes(out), os.path.getsize(out)))
    print("%-5s %-8s %-6s %8s %12s %10s %11s %10s" % ("cc", "program", "format", "samples", "raw bytes",
                                                      "raw B/smp", "file bytes", "file B/smp"))
    for cc, name, ver, n, raw, size in rows:
        print("%-5s %-8s %-6s %8d %12d %10.1f %11d %10.2f" % (cc, name, ver, n, raw, raw / max(1, n),
                                                            size, size / max(1, n)))
    tn = sum(r[3] for r in rows)
    print("all: %d samples, %.1f raw B/sample (before zlib), %.2f file B/sample (after zlib)"
          % (tn, sum(r[4] for r in rows) / max(1, tn), sum(r[5] for r in rows) / max(1, tn)))


if __name__ == "__main__":
    main()
