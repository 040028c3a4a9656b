"""tests/export/test_export.py — `flamme export` (speedscope, pprof,
folded) (make export-test, part of make test).

Writes small profiles in the flamme file format (tests/flmfile.py),
including hostile frame names (quotes, backslashes, newlines, invalid
UTF-8), exports them with the real command, and checks what a viewer would
load: speedscope JSON parsed with json.load; pprof gunzipped and decoded
with flammetest's protobuf reader, and read by `go tool pprof` itself when
Go is installed; folded text compared with `flamme collapse`. Then records
tests/e2e/split.ml (work split 50/30/20 by construction), built with the
default compiler (the subject is the exporters' arithmetic, not the walk),
and checks the exported shares and totals. Expected values are computed
here from the inputs.
"""
import json
import os
import re
import shutil
import subprocess

import pytest

import flmfile
from flammetest import clean_env, decode_pprof

HERE = os.path.dirname(os.path.abspath(__file__))


def write_profile(path, hz, frames, stacks, samples, threads, realtime=1_700_000_000_000_000_000,
                  mono=1_000_000_000, end=None):
    """A 1.1 profile. frames: [(addr, offset, function bytes/str, module)],
    stacks: [[leaf..root ids]], samples: [(stack, tid, weight, domain, flags,
    time)], threads: [(tid, kind, domain, name)]."""
    body = b"".join(flmfile.thread(tid, kind, dom, mono, name) for tid, kind, dom, name in threads)
    body += b"".join(flmfile.frame(i, *fr) for i, fr in enumerate(frames))
    body += b"".join(flmfile.stack(i, st) for i, st in enumerate(stacks))
    body += b"".join(flmfile.sample(*s) for s in samples)
    end = end if end is not None else max(s[5] for s in samples) + 1000
    body += flmfile.end(len(samples), 0, end, len(threads))
    with open(path, "wb") as fh:
        fh.write(flmfile.profile(body, hz=hz, pid=4242, minor=1, start_real=realtime, start_mono=mono))


# ------------------------------------------------------------ pprof, checked

def pprof_valid(check, p):
    """The rules pprof's CheckValid applies, plus what speedscope needs."""
    check(p["strings"] and p["raw_strings"][0] == b"", "string_table[0] is empty")
    check(p["sample_type"] == [("samples", "count"), ("cpu", "nanoseconds")],
          "sample_type", p["sample_type"])
    for locs, vals, _ in p["samples"]:
        check(len(vals) == 2, "a sample has 2 values", len(vals))
        check(locs, "a sample has locations")
        missing = [lid for lid in locs if lid not in p["locations"]]
        check(not missing, "a sample's location ids exist", missing)
    for lid, loc in p["locations"].items():
        check(lid != 0, "location id is not 0")
        check(loc["functions"], "location %d has a line" % lid)
        for fid in loc["functions"]:
            check(fid != 0 and fid in p["functions"], "location %d: function id %d exists" % (lid, fid))
        check(loc["mapping"] == 0 or loc["mapping"] in p["mappings"], "location %d: mapping id exists" % lid)


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

class Exporter:
    """The flamme under test, writing into DIR."""

    def __init__(self, build, d):
        self.flamme = build.flamme
        self.dir = d

    def path(self, name):
        return os.path.join(self.dir, name)

    def run(self, *args):
        """flamme ARGS; the CompletedProcess (bytes)."""
        return subprocess.run([self.flamme] + list(args), capture_output=True, timeout=120, env=clean_env())

    def ok(self, *args):
        """flamme ARGS, which must succeed: its stdout."""
        r = self.run(*args)
        assert r.returncode == 0, "flamme %s: exit %d: %s" % (" ".join(args), r.returncode,
                                                             r.stderr.decode(errors="replace"))
        return r.stdout

    def export(self, prof, fmt, *extra):
        out = self.path(os.path.basename(prof) + "." + fmt + ("-t" if extra else ""))
        self.ok("export", prof, "--format", fmt, "-o", out, *extra)
        return out


@pytest.fixture(scope="module")
def ex(build, tmp_path_factory):
    return Exporter(build, str(tmp_path_factory.mktemp("export")))


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


@pytest.fixture(scope="module")
def small(ex):
    path = ex.path("small.flm")
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

def test_speedscope_all_threads(ex, small, check):
    """speedscope: schema, one profile, stacks root first with demangled names, ns weights"""
    doc = json.load(open(ex.export(small, "speedscope"), encoding="utf-8"))
    check(doc["$schema"] == "https://www.speedscope.app/file-format-schema.json", "schema")
    check(len(doc["profiles"]) == 1, "one profile", len(doc["profiles"]))
    prof = doc["profiles"][0]
    check(prof["type"] == "sampled" and prof["unit"] == "nanoseconds", "type sampled, unit nanoseconds",
          (prof["type"], prof["unit"]))
    check(len(prof["samples"]) == len(prof["weights"]) == len(SMALL_SAMPLES), "one speedscope sample per sample")
    got = speedscope_stacks(doc, prof)
    want = {k: v * PERIOD for k, v in expected_stacks(False).items()}
    check(got == want, "stacks and weights as computed from the input", "\n got %r\nwant %r" % (got, want))
    nframes = len(doc["shared"]["frames"])
    for s in prof["samples"]:
        check(all(0 <= i < nframes for i in s), "frame indices in range", s)
    names = [f["name"] for f in doc["shared"]["frames"]]
    check(names.count("M.work") == 1, "two addresses in M.work share one frame")
    files = {f["name"]: f.get("file") for f in doc["shared"]["frames"]}
    check(files["M.work"] == "prog" and files['[lib"foo.so]'] == 'lib"foo.so', "file = the module's base name", files)
    times = [s[5] - 1_000_000_000 for s in SMALL_SAMPLES]
    check(prof["startValue"] == min(times) and prof["endValue"] == max(times) + PERIOD,
          "start/end = first sample, last sample + period", (prof["startValue"], prof["endValue"]))


def test_speedscope_threads(ex, small, check):
    """speedscope --threads: one profile per thread, named like the flame graph's thread roots"""
    doc = json.load(open(ex.export(small, "speedscope", "--threads"), encoding="utf-8"))
    names = [p["name"] for p in doc["profiles"]]
    check(sorted(names) == sorted(LABELS.values()), "one profile per thread, named as its root", names)
    got = {}
    for prof in doc["profiles"]:
        for k, v in speedscope_stacks(doc, prof).items():
            got[(prof["name"],) + k] = v
    want = {k: v * PERIOD for k, v in expected_stacks(True).items()}
    check(got == want, "stacks and weights as computed from the input", "\n got %r\nwant %r" % (got, want))


def test_speedscope_hostile_names(ex, small, check):
    """hostile names: quotes, backslash, newline, tab, invalid UTF-8 survive as valid JSON"""
    path = ex.export(small, "speedscope")
    raw = open(path, "rb").read()
    raw.decode("utf-8")  # strict: the file itself must be valid UTF-8
    doc = json.loads(raw)
    names = [f["name"] for f in doc["shared"]["frames"]]
    check(HOSTILE_TEXT in names, "the hostile name survives intact", names)
    # Every code point in the name table is valid: no surrogates from bad escapes.
    for n in names:
        n.encode("utf-8")
    # A name made only of bytes that cannot start UTF-8, and one cut at the end.
    p2 = ex.path("bytes.flm")
    frames = [(0x10, 0x10, bytes(range(0x80, 0x100)), "/x"), (0x20, 0x20, b"end\xe2\x82", "/x\\y\"\n"),
              (0x30, 0x30, bytes(range(1, 0x80)), "/x")]
    write_profile(p2, 100, frames, [[0], [1, 2]], [(0, 1, 1, 0, 0, 1_000_000_001), (1, 1, 2, 0, 0, 1_000_000_002)],
                  [(1, 1, 0, "m")])
    doc = json.loads(open(ex.export(p2, "speedscope"), "rb").read().decode("utf-8"))
    names = [f["name"] for f in doc["shared"]["frames"]]
    check("\ufffd" * 128 in names, "bytes 0x80..0xff become 128 U+FFFD", names)
    check("end\ufffd\ufffd" in names, "a sequence cut at the end becomes U+FFFD", names)
    check(bytes(range(1, 0x80)).decode() in names, "ASCII controls round-trip through escapes")
    check('x\\y"\n' in [f.get("file") for f in doc["shared"]["frames"]], "module names escaped too")


def test_pprof_small(ex, small, check):
    """pprof: gzip, valid ids, string_table[0] == "", demangled names, raw system names, totals"""
    prof = decode_pprof(ex.export(small, "pprof"))
    pprof_valid(check, prof)
    got = pprof_stacks(prof)
    want = {k: [v, v * 10**9 // HZ] for k, v in expected_stacks(False).items()}
    check(got == want, "stacks and weights as computed from the input", "\n got %r\nwant %r" % (got, want))
    total = sum(s[2] for s in SMALL_SAMPLES)
    check(sum(v[0] for _, v, _ in prof["samples"]) == total, "sample count total")
    fns = set(prof["functions"].values())
    check(("Stdlib.List.map", "camlStdlib__List.map_279") in fns, "Stdlib.List.map: demangled name, raw system name", fns)
    check(("M.work", "camlM.work_12") in fns, "M.work: demangled name, raw system name", fns)
    check(any(n == HOSTILE_TEXT for n, _ in fns), "hostile name in function table")
    check(HOSTILE in prof["raw_strings"], "system_name keeps the raw symbol bytes")
    addrs = {loc["address"] for loc in prof["locations"].values()}
    check({f[0] for f in SMALL_FRAMES} <= addrs, "every frame address is a location")
    check(set(prof["mappings"].values()) == {"/bin/prog", '/usr/lib/lib"foo.so'}, "mappings: one per module", prof["mappings"])
    check(prof["period_type"] == ("cpu", "nanoseconds") and prof["period"] == PERIOD, "period")
    check(prof["time_nanos"] == 1_700_000_000_000_000_000, "time_nanos = the header's start time", prof["time_nanos"])
    check(prof["duration_nanos"] == max(s[5] for s in SMALL_SAMPLES) + 1000 - 1_000_000_000, "duration = end - start", prof["duration_nanos"])
    check(prof["default_sample_type"] == "cpu", "default_sample_type")
    check(all(not labels for _, _, labels in prof["samples"]), "no labels without --threads")


def test_pprof_threads(ex, small, check):
    """pprof --threads: a "thread" label per sample with the thread's display name"""
    prof = decode_pprof(ex.export(small, "pprof", "--threads"))
    pprof_valid(check, prof)
    got = pprof_stacks(prof)
    want = {k: [v, v * 10**9 // HZ] for k, v in expected_stacks(True).items()}
    check(got == want, "stacks and weights as computed from the input", "\n got %r\nwant %r" % (got, want))


def test_folded_matches_collapse(ex, small, check):
    """folded: identical to `flamme collapse`, with and without --threads"""
    prof = small
    for extra in ([], ["--threads"]):
        out = open(ex.export(prof, "folded", *extra), "rb").read()
        ref = ex.ok("collapse", prof, *extra)
        check(out == ref, "folded export = collapse %s" % " ".join(extra))
        check(out.count(b"\n") == len(expected_stacks(bool(extra))), "one line per distinct stack %s" % " ".join(extra))


def test_bad_input(ex, small, check):
    """bad input: one clear line on stderr, exit 2"""
    junk = ex.path("junk.flm")
    open(junk, "wb").write(b"this is not a profile\n" * 10)
    cases = [
        ([ex.path("missing.flm"), "--format", "pprof"], "missing.flm"),
        ([junk, "--format", "speedscope"], "junk.flm"),
        ([small, "--format", "svg"], "svg"),
        ([small], "--format"),
        ([small, "--format"], "--format"),
        ([small, "--format", "pprof", "--bogus"], "--bogus"),
    ]
    for args, word in cases:
        r = ex.run("export", *args)
        err = r.stderr.decode(errors="replace")
        shown = "export " + " ".join(os.path.basename(a) for a in args)
        check(r.returncode == 2, "%s: exit 2" % shown, r.returncode)
        check(err.count("\n") == 1 and word in err and err.startswith("flamme export"),
              "%s: one line 'flamme export ...' naming %s" % (shown, word), err)
    r = ex.run("export", small, "--format", "pprof", "-o", ex.path(os.path.join("nodir", "x")))
    check(r.returncode == 1 and "nodir" in r.stderr.decode(), "unwritable output: exit 1 with the path", r.stderr)


@pytest.fixture(scope="module")
def split_prof(ex, ocaml_default):
    exe = ocaml_default("export/split", [os.path.join(HERE, "..", "e2e", "split.ml")])
    prof = ex.path("split.flm")
    ex.ok("record", "-F", "499", "-o", prof, "--", exe, "30")
    return prof


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
    assert total > 0, "no samples under Split.run_rounds"
    return {k: 100.0 * v / total for k, v in under.items()}, total


@pytest.mark.slow
def test_split_speedscope(ex, split_prof, check):
    """recorded split.exe: speedscope weights of work_a/b/c are 50/30/20 (+-5 points)"""
    doc = json.load(open(ex.export(split_prof, "speedscope", "--threads"), encoding="utf-8"))
    stacks = {}
    for prof in doc["profiles"]:
        for k, v in speedscope_stacks(doc, prof).items():
            stacks[k] = stacks.get(k, 0) + v
    sh, total = shares(stacks)
    for k, want in (("a", 50), ("b", 30), ("c", 20)):
        check(abs(sh[k] - want) <= 5, "speedscope: work_%s %d%% +-5" % (k, want), "%.1f%% %r" % (sh[k], sh))
    print("  split shares (speedscope): a %.1f%%, b %.1f%%, c %.1f%% of %d ns" % (sh["a"], sh["b"], sh["c"], total))


@pytest.mark.slow
def test_split_pprof_totals(ex, split_prof, check):
    """recorded split.exe: pprof sample totals equal the profile's (collapse) total; same split"""
    prof = decode_pprof(ex.export(split_prof, "pprof"))
    pprof_valid(check, prof)
    folded = ex.ok("collapse", split_prof).decode()
    total = sum(int(line.rsplit(" ", 1)[1]) for line in folded.splitlines())
    got = sum(v[0] for _, v, _ in prof["samples"])
    check(got == total and total > 0, "pprof count total = the profile's", "%d vs %d" % (got, total))
    # Each sample's time is its count times the sampling interval, 1e9/hz ns,
    # rounded down once; the period field is that interval rounded down, so
    # the time lies in [count x period, count x (period + 1)).
    per = prof["period"]
    off = [(v[0], v[1]) for _, v, _ in prof["samples"] if not v[0] * per <= v[1] < v[0] * (per + 1)]
    check(not off, "pprof cpu of each sample = its count x the period (1e9/hz, rounded down once)",
          "%d of %d samples outside, e.g. (count, ns) %s with period %d"
          % (len(off), len(prof["samples"]), off[:3], per))
    sh, _ = shares({k: v[0] for k, v in pprof_stacks(prof).items()})
    for k, want in (("a", 50), ("b", 30), ("c", 20)):
        check(abs(sh[k] - want) <= 5, "pprof: work_%s %d%% +-5" % (k, want), "%.1f%%" % sh[k])


GO = shutil.which("go")


@pytest.mark.slow
@pytest.mark.skipif(GO is None, reason="Go is not installed: no `go tool pprof` to read the export")
def test_split_go_pprof(ex, split_prof, check):
    """recorded split.exe: `go tool pprof -top` reads the export and shows the same 50/30/20 split"""
    out = ex.export(split_prof, "pprof")
    env = clean_env({"HOME": ex.dir, "GOCACHE": ex.path("gocache"), "GOFLAGS": "-mod=mod",
                     "GOTOOLCHAIN": "local", "GOPROXY": "off"})
    r = subprocess.run([GO, "tool", "pprof", "-top", "-nodecount=1000", out], capture_output=True,
                       text=True, timeout=300, env=env)
    check(r.returncode == 0, "go tool pprof -top reads the export", r.stderr[-500:])
    # pprof takes the first mapping as the main binary: its "File:" line
    first = r.stdout.splitlines()[0] if r.stdout else ""
    check(first == "File: split.exe", "go pprof names the profiled program as its main binary", first)
    # rows: flat flat% sum% cum cum% name; work_a/b/c are leaves: flat is all
    cum = {}
    for line in r.stdout.splitlines():
        m = re.match(r"^\s*\S+\s+[\d.]+%\s+[\d.]+%\s+\S+\s+([\d.]+)%\s+(.+)$", line)
        if m:
            cum[m.group(2)] = float(m.group(1))
    run = cum.get("Split.run_rounds", 0.0)
    check(run > 0, "pprof shows Split.run_rounds", sorted(cum)[:20])
    for k, want in (("a", 50), ("b", 30), ("c", 20)):
        got = 100.0 * cum.get("Split.work_" + k, 0.0) / run if run else 0.0
        check(abs(got - want) <= 5, "go pprof: work_%s %.1f%% of run_rounds (want %d +-5)" % (k, got, want),
              r.stdout[:1500])

