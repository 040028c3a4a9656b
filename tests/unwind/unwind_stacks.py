"""tests/unwind/unwind_stacks.py — what the unwind suite
(tests/unwind/test_unwind.py) and its benchmark (bench/unwind_bench.py)
share: how an unwind program is built, and its profile read as stacks
labelled by thread with the figures both print (completeness, the
heaviest incomplete stacks). Builds and runs go through
tests/flammetest.py. No assertions here; no pytest either (the benchmark
runs without it).
"""
import os
import shutil

import flammetest

HERE = os.path.dirname(os.path.abspath(__file__))
MARKERS = {"[broken]", "[truncated]"}
LIBS = {"yielder": ("unix", "threads"), "vclock": ("unix",), "dthreads": ("unix", "threads")}
# trygc's bound checks have a frame descriptor (the rows are mended from)
# only with -g, dune's default: without it a function's failing checks share
# one call, made from any depth of `try`, and the walk cannot know which.
FLAGS = {"trygc": ("-g",), "raisebt": ("-g",)}


def build_program(make, build, name):
    """Builds tests/unwind/NAME.ml (+ NAME_stubs.c) with MAKE (the `ocaml`
    fixture, or flammetest.builder's);
    returns the executable's path. dlprog gets its plugin beside it (make
    builds build/unwind/libdlwork.so; FileNotFoundError when it has not)."""
    stubs = os.path.join(HERE, name + "_stubs.c")
    sources = ([stubs] if os.path.exists(stubs) else []) + [os.path.join(HERE, name + ".ml")]
    exe = make("unwind/" + name, sources, libs=LIBS.get(name, ()), flags=FLAGS.get(name, ()))
    if name == "dlprog":
        lib = build.path("unwind", "libdlwork.so")
        if not os.path.exists(lib):
            raise FileNotFoundError("%s is missing: make %s" % (lib, os.path.relpath(lib, flammetest.REPO)))
        shutil.copy(lib, os.path.dirname(exe))
    return exe


class Stack:
    """One line of `collapse --threads`: the thread's label, the frames
    (root first) and the weight."""
    __slots__ = ("label", "frames", "weight")

    def __init__(self, frames, weight):
        self.label, self.frames, self.weight = frames[0], frames[1:], weight

    def complete(self):
        return bool(self.frames) and self.frames[0] in flammetest.ROOTS


def stacks(build, prof):
    return [Stack(f, w) for f, w in flammetest.collapse(build, prof, "--threads")]


def share(st, pred=None):
    """(% complete, weight) of the stacks matching pred."""
    sel = [s for s in st if pred is None or pred(s)]
    tot = sum(s.weight for s in sel)
    ok = sum(s.weight for s in sel if s.complete())
    return (100.0 * ok / tot if tot else 0.0), tot


def incomplete_top(st, n=5):
    """The n heaviest incomplete stacks as printable lines (leaf-side kept)."""
    out = []
    for s in sorted((s for s in st if not s.complete()), key=lambda s: -s.weight)[:n]:
        fr = s.frames
        text = ";".join(fr if len(fr) <= 40 else fr[:20] + ["..(%d frames).." % (len(fr) - 40)] + fr[-20:])
        out.append("%6d  %s;%s" % (s.weight, s.label, text))
    return out
