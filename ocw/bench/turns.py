"""The per-turn benchmark: what a `%%chat` cell costs around the model call, the
physical floor beside it, and the naive recount it replaces.

- A turn is count + append + `occupancy()`: `Session.append` counts the new
  message and writes it (one durable transaction), then the ring's figure is
  read. Timed back to back, and human-paced: after a pause longer than any idle
  timeout of ocw/store/duckdb/db.py, so whatever an idle connection does (checkpoint, close,
  hand-over) has had its chance to happen before the turn — as between cells.
  The garbage collector stays on.
- The floor: a raw durable DuckDB transaction on its own file, with a held
  connection and the same settings ocw's connection uses (ocw/store/duckdb/db.py): insert a
  ~300-byte row, update one row, commit. Nothing ocw does per turn can be
  cheaper than that.
- Naive: re-tokenize every message of the rendered history (reading it is not
  timed, which only flatters naive). Above `NAIVE_FULL_MAX` messages a fixed
  fraction is timed (every `NAIVE_STRIDE`-th message by seq, which samples every
  kind of message) and scaled by the message count; the output says so.
"""
from __future__ import annotations

import gc
import json
import os
import random
import statistics
import time

from ocw.context.render import render_blocks
from ocw.text.tokens import FRAME_TOKENS, get_encoding, render_message
from ocw.bench.build import words

PAUSE = 0.6  # seconds between human-paced turns: longer than any idle timeout of ocw/store/duckdb/db.py
NAIVE_FULL_MAX = 200_000  # above this many messages, naive is timed on a fraction and scaled
NAIVE_STRIDE = 7  # ... every 7th message (7 is prime to the 10-message cycle: every kind is sampled)
FLOOR_ROW_BYTES = 300
SLOW_MS = 50  # a turn over this is reported with what it spent: CPU, garbage collection


class Watch:
    """Times calls: wall ms per call, and for calls over SLOW_MS what they spent — the
    process's CPU time (all threads) and the garbage collector's time — so a slow turn
    says whether it worked, collected, or waited (for the disk, or for a core on a
    loaded machine)."""

    def __init__(self):
        self.ms: list[float] = []
        self.slow: list[dict] = []
        self._gc_ms = 0.0
        self._gc_t0 = None

    def _on_gc(self, phase, info) -> None:
        if phase == "start":
            self._gc_t0 = time.perf_counter()
        elif self._gc_t0 is not None:
            self._gc_ms += (time.perf_counter() - self._gc_t0) * 1000
            self._gc_t0 = None

    def __enter__(self):
        gc.callbacks.append(self._on_gc)
        return self

    def __exit__(self, *exc) -> None:
        gc.callbacks.remove(self._on_gc)

    def time(self, fn, *args) -> float:
        gc0, cpu0 = self._gc_ms, time.process_time()
        t0 = time.perf_counter()
        fn(*args)
        ms = (time.perf_counter() - t0) * 1000
        self.ms.append(ms)
        if ms > SLOW_MS:
            self.slow.append({"ms": round(ms, 1), "cpu_ms": round((time.process_time() - cpu0) * 1000, 1),
                              "gc_ms": round(self._gc_ms - gc0, 1)})
        return ms


def turn_message(rng: random.Random, i: int) -> tuple[str, str]:
    return ("user" if i % 2 == 0 else "assistant", words(rng, rng.randint(30, 90)))


def one_turn(session, role: str, text: str) -> None:
    """count + append + occupancy()."""
    session.append(role, text)
    session.occupancy()


def time_turns(session, turns: int, *, seed: int = 11, warmup: int = 0, watch: Watch | None = None) -> Watch:
    """`turns` turns back to back (after `warmup` untimed ones), timed into `watch`."""
    rng = random.Random(seed)
    for i in range(warmup):
        one_turn(session, *turn_message(rng, i))
    watch = watch or Watch()
    with watch:
        for i in range(turns):
            watch.time(one_turn, session, *turn_message(rng, i))
    return watch


class Floor:
    """A raw durable DuckDB transaction on its own file: the physical floor of a turn."""

    def __init__(self, path: str):
        import duckdb

        from ocw.store.duckdb.db import connection_settings
        from ocw.store.duckdb.settings import DUCKDB_CONFIG

        self.path = path
        self.con = duckdb.connect(path, config=DUCKDB_CONFIG)
        for stmt in connection_settings():
            self.con.execute(stmt)
        self.con.execute("CREATE TABLE IF NOT EXISTS floor_rows (id VARCHAR, body VARCHAR)")
        self.con.execute("CREATE TABLE IF NOT EXISTS floor_head (k INTEGER, head VARCHAR, rev BIGINT)")
        if not self.con.execute("SELECT 1 FROM floor_head").fetchone():
            self.con.execute("INSERT INTO floor_head VALUES (1, NULL, 0)")
        self.body = "x" * FLOOR_ROW_BYTES
        self.i = 0

    def turn(self) -> None:
        """insert one ~300-byte row, update one row, commit (durable)."""
        self.i += 1
        rid = f"r{os.getpid()}-{self.i}"
        self.con.begin()
        self.con.execute("INSERT INTO floor_rows VALUES (?, ?)", [rid, self.body])
        self.con.execute("UPDATE floor_head SET head = ?, rev = rev + 1 WHERE k = 1", [rid])
        self.con.commit()

    def time_turns(self, turns: int, *, warmup: int = 0, watch: Watch | None = None) -> Watch:
        for _ in range(warmup):
            self.turn()
        watch = watch or Watch()
        with watch:
            for _ in range(turns):
                watch.time(self.turn)
        return watch

    def close(self) -> None:
        self.con.close()


def stats(ms: list[float], slow: list[dict] = ()) -> dict:
    """p50 / p99 / max, the turns over 50 ms, and what the slow ones spent."""
    s = sorted(ms)
    if not s:
        return {"n": 0, "p50": float("nan"), "p99": float("nan"), "max": float("nan"), "over_50": 0, "slow": []}
    return {"n": len(s), "p50": statistics.median(s), "p99": s[min(len(s) - 1, int(0.99 * len(s)))],
            "max": s[-1], "over_50": sum(x > SLOW_MS for x in s), "slow": sorted(slow, key=lambda x: -x["ms"])}


# -- naive ------------------------------------------------------------------------------------
def naive_count(messages, encoding: str) -> tuple[int, float]:
    """Tokenize every message again, as a recount would. Returns (tokens, seconds)."""
    enc = get_encoding(encoding)
    t0 = time.perf_counter()
    total = 0
    for m in messages:
        total += FRAME_TOKENS + len(enc.encode_ordinary(render_message(m["role"], m["content"], m.get("name"))))
    return total, time.perf_counter() - t0


def _sampled_history(store, session) -> tuple[list[dict], int]:
    """Every NAIVE_STRIDE-th message of the (single-chain) session by seq, rendered as
    rendered_history renders it; and the number of messages on the branch."""
    cap, enc = session.tool_result_cap, session.encoding.name
    with store.db.connect() as con:
        rows = con.execute(
            "SELECT role, name, content FROM nodes WHERE session_id = ? AND seq % ? = 0 AND cover_count IS NULL"
            " ORDER BY seq", [session.id, NAIVE_STRIDE]).fetchall()
    out = [{"role": r, "content": render_blocks(json.loads(c), cap, enc), **({"name": nm} if nm else {})}
           for r, nm, c in rows]
    head = session._rows.get(session.head)
    return out, head.depth


def naive_runs(store, session, runs: int) -> dict:
    """Median of `runs` naive recounts (ms), full or sampled (see the module docstring);
    `total` is the full recount's token total (None when sampled)."""
    enc = session.encoding.name
    messages = session._rows.get(session.head).depth
    if messages <= NAIVE_FULL_MAX:
        history = session.rendered_history()
        results = [naive_count(history, enc) for _ in range(runs)]
        del history
        return {"ms": statistics.median(r[1] for r in results) * 1000, "runs": runs, "total": results[0][0],
                "method": f"full, median of {runs}"}
    sample, messages = _sampled_history(store, session)
    results = [naive_count(sample, enc) for _ in range(runs)]
    scale = messages / len(sample)
    return {"ms": statistics.median(r[1] for r in results) * 1000 * scale, "runs": runs, "total": None,
            "method": f"1 in {NAIVE_STRIDE} messages timed, ×{scale:.2f}, median of {runs}"}
