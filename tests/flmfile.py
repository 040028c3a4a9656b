"""tests/flmfile.py — writes flamme profiles byte by byte (doc/format.md),
valid or hostile, and reads their records and samples back. Independent of
common/profile.c on purpose: it is a second reader's view of the spec. Used
by tests/files (hostile files, make fuzz's seeds), tests/export and
tests/live."""
import struct
import zlib

from flammetest import unzigzag, varint

INFO, THREAD, FRAME, STACK, SAMPLE, LOST, THREAD_END, END, GC, FRAME_LINE = range(1, 11)
THREAD2 = 11  # placeholder, set by the format version tests when known


def s(b):
    if isinstance(b, str):
        b = b.encode()
    return struct.pack("<I", len(b)) + b


def rec(t, body):
    return struct.pack("<BI", t, len(body)) + body


def info(k, v):
    return rec(INFO, s(k) + s(v))


def thread(tid, kind, domain, t, name=""):
    return rec(THREAD, struct.pack("<IBiQ", tid, kind, domain, t) + s(name))


def thread_end(tid, t):
    return rec(THREAD_END, struct.pack("<IQ", tid, t))


def frame(fid, addr, off, fn, mod):
    return rec(FRAME, struct.pack("<IQQ", fid, addr, off) + s(fn) + s(mod))


def stack(sid, frames, n=None):
    n = len(frames) if n is None else n
    return rec(STACK, struct.pack("<II", sid, n) + b"".join(struct.pack("<I", f) for f in frames))


def sample(sid, tid, weight=1, domain=0, flags=0, t=0):
    return rec(SAMPLE, struct.pack("<IIIiIQ", sid, tid, weight, domain, flags, t))


def end(samples=0, lost=0, t=0, threads=0):
    return rec(END, struct.pack("<QQQI", samples, lost, t, threads))


def header(hz=99, pid=1, major=1, minor=2, start_mono=0, start_real=0):
    h = b"FLAMMEPF" + struct.pack("<HHIIIQQI", major, minor, 64, pid, hz, start_real, start_mono, 0)
    return h + b"\0" * (64 - len(h))


def chunk(payload, level=6):
    z = zlib.compress(payload, level)
    return struct.pack("<IIII", 0x434D4C46, len(payload), len(z), zlib.crc32(payload)) + z


def profile(*payloads, **hdr):
    """A whole file: header then one chunk per payload (bytes)."""
    return header(**hdr) + b"".join(chunk(p) for p in payloads)


def simple(hz=99, minor=2):
    """A small valid profile: main -> work -> leaf on two threads."""
    p = (info("cmdline", "prog arg") + thread(10, 1, 0, 0, "prog") + thread(11, 2, 1, 0) +
         frame(0, 0x1000, 0x1000, "main", "/bin/prog") +
         frame(1, 0x2000, 0x2000, "camlProg.work_10", "/bin/prog") +
         frame(2, 0x3000, 0x3000, "camlProg.leaf_11", "/bin/prog") +
         stack(0, [2, 1, 0]) + stack(1, [1, 0]) +
         sample(0, 10, 3, 0, 0, 100) + sample(1, 11, 2, 1, 0, 200) + sample(0, 11, 1, 1, 0, 300) +
         end(3, 0, 400, 2))
    return profile(p, hz=hz, minor=minor)


def thread13(tid, serial, kind, domain, t, name=""):
    return rec(THREAD, struct.pack("<IBiQ", tid, kind, domain, t) + s(name) + struct.pack("<I", serial))


def sample13(sid, tid, serial, weight=1, domain=0, flags=0, t=0):
    return rec(SAMPLE, struct.pack("<IIIiIQI", sid, tid, weight, domain, flags, t, serial))


def thread_end13(tid, serial, t):
    return rec(THREAD_END, struct.pack("<IQI", tid, t, serial))


def records(data):
    """[(type, body)] of every whole chunk of a profile file."""
    off, out = struct.unpack_from("<I", data, 12)[0], []
    while off + 16 <= len(data):
        _, raw, zlen, _ = struct.unpack_from("<IIII", data, off)
        p = zlib.decompress(data[off + 16:off + 16 + zlen])
        off += 16 + zlen
        i = 0
        while i < len(p):
            t, n = struct.unpack_from("<BI", p, i)
            out.append((t, p[i + 5:i + 5 + n]))
            i += 5 + n
    return out


SAMPLES = 16  # 2.0: runs of delta-coded samples (STACK_NODES is 15)


def decode_samples(major, start_mono, recs):
    """Every sample of a file's records, as (stack, tid, weight, domain,
    flags, time_ns, serial): SAMPLE records of a 1.x file, SAMPLES of 2.x
    (stack: a 1.x stack id, or a 2.x node id)."""
    out = []
    for t, b in recs:
        if t == SAMPLE and major == 1:
            sid, tid, w, dom, fl, tm = struct.unpack_from("<IIIiIQ", b)
            serial = struct.unpack_from("<I", b, 28)[0] if len(b) >= 32 else 0
            out.append((sid, tid, w, dom, fl, tm, serial))
        elif t == SAMPLES and major >= 2:
            i, tid, serial, dom, fl, tm = 0, 0, 0, -1, 0, start_mono
            while i < len(b):
                tag, i = b[i], i + 1
                if tag & 1:
                    tid, i = varint(b, i)
                    serial, i = varint(b, i)
                if tag & 2:
                    dom, i = varint(b, i)
                    dom = unzigzag(dom)
                if tag & 4:
                    fl, i = varint(b, i)
                w = 1
                if tag & 8:
                    w, i = varint(b, i)
                node, i = varint(b, i)
                dt, i = varint(b, i)
                tm = (tm + unzigzag(dt)) & (2**64 - 1)
                out.append((node, tid, w, dom, fl, tm, serial))
    return out


def samples(data):
    """decode_samples of a whole profile file."""
    major = struct.unpack_from("<H", data, 8)[0]
    return decode_samples(major, struct.unpack_from("<Q", data, 32)[0], records(data))
