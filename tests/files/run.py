#!/usr/bin/env python3
"""tests/files/run.py — profiles are files people pass around (issue 10):
every verb agrees on the numbers and texts it writes, nothing a profile
carries reaches a terminal raw, output files never follow links or clobber,
and hostile profiles cost work in proportion to their size.

Usage: python3 tests/files/run.py BUILD_DIR
Profiles are written byte by byte by tests/files/prof.py (the spec's view,
independent of common/profile.c). Prints "files: N passed, N failed" last.
"""
import gzip
import os
import re
import shutil
import stat
import struct
import subprocess
import sys
import tempfile
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import prof  # noqa: E402

BUILD = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build")
FLAMME = os.environ.get("FLAMME_BIN") or os.path.join(BUILD, "flamme")  # san-test: a SAN build
TMP = tempfile.mkdtemp(prefix="flamme-files-")
SEEDS = os.environ.get("FLAMME_FUZZ_SEEDS")  # make fuzz: keep every profile written here
results = []


def test(fn):
    results.append(fn)
    return fn


def path(name):
    return os.path.join(TMP, name)


def write(name, data):
    p = path(name)
    with open(p, "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())
    keep_seed(p)
    return p


def keep_seed(p):
    """make fuzz: every profile and folded file the tests write or record is a seed."""
    if SEEDS:
        kind = "prof" if open(p, "rb").read(8) == b"FLAMMEPF" else "folded"
        os.makedirs(os.path.join(SEEDS, kind), exist_ok=True)
        shutil.copy(p, os.path.join(SEEDS, kind, os.path.basename(p)))


def flamme(*args, stdin=None, timeout=120, env=None, cwd=None):
    e = dict(os.environ)
    e.update(env or {})
    p = subprocess.run([FLAMME] + [str(a) for a in args], input=stdin, capture_output=True,
                       timeout=timeout, env=e, cwd=cwd or TMP)
    return p.returncode, p.stdout, p.stderr.decode("utf-8", "replace")


# ------------------------------------------------------------------ wrong numbers

@test
def diff_counts_are_read_back_by_every_folded_reader():
    big = 123456789012345678901  # past 1e17: %.17g printed it with an exponent
    before = write("before.folded", "main;a %d\nmain;b 1\n" % big)
    after = write("after.folded", "main;a %d\nmain;b 3\nmain;cold 1\n" % big)
    rc, out, err = flamme("diff", before, after, "--folded")
    assert rc == 0, err
    lines = out.decode().splitlines()
    assert all(not re.search(r"[eE][+-]?\d", l.rsplit(" ", 2)[1] + l.rsplit(" ", 2)[2]) for l in lines), lines
    joined = write("joined.folded", out)
    # svg reads every line (no "skipped line"), and diff reads its own output
    rc, svg, err = flamme("svg", joined, "-o", path("j.svg"))
    assert rc == 0 and "skipped" not in err, err
    rc, out2, err = flamme("diff", joined, after, "--folded")
    assert rc == 0 and "skipped" not in err, err
    a = [l for l in out2.decode().splitlines() if l.startswith("main;a ")][0]
    assert float(a.split()[-2]) == float(big) and float(a.split()[-1]) == float(big), a
    # --normalize: before is scaled by 2e21/(2e21 + ...) -> fractions, never in a frame name
    before = write("nb.folded", "main;hot 1000000\nmain;cold 1\n")
    after = write("na.folded", "main;hot 20\n")
    rc, out, err = flamme("diff", before, after, "--folded", "--normalize")
    assert rc == 0, err
    text = out.decode()
    cold = [l for l in text.splitlines() if l.startswith("main;cold")]
    assert cold and cold[0].split(" ")[0] == "main;cold", text
    assert abs(float(cold[0].split()[1]) - 20 / 1000001) < 1e-9, cold
    j = write("nj.folded", out)
    rc, out2, err = flamme("diff", j, after, "--folded")
    assert rc == 0 and "skipped" not in err and "e-05" not in out2.decode(), (err, out2)
    names = [l.rsplit(" ", 2)[0] for l in out2.decode().splitlines()]
    assert sorted(names) == ["main;cold", "main;hot"], names


def pb_fields(buf):
    """Decodes one protobuf message into [(field, value)]; value is int or bytes."""
    i, out = 0, []
    def varint():
        nonlocal i
        v = sh = 0
        while True:
            b = buf[i]; i += 1
            v |= (b & 0x7f) << sh; sh += 7
            if not b & 0x80:
                return v
    while i < len(buf):
        key = varint()
        f, wt = key >> 3, key & 7
        if wt == 0:
            out.append((f, varint()))
        elif wt == 2:
            n = varint(); out.append((f, buf[i:i + n])); i += n
        else:
            raise ValueError("wire type %d" % wt)
    return out


def packed(b):
    vals, i = [], 0
    while i < len(b):
        v = sh = 0
        while True:
            c = b[i]; i += 1
            v |= (c & 0x7f) << sh; sh += 7
            if not c & 0x80:
                break
        vals.append(v)
    return vals


@test
def export_pprof_nanoseconds_do_not_overflow():
    # 5 x 4e9 ticks at 1000 Hz = 2e10 ticks = 2e16 ns: fits, but weight*1e9 did not
    p = (prof.frame(0, 0x10, 0x10, "main", "/bin/p") + prof.stack(0, [0]) +
         b"".join(prof.sample(0, 1, 4000000000, 0, 0, k) for k in range(5)) + prof.end())
    src = write("heavy.flm", prof.profile(p, hz=1000))
    rc, out, err = flamme("export", src, "--format", "pprof")
    assert rc == 0, err
    msg = pb_fields(gzip.decompress(out))
    samples = [pb_fields(v) for f, v in msg if f == 2]
    assert len(samples) == 1, samples
    values = packed([v for f, v in samples[0] if f == 2][0])
    assert values == [20000000000, 20000000000 * 1000000], values
    rc, out, err = flamme("export", src, "--format", "speedscope")
    assert rc == 0 and b"4000000000000000" in out, err  # 4e9 ticks x 1 ms each


@test
def export_pprof_empty_stack_sample():
    # first sample with no frames: an empty sub-message (pb_bytes(NULL, 0) was UB; SAN aborted)
    p = prof.stack(0, []) + prof.sample(0, 1, 2) + prof.end()
    src = write("empty_stack.flm", prof.profile(p))
    rc, out, err = flamme("export", src, "--format", "pprof")
    assert rc == 0, err
    msg = pb_fields(gzip.decompress(out))
    samples = [pb_fields(v) for f, v in msg if f == 2]
    assert [packed(v) for f, v in samples[0] if f == 2] == [[2, 2 * 10**9 // 99]], samples


@test
def collapse_threads_empty_stack_is_not_a_differential_line():
    p = (prof.thread(7, 2, 3, 0) + prof.frame(0, 0x10, 0x10, "leaf 12", "/bin/p") +
         prof.stack(0, []) + prof.stack(1, [0]) +
         prof.sample(0, 7, 5, 3) + prof.sample(1, 7, 2, 3) + prof.end())
    src = write("emptystack.flm", prof.profile(p))
    rc, out, err = flamme("collapse", src, "--threads")
    assert rc == 0, err
    lines = sorted(out.decode().splitlines())
    assert lines == ["domain 3;[no frames] 5", "domain 3;leaf_12 2"], lines
    # the folded text reads back with the same totals and no differential column
    j = write("emptystack.folded", out)
    rc, out2, err = flamme("diff", j, j, "--folded")
    assert sorted(out2.decode().splitlines()) == ["domain 3;[no frames] 5 5", "domain 3;leaf_12 2 2"], out2


# ------------------------------------------------------------------ terminal, svg

@test
def report_escapes_what_the_profile_carries():
    evil = "prog \x1b]0;owned\x07\x1b[2J\x1b]52;c;Y2xpcA==\x07 \xc2\x9b31m caf\xc3\xa9"
    exit_rec = prof.rec(11, struct.pack("<BiQ", 3, 9, 5) + prof.s("killed \x1b]0;x\x07"))  # EXIT (1.3)
    p = (prof.info("cmdline", evil.encode("latin-1")) + prof.frame(0, 0x10, 0x10, "f\xc2\x9b1m", "/bin/p") +
         prof.stack(0, [0]) + prof.sample(0, 1, 1) + exit_rec + prof.end())
    src = write("evil.flm", prof.profile(p))
    rc, out, err = flamme("report", src)
    assert rc == 0, err
    for bad in (b"\x1b", b"\x07", b"\xc2\x9b"):
        assert bad not in out, out
    assert b"command: prog \\x1b]0;owned\\x07" in out and "café".encode() in out, out
    assert b"killed \\x1b]0;x\\x07" in out, out


# a frame and module name carrying markup, quotes, escape sequences, C0/C1
# controls, the folded separator and invalid UTF-8
EVIL = b"f</title><script>alert(1)</script>&\"' \x1b]0;t\x07\x1b[2J\xc2\x9b1m\xff\xfe;x\x7f\x01 caf\xc3\xa9"


@test
def names_the_profile_carries_are_safe_in_every_output():
    p = (prof.info("cmdline", b"prog " + EVIL) +
         prof.thread13(10, 1, 1, 0, 0, b"main") + prof.thread13(11, 2, 3, 0, 0, b"T" + EVIL) +
         prof.frame(0, 0x1000, 0x1000, b"main", b"/bin/prog") +
         prof.frame(1, 0x2000, 0x2000, EVIL, b"/lib/" + EVIL) +
         prof.stack(0, [1, 0]) + prof.sample13(0, 10, 1, 3, 0, 0, 100) + prof.sample13(0, 11, 2, 2, 0, 0, 200) +
         prof.end(2, 0, 400, 2))
    src = write("names.flm", prof.profile(p, minor=4))
    # terminal: report and collapse send no escape sequence, BEL or C1 control
    for args in (["report"], ["collapse"], ["collapse", "--threads"]):
        rc, out, err = flamme(*args, src)
        assert rc == 0 and b"alert(1)" in out, (args, err)
        for bad in (b"\x1b", b"\x07", b"\xc2\x9b", b"\x7f", b"\x01"):
            assert bad not in out, (args, bad, out)
    # SVG: well-formed XML, the program's one script, the name as text of a title
    import xml.etree.ElementTree as ET
    for args in ([], ["--threads"]):
        rc, _, err = flamme("svg", src, *args, "-o", path("names.svg"))
        assert rc == 0, err
        root = ET.parse(path("names.svg")).getroot()
        assert [e.tag for e in root.iter() if e.tag.endswith("script")] == ["{http://www.w3.org/2000/svg}script"]
        titles = [e.text for e in root.iter() if e.tag.endswith("title") and "alert(1)" in (e.text or "")]
        assert titles and all(t.startswith("f</title><script>alert(1)</script>&\"'") for t in titles), titles
    # speedscope JSON: valid, each frame named as the profile names it, file = the module's base name
    import json
    for args in ([], ["--threads"]):
        rc, out, err = flamme("export", src, "--format", "speedscope", *args)
        assert rc == 0, err
        frames = json.loads(out.decode("utf-8"))["shared"]["frames"]
        evil = [f for f in frames if "alert(1)" in f["name"]]
        want = EVIL.decode("utf-8", "replace")
        assert len(evil) == 1 and evil[0]["name"] == want.replace("\ufffd\ufffd", "\ufffd" * 2), frames
        assert evil[0]["file"] == "script>" + want.split("script>", 2)[2], evil[0]
    # pprof: function names and mapping files are valid UTF-8 (proto3
    # strings; system_name keeps the raw symbol, see tests/export)
    rc, out, err = flamme("export", src, "--format", "pprof")
    assert rc == 0, err
    top = pb_fields(gzip.decompress(out))
    strings = [v for f, v in top if f == 6]
    shown = [strings[v] for f, m in top if f == 5 for g, v in pb_fields(m) if g == 2]
    shown += [strings[v] for f, m in top if f == 3 for g, v in pb_fields(m) if g == 5]
    for b in shown:
        b.decode("utf-8")
    assert any(b"alert(1)" in b for b in shown), shown


@test
def svg_notes_keep_non_ascii():
    src = write("notes.folded", "a;b 3\n")
    rc, _, err = flamme("svg", src, "--notes", "café — naïve -- ok", "-o", path("notes.svg"))
    assert rc == 0, err
    svg = open(path("notes.svg"), "rb").read().decode()
    assert "café — naïve - - ok" in svg, re.findall(r"<!--.*?-->", svg, re.S)


@test
def svg_exit_codes_and_messages_name_the_file():
    rc, _, err = flamme("svg", path("missing.folded"))
    assert rc == 2 and "missing.folded" in err, (rc, err)
    rc, _, err = flamme("svg", TMP)
    assert rc == 2 and TMP in err, (rc, err)
    empty = write("empty.folded", "")
    rc, _, err = flamme("svg", empty)
    assert rc == 2 and "empty.folded: no valid input" in err, (rc, err)
    for verb in ("collapse", "report"):
        assert flamme(verb, path("missing.flm"))[0] == 2
        assert flamme(verb, TMP)[0] == 2


@test
def doc_names_the_file_the_tools_write():
    here = os.path.dirname(os.path.abspath(__file__))
    doc = open(os.path.join(here, "..", "..", "doc", "format.md")).read()
    rc, out, _ = flamme("record", "--help")
    default = re.search(r"default (flamme\.\w+)", out.decode()).group(1)
    assert "flamme.prof" not in doc and ("`%s`" % default) in doc, default

# ------------------------------------------------------------------ output files

SPLIT = os.path.join(BUILD, "e2e", "split", "split.exe")
LIB = os.path.join(BUILD, "libflamme.so")


def preload(out, extra=None, umask=0o022):
    """Runs split.exe (1% of its work) under the preloaded agent writing out."""
    env = dict(os.environ, LD_PRELOAD=LIB, FLAMME_OUTPUT=out, FLAMME_QUIET="1")
    env.update(extra or {})
    old = os.umask(umask)
    try:
        p = subprocess.run([SPLIT, "1"], capture_output=True, env=env, timeout=120, cwd=TMP)
    finally:
        os.umask(old)
    return p.returncode, p.stderr.decode("utf-8", "replace")


def victim(name):
    v = write(name, "precious\n")
    os.chmod(v, 0o644)
    return v


def is_profile(p):
    st = os.lstat(p)
    return stat.S_ISREG(st.st_mode) and open(p, "rb").read(8) == b"FLAMMEPF"


@test
def preload_output_replaces_a_planted_link_not_its_target():
    v = victim("victim1")
    out = path("planted.flm")
    os.symlink(v, out)
    rc, err = preload(out)
    assert rc == 0, err
    assert open(v, "rb").read() == b"precious\n", "the link's target was written"
    assert is_profile(out) and stat.S_IMODE(os.stat(out).st_mode) == 0o600, oct(os.stat(out).st_mode)
    # a hard link to the old profile keeps its bytes (no truncation in place)
    keep = path("keep.flm")
    os.link(out, keep)
    before = open(keep, "rb").read()
    rc, err = preload(out, umask=0o077)
    assert rc == 0 and open(keep, "rb").read() == before and is_profile(out), err
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o600
    # a device is written as a device (and stays one)
    rc, err = preload("/dev/null")
    assert rc == 0 and stat.S_ISCHR(os.stat("/dev/null").st_mode), err


@test
def record_child_fallback_never_follows_links():
    # flamme record's agents create FILE with O_EXCL and fall back to FILE.<pid>:
    # plant links at the next pids; none may be followed
    out = path("excl.flm")
    write("excl.flm", "a parent's profile\n")
    v = victim("victim2")
    probe = subprocess.Popen(["true"]); probe.wait()
    planted = []
    for pid in range(probe.pid, probe.pid + 400):
        q = "%s.%d" % (out, pid)
        os.symlink(v, q)
        planted.append(q)
    rc, err = preload(out, {"FLAMME_EXCL": "1", "FLAMME_QUIET": "0"})
    assert rc == 0, err
    assert open(v, "rb").read() == b"precious\n", "a planted FILE.<pid> link was followed"
    assert open(out).read() == "a parent's profile\n"
    written = [q for q in glob_pid(out) if os.path.isfile(q) and not os.path.islink(q)]
    assert written or "File exists" in err, (written, err)
    for q in written:
        assert stat.S_IMODE(os.stat(q).st_mode) == 0o600 and is_profile(q)


def glob_pid(out):
    d, b = os.path.split(out)
    return [os.path.join(d, n) for n in os.listdir(d) if re.fullmatch(re.escape(b) + r"\.\d+", n)]


@test
def record_refuses_a_link_as_output_and_blames_no_one():
    link = path("dangling.flm")
    os.symlink(path("nowhere/x.flm"), link)
    rc, out, err = flamme("record", "-o", link, "--", SPLIT, "1")
    assert rc == 2 and "symbolic link" in err and "OCaml 5 program" not in err, (rc, err)
    assert not os.path.exists(path("nowhere"))
    # a plain run writes a 0600 profile and moves the old one aside
    good = path("rec.flm")
    rc, out, err = flamme("record", "-o", good, "--", SPLIT, "1")
    assert rc == 0 and is_profile(good) and stat.S_IMODE(os.stat(good).st_mode) == 0o600, err
    keep_seed(good)
    rc, out, err = flamme("record", "-o", good, "--", SPLIT, "1")
    assert rc == 0 and is_profile(good + ".old"), err


@test
def tool_outputs_replace_links_and_keep_devices():
    src = write("out_src.flm", prof.simple())
    for verb, extra in (("svg", []), ("collapse", []), ("export", ["--format", "pprof"]),
                        ("export", ["--format", "speedscope"])):
        v = victim("victim_" + verb)
        out = path("out_" + verb)
        if os.path.lexists(out):
            os.unlink(out)
        os.symlink(v, out)
        rc, _, err = flamme(verb, src, *extra, "-o", out)
        assert rc == 0, (verb, err)
        assert open(v, "rb").read() == b"precious\n", verb + " wrote through the link"
        st = os.lstat(out)
        assert stat.S_ISREG(st.st_mode) and st.st_size > 0, verb
        rc, _, err = flamme(verb, src, *extra, "-o", "/dev/null")
        assert rc == 0 and stat.S_ISCHR(os.stat("/dev/null").st_mode), (verb, err)
    leftovers = [n for n in os.listdir(TMP) if re.search(r"\.[A-Za-z0-9]{6}$", n) and n.startswith("out_")]
    assert not leftovers, leftovers
    # diff --folded -o, and svg --cp's palette file
    v = victim("victim_diff")
    os.symlink(v, path("diff_out"))
    f = write("d.folded", "a;b 2\n")
    rc, _, err = flamme("diff", f, f, "--folded", "-o", path("diff_out"))
    assert rc == 0 and open(v, "rb").read() == b"precious\n" and "a;b 2 2" in open(path("diff_out")).read(), err
    v = victim("victim_cp")
    os.symlink(v, path("palette.map"))
    rc, _, err = flamme("svg", f, "--cp", "-o", path("cp.svg"))
    assert rc == 0 and open(v, "rb").read() == b"precious\n" and "->rgb(" in open(path("palette.map")).read(), err


# ------------------------------------------------------------------ bounds

VERBS = (["collapse"], ["collapse", "--threads"], ["report"], ["svg"], ["svg", "--threads"],
         ["export", "--format", "speedscope"], ["export", "--format", "speedscope", "--threads"],
         ["export", "--format", "pprof"], ["export", "--format", "folded"])
if os.environ.get("FLAMME_SAN"):
    # make san-test: each verb on a 64 MB stack takes ~8 s under ASan; one of
    # each kind (reader only, threads, renderer, both exporters) keeps it short
    VERBS = (["collapse", "--threads"], ["svg"], ["export", "--format", "speedscope"],
             ["export", "--format", "pprof"])
AS_LIMIT = 1 << 30  # every verb on a small crafted file fits in 1 GiB of address space


def limited(*args):
    """flamme ARGS with RLIMIT_AS (skipped under ASan, which reserves terabytes)."""
    if args[0] == "report":
        args = args[:args.index("-o")] if "-o" in args else args
    import resource
    def pre():
        if not os.environ.get("FLAMME_SAN"):
            resource.setrlimit(resource.RLIMIT_AS, (AS_LIMIT, AS_LIMIT))
    p = subprocess.run([FLAMME] + list(args), capture_output=True, preexec_fn=pre, timeout=600, cwd=TMP)
    return p.returncode, p.stdout, p.stderr.decode("utf-8", "replace")


def big_chunks(payload, n):
    """n chunks of payload after a tiny header."""
    return prof.header() + prof.chunk(payload) * n


@test
def a_stack_longer_than_any_agent_writes_is_refused():
    # the file: one STACK of 16.7M frames used by 1000 samples (66 KB)
    n = 16777000
    src = write("deep16m.flm", prof.profile(
        prof.frame(0, 0x10, 0x10, "f", "/bin/p"), prof.stack(0, [0] * n),
        b"".join(prof.sample(0, 1, 1, 0, 0, k) for k in range(1000))))
    assert os.path.getsize(src) < 200000
    for v in VERBS:
        rc, out, err = limited(v[0], src, *v[1:], "-o", "/dev/null")
        assert rc == 2 and "more than 1048576 frames" in err and len(err.splitlines()) == 1, (v, rc, err)
    # the limit itself is fine
    body = prof.frame(0, 0x10, 0x10, "f", "/bin/p") + prof.stack(0, [0] * 1048576) + prof.sample(0, 1, 7)
    src = write("deep1m.flm", prof.profile(body))
    rc, out, err = limited("collapse", src)
    assert rc == 0 and out.decode().endswith(";f 7\n") and out.count(b";") == 1048575, err


@test
def chunks_that_inflate_past_the_file_budget_are_refused():
    info = prof.info("k", "x" * (60 << 20))  # 60 MiB of one byte: ~60 KB compressed
    src = write("bomb.flm", big_chunks(info, 4))
    size = os.path.getsize(src)
    assert 240 * (1 << 20) > (64 << 20) + 256 * size, size
    for v in VERBS[:4]:
        rc, out, err = limited(v[0], src, *v[1:])
        assert rc == 2 and "inflate to more than" in err, (v, rc, err)


@test
def long_names_on_long_stacks_cannot_blow_up_the_text():
    # 16 stacks of 1M references to a frame with a 4000-byte name: 64 GB of folded text
    body = prof.frame(0, 0x10, 0x10, "n" * 4000, "/bin/p")
    body += b"".join(prof.stack(k, [0] * (1000000 - k)) for k in range(16))
    body += b"".join(prof.sample(k, 1, 1) for k in range(16))
    src = write("wide.flm", prof.profile(body))
    for v in VERBS:
        rc, out, err = limited(v[0], src, *v[1:], "-o", "/dev/null")
        if v[0] == "export" and v[2] != "folded":
            assert rc == 0, (v, err)  # pprof, speedscope name each frame once: 16M references fit
            continue
        assert rc == 2 and "honestly" in err and len(err.splitlines()) == 1, (v, rc, err)


@test
def speedscope_refuses_samples_that_expand_past_the_budget():
    body = (prof.frame(0, 0x10, 0x10, "f", "/bin/p") + prof.stack(0, [0] * 1000000) +
            b"".join(prof.sample(0, 1 + k % 3, 1, 0, 0, k) for k in range(20000)))
    src = write("manydeep.flm", prof.profile(body))
    rc, out, err = limited("export", src, "--format", "speedscope", "-o", "/dev/null")
    assert rc == 2 and "honestly" in err, (rc, err)
    rc, out, err = limited("svg", src, "-o", "/dev/null")  # one distinct stack: fine
    assert rc == 0, err


@test
def export_threads_groups_many_threads_in_one_pass():
    # thread churn: 20000 threads, 2 samples each, interleaved
    body = prof.frame(0, 0x10, 0x10, "a", "/bin/p") + prof.frame(1, 0x20, 0x20, "b", "/bin/p")
    body += prof.stack(0, [0]) + prof.stack(1, [1])
    body += b"".join(prof.sample(k & 1, 1000 + k % 20000, 1, 0, 0, k) for k in range(40000))
    src = write("churn.flm", prof.profile(body, hz=1000))
    rc, out, err = flamme("export", src, "--format", "speedscope", "--threads")
    assert rc == 0, err
    import json
    doc = json.loads(out)
    profs = doc["profiles"]
    assert len(profs) == 20000 and profs[0]["name"] == "thread 1000" and profs[-1]["name"] == "thread 20999"
    # thread 1000+j got samples j (stack j&1) and j+20000 (same parity): in file order
    for j in (0, 1, 12345, 19999):
        pr = profs[j]
        assert pr["samples"] == [[j & 1], [j & 1]] and pr["startValue"] == j, (j, pr)


# ------------------------------------------------------------------ thread identity

def reused_tid_profile(minor):
    """tid 500: first a systhread of domain 1, then (after it ended) a domain 2
    thread; tid 501 once. 1.4 gives serials; 1.3 has none."""
    if minor >= 4:
        th, sa, te = prof.thread13, prof.sample13, prof.thread_end13
    else:
        th = lambda tid, serial, *a: prof.thread(tid, *a)
        sa = lambda sid, tid, serial, *a: prof.sample(sid, tid, *a)
        te = lambda tid, serial, t: prof.thread_end(tid, t)
    body = (prof.frame(0, 0x10, 0x10, "camlA.work_1", "/bin/p") + prof.stack(0, [0]) +
            th(500, 1, 3, 1, 100, "") + sa(0, 500, 1, 3, 1, 0, 150) + te(500, 1, 200) +
            th(501, 2, 1, 0, 100, "main") + sa(0, 501, 2, 1, 0, 0, 160) +
            th(500, 3, 2, 2, 300, "") + sa(0, 500, 3, 5, 2, 0, 350) + te(500, 3, 400) + prof.end())
    return prof.profile(body, minor=minor)


@test
def threads_keep_their_identity_when_a_tid_is_reused():
    src = write("reused14.flm", reused_tid_profile(4))
    rc, out, err = flamme("collapse", src, "--threads")
    assert rc == 0, err
    assert sorted(out.decode().splitlines()) == [
        "domain 2;A.work 5", "main;A.work 1", "thread 500 (domain 1);A.work 3"], out
    rc, out, err = flamme("report", src)
    rows = {l.split()[0]: l for l in out.decode().splitlines() if re.match(r"\s+(domain|thread|main)\b", l)}
    assert "threads (3 with samples)" in out.decode() and "domain" in rows, out.decode()
    rc, out, err = flamme("export", src, "--format", "speedscope", "--threads")
    import json
    names = [p_["name"] for p_ in json.loads(out)["profiles"]]
    assert sorted(names) == ["domain 2", "main", "thread 500 (domain 1)"], names


@test
def files_before_thread_serials_still_read():
    src = write("reused13.flm", reused_tid_profile(3))
    rc, out, err = flamme("collapse", src, "--threads")
    assert rc == 0, err
    # as 1.0-1.3 readers did: one thread per tid, the last THREAD record's kind wins
    assert sorted(out.decode().splitlines()) == ["domain 2;A.work 8", "main;A.work 1"], out


@test
def recorded_profiles_give_each_thread_a_serial():
    out = path("serial.flm")
    rc, err = preload(out)
    assert rc == 0, err
    keep_seed(out)
    data = open(out, "rb").read()
    import struct
    assert struct.unpack_from("<HH", data, 8) >= (1, 4)
    recs = prof.records(data)
    serials = {}
    for t, body in recs:
        if t == prof.THREAD:
            tid = struct.unpack_from("<I", body)[0]
            nlen = struct.unpack_from("<I", body, 17)[0]
            serials.setdefault(struct.unpack_from("<I", body, 21 + nlen)[0], set()).add(tid)
    samples = prof.samples(data)
    assert serials and 0 not in serials and all(len(v) == 1 for v in serials.values()), serials
    assert samples and all(s_[6] in serials and s_[1] in serials[s_[6]] for s_ in samples)


def main():
    passed = failed = 0
    only = os.environ.get("FILES_ONLY")
    for fn in results:
        if only and only not in fn.__name__:
            continue
        t0 = time.time()
        try:
            fn()
            passed += 1
            print("ok %s (%.1f s)" % (fn.__name__, time.time() - t0), flush=True)
        except Exception:
            failed += 1
            print("FAIL %s" % fn.__name__)
            traceback.print_exc(limit=3)
    shutil.rmtree(TMP, ignore_errors=True)
    print("files: %d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
