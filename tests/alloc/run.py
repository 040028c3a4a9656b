#!/usr/bin/env python3
"""tests/alloc/run.py — allocation profiles, end to end, with both compilers.

Owns: the checks of agent/alloc.c, runtime_hooks/frametable.c, the
Gc.Memprof side of ocaml_stubs/ and the verbs' --alloc/--live views. Called
by `make alloc-test` (mk/alloc.mk) after tests/alloc/split.ml was built with
the frame-pointer and the default (no frame pointers) OCaml 5.3 into
build/alloc/{fp,nofp}/split.exe, linked with the flamme library.

split.ml allocates a known split of bytes: 50% small tuples (main domain),
30% 2000-word arrays (major heap directly; half in each of two domains),
20% 200-byte Bytes in the second domain inside a deep effect handler. The
profile, sampled at 1e-3 per word (~20,000 samples), must give each function
its share within 2 percentage points (the sampling error is ~0.4 pp), each
stack must reach its thread's outermost OCaml frame, and with "live" the
kept tenth of the small tuples (and the list cells holding them: 7.8% of
the bytes) must be what the live view shows, within 2 pp.
Usage: run.py [--build DIR] [--keep]
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

RATE = "1e-3"
TOL = 2.0  # percentage points


class Failure(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise Failure(msg)


def run(cmd, **extra_env):
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLAMME_") and k != "LD_PRELOAD"}
    env.update(extra_env)
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout, p.stderr


def folded(flamme, prof, *opts):
    """[(frames root first, weight)] of `flamme collapse PROF OPTS`."""
    rc, so, se = run([flamme, "collapse", prof] + list(opts))
    check(rc == 0, "collapse %s %s failed (%d): %s" % (prof, " ".join(opts), rc, se.strip()))
    out = []
    for line in so.splitlines():
        stack, _, w = line.rpartition(" ")
        out.append((stack.split(";"), int(w)))
    check(out, "collapse %s %s printed nothing" % (prof, " ".join(opts)))
    return out


def share(stacks, leaf):
    tot = sum(w for _, w in stacks)
    return 100.0 * sum(w for f, w in stacks if f[-1] == leaf) / tot if tot else 0.0


def test_split(flamme, exe, work, comp):
    prof = os.path.join(work, "split-%s.flm" % comp)
    rc, so, se = run([exe, prof, RATE])
    check(rc == 0, "%s: split.exe failed (%d): %s" % (comp, rc, se.strip()))
    st = folded(flamme, prof, "--alloc")
    got = {fn: share(st, "Split." + fn) for fn in ("small_tuples", "big_arrays", "mid_bytes")}
    print("  %s: bytes by function: %s" % (comp, ", ".join("%s %.1f%%" % kv for kv in got.items())))
    for fn, want in (("small_tuples", 50), ("big_arrays", 30), ("mid_bytes", 20)):
        check(abs(got[fn] - want) <= TOL, "%s: %s has %.1f%% of the bytes, want %d%% +- %g pp"
              % (comp, fn, got[fn], want, TOL))
    # Two domains: the second domain's half of big_arrays and all of mid_bytes
    # (inside the effect handler) reach its Domain.spawn'd function; the main
    # domain's stacks reach the program's entry.
    st_t = folded(flamme, prof, "--alloc", "--threads")
    dom = [(f, w) for f, w in st_t if re.match(r"domain [1-9]", f[0])]
    d_big = sum(w for f, w in dom if f[-1] == "Split.big_arrays")
    d_mid = sum(w for f, w in dom if f[-1] == "Split.mid_bytes")
    tot = sum(w for _, w in st_t)
    print("  %s: second domain: big_arrays %.1f%%, mid_bytes %.1f%% of all bytes"
          % (comp, 100.0 * d_big / tot, 100.0 * d_mid / tot))
    check(abs(100.0 * d_big / tot - 15) <= TOL, "%s: second domain's big_arrays %.1f%%, want 15%%"
          % (comp, 100.0 * d_big / tot))
    check(abs(100.0 * d_mid / tot - 20) <= TOL, "%s: second domain's mid_bytes %.1f%%, want 20%%"
          % (comp, 100.0 * d_mid / tot))
    # Complete stacks: below the thread label, the root is the outermost OCaml
    # frame of the thread (the program's entry, a spawned domain's body).
    roots = {}
    for f, w in st_t:
        roots[f[1]] = roots.get(f[1], 0) + w
    whole = sum(w for r, w in roots.items() if r in ("caml_program", "Stdlib.Domain.body"))
    print("  %s: stacks reaching the thread's outermost OCaml frame: %.2f%% (roots: %s)"
          % (comp, 100.0 * whole / tot, ", ".join(sorted(roots))))
    check(whole >= 0.999 * tot, "%s: only %.2f%% of the bytes have a whole stack (roots %s)"
          % (comp, 100.0 * whole / tot, roots))
    mid_main = [f for f, w in st_t if f[-1] == "Split.mid_bytes" and f[1] != "Stdlib.Domain.body"]
    check(not mid_main, "%s: mid_bytes (in the effect handler) does not reach Domain.body: %r"
          % (comp, mid_main[:2]))
    # Blocks: 2,000,000 tuples, 3,000 arrays (within 5%: ~10,000 and ~90% of
    # 3,000 arrays sampled, each estimate unbiased).
    sb = folded(flamme, prof, "--alloc", "--blocks")
    tup = sum(w for f, w in sb if f[-1] == "Split.small_tuples")
    arr = sum(w for f, w in sb if f[-1] == "Split.big_arrays")
    print("  %s: blocks: small_tuples %d, big_arrays %d" % (comp, tup, arr))
    check(abs(tup - 2000000) <= 100000, "%s: small_tuples made %d blocks, want 2,000,000" % (comp, tup))
    check(abs(arr - 2998) <= 150, "%s: big_arrays made %d blocks, want 2,998" % (comp, arr))
    # report: the allocation section, arrays allocated directly in the major heap.
    rc, so, se = run([flamme, "report", prof])
    check(rc == 0 and "top allocators by bytes:" in so, "%s: report has no allocation section: %s"
          % (comp, se.strip()))
    m = re.search(r"major heap directly: ([\d.]+)%", so)
    check(m and abs(float(m.group(1)) - 30) <= TOL, "%s: report's major-heap share %s, want 30%%"
          % (comp, m and m.group(1)))
    check(re.search(r"^\s+1\s+\d+\s+[\d.]+%", so, re.M), "%s: report has no row for domain 1" % comp)
    # svg: bytes, not samples
    svg = os.path.join(work, "split-%s.svg" % comp)
    rc, _, se = run([flamme, "svg", "--alloc", prof, "-o", svg])
    check(rc == 0, "%s: svg --alloc failed: %s" % (comp, se.strip()))
    text = open(svg).read()
    check("Allocation Flame Graph" in text and " bytes, " in text and "Split.small_tuples" in text,
          "%s: svg --alloc lacks its title, byte counts or a function" % comp)
    return prof


def load_export_module():
    """tests/export/run.py's pprof decoder (imported by path, not run)."""
    import importlib.util
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "export", "run.py")
    spec = importlib.util.spec_from_file_location("export_run", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_exports(flamme, work):
    """speedscope in bytes, pprof with Go's heap sample types, both adding up
    to what collapse --alloc gives."""
    prof = os.path.join(work, "live-fp.flm")
    want = sum(w for _, w in folded(flamme, prof, "--alloc"))
    live = sum(w for _, w in folded(flamme, prof, "--live"))
    js = os.path.join(work, "a.json")
    rc, _, se = run([flamme, "export", prof, "--alloc", "--format", "speedscope", "-o", js])
    check(rc == 0, "export --alloc speedscope failed: %s" % se.strip())
    import json
    d = json.load(open(js))
    p0 = d["profiles"][0]
    check(p0["unit"] == "bytes" and sum(p0["weights"]) == want,
          "speedscope: unit %r, %d bytes, want %d" % (p0["unit"], sum(p0["weights"]), want))
    pb = os.path.join(work, "a.pb.gz")
    rc, _, se = run([flamme, "export", prof, "--alloc", "--format", "pprof", "-o", pb])
    check(rc == 0, "export --alloc pprof failed: %s" % se.strip())
    try:
        pp = load_export_module().decode_pprof(pb)
    except Exception as e:  # the decoder's own check failures
        raise Failure("pprof decode: %s" % e)
    types = [t for t, _ in pp["sample_type"]]
    check(types == ["alloc_objects", "alloc_space", "inuse_objects", "inuse_space"],
          "pprof sample types %r" % pp["sample_type"])
    space = sum(v[1] for _, v, _ in pp["samples"])
    inuse = sum(v[3] for _, v, _ in pp["samples"])
    print("  pprof: alloc_space %d (collapse %d), inuse_space %d (collapse --live %d), default %s"
          % (space, want, inuse, live, pp["default_sample_type"]))
    check(abs(space - want) <= len(pp["samples"]) and abs(inuse - live) <= len(pp["samples"]),
          "pprof totals differ from collapse")
    check(pp["default_sample_type"] == "alloc_space", "pprof default %r" % pp["default_sample_type"])
    if shutil.which("go"):  # Debian golang-go: the reference reader
        r = subprocess.run(["go", "tool", "pprof", "-top", "-sample_index=alloc_space", pb],
                           capture_output=True, text=True, timeout=120)
        check(r.returncode == 0 and "Split.small_tuples" in r.stdout,
              "go tool pprof: rc %d %s" % (r.returncode, (r.stderr or r.stdout)[-300:]))
        print("  go tool pprof reads it: " + next(l.strip() for l in r.stdout.splitlines()
                                                  if "small_tuples" in l))
    else:
        print("  (go not installed: go tool pprof not run)")


def test_live(flamme, exe, work, comp):
    prof = os.path.join(work, "live-%s.flm" % comp)
    rc, so, se = run([exe, prof, RATE, "live"])
    check(rc == 0, "%s: split.exe live failed (%d): %s" % (comp, rc, se.strip()))
    alloc = sum(w for _, w in folded(flamme, prof, "--alloc"))
    live = folded(flamme, prof, "--live")
    lt = sum(w for _, w in live)
    # 200,000 kept tuples (40 B) and list cells (24 B) of 2,000,000 tuples,
    # 200,000 cells, 3,000 arrays and 160,000 Bytes: 12.8 MB of 164.8 MB.
    want = 100.0 * 200000 * 64 / (2000000 * 40 + 200000 * 24 + 48e6 + 32e6)
    got = 100.0 * lt / alloc
    print("  %s: alive at the end: %.2f%% of the bytes allocated (want %.2f%%), %.1f%% of it in "
          "small_tuples" % (comp, got, want, share(live, "Split.small_tuples")))
    check(abs(got - want) <= TOL, "%s: live share %.2f%%, want %.2f%% +- %g pp" % (comp, got, want, TOL))
    check(share(live, "Split.small_tuples") >= 98, "%s: the live view is not small_tuples': %r"
          % (comp, live[:4]))
    rc, so, se = run([flamme, "report", "--live", prof])
    check(rc == 0 and "alive when profiling stopped, by bytes:" in so, "%s: report --live" % comp)
    check("warning" not in se, "%s: a single-domain live view warns: %r" % (comp, se))
    # Two domains: OCaml 5.3's Memprof drops some surviving blocks; the view says so.
    prof2 = os.path.join(work, "live2-%s.flm" % comp)
    rc, so, se = run([exe, prof2, RATE, "live2"])
    check(rc == 0, "%s: split.exe live2 failed (%d): %s" % (comp, rc, se.strip()))
    rc, so, se = run([flamme, "collapse", "--live", prof2])
    check(rc == 0 and "2 domains allocated while blocks were tracked" in se,
          "%s: the two-domain live view does not warn: %r" % (comp, se))


def test_segments(flamme, exe, work, comp):
    """A continuous profile with live tracking (FLAMME_PERIOD=0.1): the
    segments read as one give the same live share as one profile of the
    run (blocks allocated in a segment that die in a later one are matched
    across files); every segment with allocations names its mode (its own
    --live view works); a segment's report says its blocks may die later."""
    d = os.path.join(work, "seg-%s" % comp)
    os.makedirs(d)
    rc, so, se = run([exe, os.path.join(d, "s.%n.flm"), RATE, "live"], FLAMME_PERIOD="0.1")
    check(rc == 0, "%s: split.exe live with a period failed (%d): %s" % (comp, rc, se.strip()))
    segs = sorted(os.path.join(d, f) for f in os.listdir(d))
    check(len(segs) >= 2, "%s: %d segment(s) written, want 2 or more" % (comp, len(segs)))
    alloc = sum(w for _, w in folded(flamme, segs[0], *segs[1:], "--alloc"))
    live = folded(flamme, segs[0], *segs[1:], "--live")
    want = 100.0 * 200000 * 64 / (2000000 * 40 + 200000 * 24 + 48e6 + 32e6)
    got = 100.0 * sum(w for _, w in live) / alloc
    print("  %s: %d segments read as one: alive at the end %.2f%% of the bytes allocated (want "
          "%.2f%%)" % (comp, len(segs), got, want))
    check(abs(got - want) <= TOL, "%s: merged live share %.2f%%, want %.2f%% +- %g pp"
          % (comp, got, want, TOL))
    check(share(live, "Split.small_tuples") >= 98, "%s: the merged live view is not small_tuples': %r"
          % (comp, live[:4]))
    # svg reads the segments as one too (one segment may have no allocations)
    svg = os.path.join(d, "..", "seg-%s.svg" % comp)
    rc, so, se = run([flamme, "svg", "--live", "-o", svg] + segs)
    lt = sum(w for _, w in live)
    check(rc == 0 and "Split.small_tuples\n{:,} bytes".format(lt) in open(svg).read(),
          "%s: svg --live of the segments: rc %d %r (want small_tuples at {:,} bytes)".format(lt)
          % (comp, rc, se[-300:]))
    with_allocs = 0
    for s in segs:
        rc, so, se = run([flamme, "collapse", "--alloc", s])
        if rc != 0:
            check("no sampled allocations" in se, "%s: collapse --alloc %s: %r" % (comp, s, se))
            continue
        with_allocs += 1
        rc, so, se = run([flamme, "collapse", "--live", s])
        check(rc == 0, "%s: segment %s has no live view: %r" % (comp, os.path.basename(s), se))
    check(with_allocs >= 2, "%s: %d segments with allocations, want 2 or more" % (comp, with_allocs))
    rc, so, se = run([flamme, "report", segs[0]])
    check(rc == 0 and "not collected by the segment's end" in so,
          "%s: the first segment's report: %r" % (comp, so[-400:]))


def test_refusals(flamme, work, exe):
    """Views a profile cannot give: one line, exit status 2; a bad rate: Flamme.Error."""
    tracked = os.path.join(work, "split-fp.flm")  # recorded without --live
    cpu = os.path.join(work, "cpu.flm")
    rc, so, se = run([exe, cpu, "cpu"])
    check(rc == 0, "split.exe cpu failed (%d): %s" % (rc, se.strip()))
    cases = [(cpu, "--alloc", "no sampled allocations"), (tracked, "--live", "not tracked until they died")]
    for prof, view, why in cases:
        for verb in (["collapse"], ["report"], ["svg", "-o", os.path.join(work, "x.svg")],
                     ["export", "--format", "pprof", "-o", os.path.join(work, "x.pb")],
                     ["diff", prof]):
            rc, so, se = run([flamme] + verb + [view, prof])
            check(rc == 2 and why in se and len(se.strip().splitlines()) == 1,
                  "%s %s on %s: rc %d, stderr %r" % (verb[0], view, os.path.basename(prof), rc, se))
    # flamme record --alloc: a program linking the library takes the rate as
    # Flamme.start's default; an unmodified binary says what it needs.
    rec = os.path.join(work, "rec.flm")
    rc, so, se = run([flamme, "record", "--alloc=1e-3", "-o", os.path.join(work, "unused.flm"),
                      "--", exe, rec, "cpu"])
    check(rc == 0, "record --alloc of the linked program failed (%d): %s" % (rc, se.strip()))
    st = folded(flamme, rec, "--alloc")
    check(abs(share(st, "Split.small_tuples") - 50) <= TOL,
          "record --alloc: small_tuples %.1f%%" % share(st, "Split.small_tuples"))
    plain = os.path.join(work, "plain.exe")
    shutil.copy(os.path.join(os.path.dirname(exe), "..", "..", "alloc", "plain", "plain.exe"), plain)
    rc, so, se = run([flamme, "record", "--alloc", "-o", os.path.join(work, "plain.flm"), "--", plain])
    check(rc == 0 and "needs the program to link the flamme library" in se,
          "record --alloc of an unmodified binary: rc %d, stderr %r" % (rc, se))
    rc, so, se = run([exe, os.path.join(work, "bad.flm"), "0"])
    check(rc == 2 and "alloc rate must be in (0, 1]" in se,
          "split.exe with rate 0: rc %d, stderr %r" % (rc, se[-300:]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args()
    flamme = os.path.abspath(os.path.join(a.build, "flamme"))
    work = tempfile.mkdtemp(prefix="flamme-alloc-")
    failed = passed = 0
    for comp in ("fp", "nofp"):
        exe = os.path.abspath(os.path.join(a.build, "alloc", comp, "split.exe"))
        for name, fn in (("split", test_split), ("live", test_live), ("segments", test_segments)):
            print("alloc %s %s:" % (name, comp))
            try:
                fn(flamme, exe, work, comp)
                print("  PASS")
                passed += 1
            except Failure as e:
                print("  FAIL: %s" % e)
                failed += 1
    print("alloc exports:")
    try:
        test_exports(flamme, work)
        print("  PASS")
        passed += 1
    except Failure as e:
        print("  FAIL: %s" % e)
        failed += 1
    print("alloc refusals:")
    try:
        test_refusals(flamme, work, os.path.abspath(os.path.join(a.build, "alloc", "fp", "split.exe")))
        print("  PASS")
        passed += 1
    except Failure as e:
        print("  FAIL: %s" % e)
        failed += 1
    if a.keep:
        print("kept %s" % work)
    else:
        shutil.rmtree(work, ignore_errors=True)
    print("alloc: %d passed, %d failed" % (passed, failed))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
