"""Human-paced turns, several stores at once without sharing a moment.

A human-paced run is mostly waiting: 300 turns 0.6 s apart take three minutes
per store. To measure the floor and every size in the same three minutes, each
runs in its own process on one common clock: process k turns at
`start + k·PERIOD/len(jobs) + i·PERIOD`. Each process is idle for a whole
period between its own turns (as a kernel is between cells: its caches cool,
DuckDB's threads sleep, the Db's idle timers run out), and no two processes'
turns overlap unless one takes longer than PERIOD/len(jobs) (it is reported if
any did). The machine is otherwise as loaded as it is.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time

from ocw.bench.turns import PAUSE

PERIOD = PAUSE + 0.05  # a turn of < 50 ms still leaves a pause ≥ PAUSE before the next
WARMUP = 3  # untimed paced turns first (the process's first turns load code)


def worker(kind: str, path: str, name: str, turns: int, start_at: float) -> dict:
    """Runs in the process (`python -m ocw.bench.paced KIND PATH NAME TURNS START_AT`):
    KIND is `ocw` (a session of the store at PATH) or `floor` (a raw DuckDB file)."""
    import random

    from ocw.bench.turns import Floor, Watch, one_turn, turn_message

    if kind == "floor":
        floor = Floor(path)
        step, close = floor.turn, floor.close
        db = None
    else:
        from ocw.conversation.sessions import Store
        from ocw.text.tokens import get_encoding

        store = Store(path)
        s = store.open_session(name)
        get_encoding(s.encoding.name)
        rng = random.Random(13)
        counter = iter(range(10**9))
        step = lambda: one_turn(s, *turn_message(rng, next(counter)))  # noqa: E731
        close, db = store.close, store.db
    from ocw.bench.fresh import vm_kib

    watch, late, spans = Watch(), 0, []
    rss0 = vm_kib("VmRSS")
    with watch:
        for i in range(-WARMUP, turns):
            wake = start_at + (i + WARMUP) * PERIOD
            delay = wake - time.time()
            if delay > 0:
                time.sleep(delay)
            else:
                late += 1
            t0 = time.time()
            if i < 0:
                step()
                continue
            took = watch.time(step)
            spans.append((t0, t0 + took / 1000))
    out = {"kind": kind, "ms": watch.ms, "slow": watch.slow, "late": late, "spans": spans,
           "rss_gain_kib": vm_kib("VmRSS") - rss0,
           "opens": db.opens if db else None, "checkpoints": db.checkpoints if db else None}
    close()
    return out


def run(jobs: list[tuple[str, str, str, str]], turns: int) -> dict[str, dict]:
    """`jobs`: (label, kind, path, session name). Runs them at once, phase-shifted;
    returns each label's worker output, plus `overlaps`: turns that overlapped another's."""
    start_at = time.time() + 3.0 + 0.5 * len(jobs)  # every process started and opened first
    slot = PERIOD / len(jobs)
    procs = {label: subprocess.Popen(
        [sys.executable, "-m", "ocw.bench.paced", kind, path, name, str(turns), repr(start_at + k * slot)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for k, (label, kind, path, name) in enumerate(jobs)}
    out = {}
    try:
        for label, p in procs.items():
            stdout, stderr = p.communicate(timeout=turns * PERIOD + 600)
            if p.returncode != 0:
                raise RuntimeError(f"paced worker {label} failed: {stderr.strip()[-2000:]}")
            out[label] = json.loads(stdout.strip().splitlines()[-1])
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
    spans = sorted((a, b, label) for label, o in out.items() for a, b in o["spans"])
    overlaps = sum(1 for (a1, b1, l1), (a2, b2, l2) in zip(spans, spans[1:]) if a2 < b1 and l1 != l2)
    for o in out.values():
        o["overlaps"] = overlaps
    return out


if __name__ == "__main__":
    args = sys.argv[1:]
    print(json.dumps(worker(args[0], args[1], args[2], int(args[3]), float(args[4]))))
