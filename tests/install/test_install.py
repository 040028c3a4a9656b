"""tests/install/test_install.py — flamme as an installed tool, with no build
tree (make install-test, part of make test).

Copies this source tree (without build/ and .git) to a temporary clone,
builds it there as a user would (`make all ocaml-lib`), runs `make install`
with DESTDIR and PREFIX, moves the installed tree elsewhere and deletes the
clone (the `installed` fixture, once for the module). Then, with only the
installed files:
  - `flamme --version` names flamme.opam's version and common/profile.h's
    format version;
  - `flamme record` (which must find its agent relative to itself) profiles
    tests/e2e/split.ml: the 50/30/20 split of its three work functions
    (± 6 points) and >= 90% of the stacks reaching main;
  - a program linked with the installed OCaml library through ocamlfind
    (`ocamlfind ocamlopt -package flamme -linkpkg`, OCAMLPATH = the installed
    lib/) profiles the function it wraps in Flamme.with_profile
    (tests/dune/app.ml);
  - the man page is where `man` finds it.
The clone is also installed the way `opam install .` does it: the build and
install commands of flamme.opam, with %{prefix}% etc. set as in an opam
switch rooted in a temporary directory (a real opam switch needs a compiler
from opam's repository); that tree must hold the same files in opam's
layout, and its flamme must record with the agent it finds.
Finally `make uninstall` (from a fresh, unbuilt clone, with the installed
trees moved back) must leave no file and no flamme directory behind (the
last test: it takes the installed trees away).
Installing does not depend on the compiler: make's default one only.
"""
import os
import re
import shutil

import pytest

import flammetest

pytestmark = pytest.mark.slow  # a whole clone built and installed

STAGE_PREFIX = "/opt/flamme"  # PREFIX at install time; the tree is moved afterwards
# Root-most frames of a main-thread stack that reaches main (the walk may
# stop at main or go on into glibc's start-up code).
MAIN_ROOTS = {"main", "__libc_start_call_main", "__libc_start_main", "_start"}


def reaches_main(frames):
    return frames[0] in MAIN_ROOTS and "main" in frames


def install_env(extra=None):
    """clean_env without what would lead a clone's make or ocamlfind to the
    caller's (OCAMLPATH, OCAMLFIND_CONF, the make jobserver's variables)."""
    env = flammetest.clean_env(extra)
    for k in ("OCAMLPATH", "OCAMLFIND_CONF", "MAKEFLAGS", "MFLAGS", "MAKELEVEL"):
        if not extra or k not in extra:
            env.pop(k, None)
    return env


def sh(cmd, cwd=None, env=None, timeout=600):
    return flammetest.run(cmd, cwd=cwd, env=env or install_env(), timeout=timeout)


def must(cmd, what, **kw):
    """Runs CMD; its stdout. Fails the test when CMD fails."""
    p = sh(cmd, **kw)
    assert p.returncode == 0, "%s failed (%d): %s\n%s%s" % (what, p.returncode, " ".join(cmd),
                                                          p.stdout[-2000:], p.stderr[-2000:])
    return p.stdout


def opam_commands(field, env):
    """The commands of flamme.opam's `field` (build or install), each a list
    of arguments with opam's %{var}% replaced from env. Knows the forms the
    file uses: [cmd args...] or [[cmd args...] ...], quoted strings and bare
    words; a filter {...} after an argument or command is refused (none is
    expected, and ignoring one would test something else)."""
    text = open(os.path.join(flammetest.REPO, "flamme.opam")).read()
    m = re.search(r"^%s:\s*" % field, text, re.M)
    assert m, "flamme.opam has no %s field" % field
    toks = re.findall(r'"(?:[^"\\]|\\.)*"|\[|\]|\{|[^\s\[\]"{]+', text[m.end():])
    depth, cur, cmds = 0, None, []
    for tok in toks:
        assert tok != "{", "flamme.opam %s: filters are not handled by this test" % field
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
    assert cmds, "flamme.opam %s: no command" % field
    return cmds


def copy_tree(dst):
    shutil.copytree(flammetest.REPO, dst, ignore=shutil.ignore_patterns(".git", "build", "*.flm", "*.svg"))


def files_under(root):
    out = set()
    for d, _, fs in os.walk(root):
        for f in fs:
            out.add(os.path.relpath(os.path.join(d, f), root))
    return out


def opam_version():
    m = re.search(r'^version: *"([^"]+)"', open(os.path.join(flammetest.REPO, "flamme.opam")).read(), re.M)
    assert m, "flamme.opam has no version field"
    return m.group(1)


def format_version():
    h = open(os.path.join(flammetest.REPO, "common", "profile.h")).read()
    ma = re.search(r"#define FLAMME_VERSION_MAJOR (\d+)", h)
    mi = re.search(r"#define FLAMME_VERSION_MINOR (\d+)", h)
    return "%s.%s" % (ma.group(1), mi.group(1))


def expected_files(man):
    return {"bin/flamme", "lib/flamme/libflamme.so", man + "/man1/flamme.1", "lib/flamme/META",
            "lib/flamme/flamme.cmxa", "lib/flamme/flamme.a", "lib/flamme/flamme.cmi",
            "lib/flamme/flamme.cmx", "lib/flamme/flamme.mli", "lib/flamme/libflamme_stubs.a"}


def same_files(check, root, want, what):
    got = files_under(root)
    check(got == want, "%s: the installed files" % what,
          "missing %s, unexpected %s" % (sorted(want - got), sorted(got - want)))
    print("  %s: %d files" % (what, len(got)))


class Installed:
    """work: the temporary directory; ocamlopt; prefix: the moved staged
    install; opam_prefix: the tree flamme.opam's commands wrote; flamme:
    the installed command; stage: DESTDIR of the staged install."""


@pytest.fixture(scope="module")
def installed(default_compiler, tmp_path_factory):
    t = Installed()
    t.ocamlopt = default_compiler.ocamlopt
    t.work = str(tmp_path_factory.mktemp("install"))
    t.stage = os.path.join(t.work, "stage")
    src = os.path.join(t.work, "src")
    copy_tree(src)
    # As opam would: its build and install commands, the compiler first in
    # PATH (the opam file says OCAMLOPT=ocamlopt).
    o = t.opam_prefix = os.path.join(t.work, "switch")
    ovars = {"prefix": o, "bin": o + "/bin", "lib": o + "/lib", "man": o + "/man",
             "jobs": "2", "name": "flamme"}
    oenv = install_env({"PATH": default_compiler.bindir + os.pathsep + os.environ["PATH"]})
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
    return t


@pytest.fixture(scope="module")
def split_exe(ocaml_default):
    return ocaml_default("install/split", [os.path.join(flammetest.REPO, "tests", "e2e", "split.ml")])


def collapse(flamme, prof):
    stacks = flammetest.parse_folded(must([flamme, "collapse", prof], "flamme collapse"))
    assert stacks, "flamme collapse %s printed nothing" % prof
    return stacks


def test_installed_files(installed, check):
    same_files(check, installed.prefix, expected_files("share/man"),
               "make install DESTDIR=... PREFIX=" + STAGE_PREFIX)


def test_opam_layout(installed, split_exe, check):
    """The tree flamme.opam's install command wrote (man pages in %{man}% =
    PREFIX/man): the same files, and a flamme that finds its agent."""
    t = installed
    same_files(check, t.opam_prefix, expected_files("man"), "flamme.opam's install")
    flamme = os.path.join(t.opam_prefix, "bin", "flamme")
    prof = os.path.join(t.work, "opam-split.flm")
    p = sh([flamme, "record", "-o", prof, "--", split_exe, "10"], cwd=t.work)
    assert p.returncode == 0 and os.path.exists(prof), \
        "opam tree: flamme record failed (%d): %s" % (p.returncode, p.stderr)
    st = collapse(flamme, prof)
    check(any("Split.work_a" in f for f, _ in st), "opam tree: flamme record profiles split.exe (Split.work_a)")


def test_version(installed, check):
    so = must([installed.flamme, "--version"], "flamme --version")
    lines = so.splitlines()
    print("  " + "\n  ".join(lines))
    check(lines and lines[0] == "flamme " + opam_version(), "flamme --version names flamme.opam's version",
          "%r vs %s" % (lines[:1], opam_version()))
    check(re.search(r"writes %s\b" % re.escape(format_version()), so),
          "flamme --version says it writes format %s" % format_version(), so)


def test_record(installed, split_exe, check):
    t = installed
    prof = os.path.join(t.work, "split.flm")
    p = sh([t.flamme, "record", "-F", "499", "-o", prof, "--", split_exe, "60"], cwd=t.work)
    assert p.returncode == 0 and "split: rounds=" in p.stdout, \
        "flamme record split.exe failed (%d): %s" % (p.returncode, p.stderr)
    st = collapse(t.flamme, prof)
    under = [(f, n) for f, n in st if "Split.run_rounds" in f]
    n = flammetest.total(under)
    assert n >= 300, "only %d samples under Split.run_rounds" % n
    for fn, want in (("Split.work_a", 50.0), ("Split.work_b", 30.0), ("Split.work_c", 20.0)):
        share = 100.0 * flammetest.share(under, lambda f: fn in f)
        check(abs(share - want) <= 6.0, "%s has %.0f%% ± 6 of the samples" % (fn, want), "%.1f%%" % share)
    root = 100.0 * flammetest.share(st, reaches_main)
    check(root >= 90.0, ">= 90% of the stacks reach main", "%.1f%% of %d" % (root, flammetest.total(st)))


def test_library(installed, default_compiler, check):
    t = installed
    d = os.path.join(t.work, "app")
    os.makedirs(d)
    shutil.copy(os.path.join(flammetest.REPO, "tests", "dune", "app.ml"), d)
    env = install_env({"OCAMLPATH": os.path.join(t.prefix, "lib"),
                       "PATH": default_compiler.bindir + os.pathsep + os.environ["PATH"]})
    if shutil.which("ocamlfind"):
        so = must(["ocamlfind", "query", "flamme"], "ocamlfind query flamme", env=env)
        check(os.path.realpath(so.strip()) == os.path.realpath(os.path.join(t.prefix, "lib", "flamme")),
              "ocamlfind finds the installed flamme", so.strip())
        cmd = ["ocamlfind", "ocamlopt", "-package", "flamme", "-linkpkg", "-o", "app.exe", "app.ml"]
    else:  # the documented route without ocamlfind
        print("  (no ocamlfind: linking with -I)")
        cmd = [t.ocamlopt, "-I", os.path.join(t.prefix, "lib", "flamme"), "flamme.cmxa",
               "-o", "app.exe", "app.ml"]
    print("  " + " ".join(cmd[:6]) + " ...")
    must(cmd, "linking the installed library", cwd=d, env=env)
    p = sh([os.path.join(d, "app.exe")], cwd=d)
    assert p.returncode == 0 and p.stdout.startswith("work="), "app.exe failed (%d): %s" % (p.returncode, p.stderr)
    st = collapse(t.flamme, os.path.join(d, "app.flm"))
    tot = flammetest.total(st)
    good = flammetest.total(st, lambda f: reaches_main(f) and "Flamme.with_profile" in f and
                            "App.work" in f and f[-1].startswith("App.fib"))
    check(tot >= 50 and good >= 0.9 * tot,
          "the library's profile shows the wrapped work (>= 90% in App.fib under Flamme.with_profile, "
          "reaching main)", "%d of %d" % (good, tot))


def test_man(installed, check):
    if not shutil.which("man"):
        pytest.skip("no man command")
    so = must(["man", "-w", "flamme"], "man -w flamme",
              env=install_env({"MANPATH": os.path.join(installed.prefix, "share", "man")}))
    check(os.path.realpath(so.strip()) ==
          os.path.realpath(os.path.join(installed.prefix, "share", "man", "man1", "flamme.1")),
          "man finds the installed page", so.strip())


def test_uninstall(installed, check):
    """Last: moves the installed trees back and uninstalls them."""
    t = installed
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
        check(not left, "uninstall %s leaves no file" % args[0], sorted(left))
        dirs = sorted(os.path.relpath(os.path.join(d, x), root)
                      for d, xs, _ in os.walk(root) for x in xs)
        check(not any("flamme" in x.replace(STAGE_PREFIX[1:], "") for x in dirs),
              "uninstall %s leaves no flamme directory" % args[0], dirs)
