"""tests/flammetest.py — what every Python test of flamme shares.

Owns: the build under test (the flamme command, libflamme.so), the OCaml
compilers make deps provides and how a test program is built with one of
them, running `flamme record`, reading profiles back as folded stacks
(`flamme collapse`), the figures tests assert on (shares of samples,
completeness), and a protobuf reader (decode_pprof: pprof exports). Used by
tests/conftest.py (fixtures) and by the test modules; the pytest-free
scripts in bench/ may import it too. No assertions here: tests assert
through the `check` fixture (conftest.py).
"""
import gzip
import os
import re
import resource
import shutil
import subprocess
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# A stack is complete when its root-most frame is one of these (the same
# rule as `flamme report` and the record summary line).
ROOTS = frozenset({"_start", "__libc_start_main", "__libc_start_call_main", "main",
                   "clone3", "clone", "start_thread", "_dl_start_user"})

# The record summary line: "flamme: N samples, N threads, N lost, complete X%, engine E".
SUMMARY = re.compile(r"^flamme: (\d+) samples, (\d+) threads, (\d+) lost, "
                     r"complete ([0-9.]+)%, engine (\w+)", re.M)

# Where make deps put the OCaml compilers.
CACHE = os.environ.get("FLAMME_CACHE", os.path.join(os.path.expanduser("~"), ".cache", "flamme"))

RUN_TIMEOUT = 300  # seconds a profiled test program may take; a hang is a failure


class Build:
    """The build under test: paths of the command and the agent in DIR."""

    def __init__(self, build_dir):
        self.dir = os.path.abspath(build_dir)
        self.flamme = os.path.join(self.dir, "flamme")
        self.lib = os.path.join(self.dir, "libflamme.so")

    def path(self, *parts):
        return os.path.join(self.dir, *parts)


class Compiler:
    """One OCaml compiler of the cache: NAME is its directory's suffix
    (ocaml-NAME), e.g. "5.3.0-fp"; .ocamlopt, .version ("5.3.0"), .fp."""

    def __init__(self, name, ocamlopt):
        self.name = name
        self.ocamlopt = ocamlopt
        self.bindir = os.path.dirname(ocamlopt)
        self.version = _ask(ocamlopt, "-version")
        self.fp = _ask(ocamlopt, "-config-var", "with_frame_pointers") == "true"

    @property
    def at_least_5_3(self):
        return tuple(int(x) for x in self.version.split(".")[:2]) >= (5, 3)

    def __str__(self):
        return "OCaml %s %s" % (self.version, "fp" if self.fp else "no-fp")


def _ask(ocamlopt, *args):
    p = subprocess.run([ocamlopt, *args], capture_output=True, text=True, timeout=60)
    return p.stdout.strip() if p.returncode == 0 else ""


def find_compilers(cache, default_version="5.3.0"):
    """The compilers make deps built into CACHE, default first (5.3.0 with
    frame pointers, then without, then older releases). Returns [] when
    there are none (make deps not run)."""
    found = []
    if os.path.isdir(cache):
        for d in os.listdir(cache):
            exe = os.path.join(cache, d, "bin", "ocamlopt")
            if d.startswith("ocaml-") and os.access(exe, os.X_OK):
                found.append(Compiler(d[len("ocaml-"):], exe))

    def order(c):
        return (c.version != default_version, not c.fp, [-int(x) for x in c.version.split(".")])
    return sorted(found, key=order)


def select_compilers(cache, spec):
    """The compilers of CACHE (find_compilers, same order) named in SPEC, a
    comma-separated list ("": all of them), and the names of SPEC that
    CACHE lacks, sorted."""
    found = find_compilers(cache)
    wanted = [w for w in spec.split(",") if w]
    if not wanted:
        return found, []
    unknown = sorted(set(wanted) - {c.name for c in found})
    return [c for c in found if c.name in wanted], unknown


def _newest_mtime(paths):
    return max(os.stat(p).st_mtime for p in paths)


def build_ocaml(compiler, sources, out_dir, name=None, libs=(), flags=(), deps=()):
    """Builds an OCaml test program with COMPILER into OUT_DIR (sources are
    copied there first: ocamlopt writes .cmx/.o beside what it is given).
    SOURCES: paths of .c stubs and .ml files, in link order; LIBS: e.g.
    ("unix", "threads"); FLAGS: extra ocamlopt arguments; DEPS: other files
    the program is built from (a library given in FLAGS). Returns the
    executable's path (OUT_DIR/NAME.exe, NAME defaulting to the last .ml's
    base name); rebuilt only when a source, a dep or the compiler is newer,
    or the command differs from the last build's (kept in NAME.cmd).
    Raises RuntimeError with the compiler's output when the build fails."""
    sources = [os.path.abspath(s) for s in sources]
    mls = [s for s in sources if s.endswith(".ml")]
    name = name or os.path.splitext(os.path.basename(mls[-1]))[0]
    os.makedirs(out_dir, exist_ok=True)
    exe = os.path.join(out_dir, name + ".exe")
    cmd = [compiler.ocamlopt]
    for lib in libs:
        cmd += ["-I", "+" + lib, lib + ".cmxa"]
    cmd += list(flags) + ["-o", name + ".exe"] + [os.path.basename(s) for s in sources]
    stamp = os.path.join(out_dir, name + ".cmd")
    deps = sources + list(deps) + [compiler.ocamlopt]
    if (os.path.exists(exe) and os.stat(exe).st_mtime >= _newest_mtime(deps)
            and os.path.exists(stamp) and open(stamp).read() == "\n".join(cmd)):
        return exe
    for s in sources:
        shutil.copy(s, out_dir)
    p = subprocess.run(cmd, cwd=out_dir, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise RuntimeError("building %s with %s failed:\n%s%s" % (name, compiler, p.stdout, p.stderr))
    with open(stamp, "w") as f:
        f.write("\n".join(cmd))
    return exe


def builder(build, compiler):
    """make(subdir, sources, **kw) -> exe: build_ocaml with COMPILER into
    BUILD/progs/<compiler>/<subdir>/ (what conftest's `ocaml` fixture gives
    a test; the benchmarks build the tests' programs with it too)."""
    def make(subdir, sources, **kw):
        return build_ocaml(compiler, sources, build.path("progs", compiler.name, subdir), **kw)
    return make


def flamme_library(build, compiler):
    """The flamme OCaml library (ocaml_stubs/, mk/ocaml_stubs.mk) built by
    COMPILER: make's own build/ocaml_stubs when COMPILER is make's
    $(OCAMLOPT), else a sub-build build/ocaml-<name>/ocaml_stubs (make
    BUILD=... OCAMLOPT=...; .cmx files of one compiler cannot be linked by
    another). Returns (the directory, the ocamlopt arguments that link the
    library, the files a program linking it depends on). Raises
    RuntimeError with make's output when the build fails."""
    default = os.environ.get("OCAMLOPT", "")
    if default and os.path.realpath(default) == os.path.realpath(compiler.ocamlopt):
        sub = build.dir
    else:
        sub = build.path("ocaml-" + compiler.name)
    rel = os.path.relpath(sub, REPO)
    out = os.path.join(sub, "ocaml_stubs")
    outputs = [os.path.join(out, f) for f in ("flamme.cmxa", "flamme.a", "libflamme_stubs.a")]
    p = subprocess.run([os.environ.get("FLAMME_MAKE", "make"), "--no-print-directory", "BUILD=" + rel,
                        "OCAMLOPT=" + compiler.ocamlopt] + [os.path.relpath(f, REPO) for f in outputs],
                       cwd=REPO, capture_output=True, text=True, timeout=1200)
    if p.returncode != 0:
        raise RuntimeError("building the flamme library with %s failed:\n%s%s"
                           % (compiler, p.stdout[-3000:], p.stderr[-3000:]))
    return out, ["-I", out, "flamme.cmxa"], outputs


def clean_env(extra=None):
    """The caller's environment without FLAMME_* and LD_PRELOAD, plus EXTRA."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("FLAMME_") and k != "LD_PRELOAD"}
    if extra:
        env.update(extra)
    return env


def run(cmd, env=None, cwd=None, timeout=RUN_TIMEOUT, stdin=subprocess.DEVNULL):
    """Runs CMD to completion; returns the CompletedProcess (text output).
    A timeout raises subprocess.TimeoutExpired: a hang is a failure."""
    return subprocess.run(cmd, env=env if env is not None else clean_env(), cwd=cwd,
                          capture_output=True, text=True, timeout=timeout, stdin=stdin)


def record(build, cmd, out, args=(), env=None, cwd=None, timeout=RUN_TIMEOUT):
    """`flamme record ARGS -o OUT -- CMD`; returns the CompletedProcess."""
    return run([build.flamme, "record", *args, "-o", out, "--", *cmd],
               env=env, cwd=cwd, timeout=timeout)


def run_timed(cmd, env=None, cwd=None, timeout=RUN_TIMEOUT):
    """Runs CMD as run() does; returns (CompletedProcess, wall seconds, CPU
    seconds: user + system of the process and the children it waited for),
    for benchmarks. The CPU time is the growth of this process's
    RUSAGE_CHILDREN: do not run other children meanwhile."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    p = run(cmd, env=env, cwd=cwd, timeout=timeout)
    wall = time.monotonic() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return p, wall, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)


HEAPTRIM = re.compile(r"^heaptrim: sum (\d+), page faults (\d+)$", re.M)


def heaptrim_runs(check, plain, profiled, what, runs=6):
    """tests/e2e/heaptrim.ml's checks: PLAIN (its CompletedProcess alone)
    and RUNS runs of PROFILED(i) (each a CompletedProcess of a profiled
    run) print the same sum, and each profiled run's page faults stay within
    four times the faults alone plus 10,000 (the agent's own are about a
    thousand; glibc trimming and regrowing the heap's top at every major
    slice gave 9,000-186,000 before 2026-11-29, the fewer where it began
    late in the run)."""
    m = HEAPTRIM.search(plain.stdout)
    assert plain.returncode == 0 and m, "%s unprofiled: exit %d: %s" % (
        what, plain.returncode, plain.stdout + plain.stderr)
    alone = int(m.group(2))
    bound = 4 * alone + 10000
    for i in range(runs):
        p = profiled(i)
        got = HEAPTRIM.search(p.stdout)
        assert p.returncode == 0 and got, "%s: exit %d: %s" % (what, p.returncode, p.stdout + p.stderr)
        check(got.group(1) == m.group(1), "%s: run %d prints what it prints alone" % (what, i),
              "%s vs %s" % (got.group(1), m.group(1)))
        faults = int(got.group(2))
        print("  %s run %d: %d page faults (alone %d)" % (what, i, faults, alone))
        check(faults <= bound, "%s: run %d's heap is not trimmed and grown again at every major slice"
              " (page faults <= %d)" % (what, i, bound), "%d page faults, %d alone" % (faults, alone))


def report(build, prof, *opts):
    """The text of `flamme report PROF OPTS...`. Raises
    subprocess.CalledProcessError if report fails."""
    return subprocess.run([build.flamme, "report", prof, *opts], capture_output=True,
                          text=True, check=True, timeout=RUN_TIMEOUT).stdout


def summary(stderr):
    """The record summary line's figures as a dict (samples, threads, lost,
    complete, engine), or None when there is none."""
    m = SUMMARY.search(stderr)
    if not m:
        return None
    return {"samples": int(m.group(1)), "threads": int(m.group(2)), "lost": int(m.group(3)),
            "complete": float(m.group(4)), "engine": m.group(5)}


def parse_folded(text):
    """Folded text (one "frame;frame;... weight" per line) as a list of
    (frames, weight). Lines that do not end in an integer weight are
    skipped (there are none in flamme's own output)."""
    stacks = []
    for line in text.splitlines():
        stack, _, w = line.rpartition(" ")
        if stack and w.isdigit():
            stacks.append((stack.split(";"), int(w)))
    return stacks


def collapse(build, prof, *opts):
    """`flamme collapse PROF OPTS...` as a list of (frames, weight).
    Raises subprocess.CalledProcessError if collapse fails."""
    out = subprocess.run([build.flamme, "collapse", prof, *opts], capture_output=True,
                         text=True, check=True, timeout=RUN_TIMEOUT).stdout
    return parse_folded(out)


def total(stacks, pred=lambda frames: True):
    """Summed weight of the stacks whose frame list satisfies PRED."""
    return sum(w for frames, w in stacks if pred(frames))


def share(stacks, pred, within=lambda frames: True):
    """Weight of the stacks satisfying PRED as a fraction of those
    satisfying WITHIN (0.0 when there are none)."""
    base = total(stacks, within)
    return total(stacks, lambda f: within(f) and pred(f)) / base if base else 0.0


def has_frame(name):
    """A stack predicate: some frame is NAME or starts with NAME + "." or
    is "Module.NAME" (OCaml names demangle as Module.fn)."""
    return lambda frames: any(f == name or f.endswith("." + name) for f in frames)


def is_complete(frames, labelled=False):
    """True when the stack's root-most frame is a thread root. LABELLED:
    the stack comes from `collapse --threads`, whose first frame is the
    thread's label."""
    i = 1 if labelled else 0
    return i < len(frames) and frames[i] in ROOTS


def completeness(stacks, labelled=False):
    """Fraction of the weight whose stack is complete (see is_complete)."""
    return share(stacks, lambda f: is_complete(f, labelled))


# `flamme collapse --threads` labels: a domain's main thread, a systhread.
LABEL_DOMAIN = re.compile(r"^domain (\d+)$")
LABEL_SYSTHREAD = re.compile(r"^thread (\d+) \(domain (\d+)\)$")


def describe(stacks, limit=5):
    """The heaviest stacks, shortened, one per line: what a failed check
    prints to show what the profile holds instead."""
    out = []
    for f, c in sorted(stacks, key=lambda s: -s[1])[:limit]:
        s = ";".join(f) if len(f) <= 14 else ";".join(f[:6] + ["..."] + f[-6:])
        out.append("    %6d %s" % (c, s))
    return "\n".join(out)


def varint(b, i):
    """Decodes an unsigned LEB128 varint of bytes B at offset I; returns
    (value, next offset). Raises ValueError on a truncated varint."""
    v = shift = 0
    while True:
        if i >= len(b):
            raise ValueError("truncated varint")
        c = b[i]
        i += 1
        v |= (c & 0x7F) << shift
        if c < 0x80:
            return v, i
        shift += 7


def unzigzag(v):
    return (v >> 1) ^ -(v & 1)


def pb_fields(b):
    """The fields of protobuf message B in order, as (field, wire type,
    value): value is an int (wire type 0) or bytes (wire type 2). Raises
    ValueError on another wire type or a field past the end."""
    out, i = [], 0
    while i < len(b):
        key, i = varint(b, i)
        field, wire = key >> 3, key & 7
        if wire == 0:
            v, i = varint(b, i)
        elif wire == 2:
            n, i = varint(b, i)
            if i + n > len(b):
                raise ValueError("field %d: %d bytes past the end" % (field, i + n - len(b)))
            v, i = b[i:i + n], i + n
        else:
            raise ValueError("field %d: unexpected wire type %d" % (field, wire))
        out.append((field, wire, v))
    return out


def pb_message(b):
    """Protobuf message B as {field: [values in order]} (see pb_fields)."""
    d = {}
    for field, _, v in pb_fields(b):
        d.setdefault(field, []).append(v)
    return d


def pb_packed(v):
    """The integers of a repeated varint field's value V: packed bytes, or
    one int when the writer did not pack it."""
    if isinstance(v, int):
        return [v]
    out, i = [], 0
    while i < len(v):
        x, i = varint(v, i)
        out.append(x)
    return out


def _pb_one(d, f, default=0):
    """The last value of field F in message D (protobuf: the last one wins)."""
    return d.get(f, [default])[-1]


def decode_pprof(path):
    """A gzip'd pprof profile (`flamme export --format pprof`) as a dict:
    strings, raw_strings, sample_type [(type, unit)], samples [(location
    ids leaf first, values, {label: value})], locations {id: {mapping,
    address, functions}}, functions {id: (name, system name)}, mappings,
    time_nanos, duration_nanos, period_type, period, default_sample_type.
    Raises ValueError when the file is not gzip'd or not protobuf, and
    UnicodeDecodeError when a function's name is not UTF-8."""
    raw = open(path, "rb").read()
    if raw[:2] != b"\x1f\x8b":
        raise ValueError("pprof output is not gzip (magic %r)" % raw[:2])
    msg, one = pb_message, _pb_one
    top = msg(gzip.decompress(raw))
    strings = [s.decode("utf-8", "replace") for s in top.get(6, [])]
    p = {"strings": strings, "raw_strings": top.get(6, [])}
    p["sample_type"] = [(strings[one(m, 1)], strings[one(m, 2)]) for m in map(msg, top.get(1, []))]
    p["samples"] = []
    for m in map(msg, top.get(2, [])):
        locs = [x for v in m.get(1, []) for x in pb_packed(v)]
        vals = [x for v in m.get(2, []) for x in pb_packed(v)]
        labels = {}
        for lm in map(msg, m.get(3, [])):
            labels[strings[one(lm, 1)]] = strings[one(lm, 2)]
        p["samples"].append((locs, vals, labels))
    p["locations"] = {}
    for m in map(msg, top.get(4, [])):
        lines = [msg(x) for x in m.get(4, [])]
        p["locations"][one(m, 1)] = {"mapping": one(m, 2), "address": one(m, 3),
                                     "functions": [one(ln, 1) for ln in lines]}
    p["functions"] = {}
    for m in map(msg, top.get(5, [])):
        # Display names must be valid UTF-8 (proto3 strings); system_name keeps the raw symbol.
        name = p["raw_strings"][one(m, 2)].decode("utf-8")
        p["functions"][one(m, 1)] = (name, strings[one(m, 3)])
    p["mappings"] = {one(m, 1): strings[one(m, 5)] for m in map(msg, top.get(3, []))}
    p["time_nanos"] = one(top, 9)
    p["duration_nanos"] = one(top, 10)
    pt = msg(one(top, 11, b""))
    p["period_type"] = (strings[one(pt, 1)], strings[one(pt, 2)])
    p["period"] = one(top, 12)
    p["default_sample_type"] = strings[one(top, 14)]
    return p


class Checks:
    """Soft assertions of one test: every check is printed ("ok WHAT" or
    "FAIL WHAT: DETAIL") and the test fails at its end if any failed
    (conftest.py's pytest_pyfunc_call), listing all of them, so that one
    run says everything that is wrong with a program's profile."""

    def __init__(self):
        self.passed = 0
        self.failures = []

    def __call__(self, cond, what, detail=""):
        if cond:
            self.passed += 1
            print("ok " + what)
        else:
            self.failures.append(what + (": " + str(detail) if detail != "" else ""))
            print("FAIL " + self.failures[-1])
        return bool(cond)
