#!/usr/bin/env python3
"""tests/install/run.py — flamme as an installed tool, with no build tree.

Copies this source tree (without build/ and .git) to a temporary clone,
builds it there as a user would (`make all ocaml-lib`), runs `make install`
with DESTDIR and PREFIX, moves the installed tree elsewhere and deletes the
clone. Then, with only the installed files:
  - `flamme --version` names flamme.opam's version and common/profile.h's
    format version;
  - `flamme record` (which must find its agent relative to itself) profiles
    tests/e2e/split.ml: the 50/30/20 split of its three work functions
    (± 6 points) and >= 90% of the stacks reaching main;
  - a program linked with the installed OCaml library through ocamlfind
    (`ocamlfind ocamlopt -package flamme -linkpkg`, OCAMLPATH = the installed
    lib/) profiles the function it wraps in Flamme.with_profile;
  - the man page is where `man` finds it.
The clone is also installed the way `opam install .` does it: the build and
install commands of flamme.opam, with %{prefix}% etc. set as in an opam
switch rooted in a temporary directory (a real opam switch needs a compiler
from opam's repository); that tree must hold the same files in opam's
layout, and its flamme must record with the agent it finds.
Finally `make uninstall` (from a fresh, unbuilt clone, with the installed
trees moved back) must leave no file and no flamme directory behind.

Usage: run.py --ocamlopt PATH [--keep]. Ends with "install: N passed, N failed".
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STAGE_PREFIX = "/opt/flamme"  # PREFIX at install time; the tree is moved afterwards

LIB_ML = """
let[@inline never] rec fib n = if n < 2 then n else fib (n - 1) + fib (n - 2)
let[@inline never] work () = let s = ref 0 in for _ = 1 to 16 do s := !s + fib 33 done; !s
let () =
  let r = Flamme.with_profile ~hz:499 ~output:"app.flm" work in
  Printf.printf "work=%d\\n" r
"""


# Root-most frames of a main-thread stack that reaches main (the walk may
# stop at main or go on into glibc's start-up code).
MAIN_ROOTS = {"main", "__libc_start_call_main", "__libc_start_main", "_start"}


def reaches_main(frames):
    return frames[0] in MAIN_ROOTS and "main" in frames


class Failure(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise Failure(msg)


def clean_env(extra=None):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("FLAMME_") and k not in ("LD_PRELOAD", "OCAMLPATH", "OCAMLFIND_CONF",
                                                         "MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    env.update(extra or {})
    return env


def sh(cmd, cwd=None, env=None, timeout=600):
    p = subprocess.run(cmd, cwd=cwd, env=env or clean_env(), capture_output=True, text=True,
                       timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def must(cmd, what, **kw):
    rc, so, se = sh(cmd, **kw)
    check(rc == 0, "%s failed (%d): %s\n%s%s" % (what, rc, " ".join(cmd), so[-2000:], se[-2000:]))
    return so, se


def opam_commands(field, env):
    """The commands of flamme.opam's `field` (build or install), each a list
    of arguments with opam's %{var}% replaced from env. Knows the forms the
    file uses: [cmd args...] or [[cmd args...] ...], quoted strings and bare
    words; a filter {...} after an argument or command is refused (none is
    expected, and ignoring one would test something else)."""
    text = open(os.path.join(REPO, "flamme.opam")).read()
    m = re.search(r"^%s:\s*" % field, text, re.M)
    check(m, "flamme.opam has no %s field" % field)
    toks = re.findall(r'"(?:[^"\\]|\\.)*"|\[|\]|\{|[^\s\[\]"{]+', text[m.end():])
    depth, cur, cmds = 0, None, []
    for tok in toks:
        check(tok != "{", "flamme.opam %s: filters are not handled by this test" % field)
        if tok == "[":
            depth += 1
            cur = []
        elif tok == "]":
            if cur:
                cmds.append(cur)
            cur = None
            depth -= 1
            if depth == 0:
                break
        else:
            word = tok[1:-1] if tok.startswith('"') else tok
            cur.append(re.sub(r"%\{([a-z-]+)\}%", lambda v: env[v.group(1)], word))
    check(cmds, "flamme.opam %s: no command" % field)
    return cmds


def copy_tree(dst):
    shutil.copytree(REPO, dst, ignore=shutil.ignore_patterns(".git", "build", "*.flm", "*.svg"))


def files_under(root):
    out = set()
    for d, _, fs in os.walk(root):
        for f in fs:
            out.add(os.path.relpath(os.path.join(d, f), root))
    return out


def collapse(flamme, prof):
    so, _ = must([flamme, "collapse", prof], "flamme collapse")
    stacks = []
    for line in so.splitlines():
        stack, _, n = line.rpartition(" ")
        stacks.append((stack.split(";"), int(n)))
    check(stacks, "flamme collapse %s printed nothing" % prof)
    return stacks


def opam_version():
    m = re.search(r'^version: *"([^"]+)"', open(os.path.join(REPO, "flamme.opam")).read(), re.M)
    check(m, "flamme.opam has no version field")
    return m.group(1)


def format_version():
    h = open(os.path.join(REPO, "common", "profile.h")).read()
    ma = re.search(r"#define FLAMME_VERSION_MAJOR (\d+)", h)
    mi = re.search(r"#define FLAMME_VERSION_MINOR (\d+)", h)
    return "%s.%s" % (ma.group(1), mi.group(1))


def expected_files(man):
    return {"bin/flamme", "lib/flamme/libflamme.so", man + "/man1/flamme.1", "lib/flamme/META",
            "lib/flamme/flamme.cmxa", "lib/flamme/flamme.a", "lib/flamme/flamme.cmi",
            "lib/flamme/flamme.cmx", "lib/flamme/flamme.mli", "lib/flamme/libflamme_stubs.a"}


def same_files(root, want, what):
    got = files_under(root)
    check(got == want, "%s: installed files differ: missing %s, unexpected %s"
          % (what, sorted(want - got), sorted(got - want)))
    print("  %s: %d files" % (what, len(got)))


def test_installed_files(t):
    same_files(t.prefix, expected_files("share/man"), "make install DESTDIR=... PREFIX=" + STAGE_PREFIX)


def test_opam_layout(t):
    """The tree flamme.opam's install command wrote (man pages in %{man}% =
    PREFIX/man): the same files, a flamme that finds its agent, and ocamlfind
    finding the library on the switch's lib directory."""
    same_files(t.opam_prefix, expected_files("man"), "flamme.opam's install")
    flamme = os.path.join(t.opam_prefix, "bin", "flamme")
    prof = os.path.join(t.work, "opam-split.flm")
    rc, so, se = sh([flamme, "record", "-o", prof, "--", t.split_exe, "10"], cwd=t.work)
    check(rc == 0 and os.path.exists(prof), "opam tree: flamme record failed (%d): %s" % (rc, se))
    st = collapse(flamme, prof)
    check(any("Split.work_a" in f for f, _ in st), "opam tree: the profile has no Split.work_a")
    print("  opam tree: flamme record wrote %d samples" % sum(c for _, c in st))


def test_version(t):
    so, _ = must([t.flamme, "--version"], "flamme --version")
    lines = so.splitlines()
    print("  " + "\n  ".join(lines))
    check(lines and lines[0] == "flamme " + opam_version(),
          "flamme --version says %r, flamme.opam says %s" % (lines[:1], opam_version()))
    check(re.search(r"writes %s\b" % re.escape(format_version()), so),
          "flamme --version does not say it writes format %s" % format_version())


def test_record(t):
    exe = t.split_exe
    prof = os.path.join(t.work, "split.flm")
    rc, so, se = sh([t.flamme, "record", "-F", "499", "-o", prof, "--", exe, "60"], cwd=t.work)
    check(rc == 0 and "split: rounds=" in so, "flamme record split.exe failed (%d): %s" % (rc, se))
    st = collapse(t.flamme, prof)
    under = [(f, n) for f, n in st if "Split.run_rounds" in f]
    n = sum(c for _, c in under)
    check(n >= 300, "only %d samples under Split.run_rounds" % n)
    for fn, want in (("Split.work_a", 50.0), ("Split.work_b", 30.0), ("Split.work_c", 20.0)):
        share = 100.0 * sum(c for f, c in under if fn in f) / n
        print("  %s: %.1f%% (expected %.0f%% ± 6)" % (fn, share, want))
        check(abs(share - want) <= 6.0, "%s has %.1f%% of the samples, expected %.0f%% ± 6"
              % (fn, share, want))
    tot = sum(c for _, c in st)
    root = 100.0 * sum(c for f, c in st if reaches_main(f)) / tot
    print("  %d samples, %.1f%% of the stacks reach main" % (tot, root))
    check(root >= 90.0, "only %.1f%% of the stacks reach main" % root)


def test_library(t):
    d = os.path.join(t.work, "app")
    os.makedirs(d)
    with open(os.path.join(d, "app.ml"), "w") as f:
        f.write(LIB_ML)
    env = clean_env({"OCAMLPATH": os.path.join(t.prefix, "lib"),
                     "PATH": os.path.dirname(t.ocamlopt) + os.pathsep + os.environ["PATH"]})
    if shutil.which("ocamlfind"):
        so, _ = must(["ocamlfind", "query", "flamme"], "ocamlfind query flamme", env=env)
        check(os.path.realpath(so.strip()) == os.path.realpath(os.path.join(t.prefix, "lib", "flamme")),
              "ocamlfind finds flamme in %s" % so.strip())
        cmd = ["ocamlfind", "ocamlopt", "-package", "flamme", "-linkpkg", "-o", "app.exe", "app.ml"]
    else:  # the documented route without ocamlfind
        print("  (no ocamlfind: linking with -I)")
        cmd = [t.ocamlopt, "-I", os.path.join(t.prefix, "lib", "flamme"), "flamme.cmxa",
               "-o", "app.exe", "app.ml"]
    print("  " + " ".join(cmd[:6]) + " ...")
    must(cmd, "linking the installed library", cwd=d, env=env)
    rc, so, se = sh([os.path.join(d, "app.exe")], cwd=d)
    check(rc == 0 and so.startswith("work="), "app.exe failed (%d): %s" % (rc, se))
    st = collapse(t.flamme, os.path.join(d, "app.flm"))
    tot = sum(c for _, c in st)
    good = sum(c for f, c in st if reaches_main(f) and "Flamme.with_profile" in f
               and "App.work" in f and f[-1].startswith("App.fib"))
    print("  %d samples, %.1f%% in App.fib under Flamme.with_profile reaching main"
          % (tot, 100.0 * good / tot))
    check(tot >= 50 and good >= 0.9 * tot, "the library's profile does not show the wrapped work")


def test_man(t):
    if not shutil.which("man"):
        print("  (no man command: skipped)")
        return
    so, _ = must(["man", "-w", "flamme"], "man -w flamme",
                 env=clean_env({"MANPATH": os.path.join(t.prefix, "share", "man")}))
    check(os.path.realpath(so.strip()) ==
          os.path.realpath(os.path.join(t.prefix, "share", "man", "man1", "flamme.1")),
          "man finds %r" % so.strip())


def test_uninstall(t):
    src = os.path.join(t.work, "src2")
    copy_tree(src)
    staged = t.stage + STAGE_PREFIX
    shutil.move(t.prefix, staged)
    t.prefix = staged
    o = t.opam_prefix
    for args, root in ((["DESTDIR=" + t.stage, "PREFIX=" + STAGE_PREFIX], t.stage),
                       (["PREFIX=" + o, "BINDIR=%s/bin" % o, "LIBDIR=%s/lib" % o,
                         "MANDIR=%s/man" % o], o)):
        must(["make", "-s", "uninstall", "OCAMLOPT=" + t.ocamlopt] + args, "make uninstall", cwd=src)
        left = files_under(root)
        check(not left, "uninstall %s left files behind: %s" % (" ".join(args), sorted(left)))
        dirs = sorted(os.path.relpath(os.path.join(d, x), root)
                      for d, xs, _ in os.walk(root) for x in xs)
        check(not any("flamme" in x.replace(STAGE_PREFIX[1:], "") for x in dirs),
              "uninstall left directories: %s" % dirs)
        print("  %s: nothing left but the empty shared directories %s" % (args[0], dirs))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ocamlopt", required=True)
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args()

    class T:
        pass
    t = T()
    t.ocamlopt = os.path.abspath(a.ocamlopt)
    t.work = tempfile.mkdtemp(prefix="flamme-install.")
    t.stage = os.path.join(t.work, "stage")
    passed = failed = 0
    try:
        src = os.path.join(t.work, "src")
        copy_tree(src)
        print("install: building a clone in %s" % src)
        # As opam would: its build and install commands, the compiler first in
        # PATH (the opam file says OCAMLOPT=ocamlopt).
        o = t.opam_prefix = os.path.join(t.work, "switch")
        ovars = {"prefix": o, "bin": o + "/bin", "lib": o + "/lib", "man": o + "/man",
                 "jobs": "2", "name": "flamme"}
        oenv = clean_env({"PATH": os.path.dirname(t.ocamlopt) + os.pathsep + os.environ["PATH"]})
        for field in ("build", "install"):
            for cmd in opam_commands(field, ovars):
                print("  opam %s: %s" % (field, " ".join(cmd)))
                must(cmd, "flamme.opam's %s command" % field, cwd=src, env=oenv)
        # And as a distribution would: a staged install.
        must(["make", "-s", "install", "DESTDIR=" + t.stage, "PREFIX=" + STAGE_PREFIX,
              "OCAMLOPT=" + t.ocamlopt], "make install", cwd=src)
        # A relocated tree, and no build directory anywhere.
        t.prefix = os.path.join(t.work, "moved")
        shutil.move(t.stage + STAGE_PREFIX, t.prefix)
        shutil.rmtree(src)
        t.flamme = os.path.join(t.prefix, "bin", "flamme")
        t.split_exe = os.path.join(t.work, "split", "split.exe")
        os.makedirs(os.path.dirname(t.split_exe))
        shutil.copy(os.path.join(REPO, "tests", "e2e", "split.ml"), os.path.dirname(t.split_exe))
        must([t.ocamlopt, "-o", "split.exe", "split.ml"], "ocamlopt split.ml",
             cwd=os.path.dirname(t.split_exe))
    except (Failure, subprocess.TimeoutExpired) as e:
        print("FAIL install setup: %s" % e)
        print("install: 0 passed, 1 failed")
        sys.exit(1)
    for test in (test_installed_files, test_opam_layout, test_version, test_record, test_library, test_man,
                 test_uninstall):
        name = test.__name__[5:]
        print("install %s" % name)
        try:
            test(t)
            print("PASS install %s" % name)
            passed += 1
        except (Failure, subprocess.TimeoutExpired, OSError) as e:
            print("FAIL install %s: %s" % (name, e))
            failed += 1
    if a.keep:
        print("install: kept %s" % t.work)
    else:
        shutil.rmtree(t.work, ignore_errors=True)
    print("install: %d passed, %d failed" % (passed, failed))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
