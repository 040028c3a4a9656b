"""tests/files/test_files.py — profiles are files people pass around (issue
10): every verb agrees on the numbers and texts it writes, nothing a profile
carries reaches a terminal raw, output files never follow links or clobber,
and hostile profiles cost work in proportion to their size (make files-test,
part of make test).

Profiles are written byte by byte by tests/flmfile.py (the spec's view,
independent of common/profile.c). The tests that run a program profile
tests/e2e/split.ml built with the default compiler: what they check (output
files, thread serials) does not depend on the walk.

Settings from the environment:
* FLAMME_FUZZ_SEEDS=DIR: every profile and folded file a test writes or
  records is copied there (make fuzz's seeds, mk/fuzz.mk).
* FLAMME_BIN=PATH, FLAMME_SAN=1 (make san-test): the flamme command under
  test is PATH, built with sanitizers: no address-space limit, and the
  bounds tests run one verb of each kind.
"""
import gzip
import json
import os
import re
import resource
import shutil
import stat
import struct
import subprocess
import xml.etree.ElementTree as ET

import pytest

import flmfile
from flammetest import clean_env, pb_message, pb_packed

HERE = os.path.dirname(os.path.abspath(__file__))
SEEDS = os.environ.get("FLAMME_FUZZ_SEEDS")
SAN = bool(os.environ.get("FLAMME_SAN"))
AS_LIMIT = 1 << 30  # every verb on a small crafted file fits in 1 GiB of address space


class Files:
    """One test's directory (DIR) and the flamme under test."""

    def __init__(self, build, tmp):
        self.flamme = os.environ.get("FLAMME_BIN") or build.flamme
        self.lib = build.lib
        self.dir = tmp
        # a SAN flamme lives apart from libflamme.so: name it for record
        self.env = clean_env({"FLAMME_AGENT": build.lib})

    def path(self, name):
        return os.path.join(self.dir, name)

    def write(self, name, data):
        p = self.path(name)
        with open(p, "wb") as fh:
            fh.write(data if isinstance(data, bytes) else data.encode())
        self.keep_seed(p)
        return p

    def keep_seed(self, p):
        """make fuzz: every profile and folded file the tests write or record is a seed."""
        if SEEDS:
            with open(p, "rb") as fh:
                kind = "prof" if fh.read(8) == b"FLAMMEPF" else "folded"
            os.makedirs(os.path.join(SEEDS, kind), exist_ok=True)
            shutil.copy(p, os.path.join(SEEDS, kind, os.path.basename(p)))

    def run(self, *args, stdin=None, timeout=120):
        """flamme ARGS in the test's directory: (exit status, stdout bytes, stderr text)."""
        p = subprocess.run([self.flamme] + [str(a) for a in args], input=stdin, capture_output=True,
                           timeout=timeout, env=self.env, cwd=self.dir)
        return p.returncode, p.stdout, p.stderr.decode("utf-8", "replace")

    def limited(self, *args):
        """flamme ARGS with RLIMIT_AS (not under ASan, which reserves terabytes)."""
        if args[0] == "report":
            args = args[:args.index("-o")] if "-o" in args else args

        def pre():
            if not SAN:
                resource.setrlimit(resource.RLIMIT_AS, (AS_LIMIT, AS_LIMIT))
        p = subprocess.run([self.flamme] + list(args), capture_output=True, preexec_fn=pre, timeout=600,
                           cwd=self.dir, env=self.env)
        return p.returncode, p.stdout, p.stderr.decode("utf-8", "replace")

    def preload(self, exe, out, extra=None, umask=0o022):
        """Runs EXE (split.exe: 1% of its work) under the preloaded agent writing OUT:
        (exit status, stderr)."""
        env = clean_env({"LD_PRELOAD": self.lib, "FLAMME_OUTPUT": out, "FLAMME_QUIET": "1"})
        env.update(extra or {})
        old = os.umask(umask)
        try:
            p = subprocess.run([exe, "1"], capture_output=True, env=env, timeout=120, cwd=self.dir)
        finally:
            os.umask(old)
        return p.returncode, p.stderr.decode("utf-8", "replace")

    def victim(self, name):
        v = self.write(name, "precious\n")
        os.chmod(v, 0o644)
        return v


@pytest.fixture
def f(build, tmp_path):
    return Files(build, str(tmp_path))


@pytest.fixture(scope="module")
def split(ocaml_default):
    return ocaml_default("files/split", [os.path.join(HERE, "..", "e2e", "split.ml")])


def pprof_samples(data):
    """The Sample messages of a gzipped pprof export."""
    return [pb_message(m) for m in pb_message(gzip.decompress(data)).get(2, [])]


# ------------------------------------------------------------------ wrong numbers

def test_diff_counts_are_read_back_by_every_folded_reader(f):
    big = 123456789012345678901  # past 1e17: %.17g printed it with an exponent
    before = f.write("before.folded", "main;a %d\nmain;b 1\n" % big)
    after = f.write("after.folded", "main;a %d\nmain;b 3\nmain;cold 1\n" % big)
    rc, out, err = f.run("diff", before, after, "--folded")
    assert rc == 0, err
    lines = out.decode().splitlines()
    assert all(not re.search(r"[eE][+-]?\d", l.rsplit(" ", 2)[1] + l.rsplit(" ", 2)[2]) for l in lines), lines
    joined = f.write("joined.folded", out)
    # svg reads every line (no "skipped line"), and diff reads its own output
    rc, svg, err = f.run("svg", joined, "-o", f.path("j.svg"))
    assert rc == 0 and "skipped" not in err, err
    rc, out2, err = f.run("diff", joined, after, "--folded")
    assert rc == 0 and "skipped" not in err, err
    a = [l for l in out2.decode().splitlines() if l.startswith("main;a ")][0]
    assert float(a.split()[-2]) == float(big) and float(a.split()[-1]) == float(big), a
    # --normalize: before is scaled by 2e21/(2e21 + ...) -> fractions, never in a frame name
    before = f.write("nb.folded", "main;hot 1000000\nmain;cold 1\n")
    after = f.write("na.folded", "main;hot 20\n")
    rc, out, err = f.run("diff", before, after, "--folded", "--normalize")
    assert rc == 0, err
    text = out.decode()
    cold = [l for l in text.splitlines() if l.startswith("main;cold")]
    assert cold and cold[0].split(" ")[0] == "main;cold", text
    assert abs(float(cold[0].split()[1]) - 20 / 1000001) < 1e-9, cold
    j = f.write("nj.folded", out)
    rc, out2, err = f.run("diff", j, after, "--folded")
    assert rc == 0 and "skipped" not in err and "e-05" not in out2.decode(), (err, out2)
    names = [l.rsplit(" ", 2)[0] for l in out2.decode().splitlines()]
    assert sorted(names) == ["main;cold", "main;hot"], names


def test_export_pprof_nanoseconds_do_not_overflow(f):
    # 5 x 4e9 ticks at 1000 Hz = 2e10 ticks = 2e16 ns: fits, but weight*1e9 did not
    p = (flmfile.frame(0, 0x10, 0x10, "main", "/bin/p") + flmfile.stack(0, [0]) +
         b"".join(flmfile.sample(0, 1, 4000000000, 0, 0, k) for k in range(5)) + flmfile.end())
    src = f.write("heavy.flm", flmfile.profile(p, hz=1000))
    rc, out, err = f.run("export", src, "--format", "pprof")
    assert rc == 0, err
    samples = pprof_samples(out)
    assert len(samples) == 1, samples
    values = pb_packed(samples[0][2][0])
    assert values == [20000000000, 20000000000 * 1000000], values
    rc, out, err = f.run("export", src, "--format", "speedscope")
    assert rc == 0 and b"4000000000000000" in out, err  # 4e9 ticks x 1 ms each


def test_export_pprof_empty_stack_sample(f):
    # first sample with no frames: an empty sub-message (pb_bytes(NULL, 0) was UB; SAN aborted)
    p = flmfile.stack(0, []) + flmfile.sample(0, 1, 2) + flmfile.end()
    src = f.write("empty_stack.flm", flmfile.profile(p))
    rc, out, err = f.run("export", src, "--format", "pprof")
    assert rc == 0, err
    samples = pprof_samples(out)
    assert [pb_packed(v) for v in samples[0][2]] == [[2, 2 * 10**9 // 99]], samples


def test_collapse_threads_empty_stack_is_not_a_differential_line(f):
    p = (flmfile.thread(7, 2, 3, 0) + flmfile.frame(0, 0x10, 0x10, "leaf 12", "/bin/p") +
         flmfile.stack(0, []) + flmfile.stack(1, [0]) +
         flmfile.sample(0, 7, 5, 3) + flmfile.sample(1, 7, 2, 3) + flmfile.end())
    src = f.write("emptystack.flm", flmfile.profile(p))
    rc, out, err = f.run("collapse", src, "--threads")
    assert rc == 0, err
    lines = sorted(out.decode().splitlines())
    assert lines == ["domain 3;[no frames] 5", "domain 3;leaf_12 2"], lines
    # the folded text reads back with the same totals and no differential column
    j = f.write("emptystack.folded", out)
    rc, out2, err = f.run("diff", j, j, "--folded")
    assert sorted(out2.decode().splitlines()) == ["domain 3;[no frames] 5 5", "domain 3;leaf_12 2 2"], out2


# ------------------------------------------------------------------ terminal, svg

def test_report_escapes_what_the_profile_carries(f):
    evil = "prog \x1b]0;owned\x07\x1b[2J\x1b]52;c;Y2xpcA==\x07 \xc2\x9b31m caf\xc3\xa9"
    exit_rec = flmfile.rec(11, struct.pack("<BiQ", 3, 9, 5) + flmfile.s("killed \x1b]0;x\x07"))  # EXIT (1.3)
    p = (flmfile.info("cmdline", evil.encode("latin-1")) + flmfile.frame(0, 0x10, 0x10, "f\xc2\x9b1m", "/bin/p") +
         flmfile.stack(0, [0]) + flmfile.sample(0, 1, 1) + exit_rec + flmfile.end())
    src = f.write("evil.flm", flmfile.profile(p))
    rc, out, err = f.run("report", src)
    assert rc == 0, err
    for bad in (b"\x1b", b"\x07", b"\xc2\x9b"):
        assert bad not in out, out
    assert b"command: prog \\x1b]0;owned\\x07" in out and "café".encode() in out, out
    assert b"killed \\x1b]0;x\\x07" in out, out


# a frame and module name carrying markup, quotes, escape sequences, C0/C1
# controls, the folded separator and invalid UTF-8
EVIL = b"f</title><script>alert(1)</script>&\"' \x1b]0;t\x07\x1b[2J\xc2\x9b1m\xff\xfe;x\x7f\x01 caf\xc3\xa9"


def test_names_the_profile_carries_are_safe_in_every_output(f):
    p = (flmfile.info("cmdline", b"prog " + EVIL) +
         flmfile.thread13(10, 1, 1, 0, 0, b"main") + flmfile.thread13(11, 2, 3, 0, 0, b"T" + EVIL) +
         flmfile.frame(0, 0x1000, 0x1000, b"main", b"/bin/prog") +
         flmfile.frame(1, 0x2000, 0x2000, EVIL, b"/lib/" + EVIL) +
         flmfile.stack(0, [1, 0]) + flmfile.sample13(0, 10, 1, 3, 0, 0, 100) + flmfile.sample13(0, 11, 2, 2, 0, 0, 200) +
         flmfile.end(2, 0, 400, 2))
    src = f.write("names.flm", flmfile.profile(p, minor=4))
    # terminal: report and collapse send no escape sequence, BEL or C1 control
    for args in (["report"], ["collapse"], ["collapse", "--threads"]):
        rc, out, err = f.run(*args, src)
        assert rc == 0 and b"alert(1)" in out, (args, err)
        for bad in (b"\x1b", b"\x07", b"\xc2\x9b", b"\x7f", b"\x01"):
            assert bad not in out, (args, bad, out)
    # SVG: well-formed XML, the program's one script, the name as text of a title
    for args in ([], ["--threads"]):
        rc, _, err = f.run("svg", src, *args, "-o", f.path("names.svg"))
        assert rc == 0, err
        root = ET.parse(f.path("names.svg")).getroot()
        assert [e.tag for e in root.iter() if e.tag.endswith("script")] == ["{http://www.w3.org/2000/svg}script"]
        titles = [e.text for e in root.iter() if e.tag.endswith("title") and "alert(1)" in (e.text or "")]
        assert titles and all(t.startswith("f</title><script>alert(1)</script>&\"'") for t in titles), titles
    # speedscope JSON: valid, each frame named as the profile names it, file = the module's base name
    for args in ([], ["--threads"]):
        rc, out, err = f.run("export", src, "--format", "speedscope", *args)
        assert rc == 0, err
        frames = json.loads(out.decode("utf-8"))["shared"]["frames"]
        evil = [fr for fr in frames if "alert(1)" in fr["name"]]
        want = EVIL.decode("utf-8", "replace")
        assert len(evil) == 1 and evil[0]["name"] == want.replace("\ufffd\ufffd", "\ufffd" * 2), frames
        assert evil[0]["file"] == "script>" + want.split("script>", 2)[2], evil[0]
    # pprof: function names and mapping files are valid UTF-8 (proto3
    # strings; system_name keeps the raw symbol, see tests/export)
    rc, out, err = f.run("export", src, "--format", "pprof")
    assert rc == 0, err
    top = pb_message(gzip.decompress(out))
    strings = top[6]
    shown = [strings[v] for m in top.get(5, []) for v in pb_message(m).get(2, [])]
    shown += [strings[v] for m in top.get(3, []) for v in pb_message(m).get(5, [])]
    for b in shown:
        b.decode("utf-8")
    assert any(b"alert(1)" in b for b in shown), shown


def test_svg_notes_keep_non_ascii(f):
    src = f.write("notes.folded", "a;b 3\n")
    rc, _, err = f.run("svg", src, "--notes", "café — naïve -- ok", "-o", f.path("notes.svg"))
    assert rc == 0, err
    svg = open(f.path("notes.svg"), "rb").read().decode()
    assert "café — naïve - - ok" in svg, re.findall(r"<!--.*?-->", svg, re.S)


def test_svg_exit_codes_and_messages_name_the_file(f):
    rc, _, err = f.run("svg", f.path("missing.folded"))
    assert rc == 2 and "missing.folded" in err, (rc, err)
    rc, _, err = f.run("svg", f.dir)
    assert rc == 2 and f.dir in err, (rc, err)
    empty = f.write("empty.folded", "")
    rc, _, err = f.run("svg", empty)
    assert rc == 2 and "empty.folded: no valid input" in err, (rc, err)
    for verb in ("collapse", "report"):
        assert f.run(verb, f.path("missing.flm"))[0] == 2
        assert f.run(verb, f.dir)[0] == 2


def test_doc_names_the_file_the_tools_write(f):
    doc = open(os.path.join(HERE, "..", "..", "doc", "format.md")).read()
    rc, out, _ = f.run("record", "--help")
    default = re.search(r"default (flamme\.\w+)", out.decode()).group(1)
    assert "flamme.prof" not in doc and ("`%s`" % default) in doc, default


# ------------------------------------------------------------------ output files

def is_profile(p):
    st = os.lstat(p)
    return stat.S_ISREG(st.st_mode) and open(p, "rb").read(8) == b"FLAMMEPF"


@pytest.mark.slow
def test_preload_output_replaces_a_planted_link_not_its_target(f, split):
    v = f.victim("victim1")
    out = f.path("planted.flm")
    os.symlink(v, out)
    rc, err = f.preload(split, out)
    assert rc == 0, err
    assert open(v, "rb").read() == b"precious\n", "the link's target was written"
    assert is_profile(out) and stat.S_IMODE(os.stat(out).st_mode) == 0o600, oct(os.stat(out).st_mode)
    # a hard link to the old profile keeps its bytes (no truncation in place)
    keep = f.path("keep.flm")
    os.link(out, keep)
    before = open(keep, "rb").read()
    rc, err = f.preload(split, out, umask=0o077)
    assert rc == 0 and open(keep, "rb").read() == before and is_profile(out), err
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o600
    # a device is written as a device (and stays one)
    rc, err = f.preload(split, "/dev/null")
    assert rc == 0 and stat.S_ISCHR(os.stat("/dev/null").st_mode), err


@pytest.mark.slow
def test_record_child_fallback_never_follows_links(f, split):
    # flamme record's agents create FILE with O_EXCL and fall back to FILE.<pid>:
    # plant links at the next pids; none may be followed
    out = f.path("excl.flm")
    f.write("excl.flm", "a parent's profile\n")
    v = f.victim("victim2")
    probe = subprocess.Popen(["true"]); probe.wait()
    planted = []
    for pid in range(probe.pid, probe.pid + 400):
        q = "%s.%d" % (out, pid)
        os.symlink(v, q)
        planted.append(q)
    rc, err = f.preload(split, out, {"FLAMME_EXCL": "1", "FLAMME_QUIET": "0"})
    assert rc == 0, err
    assert open(v, "rb").read() == b"precious\n", "a planted FILE.<pid> link was followed"
    assert open(out).read() == "a parent's profile\n"
    # FILE.<pid> taken (by the planted link), the agent goes on to
    # FILE.<pid>.2 (an exec'd image's name, agent/agent.c).
    written = [q for q in glob_pid(out, later=True) if os.path.isfile(q) and not os.path.islink(q)]
    assert written or "File exists" in err, (written, err)
    for q in written:
        assert stat.S_IMODE(os.stat(q).st_mode) == 0o600 and is_profile(q)


def glob_pid(out, later=False):
    """FILE.<pid> beside out (later: and FILE.<pid>.<k>)."""
    d, b = os.path.split(out)
    tail = r"\.\d+(\.\d+)?" if later else r"\.\d+"
    return [os.path.join(d, n) for n in os.listdir(d) if re.fullmatch(re.escape(b) + tail, n)]


@pytest.mark.slow
def test_record_refuses_a_link_as_output_and_blames_no_one(f, split):
    link = f.path("dangling.flm")
    os.symlink(f.path("nowhere/x.flm"), link)
    rc, out, err = f.run("record", "-o", link, "--", split, "1")
    assert rc == 2 and "symbolic link" in err and "OCaml 5 program" not in err, (rc, err)
    assert not os.path.exists(f.path("nowhere"))
    # a plain run writes a 0600 profile and moves the old one aside
    good = f.path("rec.flm")
    rc, out, err = f.run("record", "-o", good, "--", split, "1")
    assert rc == 0 and is_profile(good) and stat.S_IMODE(os.stat(good).st_mode) == 0o600, err
    f.keep_seed(good)
    rc, out, err = f.run("record", "-o", good, "--", split, "1")
    assert rc == 0 and is_profile(good + ".old"), err


def test_tool_outputs_replace_links_and_keep_devices(f):
    src = f.write("out_src.flm", flmfile.simple())
    for verb, extra in (("svg", []), ("collapse", []), ("export", ["--format", "pprof"]),
                        ("export", ["--format", "speedscope"])):
        v = f.victim("victim_" + verb)
        out = f.path("out_" + verb)
        if os.path.lexists(out):
            os.unlink(out)
        os.symlink(v, out)
        rc, _, err = f.run(verb, src, *extra, "-o", out)
        assert rc == 0, (verb, err)
        assert open(v, "rb").read() == b"precious\n", verb + " wrote through the link"
        st = os.lstat(out)
        assert stat.S_ISREG(st.st_mode) and st.st_size > 0, verb
        rc, _, err = f.run(verb, src, *extra, "-o", "/dev/null")
        assert rc == 0 and stat.S_ISCHR(os.stat("/dev/null").st_mode), (verb, err)
    leftovers = [n for n in os.listdir(f.dir) if re.search(r"\.[A-Za-z0-9]{6}$", n) and n.startswith("out_")]
    assert not leftovers, leftovers
    # diff --folded -o, and svg --cp's palette file
    v = f.victim("victim_diff")
    os.symlink(v, f.path("diff_out"))
    folded = f.write("d.folded", "a;b 2\n")
    rc, _, err = f.run("diff", folded, folded, "--folded", "-o", f.path("diff_out"))
    assert rc == 0 and open(v, "rb").read() == b"precious\n" and "a;b 2 2" in open(f.path("diff_out")).read(), err
    v = f.victim("victim_cp")
    os.symlink(v, f.path("palette.map"))
    rc, _, err = f.run("svg", folded, "--cp", "-o", f.path("cp.svg"))
    assert rc == 0 and open(v, "rb").read() == b"precious\n" and "->rgb(" in open(f.path("palette.map")).read(), err


# ------------------------------------------------------------------ bounds
# (test_bounds_*: their files inflate far past the 64 KiB a fuzz seed may
# have, so make fuzz's seeds are written without them, mk/files.mk)

VERBS = (["collapse"], ["collapse", "--threads"], ["report"], ["svg"], ["svg", "--threads"],
         ["export", "--format", "speedscope"], ["export", "--format", "speedscope", "--threads"],
         ["export", "--format", "pprof"], ["export", "--format", "folded"])
if SAN:
    # make san-test: each verb on a 64 MB stack takes ~8 s under ASan; one of
    # each kind (reader only, threads, renderer, both exporters) keeps it short
    VERBS = (["collapse", "--threads"], ["svg"], ["export", "--format", "speedscope"],
             ["export", "--format", "pprof"])


def big_chunks(payload, n):
    """n chunks of payload after a tiny header."""
    return flmfile.header() + flmfile.chunk(payload) * n


@pytest.mark.slow
def test_bounds_a_stack_longer_than_any_agent_writes_is_refused(f):
    # the file: one STACK of 16.7M frames used by 1000 samples (66 KB)
    n = 16777000
    src = f.write("deep16m.flm", flmfile.profile(
        flmfile.frame(0, 0x10, 0x10, "f", "/bin/p"), flmfile.stack(0, [0] * n),
        b"".join(flmfile.sample(0, 1, 1, 0, 0, k) for k in range(1000))))
    assert os.path.getsize(src) < 200000
    for v in VERBS:
        rc, out, err = f.limited(v[0], src, *v[1:], "-o", "/dev/null")
        assert rc == 2 and "more than 1048576 frames" in err and len(err.splitlines()) == 1, (v, rc, err)
    # the limit itself is fine
    body = flmfile.frame(0, 0x10, 0x10, "f", "/bin/p") + flmfile.stack(0, [0] * 1048576) + flmfile.sample(0, 1, 7)
    src = f.write("deep1m.flm", flmfile.profile(body))
    rc, out, err = f.limited("collapse", src)
    assert rc == 0 and out.decode().endswith(";f 7\n") and out.count(b";") == 1048575, err


@pytest.mark.slow
def test_bounds_chunks_that_inflate_past_the_file_budget(f):
    info = flmfile.info("k", "x" * (60 << 20))  # 60 MiB of one byte: ~60 KB compressed
    src = f.write("bomb.flm", big_chunks(info, 4))
    size = os.path.getsize(src)
    assert 240 * (1 << 20) > (64 << 20) + 256 * size, size
    for v in VERBS[:4]:
        rc, out, err = f.limited(v[0], src, *v[1:])
        assert rc == 2 and "inflate to more than" in err, (v, rc, err)


@pytest.mark.slow
def test_bounds_long_names_on_long_stacks_cannot_blow_up_the_text(f):
    # 16 stacks of 1M references to a frame with a 4000-byte name: 64 GB of folded text
    body = flmfile.frame(0, 0x10, 0x10, "n" * 4000, "/bin/p")
    body += b"".join(flmfile.stack(k, [0] * (1000000 - k)) for k in range(16))
    body += b"".join(flmfile.sample(k, 1, 1) for k in range(16))
    src = f.write("wide.flm", flmfile.profile(body))
    for v in VERBS:
        rc, out, err = f.limited(v[0], src, *v[1:], "-o", "/dev/null")
        if v[0] == "export" and v[2] != "folded":
            assert rc == 0, (v, err)  # pprof, speedscope name each frame once: 16M references fit
            continue
        assert rc == 2 and "honestly" in err and len(err.splitlines()) == 1, (v, rc, err)


@pytest.mark.slow
def test_bounds_speedscope_refuses_samples_that_expand_past_it(f):
    body = (flmfile.frame(0, 0x10, 0x10, "f", "/bin/p") + flmfile.stack(0, [0] * 1000000) +
            b"".join(flmfile.sample(0, 1 + k % 3, 1, 0, 0, k) for k in range(20000)))
    src = f.write("manydeep.flm", flmfile.profile(body))
    rc, out, err = f.limited("export", src, "--format", "speedscope", "-o", "/dev/null")
    assert rc == 2 and "honestly" in err, (rc, err)
    rc, out, err = f.limited("svg", src, "-o", "/dev/null")  # one distinct stack: fine
    assert rc == 0, err


def test_export_threads_groups_many_threads_in_one_pass(f):
    # thread churn: 20000 threads, 2 samples each, interleaved
    body = flmfile.frame(0, 0x10, 0x10, "a", "/bin/p") + flmfile.frame(1, 0x20, 0x20, "b", "/bin/p")
    body += flmfile.stack(0, [0]) + flmfile.stack(1, [1])
    body += b"".join(flmfile.sample(k & 1, 1000 + k % 20000, 1, 0, 0, k) for k in range(40000))
    src = f.write("churn.flm", flmfile.profile(body, hz=1000))
    rc, out, err = f.run("export", src, "--format", "speedscope", "--threads")
    assert rc == 0, err
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
        th, sa, te = flmfile.thread13, flmfile.sample13, flmfile.thread_end13
    else:
        th = lambda tid, serial, *a: flmfile.thread(tid, *a)
        sa = lambda sid, tid, serial, *a: flmfile.sample(sid, tid, *a)
        te = lambda tid, serial, t: flmfile.thread_end(tid, t)
    body = (flmfile.frame(0, 0x10, 0x10, "camlA.work_1", "/bin/p") + flmfile.stack(0, [0]) +
            th(500, 1, 3, 1, 100, "") + sa(0, 500, 1, 3, 1, 0, 150) + te(500, 1, 200) +
            th(501, 2, 1, 0, 100, "main") + sa(0, 501, 2, 1, 0, 0, 160) +
            th(500, 3, 2, 2, 300, "") + sa(0, 500, 3, 5, 2, 0, 350) + te(500, 3, 400) + flmfile.end())
    return flmfile.profile(body, minor=minor)


def test_threads_keep_their_identity_when_a_tid_is_reused(f):
    src = f.write("reused14.flm", reused_tid_profile(4))
    rc, out, err = f.run("collapse", src, "--threads")
    assert rc == 0, err
    assert sorted(out.decode().splitlines()) == [
        "domain 2;A.work 5", "main;A.work 1", "thread 500 (domain 1);A.work 3"], out
    rc, out, err = f.run("report", src)
    rows = {l.split()[0]: l for l in out.decode().splitlines() if re.match(r"\s+(domain|thread|main)\b", l)}
    assert "threads (3 with samples)" in out.decode() and "domain" in rows, out.decode()
    rc, out, err = f.run("export", src, "--format", "speedscope", "--threads")
    names = [p_["name"] for p_ in json.loads(out)["profiles"]]
    assert sorted(names) == ["domain 2", "main", "thread 500 (domain 1)"], names


def test_files_before_thread_serials_still_read(f):
    src = f.write("reused13.flm", reused_tid_profile(3))
    rc, out, err = f.run("collapse", src, "--threads")
    assert rc == 0, err
    # as 1.0-1.3 readers did: one thread per tid, the last THREAD record's kind wins
    assert sorted(out.decode().splitlines()) == ["domain 2;A.work 8", "main;A.work 1"], out


@pytest.mark.slow
def test_recorded_profiles_give_each_thread_a_serial(f, split):
    out = f.path("serial.flm")
    rc, err = f.preload(split, out)
    assert rc == 0, err
    f.keep_seed(out)
    data = open(out, "rb").read()
    assert struct.unpack_from("<HH", data, 8) >= (1, 4)
    recs = flmfile.records(data)
    serials = {}
    for t, body in recs:
        if t == flmfile.THREAD:
            tid = struct.unpack_from("<I", body)[0]
            nlen = struct.unpack_from("<I", body, 17)[0]
            serials.setdefault(struct.unpack_from("<I", body, 21 + nlen)[0], set()).add(tid)
    samples = flmfile.samples(data)
    assert serials and 0 not in serials and all(len(v) == 1 for v in serials.values()), serials
    assert samples and all(s_[6] in serials and s_[1] in serials[s_[6]] for s_ in samples)
