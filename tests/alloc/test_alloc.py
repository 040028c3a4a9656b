"""tests/alloc/test_alloc.py — allocation profiles, end to end, with every
compiler (make alloc-test, part of make test).

Owns: the checks of agent/alloc.c, runtime_hooks/frametable.c, the
Gc.Memprof side of ocaml_stubs/ and the verbs' --alloc/--live views.
tests/alloc/split.ml is built with each compiler, linked with the flamme
library built by the same compiler (flammetest.flamme_library). Gc.Memprof
needs OCaml 5.3: with an older compiler the program must stop at
Flamme.start with one clear line saying so (test_needs_5_3), and the
profile tests are skipped.

split.ml allocates a known split of bytes: 50% small tuples (main domain),
30% 2000-word arrays (major heap directly; half in each of two domains),
20% 200-byte Bytes in the second domain inside a deep effect handler. The
profile, sampled at 1e-3 per word (~20,000 samples), must give each function
its share within 2 percentage points (the sampling error is ~0.4 pp), each
stack must reach its thread's outermost OCaml frame, and with "live" the
kept tenth of the small tuples (and the list cells holding them: 7.8% of
the bytes) must be what the live view shows, within 2 pp. The exports and
the refusals do not depend on the compiler: default compiler only.
"""
import json
import os
import re
import shutil
import subprocess

import pytest

from flammetest import clean_env, collapse, decode_pprof, flamme_library, run

HERE = os.path.dirname(os.path.abspath(__file__))
RATE = "1e-3"
TOL = 2.0  # percentage points
# 200,000 kept tuples (40 B) and list cells (24 B) of 2,000,000 tuples,
# 200,000 cells, 3,000 arrays and 160,000 Bytes: 12.8 MB of 164.8 MB.
LIVE_WANT = 100.0 * 200000 * 64 / (2000000 * 40 + 200000 * 24 + 48e6 + 32e6)


def build_split(build, compiler, make):
    """split.exe built by COMPILER (MAKE: the `ocaml` fixture of the same
    compiler) with that compiler's flamme library."""
    _, largs, deps = flamme_library(build, compiler)
    return make("alloc/split", [os.path.join(HERE, "split.ml")], flags=["-g"] + largs, deps=deps)


@pytest.fixture(scope="session")
def split(build, compiler, ocaml):
    """split.exe of this compiler; the test is skipped below OCaml 5.3."""
    if not compiler.at_least_5_3:
        pytest.skip("Gc.Memprof needs OCaml 5.3 (test_needs_5_3 checks what %s says)" % compiler)
    return build_split(build, compiler, ocaml)


@pytest.fixture(scope="session")
def split_default(build, default_compiler, ocaml_default):
    return build_split(build, default_compiler, ocaml_default)


def sh(cmd, **extra_env):
    p = run(cmd, env=clean_env(extra_env))
    return p.returncode, p.stdout, p.stderr


def folded(build, prof, *opts):
    """[(frames root first, weight)] of `flamme collapse PROF OPTS`, which
    must print some."""
    st = collapse(build, prof, *opts)
    assert st, "collapse %s %s printed nothing" % (prof, " ".join(opts))
    return st


def share(stacks, leaf):
    tot = sum(w for _, w in stacks)
    return 100.0 * sum(w for f, w in stacks if f[-1] == leaf) / tot if tot else 0.0


def test_needs_5_3(build, compiler, ocaml, check, tmp_path):
    """Below OCaml 5.3 (no Gc.Memprof), asking for allocation profiles stops
    the program at Flamme.start with one line saying what it needs."""
    if compiler.at_least_5_3:
        pytest.skip("%s has Gc.Memprof" % compiler)
    exe = build_split(build, compiler, ocaml)
    rc, so, se = sh([exe, str(tmp_path / "split.flm"), RATE])
    check(rc != 0 and len(se.strip().splitlines()) == 1
          and "allocation profiling needs OCaml 5.3 or later" in se,
          "%s: asking for allocation profiles says in one line that they need OCaml 5.3" % compiler,
          "rc %d, stderr %r" % (rc, se))


def test_own_memprof(build, compiler, ocaml, check, tmp_path):
    """A program running its own Gc.Memprof profile: Flamme.start ~alloc
    refuses (Flamme.Error, one line) and the program's profile keeps
    sampling. OCaml 5.5's Memprof.start would replace it silently."""
    if not compiler.at_least_5_3:
        pytest.skip("Gc.Memprof needs OCaml 5.3")
    _, largs, deps = flamme_library(build, compiler)
    exe = ocaml("alloc/own_memprof", [os.path.join(HERE, "own_memprof.ml")], flags=largs, deps=deps)
    rc, so, se = sh([exe, str(tmp_path / "own.flm")])
    print("  %s: %s" % (compiler, so.strip().replace("\n", " | ")))
    check(rc == 0 and re.search(r"^refused: cannot start allocation profiling: .+$", so, re.M),
          "%s: Flamme.start ~alloc refused beside the program's own Memprof profile" % compiler,
          "rc %d, stdout %r, stderr %r" % (rc, so, se[-300:]))
    m = re.search(r"^own samples after: (\d+)$", so, re.M)
    # 1,000,000 tuples of 3 words at 1e-2 per word: ~30,000 samples.
    check(m and int(m.group(1)) > 10000, "%s: the program's own profile still samples after" % compiler,
          so)


@pytest.mark.slow
def test_split(build, split, compiler, check, tmp_path):
    comp = compiler.name
    prof = str(tmp_path / "split.flm")
    rc, so, se = sh([split, prof, RATE])
    if not check(rc == 0, "%s: split.exe runs" % comp, "rc %d: %s" % (rc, se.strip())):
        return
    st = folded(build, prof, "--alloc")
    got = {fn: share(st, "Split." + fn) for fn in ("small_tuples", "big_arrays", "mid_bytes")}
    print("  %s: bytes by function: %s" % (comp, ", ".join("%s %.1f%%" % kv for kv in got.items())))
    for fn, want in (("small_tuples", 50), ("big_arrays", 30), ("mid_bytes", 20)):
        check(abs(got[fn] - want) <= TOL, "%s: %s has %d%% of the bytes +- %g pp" % (comp, fn, want, TOL),
              "%.1f%%" % got[fn])
    # Two domains: the second domain's half of big_arrays and all of mid_bytes
    # (inside the effect handler) reach its Domain.spawn'd function; the main
    # domain's stacks reach the program's entry.
    st_t = folded(build, prof, "--alloc", "--threads")
    dom = [(f, w) for f, w in st_t if re.match(r"domain [1-9]", f[0])]
    d_big = sum(w for f, w in dom if f[-1] == "Split.big_arrays")
    d_mid = sum(w for f, w in dom if f[-1] == "Split.mid_bytes")
    tot = sum(w for _, w in st_t)
    print("  %s: second domain: big_arrays %.1f%%, mid_bytes %.1f%% of all bytes"
          % (comp, 100.0 * d_big / tot, 100.0 * d_mid / tot))
    check(abs(100.0 * d_big / tot - 15) <= TOL, "%s: second domain's big_arrays 15%% of the bytes" % comp,
          "%.1f%%" % (100.0 * d_big / tot))
    check(abs(100.0 * d_mid / tot - 20) <= TOL, "%s: second domain's mid_bytes 20%% of the bytes" % comp,
          "%.1f%%" % (100.0 * d_mid / tot))
    # Complete stacks: below the thread label, the root is the outermost OCaml
    # frame of the thread (the program's entry, a spawned domain's body).
    roots = {}
    for f, w in st_t:
        roots[f[1]] = roots.get(f[1], 0) + w
    whole = sum(w for r, w in roots.items() if r in ("caml_program", "Stdlib.Domain.body"))
    print("  %s: stacks reaching the thread's outermost OCaml frame: %.2f%% (roots: %s)"
          % (comp, 100.0 * whole / tot, ", ".join(sorted(roots))))
    check(whole >= 0.999 * tot, "%s: >= 99.9%% of the bytes have a whole stack" % comp,
          "only %.2f%% (roots %s)" % (100.0 * whole / tot, roots))
    mid_main = [f for f, w in st_t if f[-1] == "Split.mid_bytes" and f[1] != "Stdlib.Domain.body"]
    check(not mid_main, "%s: mid_bytes (in the effect handler) reaches Domain.body" % comp, repr(mid_main[:2]))
    # Blocks: 2,000,000 tuples, 3,000 arrays (within 5%: ~10,000 and ~90% of
    # 3,000 arrays sampled, each estimate unbiased).
    sb = folded(build, prof, "--alloc", "--blocks")
    tup = sum(w for f, w in sb if f[-1] == "Split.small_tuples")
    arr = sum(w for f, w in sb if f[-1] == "Split.big_arrays")
    print("  %s: blocks: small_tuples %d, big_arrays %d" % (comp, tup, arr))
    check(abs(tup - 2000000) <= 100000, "%s: small_tuples made 2,000,000 blocks (+- 5%%)" % comp, tup)
    check(abs(arr - 2998) <= 150, "%s: big_arrays made 2,998 blocks (+- 5%%)" % comp, arr)
    # report: the allocation section, arrays allocated directly in the major heap.
    rc, so, se = sh([build.flamme, "report", prof])
    check(rc == 0 and "top allocators by bytes:" in so, "%s: report has an allocation section" % comp,
          se.strip())
    m = re.search(r"major heap directly: ([\d.]+)%", so)
    check(m and abs(float(m.group(1)) - 30) <= TOL, "%s: report's major-heap share is 30%%" % comp,
          m and m.group(1))
    check(re.search(r"^\s+1\s+\d+\s+[\d.]+%", so, re.M), "%s: report has a row for domain 1" % comp)
    # svg: bytes, not samples
    svg = str(tmp_path / "split.svg")
    rc, _, se = sh([build.flamme, "svg", "--alloc", prof, "-o", svg])
    if check(rc == 0, "%s: svg --alloc" % comp, se.strip()):
        text = open(svg).read()
        check("Allocation Flame Graph" in text and " bytes, " in text and "Split.small_tuples" in text,
              "%s: svg --alloc has its title, byte counts and the functions" % comp)


def test_stale_callstack(build, compiler, ocaml, check, tmp_path):
    """OCaml 5.3's Memprof can hand the allocation callback a callstack the
    minor GC has already reclaimed (ocaml/ocaml#14287, fixed in 5.4): the
    record then names memory the record itself holds, and reading its slots
    as frame descriptors killed the program (SIGSEGV in every run of
    stalecs.exe with the library of bb70707; 1-5 of 300 runs of split.exe).
    The program must run as it does alone, every array be counted, and each
    stack be whole or marked [broken] (a lost callstack), never a bare or
    made-up one."""
    if not compiler.at_least_5_3:
        pytest.skip("Gc.Memprof needs OCaml 5.3")
    comp = compiler.name
    _, largs, deps = flamme_library(build, compiler)
    exe = ocaml("alloc/stalecs", [os.path.join(HERE, "stalecs.ml")], flags=["-g"] + largs, deps=deps)
    prof = str(tmp_path / "stalecs.flm")
    n = 100000
    rc, so, se = sh([exe, prof, "0.01", str(n)], OCAMLRUNPARAM="s=1k")
    if not check(rc == 0 and so == "arrays %d\n" % n, "%s: stalecs.exe runs as alone (exit 0, its output)" % comp,
                 "rc %d, stdout %r, stderr %r" % (rc, so, se[-300:])):
        return
    sb = folded(build, prof, "--alloc", "--blocks")
    tot = sum(w for _, w in sb)
    arrays = sum(w for f, w in sb if f[-2:] == ["Stalecs.batch", "Stalecs.arrays"] and f[0] == "caml_program")
    lost = sum(w for f, w in sb if f == ["[broken]"])
    other = [(f, w) for f, w in sb if f != ["[broken]"] and f[-1] != "Stalecs.arrays"]
    print("  %s: %d blocks, %d with their whole stack, %d with a lost callstack" % (comp, tot, arrays, lost))
    check(abs(tot - n) <= 0.05 * n, "%s: the profile counts %d arrays (+- 5%%)" % (comp, n), tot)
    check(arrays + lost == tot and not other,
          "%s: every stack is caml_program..Stalecs.batch;Stalecs.arrays or [broken]" % comp, repr(other[:3]))
    check(lost <= 0.01 * tot, "%s: at most 1%% of the blocks lost their callstack" % comp, lost)


@pytest.mark.slow
def test_live(build, split, compiler, check, tmp_path):
    comp = compiler.name
    prof = str(tmp_path / "live.flm")
    rc, so, se = sh([split, prof, RATE, "live"])
    if check(rc == 0, "%s: split.exe live runs" % comp, "rc %d: %s" % (rc, se.strip())):
        alloc = sum(w for _, w in folded(build, prof, "--alloc"))
        live = folded(build, prof, "--live")
        got = 100.0 * sum(w for _, w in live) / alloc
        print("  %s: alive at the end: %.2f%% of the bytes allocated (want %.2f%%), %.1f%% of it in "
              "small_tuples" % (comp, got, LIVE_WANT, share(live, "Split.small_tuples")))
        check(abs(got - LIVE_WANT) <= TOL, "%s: live share %.2f%% +- %g pp" % (comp, LIVE_WANT, TOL),
              "%.2f%%" % got)
        check(share(live, "Split.small_tuples") >= 98, "%s: the live view is small_tuples' (>= 98%%)" % comp,
              repr(live[:4]))
        rc, so, se = sh([build.flamme, "report", "--live", prof])
        check(rc == 0 and "alive when profiling stopped, by bytes:" in so, "%s: report --live" % comp,
              se.strip())
        check("warning" not in se, "%s: a single-domain live view does not warn" % comp, repr(se))
    # Two domains: OCaml 5.3's Memprof drops some surviving blocks; the view says so.
    prof2 = str(tmp_path / "live2.flm")
    rc, so, se = sh([split, prof2, RATE, "live2"])
    if check(rc == 0, "%s: split.exe live2 runs" % comp, "rc %d: %s" % (rc, se.strip())):
        rc, so, se = sh([build.flamme, "collapse", "--live", prof2])
        check(rc == 0 and "2 domains allocated while blocks were tracked" in se,
              "%s: the two-domain live view warns" % comp, repr(se))


@pytest.mark.slow
def test_segments(build, split, compiler, check, tmp_path):
    """A continuous profile with live tracking (FLAMME_PERIOD=0.1): the
    segments read as one give the same live share as one profile of the
    run (blocks allocated in a segment that die in a later one are matched
    across files); every segment with allocations names its mode (its own
    --live view works); a segment's report says its blocks may die later."""
    comp = compiler.name
    d = tmp_path / "seg"
    d.mkdir()
    # At least 0.5 s of CPU: five periods or more on any machine.
    rc, so, se = sh([split, str(d / "s.%n.flm"), RATE, "live", "0.5"], FLAMME_PERIOD="0.1")
    if not check(rc == 0, "%s: split.exe live with a period runs" % comp, "rc %d: %s" % (rc, se.strip())):
        return
    segs = sorted(str(d / f) for f in os.listdir(d))
    if not check(len(segs) >= 2, "%s: 2 or more segments written" % comp, len(segs)):
        return
    alloc = sum(w for _, w in folded(build, segs[0], *segs[1:], "--alloc"))
    live = folded(build, segs[0], *segs[1:], "--live")
    got = 100.0 * sum(w for _, w in live) / alloc
    print("  %s: %d segments read as one: alive at the end %.2f%% of the bytes allocated (want "
          "%.2f%%)" % (comp, len(segs), got, LIVE_WANT))
    check(abs(got - LIVE_WANT) <= TOL, "%s: merged live share %.2f%% +- %g pp" % (comp, LIVE_WANT, TOL),
          "%.2f%%" % got)
    check(share(live, "Split.small_tuples") >= 98, "%s: the merged live view is small_tuples' (>= 98%%)"
          % comp, repr(live[:4]))
    # svg reads the segments as one too (one segment may have no allocations).
    # Its small_tuples box holds that function's live bytes: the program's
    # `sink` also keeps its last 8 blocks alive, mid_bytes' ones, and now
    # and then one of them was sampled (8,000 bytes of Split.mid_bytes in
    # the live view: 3 of 102 runs here).
    svg = str(tmp_path / "seg.svg")
    rc, so, se = sh([build.flamme, "svg", "--live", "-o", svg] + segs)
    lt = sum(w for f, w in live if f[-1] == "Split.small_tuples")
    check(rc == 0 and "Split.small_tuples\n{:,} bytes".format(lt) in open(svg).read(),
          "%s: svg --live of the segments shows small_tuples at {:,} bytes".format(lt) % comp,
          "rc %d %r" % (rc, se[-300:]))
    with_allocs = 0
    for s in segs:
        rc, so, se = sh([build.flamme, "collapse", "--alloc", s])
        if rc != 0:
            check("no sampled allocations" in se, "%s: collapse --alloc %s says it has no allocations"
                  % (comp, os.path.basename(s)), repr(se))
            continue
        with_allocs += 1
        rc, so, se = sh([build.flamme, "collapse", "--live", s])
        check(rc == 0, "%s: segment %s has a live view" % (comp, os.path.basename(s)), repr(se))
    check(with_allocs >= 2, "%s: 2 or more segments with allocations" % comp, with_allocs)
    rc, so, se = sh([build.flamme, "report", segs[0]])
    check(rc == 0 and "not collected by the segment's end" in so,
          "%s: the first segment's report says its blocks may die later" % comp, repr(so[-400:]))


@pytest.mark.slow
def test_exports(build, split_default, check, tmp_path):
    """speedscope in bytes, pprof with Go's heap sample types, both adding up
    to what collapse --alloc gives."""
    prof = str(tmp_path / "live.flm")
    rc, so, se = sh([split_default, prof, RATE, "live"])
    assert rc == 0, "split.exe live failed (%d): %s" % (rc, se.strip())
    want = sum(w for _, w in folded(build, prof, "--alloc"))
    live = sum(w for _, w in folded(build, prof, "--live"))
    js = str(tmp_path / "a.json")
    rc, _, se = sh([build.flamme, "export", prof, "--alloc", "--format", "speedscope", "-o", js])
    if check(rc == 0, "export --alloc speedscope", se.strip()):
        p0 = json.load(open(js))["profiles"][0]
        check(p0["unit"] == "bytes" and sum(p0["weights"]) == want, "speedscope: in bytes, adding up to collapse",
              "unit %r, %d bytes, want %d" % (p0["unit"], sum(p0["weights"]), want))
    pb = str(tmp_path / "a.pb.gz")
    rc, _, se = sh([build.flamme, "export", prof, "--alloc", "--format", "pprof", "-o", pb])
    if not check(rc == 0, "export --alloc pprof", se.strip()):
        return
    pp = decode_pprof(pb)
    types = [t for t, _ in pp["sample_type"]]
    check(types == ["alloc_objects", "alloc_space", "inuse_objects", "inuse_space"],
          "pprof: Go's heap sample types", repr(pp["sample_type"]))
    space = sum(v[1] for _, v, _ in pp["samples"])
    inuse = sum(v[3] for _, v, _ in pp["samples"])
    print("  pprof: alloc_space %d (collapse %d), inuse_space %d (collapse --live %d), default %s"
          % (space, want, inuse, live, pp["default_sample_type"]))
    check(abs(space - want) <= len(pp["samples"]) and abs(inuse - live) <= len(pp["samples"]),
          "pprof: alloc_space and inuse_space add up to collapse --alloc and --live",
          "%d vs %d, %d vs %d" % (space, want, inuse, live))
    check(pp["default_sample_type"] == "alloc_space", "pprof: default sample type alloc_space",
          repr(pp["default_sample_type"]))
    if not shutil.which("go"):  # Debian golang-go: the reference reader
        print("  (go not installed: go tool pprof not run)")
        return
    r = subprocess.run(["go", "tool", "pprof", "-top", "-sample_index=alloc_space", pb],
                       capture_output=True, text=True, timeout=120)
    if check(r.returncode == 0 and "Split.small_tuples" in r.stdout, "go tool pprof reads it",
             "rc %d %s" % (r.returncode, (r.stderr or r.stdout)[-300:])):
        print("  go tool pprof: " + next(l.strip() for l in r.stdout.splitlines() if "small_tuples" in l))


@pytest.mark.slow
def test_refusals(build, split_default, ocaml_default, check, tmp_path):
    """Views a profile cannot give: one line, exit status 2; a bad rate:
    Flamme.Error; record --alloc: taken by a program linking the library,
    refused with a reason for an unmodified binary."""
    flamme, exe, work = build.flamme, split_default, str(tmp_path)
    tracked = os.path.join(work, "split.flm")  # recorded without --live
    cpu = os.path.join(work, "cpu.flm")
    rc, so, se = sh([exe, tracked, RATE])
    assert rc == 0, "split.exe failed (%d): %s" % (rc, se.strip())
    rc, so, se = sh([exe, cpu, "cpu"])
    assert rc == 0, "split.exe cpu failed (%d): %s" % (rc, se.strip())
    cases = [(cpu, "--alloc", "no sampled allocations"), (tracked, "--live", "not tracked until they died")]
    for prof, view, why in cases:
        for verb in (["collapse"], ["report"], ["svg", "-o", os.path.join(work, "x.svg")],
                     ["export", "--format", "pprof", "-o", os.path.join(work, "x.pb")],
                     ["diff", prof]):
            rc, so, se = sh([flamme] + verb + [view, prof])
            check(rc == 2 and why in se and len(se.strip().splitlines()) == 1,
                  "%s %s on %s: one line (%s), exit status 2" % (verb[0], view, os.path.basename(prof), why),
                  "rc %d, stderr %r" % (rc, se))
    # flamme record --alloc: a program linking the library takes the rate as
    # Flamme.start's default; an unmodified binary is sampled by heap fill
    # (tests/alloc/test_heapfill.py).
    rec = os.path.join(work, "rec.flm")
    rc, so, se = sh([flamme, "record", "--alloc=1e-3", "-o", os.path.join(work, "unused.flm"),
                     "--", exe, rec, "cpu"])
    if check(rc == 0, "record --alloc of the linked program", "rc %d: %s" % (rc, se.strip())):
        st = folded(build, rec, "--alloc")
        check(abs(share(st, "Split.small_tuples") - 50) <= TOL, "record --alloc: small_tuples 50%% +- %g pp" % TOL,
              "%.1f%%" % share(st, "Split.small_tuples"))
    plain = ocaml_default("alloc/plain", [os.path.join(HERE, "plain.ml")])
    rc, so, se = sh([flamme, "record", "--alloc", "-o", os.path.join(work, "plain.flm"), "--", plain])
    check(rc == 0 and "allocation" not in se and folded(build, os.path.join(work, "plain.flm"), "--alloc"),
          "record --alloc of an unmodified binary records allocations", "rc %d, stderr %r" % (rc, se))
    rc, so, se = sh([exe, os.path.join(work, "bad.flm"), "0"])
    check(rc == 2 and "alloc rate must be in (0, 1]" in se, "split.exe with rate 0: Flamme.Error, exit status 2",
          "rc %d, stderr %r" % (rc, se[-300:]))
