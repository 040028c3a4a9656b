#!/usr/bin/env python3
"""tests/nofp/run.py — profiles the e2e programs built by an OCaml 5.3
WITHOUT frame pointers (a default opam switch) and checks what a user looks
at: stacks reach their thread's root, the known 50/30/20 split is there, each
domain shows its own work, code inside effect fibers sits under the
scheduler, and a 6000-deep recursion is captured whole.

Usage: run.py --build DIR.  Ends with "nofp: N passed, N failed".
"""
import argparse
import os
import subprocess
import sys
import tempfile

ROOTS = {"_start", "__libc_start_main", "__libc_start_call_main", "main",
         "start_thread", "clone3", "clone"}


def record(flamme, out, exe, args, hz=499, extra_env=None):
    env = dict(os.environ, FLAMME_ENGINE="perf", **(extra_env or {}))
    p = subprocess.run([flamme, "record", "-F", str(hz), "-o", out, "--", exe] + args,
                       env=env, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        raise AssertionError(f"{exe} exited {p.returncode}: {p.stderr.strip()[-500:]}")
    summary = [l for l in p.stderr.splitlines() if l.startswith("flamme:")]
    return summary[-1] if summary else ""


def collapse(flamme, path, threads=False):
    cmd = [flamme, "collapse", path] + (["--threads"] if threads else [])
    p = subprocess.run(cmd, capture_output=True, text=True, check=True)
    stacks = []
    for line in p.stdout.splitlines():
        stack, _, count = line.rpartition(" ")
        stacks.append((stack.split(";"), float(count)))
    return stacks


def complete_share(stacks, threads=False):
    total = sum(c for _, c in stacks)
    ok = sum(c for s, c in stacks if s[1 if threads else 0] in ROOTS)
    return ok / total if total else 0.0


def worst(stacks, threads=False, n=3):
    bad = [(c, ";".join(s[-6:])) for s, c in stacks if s[1 if threads else 0] not in ROOTS]
    bad.sort(reverse=True)
    return "; ".join(f"{int(c)}x ...{s}" for c, s in bad[:n])


def check(cond, msg):
    if not cond:
        raise AssertionError(msg)


def t_split(flamme, bdir, tmp):
    out = os.path.join(tmp, "split.flm")
    print("  " + record(flamme, out, f"{bdir}/nofp/split/split.exe", ["60"]))
    st = collapse(flamme, out)
    share = complete_share(st)
    print(f"  complete: {100 * share:.1f}%")
    check(share >= 0.95, f"only {100 * share:.1f}% complete: {worst(st)}")
    under = [(s, c) for s, c in st if "Split.run_rounds" in s]
    tot = sum(c for _, c in under)
    check(tot > 300, f"too few samples under Split.run_rounds ({tot})")
    for fn, want in (("Split.work_a", 50), ("Split.work_b", 30), ("Split.work_c", 20)):
        got = 100 * sum(c for s, c in under if fn in s) / tot
        print(f"  {fn}: {got:.1f}% (want {want} +- 5)")
        check(abs(got - want) <= 5, f"{fn} has {got:.1f}%, want {want}+-5")


def t_domains(flamme, bdir, tmp):
    out = os.path.join(tmp, "domains.flm")
    print("  " + record(flamme, out, f"{bdir}/nofp/domains/domains.exe", ["60"]))
    st = collapse(flamme, out, threads=True)
    share = complete_share(st, threads=True)
    print(f"  complete: {100 * share:.1f}%")
    check(share >= 0.95, f"only {100 * share:.1f}% complete: {worst(st, True)}")
    for label, mine, other in (("domain 1", "Domains.work_a", "Domains.work_b"),
                               ("domain 2", "Domains.work_b", "Domains.work_a")):
        d = [(s, c) for s, c in st if s[0] == label]
        tot = sum(c for _, c in d)
        own = sum(c for s, c in d if mine in s) / tot if tot else 0
        oth = sum(c for s, c in d if other in s) / tot if tot else 1
        print(f"  {label}: {int(tot)} samples, {mine} {100 * own:.1f}%, {other} {100 * oth:.1f}%")
        check(tot > 100 and own >= 0.9 and oth <= 0.02, f"{label} does not show its own work")


def t_effects(flamme, bdir, tmp):
    out = os.path.join(tmp, "effects.flm")
    print("  " + record(flamme, out, f"{bdir}/nofp/effects/effects.exe", ["60"]))
    st = collapse(flamme, out)
    share = complete_share(st)
    print(f"  complete: {100 * share:.1f}%")
    check(share >= 0.95, f"only {100 * share:.1f}% complete: {worst(st)}")
    comp = [(s, c) for s, c in st if "Effects.compute" in s]
    tot = sum(c for _, c in comp)
    under = sum(c for s, c in comp if "Effects.run_scheduler" in s and s[0] in ROOTS)
    print(f"  Effects.compute: {int(tot)} samples, {100 * under / max(tot, 1):.1f}% under "
          "Effects.run_scheduler and a root")
    check(tot > 100 and under / tot >= 0.9, "fiber stacks do not reach the scheduler and main")


def t_deep(flamme, bdir, tmp):
    out = os.path.join(tmp, "deep.flm")
    # The walker is under test, not the CPU budget (which shortens most
    # 6000-frame samples at this rate): FLAMME_BUDGET=0.
    print("  " + record(flamme, out, f"{bdir}/nofp/deep/deep.exe", ["60", "6000"],
                        extra_env={"FLAMME_BUDGET": "0"}))
    st = collapse(flamme, out)
    share = complete_share(st)
    print(f"  complete: {100 * share:.1f}%")
    check(share >= 0.9, f"only {100 * share:.1f}% complete: {worst(st)}")
    deepest = max(s.count("Deep.descend") for s, _ in st)
    print(f"  deepest stack: {deepest} Deep.descend frames")
    check(deepest >= 6000, f"deepest stack has {deepest} Deep.descend frames, want 6000")


def t_systhread(flamme, bdir, tmp):
    out = os.path.join(tmp, "systhread.flm")
    print("  " + record(flamme, out, f"{bdir}/nofp/systhread/systhread.exe", ["60"]))
    st = collapse(flamme, out, threads=True)
    share = complete_share(st, threads=True)
    print(f"  complete: {100 * share:.1f}%")
    check(share >= 0.95, f"only {100 * share:.1f}% complete: {worst(st, True)}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    a = ap.parse_args()
    flamme = os.path.join(a.build, "flamme")
    passed = failed = 0
    with tempfile.TemporaryDirectory(prefix="flamme-nofp.") as tmp:
        for name, fn in (("split", t_split), ("domains", t_domains), ("effects", t_effects),
                         ("deep", t_deep), ("systhread", t_systhread)):
            print(f"== {name} (OCaml without frame pointers)")
            try:
                fn(flamme, a.build, tmp)
                print(f"PASS {name}")
                passed += 1
            except (AssertionError, subprocess.SubprocessError) as e:
                print(f"FAIL {name}: {e}")
                failed += 1
    print(f"nofp: {passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
