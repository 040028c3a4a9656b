"""tests/engine/neighbour.py — a process that shares a CPU with the program
under test and preempts it thousands of times a second, for a few hundred
us each: it runs for 0-0.3 ms, sleeps for 0-0.6 ms (each woken sleeper
preempts the running thread), again and again, for SECONDS (default 3).
What a busy machine does to a thread that never sleeps (test_engine's
test_ticks_busy). With `busy` it never sleeps either: the scheduler then
takes the CPU from the program for whole slices, wherever the program is,
inside its system calls too (test_kern_busy).
Usage: neighbour.py [SECONDS [busy]]"""
import random
import sys
import time

end = time.monotonic() + (float(sys.argv[1]) if len(sys.argv) > 1 else 3.0)
if sys.argv[2:] == ["busy"]:
    while time.monotonic() < end:
        pass
while time.monotonic() < end:
    until = time.monotonic() + random.random() * 0.0003
    while time.monotonic() < until:
        pass
    time.sleep(random.random() * 0.0006)
