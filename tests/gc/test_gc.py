"""tests/gc/test_gc.py — GC insight, end to end (make gc-test, part of make test).

Profiles tests/gc/gcwork.ml (3 domains, allocation-heavy), with every
compiler make deps provides, built twice: plain,
and with systhreads linked in (-linkall: Thread's initialiser replaces several
runtime hooks without chaining; the GC timing hooks must survive it). For each
build it checks what a user reads in `flamme report` and
`flamme collapse --fold-gc`:

* minor collections of domain 0 (alive for the whole run) recorded in the
  profile vs the runtime's own count, Gc.quick_stat().minor_collections,
  printed by the program at its end. In OCaml 5 that counter is global: one
  minor collection is a stop-the-world event in which every running domain
  does its share, and each domain's share is one GC record. So domain 0 must
  have between N and N + 2 minor records (N is read before exit; the slack
  allows for a collection during at_exit / domain shutdown after the print).
  Spawned domains take part only while alive: 1..N records each.
* the duration table: count > 0 and p50 <= p90 <= p99 <= max for every row.
* samples flagged "in minor GC" cannot exceed what the recorded minor
  durations allow: a sample needs a CPU tick of the thread, and a domain can
  burn at most duration x hz ticks inside its collections (durations are wall
  time; with more domains than CPUs part of that time is spent descheduled, so
  only this upper bound holds). Allowed slack: 3 standard deviations of a
  Poisson count plus 3 samples. Some GC-flagged samples must exist.
* --fold-gc: the same total weight as without it, no runtime GC function
  left in any stack, and most of the [GC] weight (>= 80%) sits directly under
  an OCaml frame (the code whose allocation triggered the collection).
"""
import math
import os
import re
import subprocess

import pytest

from flammetest import collapse

HERE = os.path.dirname(os.path.abspath(__file__))
HZ = 499
GC_FUNCS = ("caml_call_gc", "caml_alloc_small_dispatch", "caml_empty_minor_heap_promote",
            "oldify_one", "major_collection_slice", "caml_major_collection_slice",
            "caml_poll_gc_work", "stw_handler", "handle_incoming")

def parse_report(text):
    """Returns (shares, durations) from the report's GC section:
    shares[domain] = (samples, minor%, major%, stack GC%, stw%),
    durations[(domain, kind)] = (count, total_ms, p50, p90, p99, max)."""
    shares, durations = {}, {}
    sec = text.split("\nGC:\n", 1)
    if len(sec) < 2:
        return shares, durations
    for line in sec[1].splitlines():
        if not line.startswith("  "):
            break
        m = re.match(r"^\s+(\d+|none)\s+(\d+)\s+([\d.]+)%\s+([\d.]+)%\s+([\d.]+)%\s+([\d.]+)%$", line)
        if m:
            shares[m.group(1)] = (int(m.group(2)),) + tuple(float(m.group(i)) for i in range(3, 7))
            continue
        m = re.match(r"^\s+(\d+|none)\s+(minor|major slice)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+"
                     r"([\d.]+)\s+([\d.]+)\s+([\d.]+)$", line)
        if m:
            durations[(m.group(1), m.group(2))] = (int(m.group(3)),) + tuple(
                float(m.group(i)) for i in range(4, 9))
    return shares, durations


def is_ocaml_frame(name):
    # Demangled OCaml names: "Unit.fn", "Unit (init)", "Stdlib.List.init".
    return bool(re.match(r"^[A-Z][A-Za-z0-9_']*[. ]", name))


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["plain", "threads"])
def test_gc(variant, build, ocaml, check, tmp_path):
    flamme = build.flamme
    exe = ocaml("gc/" + variant, [os.path.join(HERE, "gcwork.ml")],
                **({"libs": ("unix", "threads"), "flags": ("-linkall",)} if variant == "threads" else {}))
    prof = str(tmp_path / f"{variant}.flm")
    r = subprocess.run([flamme, "record", "-F", str(HZ), "-o", prof, "--", exe, "3", "100000"],
                       capture_output=True, text=True, timeout=300)
    check(r.returncode == 0, f"{variant}: program profiled", r.stderr.strip()[-300:])
    m = re.search(r"^minor_collections (\d+)$", r.stdout, re.M)
    check(m is not None, f"{variant}: program printed its minor collection count", r.stdout[-200:])
    if r.returncode != 0 or m is None:
        return
    runtime_minor = int(m.group(1))

    rep = subprocess.run([flamme, "report", prof], capture_output=True, text=True)
    check(rep.returncode == 0, f"{variant}: flamme report", rep.stderr.strip())
    shares, durations = parse_report(rep.stdout)
    check({"0", "1", "2"} <= set(shares), f"{variant}: GC share rows for domains 0, 1, 2",
          f"rows {sorted(shares)}")

    d0 = durations.get(("0", "minor"), (0,))[0]
    print(f"  {variant}: runtime minor_collections {runtime_minor}, domain 0 minor records {d0}")
    check(runtime_minor <= d0 <= runtime_minor + 2,
          f"{variant}: domain 0 minor records = runtime count (+0..2)",
          f"{d0} records vs {runtime_minor}")
    for dom in ("1", "2"):
        n = durations.get((dom, "minor"), (0,))[0]
        check(1 <= n <= runtime_minor + 2, f"{variant}: domain {dom} minor records in 1..runtime count",
              f"{n} vs {runtime_minor}")
    for (dom, kind), (count, total, p50, p90, p99, mx) in sorted(durations.items()):
        check(count > 0 and p50 <= p90 <= p99 <= mx and total > 0,
              f"{variant}: domain {dom} {kind} histogram plausible",
              f"count {count} p50 {p50} p90 {p90} p99 {p99} max {mx} total {total}")
    check(any(k[1] == "major slice" for k in durations), f"{variant}: major slices recorded")

    flagged_any = 0
    for dom in ("0", "1", "2"):
        if dom not in shares or (dom, "minor") not in durations:
            continue
        samples, minor_pct = shares[dom][0], shares[dom][1]
        flagged = samples * minor_pct / 100.0
        flagged_any += flagged
        total_ms = durations[(dom, "minor")][1]
        allowed = total_ms / 1000.0 * HZ
        slack = 3 * math.sqrt(max(allowed, 1.0)) + 3
        print(f"  {variant}: domain {dom}: {flagged:.0f} of {samples} samples flagged minor "
              f"({minor_pct:.1f}%); minor durations {total_ms:.1f} ms = at most {allowed:.0f} samples")
        check(flagged <= allowed + slack, f"{variant}: domain {dom} minor-flagged samples within durations",
              f"{flagged:.0f} > {allowed:.0f} + {slack:.0f}")
    check(flagged_any > 0, f"{variant}: some samples flagged as taken in a minor collection")

    plain = collapse(build, prof)
    fold = collapse(build, prof, "--fold-gc")
    check(sum(w for _, w in plain) == sum(w for _, w in fold),
          f"{variant}: --fold-gc keeps the total weight")
    left = [f for st, _ in fold for f in st if f.split(".")[0] in GC_FUNCS]
    check(not left, f"{variant}: --fold-gc leaves no GC function", ", ".join(sorted(set(left))[:5]))
    gcw = sum(w for st, w in fold if st[-1] in ("[GC]", "[GC stw wait]"))
    under_ocaml = sum(w for st, w in fold
                      if st[-1] in ("[GC]", "[GC stw wait]") and len(st) > 1 and is_ocaml_frame(st[-2]))
    print(f"  {variant}: folded GC weight {gcw}, of which directly under an OCaml frame {under_ocaml}")
    check(gcw > 0 and under_ocaml >= 0.8 * gcw,
          f"{variant}: [GC] frames sit under the OCaml code that allocated", f"{under_ocaml}/{gcw}")
