"""tests/lines/test_lines.py — source positions end to end (make lines-test,
part of make test).

Records tests/e2e/split.ml, built with every compiler (with -g), and checks that
`flamme collapse --lines` names its OCaml frames "Split.work_a (split.ml:N)"
with N inside that function's lines of the source (read from split.ml here,
not hard-coded), that callers carry their call's line, that without --lines
the names are unchanged, and that `flamme svg --lines` shows the positions.
The OCaml compiler's own frames get the same positions when its line rows
are read back from the cache as when they are made from its line table.
"""
import filecmp
import os
import re
import shutil
import struct

import pytest

import flmfile
from flammetest import REPO, clean_env, collapse, record, run, total

SPLIT_ML = os.path.join(REPO, "tests", "e2e", "split.ml")
REPLACE_ML = os.path.join(REPO, "tests", "lines", "replace_self.ml")
POS = re.compile(r"^(.*) \(([^()]*):(\d+)\)$")
FUNCS = ("work_a", "work_b", "work_c", "run_rounds")


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


def test_function_ranges(check):
    """The test's own reading of split.ml finds the functions it checks."""
    ranges = function_ranges(SPLIT_ML)
    check(all(f in ranges for f in FUNCS), "split.ml: found work_a/b/c and run_rounds", ranges)


def check_positions(with_lines, ranges, check, what=""):
    """Frames of Split.work_a/b/c and run_rounds carry a position in
    split.ml, inside that function's lines."""
    seen = {}
    outside = []
    unpositioned = 0
    for stack, w in with_lines:
        for fr in stack:
            m = POS.match(fr)
            fm = re.match(r"^Split\.(work_[abc]|run_rounds)$", m.group(1) if m else fr)
            if not fm:
                continue
            fn = fm.group(1)
            if not m:
                unpositioned += w
                continue
            f, line = m.group(2), int(m.group(3))
            lo, hi = ranges.get(fn, (0, -1))
            if os.path.basename(f) != "split.ml" or not lo <= line <= hi:
                outside.append((fr, w))
            seen.setdefault(fn, set()).add(line)
    for fn in FUNCS:
        check(fn in seen, what + "Split.%s frames carry a position in split.ml" % fn, sorted(seen.get(fn, [])))
    check(not outside, what + "every position lies within its function's lines", outside[:5])
    check(unpositioned == 0, what + "no Split.work_*/run_rounds frame without a position", unpositioned)


@pytest.mark.slow
def test_lines(build, ocaml, compiler, check, tmp_path):
    ranges = function_ranges(SPLIT_ML)
    # -g, as dune builds: the no-fp compiler's programs have no line table
    # without it (the fp compiler's C flags carry -g, and its assembler
    # keeps the .loc lines even then).
    exe = ocaml("lines/split", [SPLIT_ML], flags=("-g",))
    prof = str(tmp_path / "split.flm")
    r = record(build, [exe, "30"], prof, ["-F", "499"])
    assert r.returncode == 0 and os.path.exists(prof), "record split.exe 30: %s" % r.stderr[-500:]
    with_lines = collapse(build, prof, "--lines")
    plain = collapse(build, prof)
    n = total(with_lines)
    check(n > 100 and n == total(plain), "collapse --lines keeps every sample (> 100)",
          "%d with --lines, %d without" % (n, total(plain)))

    check_positions(with_lines, ranges, check)
    # Callers: run_rounds calls work_a on one line, work_b on another.
    call_line = {}
    for stack, w in with_lines:
        for caller, callee in zip(stack, stack[1:]):
            mc, me = POS.match(caller), POS.match(callee)
            if mc and me and mc.group(1) == "Split.run_rounds" and me.group(1).startswith("Split.work_"):
                call_line.setdefault(me.group(1), set()).add(int(mc.group(3)))
    src = open(SPLIT_ML).read().split("\n")
    ok = len(call_line) == 3
    for callee, ls in call_line.items():
        short = callee.split(".")[1]
        ok = ok and all(re.search(r"\b%s\b" % short, src[l - 1]) for l in ls)
    check(ok, "run_rounds frames are on the line that calls their callee", call_line)

    check(not any("(split.ml:" in fr for stack, _ in plain for fr in stack),
          "without --lines the frame names are unchanged")
    svg = str(tmp_path / "s.svg")
    r = run([build.flamme, "svg", "--lines", prof, "-o", svg])
    text = open(svg).read() if r.returncode == 0 and os.path.exists(svg) else ""
    check(re.search(r"Split\.work_a \(split\.ml:\d+\)", text) is not None, "svg --lines shows positions",
          r.stderr[-300:])
    r = run([build.flamme, "svg", prof, "-o", svg])
    text = open(svg).read() if r.returncode == 0 else "(failed)"
    check("Split.work_a" in text and "(split.ml:" not in text, "svg without --lines has none", r.stderr[-300:])


@pytest.mark.slow
def test_lines_after_the_executable_is_replaced(build, ocaml, compiler, check, tmp_path):
    """A rebuild moves a new file over a running program's path. The writer
    reads the executable's line table when a sample first needs it, by which
    time the path names the new file: the positions must still be the
    running program's. The program replaces itself first thing, with
    another program's executable (replace_self.ml alone)."""
    ranges = function_ranges(SPLIT_ML)
    built = ocaml("lines/replaced", [REPLACE_ML, SPLIT_ML], name="replaced", flags=("-g",))
    other = ocaml("lines/other", [REPLACE_ML], name="other", flags=("-g",))
    exe, new = str(tmp_path / "prog.exe"), str(tmp_path / "new.exe")
    shutil.copy(built, exe)
    shutil.copy(other, new)
    env = clean_env()
    env["REPLACE_SELF_WITH"] = new
    prof = str(tmp_path / "replaced.flm")
    r = record(build, [exe, "30"], prof, ["-F", "499"], env=env)
    assert r.returncode == 0 and os.path.exists(prof), "record prog.exe 30: %s" % r.stderr[-500:]
    check(not os.path.exists(new) and filecmp.cmp(exe, other, shallow=False),
          "the program moved the other executable over its own path")
    with_lines = collapse(build, prof, "--lines")
    check(total(with_lines) > 100, "more than 100 samples", total(with_lines))
    check_positions(with_lines, ranges, check, "replaced: ")


def exe_positions(prof, exe):
    """{offset in exe: (file, line)} of the profile's frames of the
    executable exe that have a source position (FRAME and FRAME_LINE
    records), and how many of its frames there are."""
    recs = flmfile.records(open(prof, "rb").read())
    offs, pos = {}, {}
    for t, b in recs:
        if t == flmfile.FRAME:
            fid, _, off = struct.unpack_from("<IQQ", b)
            n = struct.unpack_from("<I", b, 20)[0]
            m = struct.unpack_from("<I", b, 24 + n)[0]
            if os.path.realpath(b[28 + n:28 + n + m].decode()) == os.path.realpath(exe):
                offs[fid] = off
        elif t == flmfile.FRAME_LINE:
            fid, line = struct.unpack_from("<II", b)
            n = struct.unpack_from("<I", b, 8)[0]
            if fid in offs:
                pos[offs[fid]] = (b[12:12 + n].decode(), line)
    return pos, len(offs)


def test_lines_kept_between_processes(build, compiler, check, tmp_path):
    """A build starts the same compiler for every file: the rows of its
    line table that one process made are kept in the cache directory for
    the next (writer/lines.c "kept rows"). Later processes give the same
    source positions as one that reads nothing kept (FLAMME_CACHE=0),
    to the frames of ocamlopt.opt, at the same offsets."""
    opt = os.path.join(compiler.bindir, "ocamlopt.opt")
    src = tmp_path / "gen.ml"
    src.write_text("".join(
        "let f%d x = match x with\n  | [] -> %d\n  | y :: r -> y * %d + List.length r\n"
        "let g%d l = List.map (fun v -> (f%d [v; %d], string_of_int v)) l\n" % (i, i, i, i, i, i)
        for i in range(300)))
    cache = str(tmp_path / "cache")

    def compile_once(name, extra):
        env = clean_env(extra)
        prof = str(tmp_path / (name + ".flm"))
        r = record(build, [opt, "-c", "gen.ml"], prof, ["-F", "999"], env=env, cwd=str(tmp_path))
        assert r.returncode == 0, "ocamlopt.opt -c gen.ml under flamme: %s" % r.stderr[-500:]
        return exe_positions(prof, opt)

    ref, nref = compile_once("nocache", {"FLAMME_CACHE": "0"})
    compile_once("first", {"FLAMME_CACHE_DIR": cache})
    kept = [f for f in os.listdir(cache) if open(os.path.join(cache, f), "rb").read(8) == b"FLMLROW\0"]
    check(len(kept) == 1, "the first process keeps the compiler's line rows", os.listdir(cache))
    for name in ("second", "third"):
        pos, n = compile_once(name, {"FLAMME_CACHE_DIR": cache})
        common = [o for o in pos if o in ref]
        differ = [(o, pos[o], ref[o]) for o in common if pos[o] != ref[o]]
        print("    %s: %d of %d compiler frames placed (%d of %d without the cache), %d offsets in both"
              % (name, len(pos), n, len(ref), nref, len(common)))
        check(len(common) >= 20 and not differ, "%s process: the same positions as without the cache "
              "(>= 20 offsets in both)" % name, "%d in both, differing: %s" % (len(common), differ[:3]))
        check(len(pos) >= 0.9 * n, "%s process: >= 90%% of the compiler's frames placed" % name,
              "%d of %d" % (len(pos), n))
