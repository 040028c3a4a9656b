"""tests/alloc/test_heapfill.py — `flamme record --alloc` of an unmodified
program (make alloc-test, part of make test): heap-fill sampling under
LD_PRELOAD alone (doc/design.md, "Heap-fill sampling").

tests/alloc/split.ml is built with a stand-in Flamme module that does
nothing (tests/alloc/unlinked/flamme.ml), so the program has no flamme code
of its own. Its known split of allocated bytes (50% small tuples in the
main domain, 30% 2000-word arrays allocated directly in the major heap,
half in each domain, 20% 200-byte Bytes in a second domain inside a deep
effect handler) must come out of `collapse --alloc` within 2 percentage
points, per function and per domain, with stacks that reach their thread's
root; `report` names the method; block counts are refused. On a runtime
older than 5.3, one line says allocation profiling needs 5.3.
"""
import os
import re

import pytest

from flammetest import collapse, completeness, record, run, share

HERE = os.path.dirname(os.path.abspath(__file__))
TOL = 0.02


def leaf(name):
    return lambda frames: frames[-1] == name


@pytest.mark.slow
def test_heapfill_split(build, compiler, ocaml, tmp_path, check):
    exe = ocaml("alloc/unlinked", [os.path.join(HERE, "unlinked", "flamme.ml"),
                                   os.path.join(HERE, "split.ml")])
    prof = str(tmp_path / "split.flm")
    p = record(build, [exe, "unused", "1e-3"], prof, args=["--alloc"])
    assert p.returncode == 0, p.stderr
    if not compiler.at_least_5_3:
        check(re.search(r"^flamme: allocation profiling \(--alloc\) needs OCaml 5\.3 or later; "
                        r"this is 5\.\d+; profiling CPU only$", p.stderr, re.M),
              f"{compiler}: one line says --alloc needs 5.3", p.stderr)
        return
    check("allocation" not in p.stderr, f"{compiler}: record --alloc without a warning", p.stderr)
    st = collapse(build, prof, "--alloc")
    for fn, want in (("small_tuples", 0.5), ("big_arrays", 0.3), ("mid_bytes", 0.2)):
        got = share(st, leaf("Split." + fn))
        check(abs(got - want) <= TOL,
              f"{compiler}: {fn} has {100 * got:.1f}% of the bytes (want {100 * want:.0f}% +- 2 pp)")
    # The second domain's share: half of big_arrays and all of mid_bytes.
    st_t = collapse(build, prof, "--alloc", "--threads")
    for fn, want in (("big_arrays", 0.15), ("mid_bytes", 0.2)):
        got = share(st_t, lambda f: re.match(r"domain [1-9]", f[0]) and f[-1] == "Split." + fn)
        check(abs(got - want) <= TOL,
              f"{compiler}: second domain's {fn} {100 * got:.1f}% (want {100 * want:.0f}% +- 2 pp)")
    # Stacks are walked like CPU samples: they reach the thread's root, and
    # mid_bytes (inside the effect handler) reaches the domain's body.
    whole = completeness(st_t, labelled=True)
    check(whole >= 0.99, f"{compiler}: {100 * whole:.1f}% of the bytes have a complete stack")
    mid = [f for f, _ in st_t if f[-1] == "Split.mid_bytes"]
    check(mid and all("Stdlib.Domain.body" in f for f in mid),
          f"{compiler}: mid_bytes (in the effect handler) reaches Domain.body", mid[:2])
    # report: the method and its bias in one line, the major-heap share.
    rep = run([build.flamme, "report", prof])
    check(rep.returncode == 0 and re.search(r"^allocations \(heap fill, \d+ samples: .*biased: "
                                            r"doc/design\.md\):$", rep.stdout, re.M),
          f"{compiler}: report names the method and its bias", rep.stdout[-600:])
    m = re.search(r"major heap directly: ([\d.]+)%", rep.stdout)
    check(m and abs(float(m.group(1)) - 30) <= 100 * TOL,
          f"{compiler}: report's major-heap share {m and m.group(1)}% (want 30% +- 2 pp)")
    # Blocks are not counted by this method: one line, exit status 2.
    b = run([build.flamme, "collapse", "--alloc", "--blocks", prof])
    check(b.returncode == 2 and "counts bytes, not blocks" in b.stderr
          and len(b.stderr.strip().splitlines()) == 1,
          f"{compiler}: collapse --blocks refused in one line", (b.returncode, b.stderr))


def test_heapfill_live_refused(build, ocaml_default, tmp_path):
    """--live needs the library: one line, and the profile has allocations
    but no live view."""
    exe = ocaml_default("alloc/plain", [os.path.join(HERE, "plain.ml")])
    prof = str(tmp_path / "plain.flm")
    p = record(build, [exe], prof, args=["--alloc", "--live"])
    assert p.returncode == 0, p.stderr
    assert "--live needs the program to link the flamme library" in p.stderr, p.stderr
    assert collapse(build, prof, "--alloc"), "no allocations recorded"
    lv = run([build.flamme, "collapse", "--live", prof])
    assert lv.returncode == 2 and "not tracked until they died" in lv.stderr, lv.stderr
