#!/usr/bin/env python3
"""tests/dune/run.py — the OCaml library as a dune user gets it: a fresh dune
project vendors this repository (agent sources + ocaml_stubs/dune), adds
`flamme` to an executable's libraries, wraps a function in
Flamme.with_profile, builds with dune and the frame-pointer OCaml, runs it,
and checks the profile holds that function's work under with_profile and
reaches main.

Usage: run.py --build DIR --ocaml-bin DIR.  Ends with "dune: N passed, N failed".
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VENDORED = ["agent", "runtime_hooks", "writer", "common", "ocaml_stubs", "dune-project",
            "flamme.opam"]

MAIN_ML = """
let[@inline never] rec fib n = if n < 2 then n else fib (n - 1) + fib (n - 2)
let[@inline never] work () = let s = ref 0 in for _ = 1 to 16 do s := !s + fib 34 done; !s
let () =
  let r = Flamme.with_profile ~hz:499 ~output:"app.flm" work in
  Printf.printf "work=%d\\n" r
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--ocaml-bin", required=True)
    a = ap.parse_args()
    flamme = os.path.abspath(os.path.join(a.build, "flamme"))
    if not shutil.which("dune"):
        print("FAIL dune: the dune command is missing (make deps installs ocaml-dune)")
        print("dune: 0 passed, 1 failed")
        sys.exit(1)
    env = dict(os.environ, PATH=os.path.abspath(a.ocaml_bin) + os.pathsep + os.environ["PATH"])
    failed = 0
    with tempfile.TemporaryDirectory(prefix="flamme-dune.") as proj:
        vend = os.path.join(proj, "vendor", "flamme")
        os.makedirs(vend)
        for item in VENDORED:
            src = os.path.join(REPO, item)
            (shutil.copytree if os.path.isdir(src) else shutil.copy)(src, os.path.join(vend, item))
        os.makedirs(os.path.join(proj, "app"))
        with open(os.path.join(proj, "dune-project"), "w") as f:
            f.write("(lang dune 2.9)\n")
        with open(os.path.join(proj, "app", "dune"), "w") as f:
            f.write("(executable (name main) (libraries flamme))\n")
        with open(os.path.join(proj, "app", "main.ml"), "w") as f:
            f.write(MAIN_ML)
        try:
            b = subprocess.run(["dune", "build", "./app/main.exe"], cwd=proj, env=env,
                               capture_output=True, text=True, timeout=600)
            if b.returncode != 0:
                raise AssertionError("dune build failed (%d): %s%s" % (b.returncode, b.stdout, b.stderr))
            r = subprocess.run(["./_build/default/app/main.exe"], cwd=proj, env=env,
                               capture_output=True, text=True, timeout=120)
            if r.returncode != 0 or not r.stdout.startswith("work="):
                raise AssertionError("app failed (%d): %s" % (r.returncode, r.stderr))
            c = subprocess.run([flamme, "collapse", os.path.join(proj, "app.flm")],
                               capture_output=True, text=True, check=True)
            total = under = 0.0
            for line in c.stdout.splitlines():
                stack, _, n = line.rpartition(" ")
                frames = stack.split(";")
                total += float(n)
                # dune wraps the module as Dune__exe__Main; flamme shows Main.
                if "Flamme.with_profile" in frames and "Main.work" in frames and \
                        frames[-1] == "Main.fib" and frames[0] in ("_start", "main"):
                    under += float(n)
            print("  %d samples, %.1f%% in Main.fib under Flamme.with_profile reaching the root"
                  % (total, 100 * under / max(total, 1)))
            if total < 50 or under / total < 0.9:
                raise AssertionError("the profile does not show the wrapped work")
            print("PASS dune")
        except (AssertionError, subprocess.SubprocessError) as e:
            print("FAIL dune: %s" % e)
            failed = 1
    print("dune: %d passed, %d failed" % (1 - failed, failed))
    sys.exit(failed)


if __name__ == "__main__":
    main()
