"""`make test-under-load`: the README's test command while two CPU-bound processes run beside it.

Usage: python tools/under_load.py [--burners N] [COMMAND ...]   (default command: make test)

A test that assumes timing (a fixed sleep standing in for "it has happened by now", a
bound on how fast something goes) passes on an idle machine and fails on a busy one;
this makes the machine busy on purpose. N (default 2) processes spin in a loop at normal
priority for the whole run and are stopped afterwards — each by its own pid, also when
the tests fail or are interrupted. Exits with the command's code. It says what it does
BEFORE the command runs and nothing after, so pytest's summary stays the log's last line
(CI's log reader reads it; `.ci/run` runs this).
"""
from __future__ import annotations

import os
import subprocess
import sys

BURN = "while True: pass"


def main(argv: list[str]) -> int:
    burners = 2
    if argv[:1] == ["--burners"]:
        burners, argv = int(argv[1]), argv[2:]
    command = argv or ["make", "test"]
    spinning = [subprocess.Popen([sys.executable, "-c", BURN]) for _ in range(burners)]
    try:
        print(f"under-load: {burners} CPU-bound processes (pids {', '.join(str(p.pid) for p in spinning)}, "
              f"stopped when it ends) beside `{' '.join(command)}` on {os.cpu_count()} CPUs", flush=True)
        return subprocess.call(command)
    finally:
        for p in spinning:
            p.kill()
        for p in spinning:
            p.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
