#!/usr/bin/env python3
"""tests/lines/run.py — source positions end to end (make lines-test).

Records build/e2e/split/split.exe (tests/e2e/split.ml) and checks that
`flamme collapse --lines` names its OCaml frames "Split.work_a (split.ml:N)"
with N inside that function's lines of the source (read from split.ml here,
not hard-coded), that callers carry their call's line, that without --lines
the names are unchanged, and that `flamme svg --lines` shows the positions.
Ends with "lines: N passed, N failed"."""
import argparse
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
passed = failed = 0


def check(cond, what):
    global passed, failed
    if cond:
        passed += 1
        print("ok", what)
    else:
        failed += 1
        print("FAIL", what)


def function_ranges(src):
    """First and last line of each top-level `let` of the source: from its
    `let` to the line before the next top-level definition or comment."""
    lines = open(src).read().split("\n")
    starts = []
    for i, l in enumerate(lines, 1):
        m = re.match(r"let(?:\[@inline never\])?\s+(\w+)", l)
        if m:
            starts.append((i, m.group(1)))
        elif l.startswith("(*") or (l and not l[0].isspace()):
            starts.append((i, None))
    ranges = {}
    for k, (i, name) in enumerate(starts):
        if name is None:
            continue
        end = starts[k + 1][0] - 1 if k + 1 < len(starts) else len(lines)
        while end > i and not lines[end - 1].strip():
            end -= 1
        ranges[name] = (i, end)
    return ranges


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def folded(flamme, prof, *opts):
    r = run([flamme, "collapse", prof] + list(opts))
    if r.returncode != 0:
        sys.stderr.write(r.stderr)
        return []
    out = []
    for l in r.stdout.splitlines():
        stack, _, n = l.rpartition(" ")
        out.append((stack.split(";"), int(n)))
    return out


POS = re.compile(r"^(.*) \(([^()]*):(\d+)\)$")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    a = ap.parse_args()
    flamme = os.path.abspath(os.path.join(a.build, "flamme"))
    exe = os.path.abspath(os.path.join(a.build, "e2e", "split", "split.exe"))
    ranges = function_ranges(os.path.join(ROOT, "tests", "e2e", "split.ml"))
    check(all(f in ranges for f in ("work_a", "work_b", "work_c", "run_rounds")),
          "split.ml: found work_a/b/c and run_rounds (%s)" % ranges)
    with tempfile.TemporaryDirectory(prefix="flamme-lines-") as tmp:
        prof = os.path.join(tmp, "split.flm")
        r = run([flamme, "record", "-F", "499", "-o", prof, "--", exe, "30"])
        check(r.returncode == 0 and os.path.exists(prof), "record split.exe 30")
        if r.returncode != 0:
            sys.stderr.write(r.stderr)
        with_lines = folded(flamme, prof, "--lines")
        plain = folded(flamme, prof)
        total = sum(n for _, n in with_lines)
        check(total > 100 and total == sum(n for _, n in plain),
              "collapse --lines keeps every sample (%d)" % total)

        # Leaves in work_a/b/c: positions inside the function's lines.
        seen = {}
        outside = []
        unpositioned = 0
        for stack, n in with_lines:
            for fr in stack:
                m = POS.match(fr)
                name = m.group(1) if m else fr
                fm = re.match(r"^Split\.(work_[abc]|run_rounds)$", name)
                if not fm:
                    continue
                fn = fm.group(1)
                if not m:
                    unpositioned += n
                    continue
                f, line = m.group(2), int(m.group(3))
                lo, hi = ranges.get(fn, (0, -1))
                if os.path.basename(f) != "split.ml" or not lo <= line <= hi:
                    outside.append((fr, n))
                seen.setdefault(fn, set()).add(line)
        for fn in ("work_a", "work_b", "work_c", "run_rounds"):
            check(fn in seen, "Split.%s frames carry a position (split.ml:%s)" % (fn, sorted(seen.get(fn, []))))
        check(not outside, "every position lies within its function's lines %s" % outside[:5])
        check(unpositioned == 0, "no Split.work_*/run_rounds frame without a position (%d)" % unpositioned)
        # Callers: run_rounds calls work_a on one line, work_b on another.
        call_line = {}
        for stack, n in with_lines:
            for caller, callee in zip(stack, stack[1:]):
                mc, me = POS.match(caller), POS.match(callee)
                if mc and me and mc.group(1) == "Split.run_rounds" and me.group(1).startswith("Split.work_"):
                    call_line.setdefault(me.group(1), set()).add(int(mc.group(3)))
        src = open(os.path.join(ROOT, "tests", "e2e", "split.ml")).read().split("\n")
        ok = len(call_line) == 3
        for callee, ls in call_line.items():
            short = callee.split(".")[1]
            ok = ok and all(re.search(r"\b%s\b" % short, src[l - 1]) for l in ls)
        check(ok, "run_rounds frames are on the line that calls their callee %s" % call_line)

        check(not any("(split.ml:" in fr for stack, _ in plain for fr in stack),
              "without --lines the frame names are unchanged")
        svg = os.path.join(tmp, "s.svg")
        r = run([flamme, "svg", "--lines", prof, "-o", svg])
        text = open(svg).read() if r.returncode == 0 and os.path.exists(svg) else ""
        check(re.search(r"Split\.work_a \(split\.ml:\d+\)", text) is not None, "svg --lines shows positions")
        r = run([flamme, "svg", prof, "-o", svg])
        text = open(svg).read() if r.returncode == 0 else "(failed)"
        check("Split.work_a" in text and "(split.ml:" not in text, "svg without --lines has none")
    print("lines: %d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
