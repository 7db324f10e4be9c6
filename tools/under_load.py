"""`make test-under-load`: the test suite while two CPU-bound processes run beside it.

Usage: python tools/under_load.py [--burners N] [PYTEST ARGS ...]

A test that assumes timing (a fixed sleep standing in for "it has happened by now", a
bound on how fast something goes) passes on an idle machine and fails on a busy one;
this makes the machine busy on purpose. N (default 2) processes spin in a loop at normal
priority for the whole run and are stopped afterwards — each by its own pid, also when
the tests fail or are interrupted. Exits with pytest's code and prints the wall time.
"""
from __future__ import annotations

import subprocess
import sys
import time

BURN = "while True: pass"


def main(argv: list[str]) -> int:
    burners = 2
    if argv[:1] == ["--burners"]:
        burners, argv = int(argv[1]), argv[2:]
    spinning = [subprocess.Popen([sys.executable, "-c", BURN]) for _ in range(burners)]
    t0 = time.monotonic()
    try:
        print(f"under-load: {burners} CPU-bound processes (pids {', '.join(str(p.pid) for p in spinning)}) "
              f"beside pytest {' '.join(argv)}", flush=True)
        code = subprocess.call([sys.executable, "-m", "pytest", *argv])
    finally:
        for p in spinning:
            p.kill()
        for p in spinning:
            p.wait()
    print(f"under-load: pytest exit {code} after {time.monotonic() - t0:.0f} s with {burners} CPU-bound "
          "processes beside it (stopped)", flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
