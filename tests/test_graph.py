"""The pure branch arithmetic (ocw/graph.py): node rows, walks, running totals, the
active-summary rule."""
from __future__ import annotations

from ocw.graph import SUMMARY_NAME, Node, active_summary, chain_totals, is_summary, walk_up


def chain(ids, parent=None, tokens=10, start_seq=1, epoch=0):
    """Rows of a chain under `parent` (a Node or None), with depths and totals."""
    nodes = [Node(nid, start_seq + i, None, "user" if i % 2 == 0 else "assistant", None, tokens)
             for i, nid in enumerate(ids)]
    prev = parent.id if parent else None
    for n in nodes:
        n.parent_id, prev = prev, n.id
    return chain_totals(parent, nodes, {}, epoch)


def test_chain_totals_are_depths_and_running_sums():
    a, b, c = chain("abc", tokens=10)
    assert [(n.depth, n.cum) for n in (a, b, c)] == [(1, 10), (2, 20), (3, 30)]
    (x,) = chain("x", parent=b, tokens=7, start_seq=9)  # a fork under b
    assert (x.depth, x.cum, x.parent_id) == (3, 27, "b")
    # The tail after b is one subtraction, whatever came before.
    assert c.cum - b.cum == 10 and x.cum - b.cum == 7


def test_chain_totals_use_new_counts_and_the_epoch():
    a, b = chain("ab", tokens=10)
    chain_totals(None, [a, b], {"a": 3, "b": 4}, epoch=5)
    assert [(n.tokens, n.cum, n.epoch) for n in (a, b)] == [(3, 3, 5), (4, 7, 5)]


def test_walk_up_stops_at_the_depth_or_where_rows_are_missing():
    rows = {n.id: n for n in chain("abcde")}
    assert [n.id for n in walk_up("e", rows.get)] == ["e", "d", "c", "b", "a"]
    assert [n.id for n in walk_up("e", rows.get, stop_depth=2)] == ["e", "d", "c"]
    assert [n.id for n in walk_up("e", rows.get, stop_depth=4)] == ["e"]
    assert [n.id for n in walk_up("e", rows.get, stop_depth=5)] == []
    del rows["c"]
    assert [n.id for n in walk_up("e", rows.get)] == ["e", "d"]  # the caller loads more
    assert list(walk_up(None, rows.get)) == []


def summary(sid, boundary: Node, seq: int) -> Node:
    return Node(sid, seq, boundary.id, "llm", SUMMARY_NAME, 5, cover_count=boundary.depth)


def test_active_summary_is_the_newest_whose_boundary_is_on_the_branch():
    a, b, c, d, e = chain("abcde")
    on_branch = {n.id for n in (a, b, c, d, e)}
    s1, s2 = summary("s1", b, 20), summary("s2", d, 21)
    anc = lambda s: s.parent_id in on_branch  # noqa: E731
    assert active_summary([s1, s2], anc, head_depth=5) is s2
    assert active_summary([s2, s1], anc, head_depth=5) is s2  # order of the list does not matter
    # Rewound to c (depth 3): s2's boundary d is no longer an ancestor → the older s1.
    on_branch = {"a", "b", "c"}
    assert active_summary([s1, s2], anc, head_depth=3) is s1
    # A boundary deeper than HEAD is never checked; at depth 1 neither fits.
    assert active_summary([s1, s2], lambda s: True, head_depth=1) is None


def test_a_summary_boundary_exactly_at_head_is_active():
    a, b = chain("ab")
    s = summary("s", b, 9)
    assert active_summary([s], lambda x: x.parent_id in {"a", "b"}, head_depth=2) is s


def test_summary_rows():
    a, = chain("a")
    s = summary("s", a, 3)
    assert s.is_summary and not a.is_summary and s.cover_count == 1
    assert is_summary("llm", SUMMARY_NAME) and not is_summary("llm", "other") and not is_summary("user", SUMMARY_NAME)
