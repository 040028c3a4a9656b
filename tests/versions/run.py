#!/usr/bin/env python3
"""tests/versions/run.py — the agent on OCaml runtimes it does not know.

The agent relies on runtime internals that change between OCaml releases
(runtime_hooks/ocaml_version.c checks them at start-up). On a runtime it
does not know, it must print one line saying so, write no profile and leave
the program alone (same output, same exit status):
  - fake: a C program that exports caml_state and caml_start_program like an
    OCaml program but defines none of a known release's runtime functions;
  - patched: tests/e2e/split.ml's program (built by the 5.3.0 compiler) whose
    caml_runstack is altered to link fibers through another stack_handler
    offset, as a release with a changed layout would (the program uses no
    effects, so it still runs);
  - patched_id: the same program whose caml_reset_young_limit reads
    Caml_state->id at another offset;
  - and, as a control, the unpatched program is profiled.
The runs with each supported release are the e2e/fidelity/library suites
(make e2e and make compilers-test).

Usage: run.py --build DIR. Ends with "versions: N passed, N failed".
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

# caml_runstack: mov 0x10(%rax),%r11; mov %rcx,0x18(%r11) (stack_handler's
# parent at 24). The patch moves the parent to 32.
RUNSTACK = bytes([0x4c, 0x8b, 0x58, 0x10, 0x49, 0x89, 0x4b, 0x18])
# caml_reset_young_limit: movslq 0x120(%rdi),%rdx (Caml_state->id, 288 in 5.3).
ID_LOAD = bytes([0x48, 0x63, 0x97, 0x20, 0x01, 0x00, 0x00])


class Failure(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise Failure(msg)


def run(cmd, env):
    full = {k: v for k, v in os.environ.items() if not k.startswith("FLAMME_") and k != "LD_PRELOAD"}
    full.update(env)
    p = subprocess.run(cmd, env=full, capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout, p.stderr


def dormant(ctx, exe, args, want_rc, want_out, want_line):
    """Runs exe without and with the agent; the outputs and statuses must be
    the same and the agent's stderr exactly one line matching want_line."""
    rc0, out0, err0 = run([exe] + args, {})
    check(rc0 == want_rc and re.search(want_out, out0),
          "%s alone: exit %d, output %r" % (exe, rc0, out0[:200]))
    prof = os.path.join(ctx.work, os.path.basename(exe) + ".flm")
    rc, out, err = run([exe] + args, {"LD_PRELOAD": ctx.lib, "FLAMME_OUTPUT": prof})
    check(rc == rc0, "with the agent: exit %d, without: %d" % (rc, rc0))
    check(out == out0, "with the agent the output changed: %r vs %r" % (out[:200], out0[:200]))
    extra = [l for l in err.splitlines() if l not in err0.splitlines()]
    print("  agent says: %s" % " | ".join(extra))
    check(len(extra) == 1 and re.search(want_line, extra[0]),
          "want one line matching %r from the agent, got %r" % (want_line, extra))
    check(not os.path.exists(prof), "a profile was written on an unknown runtime: %s" % prof)


def test_fake(ctx):
    dormant(ctx, os.path.join(ctx.build, "versions", "fake_runtime"), [], 3, r"^fake runtime: done",
            r"^flamme: this program's OCaml runtime is not a release flamme knows .*; not profiling$")


def patched_split(ctx):
    src = os.path.join(ctx.build, "e2e", "split", "split.exe")
    data = open(src, "rb").read()
    check(data.count(RUNSTACK) == 1, "split.exe: caml_runstack's parent link found %d times"
          % data.count(RUNSTACK))
    exe = os.path.join(ctx.work, "split_patched.exe")
    with open(exe, "wb") as f:
        f.write(data.replace(RUNSTACK, RUNSTACK[:-1] + bytes([0x20])))
    os.chmod(exe, 0o755)
    return exe


def file_offset(exe, symbol):
    """File offset of symbol's code in exe (nm's address, mapped through the
    LOAD segment that holds it)."""
    nm = subprocess.run(["nm", exe], capture_output=True, text=True).stdout
    m = re.search(r"^([0-9a-f]+) T %s$" % re.escape(symbol), nm, re.M)
    check(m, "%s: no symbol %s" % (exe, symbol))
    vaddr = int(m.group(1), 16)
    ph = subprocess.run(["readelf", "-lW", exe], capture_output=True, text=True).stdout
    for l in ph.splitlines():
        f = l.split()
        if f and f[0] == "LOAD":
            off, va, filesz = int(f[1], 16), int(f[2], 16), int(f[4], 16)
            if va <= vaddr < va + filesz:
                return vaddr - va + off
    raise Failure("%s: %s is in no LOAD segment" % (exe, symbol))


def test_patched_id(ctx):
    """caml_reset_young_limit reading Caml_state->id elsewhere, as a release
    that moved the field would: the domain labels would be wrong, so the
    agent stays dormant. (The patch reads the upper half of the id's 8-byte
    slot, 0 in this single-domain program, which runs as before.)"""
    src = os.path.join(ctx.build, "e2e", "split", "split.exe")
    data = bytearray(open(src, "rb").read())
    at = file_offset(src, "caml_reset_young_limit")
    i = data.find(ID_LOAD, at, at + 64)
    check(i >= 0, "split.exe: caml_reset_young_limit has no movslq 0x120(%rdi)")
    data[i + 3] += 4
    exe = os.path.join(ctx.work, "split_patched_id.exe")
    with open(exe, "wb") as f:
        f.write(data)
    os.chmod(exe, 0o755)
    dormant(ctx, exe, ["10"], 0, r"^split: rounds=50 ",
            r"^flamme: OCaml 5\.3 runtime: caml_reset_young_limit reads the domain id at offset "
            r"292, not at 288 .*; not profiling$")


def test_patched(ctx):
    dormant(ctx, patched_split(ctx), ["10"], 0, r"^split: rounds=50 ",
            r"^flamme: OCaml 5\.\d runtime: caml_c_call/caml_runstack do not use .*; not profiling$")


def test_control(ctx):
    exe = os.path.join(ctx.build, "e2e", "split", "split.exe")
    prof = os.path.join(ctx.work, "control.flm")
    rc, out, err = run([exe, "10"], {"LD_PRELOAD": ctx.lib, "FLAMME_OUTPUT": prof, "FLAMME_HZ": "499"})
    check(rc == 0 and out.startswith("split: rounds=50 "), "split.exe failed (%d): %s" % (rc, err))
    check("not profiling" not in err, "the agent refused a known runtime: %s" % err.strip())
    c = subprocess.run([ctx.flamme, "collapse", prof], capture_output=True, text=True)
    n = sum(int(l.rpartition(" ")[2]) for l in c.stdout.splitlines() if "Split.work_" in l)
    print("  unpatched: %d samples in Split.work_*" % n)
    check(c.returncode == 0 and n >= 20, "the unpatched program's profile has %d work samples" % n)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    a = ap.parse_args()

    class Ctx:
        pass
    ctx = Ctx()
    ctx.build = a.build
    ctx.lib = os.path.abspath(os.path.join(a.build, "libflamme.so"))
    ctx.flamme = os.path.abspath(os.path.join(a.build, "flamme"))
    ctx.work = tempfile.mkdtemp(prefix="flamme-versions.")
    passed = failed = 0
    for t in (test_fake, test_patched, test_patched_id, test_control):
        name = t.__name__[5:]
        print("versions %s" % name)
        try:
            t(ctx)
            print("PASS versions %s" % name)
            passed += 1
        except (Failure, OSError, subprocess.TimeoutExpired) as e:
            print("FAIL versions %s: %s" % (name, e))
            failed += 1
    shutil.rmtree(ctx.work, ignore_errors=True)
    print("versions: %d passed, %d failed" % (passed, failed))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
