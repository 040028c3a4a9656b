"""tests/dune/test_dune.py — the OCaml library as a dune user gets it (make
dune-test, part of make test): a fresh dune project vendors this repository
(agent sources + ocaml_stubs/dune), adds `flamme` to an executable's
libraries, wraps a function in Flamme.with_profile, builds with Debian's dune
and each compiler make deps provides, runs it, and checks the profile holds
that function's work under with_profile and reaches main.
"""
import os
import shutil
import subprocess

import pytest

import flammetest

VENDORED = ["agent", "runtime_hooks", "writer", "common", "ocaml_stubs", "dune-project",
            "flamme.opam"]

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.mark.slow
def test_dune_project(build, compiler, check, tmp_path):
    assert shutil.which("dune"), "the dune command is missing (make deps installs ocaml-dune)"
    proj = str(tmp_path)
    vend = os.path.join(proj, "vendor", "flamme")
    os.makedirs(vend)
    for item in VENDORED:
        src = os.path.join(flammetest.REPO, item)
        (shutil.copytree if os.path.isdir(src) else shutil.copy)(src, os.path.join(vend, item))
    os.makedirs(os.path.join(proj, "app"))
    (tmp_path / "dune-project").write_text("(lang dune 2.9)\n")
    (tmp_path / "app" / "dune").write_text("(executable (name app) (libraries flamme))\n")
    shutil.copy(os.path.join(HERE, "app.ml"), os.path.join(proj, "app"))
    env = flammetest.clean_env({"PATH": compiler.bindir + os.pathsep + os.environ["PATH"]})
    b = subprocess.run(["dune", "build", "./app/app.exe"], cwd=proj, env=env,
                       capture_output=True, text=True, timeout=600)
    assert b.returncode == 0, "dune build failed (%d): %s%s" % (b.returncode, b.stdout, b.stderr)
    r = flammetest.run(["./_build/default/app/app.exe"], cwd=proj, env=env, timeout=120)
    assert r.returncode == 0 and r.stdout.startswith("work="), \
        "the app failed (%d): %s" % (r.returncode, r.stderr)
    stacks = flammetest.collapse(build, os.path.join(proj, "app.flm"))
    total = flammetest.total(stacks)
    # dune wraps the module as Dune__exe__App; flamme shows App.
    under = flammetest.total(stacks, lambda f: "Flamme.with_profile" in f and "App.work" in f and
                             f[-1] == "App.fib" and f[0] in ("_start", "main"))
    print("  %d samples, %.1f%% in App.fib under Flamme.with_profile reaching the root"
          % (total, 100 * under / max(total, 1)))
    check(total >= 50, "the profile written by Flamme.with_profile has samples", "%d samples" % total)
    check(total and under / total >= 0.9,
          "it shows the wrapped work: >= 90% in App.fib under Flamme.with_profile, reaching the root",
          "%d of %d" % (under, total))
