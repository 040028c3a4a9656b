#!/usr/bin/env python3
"""tests/layout/sigsafe.py — what the signal handler can reach calls only
async-signal-safe functions, and never one of the agent's own interposers.

Reads the disassembly of libflamme.so (objdump, binutils) into a call graph
of direct calls and jumps, walks it from the handler (flamme_sigprof) and
every function whose name ends `_sigsafe`, and fails with one line per
offence, with the chain of calls that reaches it:
  - a call into libc (through the PLT) that is not on ALLOWED: the POSIX
    async-signal-safe list (POSIX.1-2024, which names the mem* functions)
    as far as the agent uses it, and the Linux system calls it makes;
  - a call of a function the library exports under a libc name (its
    interposers: agent/exports.map). The handler's doorbell once went
    through the `write` interposer: its frame and descriptor lookup took
    ~400 bytes of an alternate stack that had ~1 KiB left, and a first
    lookup made a getsockopt call from the handler.
Indirect calls (the program's handler, forwarded) are not followed.
Usage: sigsafe.py LIBFLAMME.so   (make sigsafe-test, mk/layout.mk)
"""
import re
import subprocess
import sys

ROOTS = re.compile(r"^(flamme_sigprof|\w+_sigsafe)$")
# libc functions the handler's code may call.
ALLOWED = {
    # POSIX async-signal-safe
    "clock_gettime", "fstat", "getpid", "memcpy", "memmove", "memset", "memcmp", "strlen",
    "sigprocmask", "pthread_sigmask", "timer_settime", "timer_getoverrun", "read", "write",
    "getppid", "sigaction", "raise", "kill", "_exit", "abort", "clock_nanosleep", "unlink",
    # Linux: a system call and nothing else (errno is the thread's)
    "syscall", "ioctl", "gettid", "tgkill", "__errno_location", "process_vm_readv",
    "sched_yield", "__tls_get_addr",
}
FUNC = re.compile(r"^[0-9a-f]+ <([^>]+)>:")
CALL = re.compile(r"\b(?:call|jmp)\s+[0-9a-f]+ <([^>+]+)>")


def disassembly(lib):
    r = subprocess.run(["objdump", "-d", "--no-show-raw-insn", lib], capture_output=True, text=True)
    if r.returncode != 0:
        print(f"sigsafe: objdump -d {lib}: {r.stderr.strip()}", file=sys.stderr)
        sys.exit(2)
    return r.stdout


def exported(lib):
    """Functions the library defines and exports (its interposers and API)."""
    r = subprocess.run(["nm", "-D", "--defined-only", lib], capture_output=True, text=True)
    return {line.split()[-1].split("@")[0] for line in r.stdout.splitlines()
            if len(line.split()) == 3 and line.split()[1] in "TW"}


def main():
    if len(sys.argv) != 2:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    lib = sys.argv[1]
    graph, cur = {}, None
    for line in disassembly(lib).splitlines():
        m = FUNC.match(line)
        if m:
            cur = m.group(1)
            graph.setdefault(cur, set())
            continue
        m = CALL.search(line)
        if m and cur and m.group(1) != cur:
            graph[cur].add(m.group(1))
    interposers = exported(lib) - {f for f in graph if f.startswith("flamme_")}
    roots = sorted(f for f in graph if ROOTS.match(f))
    if "flamme_sigprof" not in roots:
        print(f"sigsafe: {lib} has no flamme_sigprof (stripped?)", file=sys.stderr)
        return 2
    came_from = {r: None for r in roots}
    todo = list(roots)
    while todo:
        f = todo.pop()
        if f in interposers or f.endswith("@plt"):
            continue  # a leaf: judged below, not walked into
        for c in sorted(graph.get(f, ())):
            if c not in came_from:
                came_from[c] = f
                todo.append(c)

    def chain(f):
        out = []
        while f:
            out.append(f)
            f = came_from[f]
        return " <- ".join(out)

    errors = []
    for f in sorted(came_from):
        if f.endswith("@plt") and f[:-4] not in ALLOWED:
            errors.append(f"{f[:-4]} is not async-signal-safe: {chain(f)}")
        elif f in interposers:
            errors.append(f"{f} is the agent's interposer, not libc's: {chain(f)}")
    for e in errors:
        print("sigsafe: " + e)
    if errors:
        return 1
    libc = sorted(f[:-4] for f in came_from if f.endswith("@plt"))
    print(f"sigsafe: {len(came_from) - len(libc)} functions reachable from {len(roots)} handler "
          f"entry points call only {', '.join(libc)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
