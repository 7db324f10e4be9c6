"""A session's node DAG, the pure part: node rows and the branch arithmetic.

Pure (no I/O), so the invariants are easy to test and to trust:
- Every node row carries its `depth` (1 for a root) and `cum` — the running
  token total from the root along its branch, computed once when it is
  appended (parent's cum + its own tokens). The tokens of any stretch of a
  branch are a difference of two stored numbers: the uncovered tail is
  `head.cum − boundary.cum`, whatever the history's length.
- Totals are only comparable within one count epoch: a node's `cum` was
  computed from a parent of the same epoch (or it is a root), so if HEAD's
  epoch is the session's, its whole chain is; a stale node (another epoch)
  is recounted with its stale ancestors before its total is used.
- A summary's covered nodes are always a prefix of a branch ending at the
  summary's parent, its boundary (compaction folds from the oldest uncovered
  message on), so "all covered nodes are ancestors of HEAD" reduces to "the
  boundary is HEAD's ancestor" — and `cover_count` is the boundary's depth.
"""
from __future__ import annotations

from typing import Callable, Iterable, Iterator

SUMMARY_NAME = "context/summary"


class Node:
    """One node row (no content). `__slots__`: a session keeps a tail of these, and a
    recount may briefly hold many."""

    __slots__ = ("id", "seq", "parent_id", "role", "name", "tokens", "depth", "cum", "epoch", "cover_count",
                 "supersedes", "created_at")

    def __init__(self, id: str, seq: int, parent_id: str | None, role: str, name: str | None, tokens: int,
                 depth: int | None = None, cum: int | None = None, epoch: int = 0, cover_count: int = 0,
                 supersedes: str | None = None, created_at=None):
        self.id, self.seq, self.parent_id, self.role, self.name = id, seq, parent_id, role, name
        self.tokens, self.depth, self.cum, self.epoch = int(tokens or 0), depth, cum, epoch
        self.cover_count, self.supersedes, self.created_at = int(cover_count or 0), supersedes, created_at

    @property
    def is_summary(self) -> bool:
        return self.role == "llm" and self.name == SUMMARY_NAME

    def __repr__(self) -> str:
        return f"Node({self.id}, {self.role}, depth={self.depth}, cum={self.cum}, epoch={self.epoch})"


def is_summary(role: str, name: str | None) -> bool:
    return role == "llm" and name == SUMMARY_NAME


def walk_up(head: str | None, get: Callable[[str], Node | None], stop_depth: int = 0) -> Iterator[Node]:
    """HEAD's ancestors (HEAD first) down to, but not including, depth `stop_depth`.
    `get` returns None for a node it does not have: the walk stops there (the caller
    loads more and walks again)."""
    nid = head
    while nid is not None:
        node = get(nid)
        if node is None or (node.depth is not None and node.depth <= stop_depth):
            return
        yield node
        nid = node.parent_id


def chain_totals(parent: Node | None, chain: Iterable[Node], counts: dict[str, int], epoch: int) -> list[Node]:
    """Give `chain` (a parent-first run of nodes hanging under `parent`) the depths and
    running totals `counts` imply, in `epoch`. Returns the nodes, updated in place."""
    depth = parent.depth if parent is not None else 0
    cum = parent.cum if parent is not None else 0
    out = []
    for node in chain:
        depth += 1
        node.tokens = counts.get(node.id, node.tokens)
        cum += node.tokens
        node.depth, node.cum, node.epoch = depth, cum, epoch
        out.append(node)
    return out


def active_summary(summaries: list[Node], is_ancestor: Callable[[Node], bool], head_depth: int) -> Node | None:
    """The newest summary whose covered nodes are all ancestors of HEAD: its boundary
    (depth `cover_count`, id `parent_id`) is on HEAD's branch. Rewinding into a
    summary's range falls back to the newest older summary that still fits."""
    for s in sorted(summaries, key=lambda n: n.seq, reverse=True):
        if s.parent_id is not None and 0 < s.cover_count <= head_depth and is_ancestor(s):
            return s
    return None
