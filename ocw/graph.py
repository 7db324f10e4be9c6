"""The branch index: a session's DAG in memory, and its branch with prefix sums.

Pure (no I/O), so the invariants are easy to test and to trust:
- Every node's token count is computed once, when it is appended, and kept
  here beside its parent id.
- The branch (root → HEAD) is a list with prefix sums of those counts, so the
  tokens of any suffix — the uncovered tail — is one subtraction, and moving
  HEAD touches only the part of the branch that changed.
- A summary's covered nodes are always a prefix of a branch ending at the
  summary's parent (compaction folds from the oldest uncovered message on), so
  "all covered nodes are ancestors of HEAD" reduces to "the parent is on the
  branch at depth cover_count".
"""
from __future__ import annotations

from dataclasses import dataclass

SUMMARY_NAME = "context/summary"


@dataclass
class NodeMeta:
    id: str
    seq: int
    parent_id: str | None
    role: str
    name: str | None
    tokens: int
    cover_count: int = 0  # summaries: how many branch nodes they cover
    supersedes: str | None = None

    @property
    def is_summary(self) -> bool:
        return self.role == "llm" and self.name == SUMMARY_NAME


class BranchIndex:
    def __init__(self) -> None:
        self.nodes: dict[str, NodeMeta] = {}
        self.summaries: list[NodeMeta] = []  # oldest first
        self.path: list[str] = []
        self.index: dict[str, int] = {}
        self.prefix: list[int] = [0]

    def add(self, meta: NodeMeta) -> None:
        self.nodes[meta.id] = meta
        if meta.is_summary:
            self.summaries.append(meta)

    def clear_path(self) -> None:
        """Forget the branch (after counts changed); the next move_head rebuilds it."""
        self.path, self.index, self.prefix = [], {}, [0]

    def move_head(self, head: str | None) -> None:
        """Make the branch end at `head`, touching only the part that changed."""
        new: list[str] = []
        n = head
        while n is not None and n not in self.index:
            new.append(n)
            n = self.nodes[n].parent_id
        keep = self.index[n] + 1 if n is not None else 0
        for nid in self.path[keep:]:
            del self.index[nid]
        del self.path[keep:]
        del self.prefix[keep + 1:]
        for nid in reversed(new):
            self.index[nid] = len(self.path)
            self.path.append(nid)
            self.prefix.append(self.prefix[-1] + self.nodes[nid].tokens)

    def active_summary(self) -> NodeMeta | None:
        """The newest summary whose covered nodes are all ancestors of HEAD."""
        for s in reversed(self.summaries):
            idx = self.index.get(s.parent_id) if s.parent_id else None
            if idx is not None and idx + 1 == s.cover_count:
                return s
        return None

    def tokens_from(self, start: int) -> int:
        """Tokens of the branch from position `start` to HEAD."""
        return self.prefix[-1] - self.prefix[start]

    def leaves(self) -> list[dict]:
        """Every leaf of the DAG (summaries aside), oldest first, with its depth."""
        has_child = {m.parent_id for m in self.nodes.values() if not m.is_summary}
        out = []
        for leaf in sorted((m for m in self.nodes.values() if not m.is_summary and m.id not in has_child),
                           key=lambda m: m.seq):
            depth, n = 0, leaf.id
            while n is not None:
                depth += 1
                n = self.nodes[n].parent_id
            out.append({"id": leaf.id, "depth": depth, "role": leaf.role, "on_branch": leaf.id in self.index})
        return out
