"""`python -m ocw.bench.comm [--quick]`: what a turn costs the chat widget's comm
(issue 28 item 2), beside what the turn added.

A real IPython shell with `%load_ext ocw` (the offline model) on a session built by
`build_session` (100 and 10,000 messages; `--quick`: 100 and 2,000), the chat widget open
with every message loaded ("load older" until none is left). Each turn — sent from the
widget as the browser sends it (the `chat_send` command), and as a `%%chat` cell run
while the widget is open — is measured by the bytes of every comm message the widget's
comm published (JSON of the message's data plus its buffers; each widget's comm is a
recording one), against the JSON size of the display items the turn added (the new
messages as the widget shows them). Target: ≤ 2× at every loaded size. The ring's comm
(the ContextWidget beside the composer) and the turn's wall time (the offline model's
reply included; a figure, not a target) are reported beside it.

Checks (the exit status; what tests/bench/test_bench_comm.py asserts): every turn shows
its two messages, and a replica that starts from the widget's state as a browser gets it
(`get_state()`) and applies every message the comm carried — state updates and changes,
as widgets/chat.js applies them — ends equal to the widget's state.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import random
import statistics
import sys
import tempfile
import time
from typing import Any

import comm as comm_module
from comm.base_comm import BaseComm

LOG: list[tuple[str, int, dict]] = []  # (comm id, bytes, data) of every message a recording comm published


class RecordingComm(BaseComm):
    """A kernel-side comm that keeps what it would publish (no kernel needed)."""

    def publish_msg(self, msg_type: str, data: Any = None, metadata: Any = None, buffers: Any = None,
                    **keys: Any) -> None:
        body = json.dumps(data or {}, ensure_ascii=False, default=str).encode()
        LOG.append((self.comm_id, len(body) + sum(len(b) for b in buffers or []), data or {}))


@contextlib.contextmanager
def recording():
    """Widgets created inside get a RecordingComm (ipywidgets calls comm.create_comm)."""
    saved = comm_module.create_comm
    comm_module.create_comm = lambda *a, **k: RecordingComm(*a, **k)
    try:
        yield LOG
    finally:
        comm_module.create_comm = saved


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def apply(state: dict, data: dict, names: tuple[str, ...]) -> None:
    """One comm message applied to a browser-side replica (widgets/chat.js's rules)."""
    if data.get("method") == "update":
        state.update(data.get("state") or {})
    content = data.get("content") if data.get("method") == "custom" else None
    if isinstance(content, dict) and content.get("kind") == "ocw-changes":
        before = dict(state)

        def deref(entry):
            return {k: before[v["$held"]] if isinstance(v, dict) and set(v) == {"$held"} else v
                    for k, v in entry.items()} if isinstance(entry, dict) else entry

        for op in content["ops"]:
            op = dict(op, **({"items": [deref(e) for e in op["items"]]} if "items" in op else {}),
                      **({"set": deref(op["set"])} if "set" in op else {}))
            name = op["name"]
            assert name in names, name
            if "value" in op:
                state[name] = op["value"]
            elif "keep" in op:
                held = state[name].encode("utf-16-le")[: 2 * op["keep"]].decode("utf-16-le")
                state[name] = held + op["add"]
            elif "index" in op:
                entry = {k: v for k, v in {**state[name][op["index"]], **op["set"]}.items() if k not in op["drop"]}
                state[name] = state[name][: op["index"]] + [entry] + state[name][op["index"] + 1:]
            else:
                held = state[name]
                assert op["at"] + op["remove"] <= len(held), op
                state[name] = held[: op["at"]] + op["items"] + held[op["at"] + op["remove"]:]


def _load_ocw(d: str):
    from IPython.core.interactiveshell import InteractiveShell

    import ocw.notebook.magics

    for k in [k for k in os.environ if k.startswith("OCW_")]:
        del os.environ[k]
    os.environ["OCW_DB"] = os.path.join(d, "comm.duckdb")
    shell = InteractiveShell.instance()
    if "ocw" in shell.extension_manager.loaded:
        shell.extension_manager.unload_extension("ocw")
    ocw.notebook.magics._state.clear()
    shell.run_line_magic("load_ext", "ocw")
    shell.run_line_magic("config", "Ocw.auto_compact = 0")
    return shell


def _command(w, name: str, msg: dict) -> dict:
    """A request as the browser makes it (anywidget's command); its answer goes on the comm."""
    before = len(LOG)
    w._handle_custom_msg({"id": f"bench-{before}", "kind": "anywidget-command", "name": name, "msg": msg}, [])
    answers = [data["content"]["response"] for cid, _, data in LOG[before:]
               if cid == w.comm.comm_id and (data.get("content") or {}).get("kind") == "anywidget-command-response"]
    return answers[-1] if answers else {}


def run_size(shell, n: int, turns: int, rng: random.Random) -> tuple[dict, list[str]]:
    """`turns` widget turns and `turns` cell turns at n loaded messages: their figures, and
    the checks that failed."""
    import ocw
    from ocw.bench.build import build_session, words
    from ocw.notebook.magics import get_runtime

    s = build_session(get_runtime().store, n, name=f"comm-{n}", id_salt=f"n_c{n}")
    with contextlib.redirect_stdout(io.StringIO()):
        shell.run_line_magic("session", s.name)
    w = ocw.chat()
    while w.has_older:
        if not _command(w, "chat_older", {}).get("count"):
            break
    failed = [] if len(w.messages) >= n * 0.85 else [f"{n}: only {len(w.messages)} messages loaded"]
    names = type(w)._CHANGES
    replica = json.loads(json.dumps(w.get_state(), default=str))  # what a browser opening it now gets
    start = len(LOG)
    figures: dict[str, list[tuple[int, int, int, float]]] = {"widget": [], "cell": []}
    for i in range(turns):
        for kind in ("widget", "cell"):
            text = f"Turn {i} ({kind}): " + words(rng, 60)
            ids, count, before = {m["id"] for m in w.messages}, len(w.messages), len(LOG)
            t0 = time.perf_counter()
            if kind == "widget":
                answer = _command(w, "chat_send", {"text": text})
                if answer.get("ok") is not True:
                    failed.append(f"{n}: chat_send answered {answer!r}")
            else:
                with contextlib.redirect_stdout(io.StringIO()):
                    res = shell.run_cell(f"%%chat\n{text}")
                if res.error_in_exec is not None:
                    failed.append(f"{n}: %%chat failed: {res.error_in_exec!r}")
            ms = (time.perf_counter() - t0) * 1000
            new = [m for m in w.messages if m["id"] not in ids]
            if len(w.messages) != count + 2 or [m["role"] for m in new] != ["user", "assistant"]:
                failed.append(f"{n}: a {kind} turn shows {len(w.messages) - count} new messages, not 2")
            chat = sum(b for cid, b, _ in LOG[before:] if cid == w.comm.comm_id)
            ring = sum(b for cid, b, _ in LOG[before:] if cid == w.ring.comm.comm_id)
            figures[kind].append((chat, len(json.dumps(new, ensure_ascii=False).encode()), ring, ms))
    for cid, _, data in LOG[start:]:
        if cid == w.comm.comm_id:
            apply(replica, data, names)
    for name in names:
        if replica.get(name) != json.loads(json.dumps(getattr(w, name), default=str)):
            failed.append(f"{n}: a browser applying what the comm carried holds another {name!r}")
    w.close()
    return figures, failed


def table(results: dict[int, dict]) -> list[str]:
    lines = ["| chat widget comm per turn | loaded | comm bytes p50 | p99 | max | new messages' bytes p50 "
             "| ratio p50 | p99 | max | ring comm bytes p50 | turn ms p50 | p99 | max |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for n, figures in results.items():
        for kind, rows in figures.items():
            chat, new, ring, ms = ([r[i] for r in rows] for i in range(4))
            ratios = [c / max(1, b) for c, b, *_ in rows]
            label = "turn sent from the widget" if kind == "widget" else "`%%chat` cell, widget open"
            lines.append(f"| {label} | {n:,} | {statistics.median(chat):,.0f} | {_pct(chat, .99):,.0f} | "
                         f"{max(chat):,.0f} | {statistics.median(new):,.0f} | {statistics.median(ratios):,.2f}× | "
                         f"{_pct(ratios, .99):,.2f}× | {max(ratios):,.2f}× | {statistics.median(ring):,.0f} | "
                         f"{statistics.median(ms):,.0f} | {_pct(ms, .99):,.0f} | {max(ms):,.0f} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ocw.bench.comm", description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="100 and 2,000 loaded, 5 turns each way (for the tests)")
    p.add_argument("--turns", type=int, default=None, help="turns of each kind per size (default 50; quick 5)")
    args = p.parse_args(argv)
    sizes, turns = ((100, 2000), 5) if args.quick else ((100, 10_000), 50)
    turns = args.turns or turns
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    results, failed = {}, []
    saved_env = dict(os.environ)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ocw-bench-comm-") as d, recording():
        shell = _load_ocw(d)
        try:
            for n in sizes:
                results[n], bad = run_size(shell, n, turns, random.Random(n))
                failed += bad
                LOG.clear()
        finally:
            shell.extension_manager.unload_extension("ocw")
            os.environ.clear()
            os.environ.update(saved_env)
    print("\n".join(table(results)))
    worst = max(c / max(1, b) for figures in results.values() for rows in figures.values() for c, b, *_ in rows)
    print(f"target: comm bytes per turn ≤ 2× the new messages' bytes at every loaded size: "
          f"{'met' if worst <= 2 else 'NOT met'} (worst {worst:.2f}×)")
    for line in failed:
        print(f"CHECK FAILED: {line}")
    print(f"load average {os.getloadavg()[0]:.2f} after ({time.perf_counter() - t0:.0f} s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
