"""The reading side of pruned tool output: which old tool results a session's
rendered history shows as one-line stubs, and how many tokens that saves.

A mixin of BranchView (ocw/conversation/branch_view.py), which holds the state it reads
(`_stubs`, `_prune_key`, `_prune_node`). The rules are in ocw/context/prune.py;
the write (the prune mark, in the session's metadata) is ocw/conversation/pruning.py.

Why it stays O(1)-ish per turn: the pruned set is fixed by the mark (every
tool result at or before it on the branch), not by HEAD, so the saving is
stored with the mark and reused while the summary boundary is the one it was
computed for; otherwise it is one pass over the in-memory tail, with each
message's stub made once per count epoch and cached.
"""
from __future__ import annotations

from ocw.context.graph import Node

STUB_CACHE = 4096  # messages whose stub (or lack of one) is remembered


class PrunedView:
    def prune_mark(self) -> Node | None:
        """The active prune mark: the newest message whose tool results render as stubs
        (and every older one's with it) — while it is on HEAD's branch, in this count
        epoch, and not covered by the active summary. Cached per (HEAD, generation)."""
        key = (self.head, self.generation, self.epoch, len(self._summaries))
        if key != self._prune_key:
            mark = self._row["metadata"].get("tool_prune")
            node = None
            if isinstance(mark, dict) and mark.get("epoch") == self.epoch and isinstance(mark.get("node"), str):
                node = self._rows.get(mark["node"])
                b = self._boundary()
                if node is not None and (not self._on_branch(node) or (b is not None and node.depth <= b.depth)):
                    node = None
            self._prune_node, self._prune_key = node, key
        return self._prune_node

    def _pruned_nodes(self, mark: Node, tail: list[Node], contents: dict | None = None) -> dict[str, tuple[list, int]]:
        """id -> (stub blocks, tokens saved) for the tail's messages at or before `mark`
        that hold tool results. Each message's stub is made once per count epoch
        (`contents`: the tail's blocks, when the caller has read them already)."""
        from ocw.context import prune as prune_rules

        upto = [m for m in tail if m.depth <= mark.depth]
        missing = [i for i, m in enumerate(upto) if (m.id, self.epoch) not in self._stubs]
        if missing:
            need = {upto[i].id: upto[i] for i in missing}
            need.update({upto[i - 1].id: upto[i - 1] for i in missing if i > 0})
            if contents is None or any(nid not in contents for nid in need):  # else: what the caller read
                contents = self._contents(list(need.values()))
            enc = self.encoding.name
            for i in missing:
                m = upto[i]
                calls = prune_rules.calls_of(contents[upto[i - 1].id]) if i > 0 else {}
                stub = prune_rules.stub_blocks(contents[m.id], calls, enc)
                saved = prune_rules.saving(m.role, m.name, m.tokens, stub, enc) if stub is not None else 0
                # a stub no smaller than the (cap-cut) result it replaces: keep the result
                self._stubs[(m.id, self.epoch)] = (stub, saved) if saved > 0 else (None, 0)
            while len(self._stubs) > STUB_CACHE:
                del self._stubs[next(iter(self._stubs))]
        out = {}
        for m in upto:
            stub, saved = self._stubs[(m.id, self.epoch)]
            if stub is not None:
                out[m.id] = (stub, saved)
        return out

    def pruned(self, boundary: Node | None | bool = True) -> tuple[int, int]:
        """(tokens saved, results pruned) by the active prune mark in the tail after
        `boundary` (True: the active summary's). O(1) when the figure stored with the
        mark applies (same boundary, same epoch); else one pass over the in-memory tail."""
        mark = self.prune_mark()
        if mark is None:
            return 0, 0
        current = self._boundary()
        b = current if boundary is True else boundary
        meta = self._row["metadata"].get("tool_prune") or {}
        if b is current and meta.get("boundary") == (b.id if b else None) and isinstance(meta.get("saved"), int):
            return meta["saved"], int(meta.get("results") or 0)
        if b is not None and mark.depth <= b.depth:
            return 0, 0
        nodes = self._pruned_nodes(mark, self.tail())
        depth_of = {m.id: m.depth for m in self.tail()}
        kept = [saved for nid, (_, saved) in nodes.items() if b is None or depth_of[nid] > b.depth]
        return sum(kept), len(kept)
