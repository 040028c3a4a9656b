#!/usr/bin/env python3
"""tests/fuzz/run.py — drives afl++ for `make fuzz` (mk/fuzz.mk).

Usage: run.py --afl-harness H --plain-harness P --seeds DIR --out DIR
              --seconds N [--name NAME]
Runs afl-fuzz on H (instrumented, ASan/UBSan) for N seconds from the seeds,
then replays every queued input, crash and hang through P (plain build) to
measure the worst peak memory per byte of the file the verbs read. Prints
one summary line: executions, crashes, hangs, worst KB per input byte.
Exits 1 if afl found a crash or a hang (their files are listed)."""
import argparse
import glob
import os
import subprocess
import sys

TIMEOUT_MS = 10000  # a hang: one input running every verb for more than this


def stats(out):
    d = {}
    for line in open(os.path.join(out, "default", "fuzzer_stats")):
        k, _, v = line.partition(":")
        d[k.strip()] = v.strip()
    return d


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--afl-harness", required=True)
    ap.add_argument("--plain-harness", required=True)
    ap.add_argument("--seeds", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seconds", type=int, default=60)
    ap.add_argument("--name", default="fuzz")
    a = ap.parse_args()
    env = dict(os.environ, AFL_NO_UI="1", AFL_SKIP_CPUFREQ="1", AFL_NO_AFFINITY="1",
               AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES="1", AFL_SKIP_CRASHES="1",
               AFL_QUIET="1", ASAN_OPTIONS="abort_on_error=1:symbolize=0:detect_leaks=0",
               UBSAN_OPTIONS="halt_on_error=1:abort_on_error=1")
    subprocess.run(["rm", "-rf", a.out])
    os.makedirs(os.path.join(a.out, "tmp"))
    env["FLAMME_FUZZ_TMP"] = os.path.abspath(os.path.join(a.out, "tmp"))
    cmd = ["afl-fuzz", "-V", str(a.seconds), "-m", "none", "-t", str(TIMEOUT_MS), "-i", a.seeds, "-o", a.out,
           "--", a.afl_harness, "@@"]
    p = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    if p.returncode != 0 or not os.path.exists(os.path.join(a.out, "default", "fuzzer_stats")):
        sys.stderr.write(p.stderr.decode("utf-8", "replace")[-3000:])
        print("%s: afl-fuzz failed (exit %d): %s" % (a.name, p.returncode, " ".join(cmd)))
        return 1
    st = stats(a.out)
    crashes = sorted(glob.glob(os.path.join(a.out, "default", "crashes", "id:*")))
    hangs = sorted(glob.glob(os.path.join(a.out, "default", "hangs", "id:*")))
    # peak memory per byte of the file the verbs read, replayed without
    # sanitizers; the smallest peak is the harness's own (baseline)
    runs = []
    inputs = sorted(glob.glob(os.path.join(a.out, "default", "queue", "id:*"))) + crashes + hangs
    for f in inputs:
        try:
            r = subprocess.run([a.plain_harness, f], env=dict(os.environ, FLAMME_FUZZ_STATS="1"),
                               capture_output=True, timeout=120)
        except subprocess.TimeoutExpired:
            print("%s: replay of %s took over 120 s" % (a.name, f))
            continue
        line = r.stderr.decode("utf-8", "replace").strip().splitlines()
        if line and len(line[-1].split()) == 3:
            runs.append(tuple(map(int, line[-1].split())) + (f,))
    base = min((rss for _, _, rss, _ in runs), default=0)
    big = [((rss - base) * 1024.0 / fb, fb, rss, f) for _, fb, rss, f in runs if fb >= 1024]
    worst = max(big, default=(0.0, 0, 0, "-"))
    largest = max((fb for _, fb, _, _ in runs), default=0)
    print("%s: %s executions in %d s, %d crashes, %d hangs (over %d ms), %d inputs in the queue; "
          "worst peak memory %.1f bytes per file byte over the %d inputs of 1 KiB or more "
          "(%d KB for a %d-byte file, baseline %d KB; largest file %d bytes)"
          % (a.name, st.get("execs_done"), a.seconds, len(crashes), len(hangs), TIMEOUT_MS,
             len(inputs) - len(crashes) - len(hangs), worst[0], len(big), worst[2], worst[1], base,
             largest))
    for f in crashes + hangs:
        print("  found: %s (replay: FLAMME_FUZZ_STDERR=1 %s %s)" % (f, a.afl_harness, f))
    return 1 if crashes or hangs else 0


if __name__ == "__main__":
    sys.exit(main())
