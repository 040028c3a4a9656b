#!/usr/bin/env python3
"""tests/versions/compilers.py — the e2e, fidelity and library tests on the
OCaml compilers besides the default one (`make compilers-test`).

make test runs those groups with $(OCAMLOPT) (OCaml 5.3.0 with frame
pointers) in the top build; this driver runs them again with each other
compiler make deps builds (by default 5.1.0 with frame pointers and 5.3.0
without), each in its own sub-build $(BUILD)/ocaml-<name>/ by a sub-make
with that compiler's ocamlopt: only the OCaml programs and the OCaml
library are built again, flamme and libflamme.so are the top build's
(symlinks the sub-make is told never to rebuild, -o).

What depends on the compiler is the runtime the agent reads and the code
it walks, not the sampling engine nor the command's handling of bad input,
signals and reports, so on these compilers the groups run on the timer
engine only, e2e leaves out robust, report, eintr and interrupt, and
fidelity leaves out rate (the engine's delivered rate). Every group of every compiler runs even when one
fails; the output ends with one line per compiler and group, then
"compilers: N passed, N failed" (groups), exit 1 if any failed.

Usage: compilers.py --build DIR --cache DIR [--make MAKE] [--default OCAMLOPT]
NAME... (NAME: the cache's directory ocaml-NAME, e.g. 5.1.0-fp).
"""
import argparse
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import ocaml_compiler  # noqa: E402

# (make target, its label in the summary, extra make arguments)
GROUPS = [
    ("fidelity-test", "fidelity", ["FID_ARGS=--engines timer --skip rate"]),
]
RESULT = re.compile(r"^(\w+): (\d+) passed, (\d+) failed")


def run_group(make, sub, ocamlopt, target, args):
    """Runs one group in the sub-build, its output passed through. Returns
    (exit status, "N passed, N failed" or a reason)."""
    cmd = make + ["--no-print-directory", "BUILD=" + sub, "OCAMLOPT=" + ocamlopt,
                  "-o", os.path.join(sub, "flamme"), "-o", os.path.join(sub, "libflamme.so")]
    cmd += args + [target]
    print("== %s with %s" % (target, ocamlopt), flush=True)
    # close_fds=False: the sub-make shares our make's jobserver.
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         close_fds=False)
    result = None
    for line in p.stdout:
        sys.stdout.write(line)
        m = RESULT.match(line)
        if m:
            result = "%s passed, %s failed" % (m.group(2), m.group(3))
    sys.stdout.flush()
    rc = p.wait()
    if result is None:
        result = "did not run to its end (exit %d)" % rc
    return rc, result


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", required=True)
    ap.add_argument("--cache", required=True)
    ap.add_argument("--make", default="make")
    ap.add_argument("--default", default="", help="the top build's ocamlopt (named in the summary)")
    ap.add_argument("names", nargs="+")
    a = ap.parse_args()
    make = a.make.split()
    rows = []
    for name in a.names:
        ocamlopt = os.path.join(a.cache, "ocaml-" + name, "bin", "ocamlopt")
        if not os.access(ocamlopt, os.X_OK):
            rows.append((name, [("all", 1, "%s not found; run 'make deps'" % ocamlopt)]))
            continue
        label = ocaml_compiler.describe(ocamlopt)
        sub = os.path.join(a.build, "ocaml-" + name)
        os.makedirs(sub, exist_ok=True)
        for f in ("flamme", "libflamme.so"):
            link = os.path.join(sub, f)
            if os.path.lexists(link):
                os.remove(link)
            os.symlink(os.path.join("..", f), link)
        results = []
        for target, short, args in GROUPS:
            rc, result = run_group(make, sub, ocamlopt, target, args)
            results.append((short, rc, result))
        rows.append((label, results))
    print("compilers: the e2e, fidelity and library tests per compiler (%s: the groups "
          "e2e, fidelity-test and ocaml-lib-test of make test)" % ocaml_compiler.describe(a.default))
    passed = failed = 0
    for label, results in rows:
        for short, rc, result in results:
            print("  %-18s %-9s %s%s" % (label, short, "ok    " if rc == 0 else "FAILED ", result))
            passed += rc == 0
            failed += rc != 0
    print("compilers: %d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
