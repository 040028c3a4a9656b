"""tests/ocaml_compiler.py — names the OCaml compiler a test group's programs
were built with.

The e2e, fidelity and library runners take --compiler PATH (the ocamlopt
their Makefile rules used, $(OCAMLOPT)) and print its name on their first
and last lines, so that each run of a group (make test runs them on every
compiler make deps builds: mk/versions.mk) says which compiler it tested.
"""
import subprocess


def describe(ocamlopt):
    """Returns e.g. "OCaml 5.1.0 fp" or "OCaml 5.3.0 no-fp" for the compiler
    at path ocamlopt; "compiler not given" without one, the path itself if
    it cannot be run."""
    if not ocamlopt:
        return "compiler not given"

    def ask(*args):
        p = subprocess.run([ocamlopt] + list(args), capture_output=True, text=True, timeout=60)
        return p.stdout.strip() if p.returncode == 0 else ""

    try:
        version = ask("-version")
        fp = ask("-config-var", "with_frame_pointers")
    except (OSError, subprocess.SubprocessError):
        return ocamlopt
    if not version:
        return ocamlopt
    return "OCaml %s %s" % (version, "fp" if fp == "true" else "no-fp")
