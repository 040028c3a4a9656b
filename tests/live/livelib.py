"""tests/live/livelib.py — what the continuous-profile tests of tests/live
share (test_live.py, test_push.py, test_attach.py, test_timeline.py).

Owns: building tests/live/phases.ml's two programs (phases_main.exe,
profiled from outside; phases_lib.exe, linked with the flamme library),
reading a profile's SEGMENT records and samples byte by byte from the spec
(doc/format.md, tests/flmfile.py; not through common/profile.c), and
the `flamme report` / `flamme collapse` figures those tests compare.
"""
import os
import re
import struct
import zlib

import flammetest
import flmfile as prof  # tests/flmfile.py: the spec's decoding of samples

HERE = os.path.dirname(os.path.abspath(__file__))

HZ = 499
SEGMENT = 12  # record type (doc/format.md)


def phases_main(ocaml):
    """phases_main.exe SECS, built by the `ocaml` fixture's compiler."""
    return ocaml("live/main", [os.path.join(HERE, "phases.ml"), os.path.join(HERE, "phases_main.ml")],
                 libs=("unix",))


def phases_lib(build, compiler):
    """phases_lib.exe SECS OUTPUT PERIOD HZ, linked with the flamme library
    built by COMPILER."""
    _, flags, deps = flammetest.flamme_library(build, compiler)
    return flammetest.build_ocaml(compiler, [os.path.join(HERE, "phases.ml"),
                                             os.path.join(HERE, "phases_lib.ml")],
                                  build.path("progs", compiler.name, "live/lib"), libs=("unix",),
                                  flags=flags, deps=deps)


def read_records(path):
    """The spec's view of a profile: (header dict, [(type, body)]).
    Raises AssertionError on a malformed file."""
    data = open(path, "rb").read()
    assert data[:8] == b"FLAMMEPF", path
    major, minor, hsize, pid, hz, rt, mono = struct.unpack_from("<HHIIIQQ", data, 8)
    hdr = dict(major=major, minor=minor, pid=pid, hz=hz, realtime=rt, mono=mono)
    off, recs = hsize, []
    while off + 16 <= len(data):
        magic, raw_len, zlen, crc = struct.unpack_from("<IIII", data, off)
        assert magic == 0x434D4C46, "%s: bad chunk at %d" % (path, off)
        raw = zlib.decompress(data[off + 16:off + 16 + zlen])
        assert len(raw) == raw_len and zlib.crc32(raw) == crc, path
        p = 0
        while p < len(raw):
            t, bl = struct.unpack_from("<BI", raw, p)
            recs.append((t, raw[p + 5:p + 5 + bl]))
            p += 5 + bl
        off += 16 + zlen
    assert off == len(data), "%s: trailing bytes" % path
    return hdr, recs


def segment_facts(path):
    """(SEGMENT records [(seq, from, until, ...)], header, samples
    [(tid, serial, time, weight)])."""
    hdr, recs = read_records(path)
    seg = [struct.unpack_from("<IQQQ", b) for t, b in recs if t == SEGMENT]
    samples = [(tid, serial, tm, w)
               for _st, tid, w, _dom, _fl, tm, serial in prof.decode_samples(hdr["major"], hdr["mono"], recs)]
    return seg, hdr, samples


def flamme(build, *args):
    """`flamme ARGS`: (exit status, stdout, stderr)."""
    p = flammetest.run([build.flamme, *args], timeout=120)
    return p.returncode, p.stdout, p.stderr


def report_weight(build, files):
    """`flamme report FILES`: (exit status, total weight, status line, output)."""
    rc, out, err = flamme(build, "report", *files)
    m = re.search(r"samples: \d+ records, weight (\d+)", out)
    st = re.search(r"^\s*status: (.*)$", out, re.M)
    return rc, (int(m.group(1)) if m else None), (st.group(1) if st else None), out + err


def collapse(build, files):
    """`flamme collapse FILES`: (exit status, [(frames, weight)], stderr)."""
    rc, out, err = flamme(build, "collapse", *files)
    return rc, flammetest.parse_folded(out), err


def weight(stacks, fn):
    """Weight of the stacks with a frame FN (or FN_<suffix>)."""
    return flammetest.total(stacks, lambda f: any(x == fn or x.startswith(fn + "_") for x in f))
