#!/usr/bin/env python3
"""tests/export/run.py — tests of `flamme export` (speedscope, pprof, folded).

Usage: python3 tests/export/run.py build/flamme build/e2e/split/split.exe

Writes small profiles here in the flamme file format (common/profile.h),
including hostile frame names (quotes, backslashes, newlines, invalid UTF-8),
exports them with the real command, and checks what a viewer would load:
speedscope JSON parsed with json.load; pprof gunzipped and decoded with a
small protobuf reader written below (no external modules); folded text
compared with `flamme collapse`. Then records the split e2e program (work
split 50/30/20 by construction) and checks the exported shares and totals.
Expected values are computed here from the inputs.
Prints "export: N passed, N failed" last; exits 1 if anything failed.
"""
import json
import os
import struct
import subprocess
import sys
import tempfile
import traceback
import zlib

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import flammetest  # noqa: E402

FLAMME = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build/flamme")
SPLIT = os.path.abspath(sys.argv[2] if len(sys.argv) > 2 else "build/e2e/split/split.exe")
TMP = tempfile.mkdtemp(prefix="flamme-export-")
results = []


def test(fn):
    results.append(fn)
    return fn


def check(cond, what):
    if not cond:
        raise AssertionError(what)


# ------------------------------------------------------------ profile writer

def s_(b):
    if isinstance(b, str):
        b = b.encode()
    return struct.pack("<I", len(b)) + b


def write_profile(path, hz, frames, stacks, samples, threads, realtime=1_700_000_000_000_000_000,
                  mono=1_000_000_000, end=None):
    """frames: [(addr, offset, function bytes/str, module)], stacks: [[leaf..root ids]],
    samples: [(stack, tid, weight, domain, flags, time)], threads: [(tid, kind, domain, name)]."""
    recs = []

    def rec(t, body):
        recs.append(struct.pack("<BI", t, len(body)) + body)

    for tid, kind, dom, name in threads:
        rec(2, struct.pack("<IBiQ", tid, kind, dom, mono) + s_(name))
    for i, (addr, off, fn, mod) in enumerate(frames):
        rec(3, struct.pack("<IQQ", i, addr, off) + s_(fn) + s_(mod))
    for i, st in enumerate(stacks):
        rec(4, struct.pack("<II", i, len(st)) + b"".join(struct.pack("<I", f) for f in st))
    for st, tid, w, dom, flags, t in samples:
        rec(5, struct.pack("<IIIiIQ", st, tid, w, dom, flags, t))
    end = end if end is not None else max(s[5] for s in samples) + 1000
    rec(8, struct.pack("<QQQI", len(samples), 0, end, len(threads)))
    raw = b"".join(recs)
    z = zlib.compress(raw)
    hdr = b"FLAMMEPF" + struct.pack("<HHIIIQQI", 1, 1, 64, 4242, hz, realtime, mono, 0)
    hdr += b"\0" * (64 - len(hdr))
    with open(path, "wb") as f:
        f.write(hdr + struct.pack("<IIII", 0x434D4C46, len(raw), len(z), zlib.crc32(raw)) + z)


# ------------------------------------------------------------ protobuf reader

def decode_pprof(path):
    try:
        return flammetest.decode_pprof(path)
    except ValueError as e:
        raise AssertionError(str(e))


def pprof_valid(p):
    """The rules pprof's CheckValid applies, plus what speedscope needs."""
    check(p["strings"] and p["raw_strings"][0] == b"", "string_table[0] must be empty")
    check(p["sample_type"] == [("samples", "count"), ("cpu", "nanoseconds")],
          "sample_type %r" % p["sample_type"])
    for locs, vals, _ in p["samples"]:
        check(len(vals) == 2, "sample with %d values" % len(vals))
        check(locs, "sample without locations")
        for lid in locs:
            check(lid in p["locations"], "location id %d referenced but missing" % lid)
    for lid, loc in p["locations"].items():
        check(lid != 0, "location id 0")
        check(loc["functions"], "location %d without a line" % lid)
        for fid in loc["functions"]:
            check(fid != 0 and fid in p["functions"], "function id %d missing" % fid)
        check(loc["mapping"] == 0 or loc["mapping"] in p["mappings"], "mapping id missing")


def pprof_stacks(p):
    """{root-first name tuple: [count, cpu]} plus labels kept per sample."""
    out = {}
    for locs, vals, labels in p["samples"]:
        names = tuple(p["functions"][p["locations"][l]["functions"][-1]][0] for l in reversed(locs))
        key = (labels.get("thread"),) + names if labels else names
        acc = out.setdefault(key, [0, 0])
        acc[0] += vals[0]
        acc[1] += vals[1]
    return out


# ------------------------------------------------------------ running flamme

def run(*args, ok=True):
    r = subprocess.run([FLAMME] + list(args), capture_output=True, timeout=120)
    if ok:
        check(r.returncode == 0, "flamme %s: exit %d: %s" % (" ".join(args), r.returncode,
                                                            r.stderr.decode(errors="replace")))
    return r


def export(prof, fmt, *extra):
    out = os.path.join(TMP, os.path.basename(prof) + "." + fmt + ("-t" if extra else ""))
    run("export", prof, "--format", fmt, "-o", out, *extra)
    return out


# A small profile: 3 threads, hostile names, a truncated and a broken stack.
HOSTILE = b'q"uote\\back\nnl\ttab \xff\xfe bad \xe2\x82 cut \xc3\xa9 ok \xf0\x9f\x94\xa5'
HOSTILE_TEXT = 'q"uote\\back\nnl\ttab \ufffd\ufffd bad \ufffd\ufffd cut \u00e9 ok \U0001f525'
HZ = 997
SMALL_FRAMES = [
    (0x1000, 0x1000, "main", "/bin/prog"),                      # 0
    (0x2000, 0x2000, "camlM.entry", "/bin/prog"),               # 1
    (0x3000, 0x3000, "camlM.work_12", "/bin/prog"),             # 2
    (0x4000, 0x4000, "camlStdlib__List.map_279", "/bin/prog"),  # 3
    (0x3010, 0x3010, "camlM.work_12", "/bin/prog"),             # 4 second address, same function
    (0x7f001f00, 0x1f00, "", "/usr/lib/lib\"foo.so"),           # 5 no symbol
    (0x5000, 0x5000, HOSTILE, "/bin/prog"),                     # 6
]
SMALL_STACKS = [[3, 2, 1, 0], [4, 1, 0], [2, 1, 0], [3, 2], [5, 2], [6, 0]]
# (stack, tid, weight, domain, flags, time)
SMALL_SAMPLES = [
    (0, 100, 1, 0, 0, 1_000_002_000), (0, 100, 2, 0, 0, 1_000_003_000),
    (0, 101, 1, 1, 0, 1_000_003_500), (1, 100, 1, 0, 0, 1_000_004_000),
    (2, 100, 4, 0, 0, 1_000_005_000), (3, 102, 1, 1, 1, 1_000_006_000),
    (4, 103, 1, 0, 2, 1_000_007_000), (5, 100, 3, 0, 0, 1_000_008_000),
]
SMALL_THREADS = [(100, 1, 0, "prog"), (101, 2, 1, ""), (102, 3, 1, "")]
NAMES = {0: "main", 1: "M (init)", 2: "M.work", 3: "Stdlib.List.map", 4: "M.work",
         5: '[lib"foo.so]', 6: HOSTILE_TEXT}
LABELS = {100: "main", 101: "domain 1", 102: "thread 102 (domain 1)", 103: "thread 103"}
PERIOD = 10**9 // HZ


def small_profile():
    path = os.path.join(TMP, "small.flm")
    if not os.path.exists(path):
        write_profile(path, HZ, SMALL_FRAMES, SMALL_STACKS, SMALL_SAMPLES, SMALL_THREADS)
    return path


def expected_stacks(threads):
    """{root-first display names: weight} computed from SMALL_* as collapse names them."""
    out = {}
    for st, tid, w, _, flags, _ in SMALL_SAMPLES:
        names = [NAMES[f] for f in reversed(SMALL_STACKS[st])]
        if flags & 1:
            names = ["[truncated]"] + names
        elif flags & 2:
            names = ["[broken]"] + names
        key = tuple(([LABELS[tid]] if threads else []) + names)
        out[key] = out.get(key, 0) + w
    return out


def speedscope_stacks(doc, prof):
    frames = doc["shared"]["frames"]
    out = {}
    for stack, w in zip(prof["samples"], prof["weights"]):
        key = tuple(frames[i]["name"] for i in stack)
        out[key] = out.get(key, 0) + w
    return out


# ------------------------------------------------------------ tests

@test
def speedscope_all_threads():
    """speedscope: schema, one profile, stacks root first with demangled names, ns weights"""
    doc = json.load(open(export(small_profile(), "speedscope"), encoding="utf-8"))
    check(doc["$schema"] == "https://www.speedscope.app/file-format-schema.json", "schema")
    check(len(doc["profiles"]) == 1, "profiles: %d" % len(doc["profiles"]))
    prof = doc["profiles"][0]
    check(prof["type"] == "sampled" and prof["unit"] == "nanoseconds", "type/unit %r" % prof)
    check(len(prof["samples"]) == len(prof["weights"]) == len(SMALL_SAMPLES), "sample count")
    got = speedscope_stacks(doc, prof)
    want = {k: v * PERIOD for k, v in expected_stacks(False).items()}
    check(got == want, "stacks\n got %r\nwant %r" % (got, want))
    nframes = len(doc["shared"]["frames"])
    for s in prof["samples"]:
        check(all(0 <= i < nframes for i in s), "frame index out of range")
    names = [f["name"] for f in doc["shared"]["frames"]]
    check(names.count("M.work") == 1, "two addresses in M.work must share one frame")
    files = {f["name"]: f.get("file") for f in doc["shared"]["frames"]}
    check(files["M.work"] == "prog" and files['[lib"foo.so]'] == 'lib"foo.so', "file = module basename")
    times = [s[5] - 1_000_000_000 for s in SMALL_SAMPLES]
    check(prof["startValue"] == min(times) and prof["endValue"] == max(times) + PERIOD,
          "start/end %r %r" % (prof["startValue"], prof["endValue"]))


@test
def speedscope_threads():
    """speedscope --threads: one profile per thread, named like the flame graph's thread roots"""
    doc = json.load(open(export(small_profile(), "speedscope", "--threads"), encoding="utf-8"))
    names = [p["name"] for p in doc["profiles"]]
    check(sorted(names) == sorted(LABELS.values()), "profile names %r" % names)
    got = {}
    for prof in doc["profiles"]:
        for k, v in speedscope_stacks(doc, prof).items():
            got[(prof["name"],) + k] = v
    want = {k: v * PERIOD for k, v in expected_stacks(True).items()}
    check(got == want, "stacks\n got %r\nwant %r" % (got, want))


@test
def speedscope_hostile_names():
    """hostile names: quotes, backslash, newline, tab, invalid UTF-8 survive as valid JSON"""
    path = export(small_profile(), "speedscope")
    raw = open(path, "rb").read()
    raw.decode("utf-8")  # strict: the file itself must be valid UTF-8
    doc = json.loads(raw)
    names = [f["name"] for f in doc["shared"]["frames"]]
    check(HOSTILE_TEXT in names, "hostile name not found intact: %r" % names)
    # Every code point in the name table is valid: no surrogates from bad escapes.
    for n in names:
        n.encode("utf-8")
    # A name made only of bytes that cannot start UTF-8, and one cut at the end.
    p2 = os.path.join(TMP, "bytes.flm")
    frames = [(0x10, 0x10, bytes(range(0x80, 0x100)), "/x"), (0x20, 0x20, b"end\xe2\x82", "/x\\y\"\n"),
              (0x30, 0x30, bytes(range(1, 0x80)), "/x")]
    write_profile(p2, 100, frames, [[0], [1, 2]], [(0, 1, 1, 0, 0, 1_000_000_001), (1, 1, 2, 0, 0, 1_000_000_002)],
                  [(1, 1, 0, "m")])
    doc = json.loads(open(export(p2, "speedscope"), "rb").read().decode("utf-8"))
    names = [f["name"] for f in doc["shared"]["frames"]]
    check("\ufffd" * 128 in names, "bytes 0x80..0xff must become 128 U+FFFD")
    check("end\ufffd\ufffd" in names, "cut sequence: %r" % names)
    check(bytes(range(1, 0x80)).decode() in names, "ASCII controls must round-trip through escapes")
    check('x\\y"\n' in [f.get("file") for f in doc["shared"]["frames"]], "module names escaped too")


@test
def pprof_small():
    """pprof: gzip, valid ids, string_table[0] == "", demangled names, raw system names, totals"""
    prof = decode_pprof(export(small_profile(), "pprof"))
    pprof_valid(prof)
    got = pprof_stacks(prof)
    want = {k: [v, v * 10**9 // HZ] for k, v in expected_stacks(False).items()}
    check(got == want, "stacks\n got %r\nwant %r" % (got, want))
    total = sum(s[2] for s in SMALL_SAMPLES)
    check(sum(v[0] for _, v, _ in prof["samples"]) == total, "sample count total")
    fns = set(prof["functions"].values())
    check(("Stdlib.List.map", "camlStdlib__List.map_279") in fns, "function names %r" % fns)
    check(("M.work", "camlM.work_12") in fns, "function names %r" % fns)
    check(any(n == HOSTILE_TEXT for n, _ in fns), "hostile name in function table")
    check(HOSTILE in prof["raw_strings"], "system_name keeps the raw symbol bytes")
    addrs = {loc["address"] for loc in prof["locations"].values()}
    check({f[0] for f in SMALL_FRAMES} <= addrs, "every frame address is a location")
    check(set(prof["mappings"].values()) == {"/bin/prog", '/usr/lib/lib"foo.so'}, "mappings %r" % prof["mappings"])
    check(prof["period_type"] == ("cpu", "nanoseconds") and prof["period"] == PERIOD, "period")
    check(prof["time_nanos"] == 1_700_000_000_000_000_000, "time_nanos %d" % prof["time_nanos"])
    check(prof["duration_nanos"] == max(s[5] for s in SMALL_SAMPLES) + 1000 - 1_000_000_000, "duration")
    check(prof["default_sample_type"] == "cpu", "default_sample_type")
    check(all(not labels for _, _, labels in prof["samples"]), "no labels without --threads")


@test
def pprof_threads():
    """pprof --threads: a "thread" label per sample with the thread's display name"""
    prof = decode_pprof(export(small_profile(), "pprof", "--threads"))
    pprof_valid(prof)
    got = pprof_stacks(prof)
    want = {k: [v, v * 10**9 // HZ] for k, v in expected_stacks(True).items()}
    check(got == want, "stacks\n got %r\nwant %r" % (got, want))


@test
def folded_matches_collapse():
    """folded: identical to `flamme collapse`, with and without --threads"""
    prof = small_profile()
    for extra in ([], ["--threads"]):
        out = open(export(prof, "folded", *extra), "rb").read()
        ref = run("collapse", prof, *extra).stdout
        check(out == ref, "folded differs from collapse %r" % extra)
        check(out.count(b"\n") == len(expected_stacks(bool(extra))), "line count")


@test
def bad_input():
    """bad input: one clear line on stderr, exit 2"""
    junk = os.path.join(TMP, "junk.flm")
    open(junk, "wb").write(b"this is not a profile\n" * 10)
    cases = [
        ([os.path.join(TMP, "missing.flm"), "--format", "pprof"], "missing.flm"),
        ([junk, "--format", "speedscope"], "junk.flm"),
        ([small_profile(), "--format", "svg"], "svg"),
        ([small_profile()], "--format"),
        ([small_profile(), "--format"], "--format"),
        ([small_profile(), "--format", "pprof", "--bogus"], "--bogus"),
    ]
    for args, word in cases:
        r = run("export", *args, ok=False)
        err = r.stderr.decode(errors="replace")
        check(r.returncode == 2, "%r: exit %d" % (args, r.returncode))
        check(err.count("\n") == 1 and word in err and err.startswith("flamme export"),
              "%r: stderr %r" % (args, err))
    r = run("export", small_profile(), "--format", "pprof", "-o", os.path.join(TMP, "nodir", "x"), ok=False)
    check(r.returncode == 1 and "nodir" in r.stderr.decode(), "unwritable output: exit 1 with the path")


SPLIT_PROF = os.path.join(TMP, "split.flm")


def split_profile():
    if not os.path.exists(SPLIT_PROF):
        run("record", "-F", "499", "-o", SPLIT_PROF, "--", SPLIT, "30")
    return SPLIT_PROF


def shares(stacks):
    """Inclusive share (percent) of Split.work_a/b/c among stacks under Split.run_rounds."""
    under = {"a": 0, "b": 0, "c": 0}
    total = 0
    for names, w in stacks.items():
        if "Split.run_rounds" not in names:
            continue
        total += w
        for k in under:
            if "Split.work_" + k in names:
                under[k] += w
    check(total > 0, "no samples under Split.run_rounds")
    return {k: 100.0 * v / total for k, v in under.items()}, total


@test
def split_speedscope():
    """recorded split.exe: speedscope weights of work_a/b/c are 50/30/20 (+-5 points)"""
    doc = json.load(open(export(split_profile(), "speedscope", "--threads"), encoding="utf-8"))
    stacks = {}
    for prof in doc["profiles"]:
        for k, v in speedscope_stacks(doc, prof).items():
            stacks[k] = stacks.get(k, 0) + v
    sh, total = shares(stacks)
    for k, want in (("a", 50), ("b", 30), ("c", 20)):
        check(abs(sh[k] - want) <= 5, "work_%s: %.1f%% (want %d +-5) %r" % (k, sh[k], want, sh))
    print("  split shares (speedscope): a %.1f%%, b %.1f%%, c %.1f%% of %d ns" % (sh["a"], sh["b"], sh["c"], total))


@test
def split_pprof_totals():
    """recorded split.exe: pprof sample totals equal the profile's (collapse) total; same split"""
    prof = decode_pprof(export(split_profile(), "pprof"))
    pprof_valid(prof)
    folded = run("collapse", split_profile()).stdout.decode()
    total = sum(int(line.rsplit(" ", 1)[1]) for line in folded.splitlines())
    got = sum(v[0] for _, v, _ in prof["samples"])
    check(got == total and total > 0, "pprof count total %d, profile %d" % (got, total))
    cpu = sum(v[1] for _, v, _ in prof["samples"])
    check(abs(cpu - total * prof["period"]) <= len(prof["samples"]), "cpu total %d vs %d" % (cpu, total * prof["period"]))
    sh, _ = shares({k: v[0] for k, v in pprof_stacks(prof).items()})
    for k, want in (("a", 50), ("b", 30), ("c", 20)):
        check(abs(sh[k] - want) <= 5, "pprof work_%s: %.1f%%" % (k, sh[k]))


def main():
    passed = failed = 0
    for fn in results:
        try:
            fn()
            passed += 1
            print("ok %s: %s" % (fn.__name__, fn.__doc__))
        except Exception as e:  # report and continue with the next test
            failed += 1
            print("FAIL %s: %s\n  %s" % (fn.__name__, fn.__doc__, e))
            if not isinstance(e, AssertionError):
                traceback.print_exc()
    print("export: %d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
