"""The node rows a session holds in memory: its tail, loaded from the store by seq range.

Why seq ranges: a branch's nodes were appended after their ancestors, so every
ancestor of HEAD below a known node N has `seq ≥ N.seq` — one indexed range read
(DuckDB's zone maps skip the rest of the file) loads the whole stretch from a
summary's boundary to HEAD, where walking parent ids one lookup at a time would
cost a round trip per message. The invariant kept here: every node row of the
session with `seq ≥ loaded_from` is in `rows`. Memory is what the walks needed:
the uncovered tail, normally; `trim` drops what lies before a new boundary.

When another kernel appends to the session, the invariant breaks only above
`loaded_to`, the highest seq known to be complete: a session's appends are
serialised (its row lock; one DuckDB writer at a time), so what it appended has
larger seqs than anything read before. `catch_up` reads just those rows — where
dropping everything and reading the tail again cost every turn of two kernels
sharing a session hundreds of rows (issue 28).
"""
from __future__ import annotations

from ocw.context.graph import Node, walk_up

FIRST_CHUNK = 512  # rows read below the loaded range when a walk runs out of them


class TailRows:
    def __init__(self, backend, sid: str, epoch=lambda: 0):
        self.backend, self.sid, self.epoch = backend, sid, epoch
        self.rows: dict[str, Node] = {}
        self.loaded_from: int | None = None  # all rows with seq ≥ this are loaded
        self.loaded_to: int | None = None  # ... up to this seq at least (others may have appended above it)

    def clear(self) -> None:
        self.rows.clear()
        self.loaded_from = self.loaded_to = None

    def add(self, nodes, *, complete: bool = False) -> None:
        """Rows written here; `complete`: nobody else appended before them (our write
        moved the session's rev by exactly one), so everything up to them is loaded."""
        for n in nodes:
            self.rows[n.id] = n
        if complete and self.loaded_to is not None and nodes:
            self.loaded_to = max(self.loaded_to, max(n.seq for n in nodes))

    def catch_up(self) -> None:
        """Read the rows appended above `loaded_to` (another kernel's), one range read."""
        if self.loaded_from is None or self.loaded_to is None:
            return
        got = self.backend.nodes_since(self.sid, self.loaded_to + 1, None, self.epoch())
        for n in got:
            self.rows[n.id] = n
        if got:
            self.loaded_to = max(self.loaded_to, max(n.seq for n in got))

    def get(self, nid: str) -> Node | None:
        """A row by id: from memory, else one indexed lookup (kept)."""
        node = self.rows.get(nid)
        if node is None:
            node = self.backend.node(self.sid, nid, self.epoch())
            if node is not None:
                self.rows[nid] = node
        return node

    def load_from(self, seq: int) -> None:
        """Make sure every row with seq ≥ `seq` is in memory (one range read)."""
        seq = max(0, int(seq))
        if self.loaded_from is not None and seq >= self.loaded_from:
            return
        hi = None if self.loaded_from is None else self.loaded_from - 1
        got = self.backend.nodes_since(self.sid, seq, hi, self.epoch())
        for n in got:
            self.rows.setdefault(n.id, n)
        if hi is None:
            self.loaded_to = max((n.seq for n in got), default=seq - 1)
        self.loaded_from = seq

    def ancestors(self, head: str | None, stop_depth: int = 0, stop_seq: int | None = None) -> list[Node]:
        """HEAD and its ancestors (HEAD first) down to, not including, depth `stop_depth`.
        `stop_seq`, when known (the seq of the node at `stop_depth`), lets one range
        read bring the whole stretch; otherwise the range grows downward as needed."""
        if head is None:
            return []
        first = self.get(head)
        if first is None:
            return []
        if stop_seq is not None:
            self.load_from(stop_seq)
        elif self.loaded_from is None:
            self.load_from(first.seq - FIRST_CHUNK)
        chunk = FIRST_CHUNK
        while True:
            out = list(walk_up(head, self.rows.get, stop_depth))
            if not out:
                return out
            last = out[-1]
            # Done at the root, at the stop depth, or where the parent is known (and
            # so stopped the walk by its depth); else the parent lies below what is loaded.
            if last.parent_id is None or last.depth - 1 <= stop_depth or last.parent_id in self.rows \
                    or self.loaded_from == 0:
                return out
            self.load_from((self.loaded_from or 0) - chunk)
            chunk *= 2

    def trim(self, keep_from_seq: int, keep: set[str] = frozenset()) -> None:
        """Forget rows before `keep_from_seq` (a new boundary), except `keep`."""
        if self.loaded_from is not None and keep_from_seq <= self.loaded_from:
            return
        self.rows = {k: n for k, n in self.rows.items() if n.seq >= keep_from_seq or k in keep}
        self.loaded_from = keep_from_seq
