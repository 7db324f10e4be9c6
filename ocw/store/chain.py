"""The rows of a chain appended under HEAD — one rule for both stores.

A turn appends its messages as a chain under the session's HEAD. Each new node's
depth is its parent's plus one and its running total (`cum`) its parent's plus its
own tokens, so HEAD's depth and total are the branch's size without a scan of it
(ocw/context/graph.py). The chain is of the session's count epoch only if its parent
is: a parent counted under an older epoch makes its totals stale, so the chain is
marked −1 and the session recounts it on use. HEAD then moves to the chain's last
node; the caller's `change(row, parent)` may add session columns to that same write.

DuckDB (ocw/store/duckdb/store.py) and PostgreSQL (ocw/store/postgres/append.py) each
read the row and HEAD their own way, in their own transaction, and call this with
what they read: pure, no I/O, so both stores number a chain alike by construction.
One exception: PostgreSQL's turn on a guess (ocw/store/postgres/guess.py) numbers its
chain in SQL, under HEAD as the server reads it after the lock, by this same rule —
tests/store/test_pg_guess.py holds the two equal case by case (no HEAD, HEAD of the
row's count epoch, of an older one, recounted).
"""
from __future__ import annotations

import json
from typing import Callable

from ocw.context.graph import Node


def content_text(node: dict) -> str:
    """A new node's content as the JSON text stored: the text its writer already made
    (`content_json`, the session's storability check dumps it), else dumped here."""
    text = node.get("content_json")
    return text if text is not None else json.dumps(node["content"], ensure_ascii=False)


def chain_rows(row: dict, parent: Node | None, nodes: list[dict],
               change: Callable[[dict, Node | None], dict | None] | None) -> tuple[list[Node], dict]:
    """The chain's `Node`s (seq 0: the store fills it in once inserted) and the session
    columns to write with it: `head_id` the chain's last node (the row's HEAD when
    `nodes` is empty), updated with what `change(row, parent)` returns, if anything."""
    epoch = row["count_epoch"] if parent is None or parent.epoch == row["count_epoch"] else -1
    depth, cum = (parent.depth or 0, parent.cum or 0) if parent is not None else (0, 0)
    pid, written = row["head_id"], []
    for n in nodes:
        depth += 1
        cum += int(n["tokens"])
        written.append(Node(n["id"], 0, pid, n["role"], n.get("name"), int(n["tokens"]), depth, cum, epoch))
        pid = n["id"]
    fields = {"head_id": pid}
    extra = change(row, parent) if change else None
    if extra:
        fields.update(extra)
    return written, fields
