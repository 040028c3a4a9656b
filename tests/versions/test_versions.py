"""tests/versions/test_versions.py — the agent on OCaml runtimes it does not
know (make versions-test, part of make test).

The agent relies on runtime internals that change between OCaml releases
(runtime_hooks/ocaml_version.c checks them at start-up). On a runtime it
does not know, it must print one line saying so, write no profile and leave
the program alone (same output, same exit status):
  - fake: a C program that exports caml_state and caml_start_program like an
    OCaml program but defines none of a known release's runtime functions
    ($(BUILD)/versions/fake_runtime, built by make);
  - patched: tests/e2e/split.ml's program whose caml_runstack is altered to
    link fibers through another stack_handler offset, as a release with a
    changed layout would (the program uses no effects, so it still runs);
  - patched_id: the same program whose caml_reset_young_limit reads
    Caml_state->id at another offset;
  - and, as a control, the unpatched program is profiled.
The patches are written against OCaml 5.3's to 5.5's runtime code: they run
with the 5.3.0 compilers (fp and no-fp), 5.4.1 and 5.5.2, and are skipped for 5.1;
the control runs with every compiler. The runs with each supported release are
the rest of the suite.
"""
import os
import re
import subprocess

import pytest

import flammetest

# caml_runstack: mov 0x10(%rax),%r11; mov %rcx,0x18(%r11) (stack_handler's
# parent at 24). The patch moves the parent to 32.
RUNSTACK = bytes([0x4c, 0x8b, 0x58, 0x10, 0x49, 0x89, 0x4b, 0x18])
# caml_reset_young_limit: movslq ID(%rdi),%rdx, Caml_state->id by release.
ID_OFFSET = {"5.3": 288, "5.4": 320, "5.5": 320}


def id_load(offset):
    return bytes([0x48, 0x63, 0x97]) + offset.to_bytes(4, "little")


def split(ocaml):
    return ocaml("versions/split", [os.path.join(flammetest.REPO, "tests", "e2e", "split.ml")])


def release(compiler):
    return ".".join(compiler.version.split(".")[:2])


def needs_patchable(compiler):
    if release(compiler) not in ID_OFFSET:
        pytest.skip("the patches are written against OCaml 5.3's to 5.5's runtime code, not %s"
                    % compiler)


def run(cmd, env):
    return flammetest.run(cmd, env=flammetest.clean_env(env), timeout=120)


def dormant(check, build, work, exe, args, want_rc, want_out, want_line):
    """Runs exe without and with the agent; the outputs and statuses must be
    the same and the agent's stderr exactly one line matching want_line."""
    p0 = run([exe] + args, {})
    assert p0.returncode == want_rc and re.search(want_out, p0.stdout), \
        "%s alone: exit %d, output %r" % (exe, p0.returncode, p0.stdout[:200])
    prof = os.path.join(work, os.path.basename(exe) + ".flm")
    p = run([exe] + args, {"LD_PRELOAD": build.lib, "FLAMME_OUTPUT": prof})
    check(p.returncode == p0.returncode, "with the agent: the same exit status",
          "%d vs %d" % (p.returncode, p0.returncode))
    check(p.stdout == p0.stdout, "with the agent: the same output", "%r vs %r" % (p.stdout[:200], p0.stdout[:200]))
    extra = [ln for ln in p.stderr.splitlines() if ln not in p0.stderr.splitlines()]
    print("  agent says: %s" % " | ".join(extra))
    check(len(extra) == 1 and re.search(want_line, extra[0]),
          "one line from the agent, matching %r" % want_line, extra)
    check(not os.path.exists(prof), "no profile written on an unknown runtime", prof)


def test_fake(build, check, tmp_path):
    exe = build.path("versions", "fake_runtime")
    assert os.path.exists(exe), "%s is missing: make %s" % (exe, exe)
    dormant(check, build, str(tmp_path), exe, [], 3, r"^fake runtime: done",
            r"^flamme: this program's OCaml runtime is not a release flamme knows .*; not profiling$")


def file_offset(exe, symbol):
    """File offset of symbol's code in exe (nm's address, mapped through the
    LOAD segment that holds it)."""
    nm = subprocess.run(["nm", exe], capture_output=True, text=True).stdout
    m = re.search(r"^([0-9a-f]+) T %s$" % re.escape(symbol), nm, re.M)
    assert m, "%s: no symbol %s" % (exe, symbol)
    vaddr = int(m.group(1), 16)
    ph = subprocess.run(["readelf", "-lW", exe], capture_output=True, text=True).stdout
    for line in ph.splitlines():
        f = line.split()
        if f and f[0] == "LOAD":
            off, va, filesz = int(f[1], 16), int(f[2], 16), int(f[4], 16)
            if va <= vaddr < va + filesz:
                return vaddr - va + off
    raise AssertionError("%s: %s is in no LOAD segment" % (exe, symbol))


def write_exe(path, data):
    with open(path, "wb") as f:
        f.write(data)
    os.chmod(path, 0o755)
    return path


def test_patched(build, ocaml, compiler, check, tmp_path):
    needs_patchable(compiler)
    data = open(split(ocaml), "rb").read()
    assert data.count(RUNSTACK) == 1, \
        "split.exe: caml_runstack's parent link found %d times" % data.count(RUNSTACK)
    exe = write_exe(str(tmp_path / "split_patched.exe"), data.replace(RUNSTACK, RUNSTACK[:-1] + bytes([0x20])))
    dormant(check, build, str(tmp_path), exe, ["10"], 0, r"^split: rounds=50 ",
            r"^flamme: OCaml 5\.\d runtime: caml_c_call/caml_runstack do not use .*; not profiling$")


def test_patched_id(build, ocaml, compiler, check, tmp_path):
    """caml_reset_young_limit reading Caml_state->id elsewhere, as a release
    that moved the field would: the domain labels would be wrong, so the
    agent stays dormant. (The patch reads the upper half of the id's 8-byte
    slot, 0 in this single-domain program, which runs as before.)"""
    needs_patchable(compiler)
    rel = release(compiler)
    off = ID_OFFSET[rel]
    src = split(ocaml)
    data = bytearray(open(src, "rb").read())
    at = file_offset(src, "caml_reset_young_limit")
    i = data.find(id_load(off), at, at + 64)
    assert i >= 0, "split.exe: caml_reset_young_limit has no movslq %#x(%%rdi)" % off
    data[i + 3] += 4
    exe = write_exe(str(tmp_path / "split_patched_id.exe"), data)
    dormant(check, build, str(tmp_path), exe, ["10"], 0, r"^split: rounds=50 ",
            r"^flamme: OCaml %s runtime: caml_reset_young_limit reads the domain id at offset "
            r"%d, not at %d .*; not profiling$" % (re.escape(rel), off + 4, off))


def test_control(build, ocaml, check, tmp_path):
    """The unpatched program is profiled."""
    prof = str(tmp_path / "control.flm")
    p = run([split(ocaml), "10"], {"LD_PRELOAD": build.lib, "FLAMME_OUTPUT": prof, "FLAMME_HZ": "499"})
    assert p.returncode == 0 and p.stdout.startswith("split: rounds=50 "), \
        "split.exe failed (%d): %s" % (p.returncode, p.stderr)
    check("not profiling" not in p.stderr, "the agent accepts a known runtime", p.stderr.strip())
    n = flammetest.total(flammetest.collapse(build, prof), lambda f: any("Split.work_" in x for x in f))
    check(n >= 20, "the unpatched program's profile has >= 20 samples in Split.work_*", n)
