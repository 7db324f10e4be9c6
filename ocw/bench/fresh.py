"""Open time and memory in a fresh process: what the first `%%chat` cell of a new
kernel pays before it can talk to the model.

A child process imports everything first (ocw, DuckDB, the tokenizer and its
encoding: a kernel pays those whatever the session's size, so they are excluded
and every figure below is the store's own), then measures: open the store and
the session by name, read `occupancy()` and `rendered_history()`. Time is
wall-clock; memory is the process's VmRSS after − before, with the session, its
occupancy and its rendered history still referenced (the kernel holds them).
Sessions are compacted (a summary + a recent tail of a few hundred messages),
so an O(tail) open costs the same at 1k and 1M messages and an O(history) one
does not. The file is in the page cache (the parent just wrote it).
"""
from __future__ import annotations

import json
import statistics
import subprocess
import sys


def vm_kib(key: str) -> int:
    """/proc/self/status field in KiB (0 where there is no /proc)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def child(path: str, name: str, model: str) -> dict:
    """Runs in the fresh process (`python -m ocw.bench.fresh PATH NAME MODEL`)."""
    import gc
    import time

    import duckdb  # noqa: F401  imports excluded: a kernel pays them whatever the size

    import ocw.conversation.session  # noqa: F401
    import ocw.store.duckdb.store  # noqa: F401
    from ocw.conversation.sessions import Store
    from ocw.text.tokens import encoding_for_model, get_encoding

    get_encoding(encoding_for_model(model).name)  # the tokenizer's tables: same at any size
    gc.collect()
    rss0, hwm0 = vm_kib("VmRSS"), vm_kib("VmHWM")
    t0 = time.perf_counter()
    store = Store(path)
    s = store.open_session(name)
    occ = s.occupancy()
    history = s.rendered_history()
    dt = time.perf_counter() - t0
    rss1, hwm1 = vm_kib("VmRSS"), vm_kib("VmHWM")
    out = {"open_ms": dt * 1000, "rss_kib": rss1 - rss0, "peak_kib": max(0, hwm1 - hwm0),
           "messages": len(history), "total": occ["total"]}
    store.close()
    return out


def measure(path: str, name: str, model: str = "gpt-4o") -> dict:
    """One fresh process: its figures."""
    p = subprocess.run([sys.executable, "-m", "ocw.bench.fresh", path, name, model], capture_output=True, text=True,
                       timeout=600)
    if p.returncode != 0:
        raise RuntimeError(f"fresh-process open of {name} failed: {p.stderr.strip()[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def compare(cases: list[tuple[str, str, str]], runs: int, model: str = "gpt-4o") -> dict[str, dict]:
    """`cases`: (label, path, session name). Alternates the cases `runs` times (so each
    sees the same machine load); medians per case."""
    got: dict[str, list[dict]] = {label: [] for label, _, _ in cases}
    for _ in range(runs):
        for label, path, name in cases:
            got[label].append(measure(path, name, model))
    return {label: {"open_ms": statistics.median(r["open_ms"] for r in rs),
                    "rss_mib": statistics.median(r["rss_kib"] for r in rs) / 1024,
                    "peak_mib": statistics.median(r["peak_kib"] for r in rs) / 1024,
                    "history_messages": rs[0]["messages"], "runs": len(rs)}
            for label, rs in got.items()}


if __name__ == "__main__":
    print(json.dumps(child(*sys.argv[1:4])))
