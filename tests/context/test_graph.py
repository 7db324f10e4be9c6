"""The pure branch arithmetic (ocw/context/graph.py): node rows, walks, running totals, the
active-summary rule."""
from __future__ import annotations

from ocw.context.graph import SUMMARY_NAME, Node, active_summary, chain_totals, is_summary, walk_up


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


# -- boundaries (issue 13): walks, running totals and the active-summary rule ------------------
def ancestors_of(head, rows):
    """`is_ancestor` as a session answers it: the summary's boundary is on HEAD's walk."""
    on_branch = {n.id for n in walk_up(head, rows.get)}
    return lambda s: s.parent_id in on_branch


def test_running_totals_with_unequal_counts_start_from_zero():
    nodes = [Node(nid, i, None if i == 0 else "abcde"[i - 1], "user", None, t)
             for i, (nid, t) in enumerate(zip("abcde", (7, 0, 13, 1, 100)))]
    out = chain_totals(None, nodes, {}, epoch=2)
    assert out == nodes  # the same nodes, updated in place, parent first
    assert [(n.depth, n.cum, n.epoch) for n in nodes] == [(1, 7, 2), (2, 7, 2), (3, 20, 2), (4, 21, 2), (5, 121, 2)]
    # Any stretch is one subtraction: the three nodes after b hold 13 + 1 + 100.
    assert nodes[4].cum - nodes[1].cum == 114
    assert chain_totals(None, [], {}, epoch=0) == []


def test_running_totals_under_a_parent_and_with_partial_recounts():
    parent = Node("p", 1, None, "user", None, 50, depth=4, cum=200, epoch=1)
    a = Node("a", 2, "p", "assistant", None, 10)
    b = Node("b", 3, "a", "user", None, 20)
    chain_totals(parent, [a, b], {"b": 5}, epoch=1)  # only b recounted: a keeps its 10
    assert [(n.depth, n.tokens, n.cum) for n in (a, b)] == [(5, 10, 210), (6, 5, 215)]
    # A recount to 0 is a count, not a missing one.
    chain_totals(parent, [a, b], {"a": 0, "b": 0}, epoch=1)
    assert [(n.tokens, n.cum) for n in (a, b)] == [(0, 200), (0, 200)]


def test_walk_up_of_nodes_without_a_depth_goes_to_the_root():
    rows = {"a": Node("a", 1, None, "user", None, 1), "b": Node("b", 2, "a", "user", None, 1)}
    assert [n.id for n in walk_up("b", rows.get, stop_depth=5)] == ["b", "a"]
    rows = {n.id: n for n in chain("abc")}
    assert [n.id for n in walk_up("c", rows.get, stop_depth=0)] == ["c", "b", "a"]
    assert [n.id for n in walk_up("c", rows.get, stop_depth=1)] == ["c", "b"]
    assert [n.id for n in walk_up("c", rows.get, stop_depth=3)] == []


def test_active_summary_over_its_range_boundaries_on_both_sides():
    rows = {n.id: n for n in chain("abcde")}
    s = summary("s", rows["c"], 20)  # covers a, b, c: boundary c at depth 3
    assert s.cover_count == 3
    for head, active in (("e", s), ("d", s), ("c", s), ("b", None), ("a", None), (None, None)):
        depth = rows[head].depth if head else 0
        assert active_summary([s], ancestors_of(head, rows), depth) is active, head
    # The depth check alone, with an ancestry that says yes to everything:
    # cover_count 3 fits HEAD depths 3 and 4, not 2.
    yes = lambda _s: True  # noqa: E731
    assert active_summary([s], yes, 3) is s and active_summary([s], yes, 4) is s
    assert active_summary([s], yes, 2) is None
    # A summary covering nothing (cover_count 0) or with no boundary never applies.
    empty = Node("s0", 30, "a", "llm", SUMMARY_NAME, 5, cover_count=0)
    rootless = Node("s9", 31, None, "llm", SUMMARY_NAME, 5, cover_count=1)
    assert active_summary([empty], yes, 5) is None
    assert active_summary([rootless], yes, 5) is None
    assert active_summary([], yes, 5) is None
    # ... and they do not hide an older one that fits.
    assert active_summary([s, empty, rootless], yes, 5) is s


def test_the_newest_fitting_summary_wins_after_rewinds_and_forks():
    rows = {n.id: n for n in chain("abcdef")}
    s1 = summary("s1", rows["b"], 20)
    s2 = summary("s2", rows["d"], 21)
    s3 = summary("s3", rows["e"], 22)
    every = [s2, s3, s1]
    for head, active in (("f", s3), ("e", s3), ("d", s2), ("c", s1), ("b", s1), ("a", None)):
        assert active_summary(every, ancestors_of(head, rows), rows[head].depth) is active, head
    (x,) = chain("x", parent=rows["c"], start_seq=30)  # a fork under c: s1 fits, s2 and s3 do not
    rows["x"] = x
    assert x.depth == 4
    assert active_summary(every, ancestors_of("x", rows), x.depth) is s1
    # Seq decides "newest", not the order of the list or the depth of the boundary.
    late = Node("late", 40, "b", "llm", SUMMARY_NAME, 5, cover_count=2)
    assert active_summary(every + [late], ancestors_of("f", rows), 6) is late


def test_node_rows_read_missing_numbers_as_zero():
    n = Node("a", 1, None, "user", None, None, cover_count=None)
    assert (n.tokens, n.cover_count, n.depth, n.cum, n.epoch, n.supersedes, n.created_at) == (0, 0, None, None, 0, None, None)
    s = Node("s", 2, "a", "llm", SUMMARY_NAME, "12", depth=3, cum=40, epoch=7, cover_count="2", supersedes="s0",
             created_at="t")
    assert (s.tokens, s.cover_count, s.depth, s.cum, s.epoch, s.supersedes, s.created_at) == (12, 2, 3, 40, 7, "s0", "t")
    assert (s.seq, s.parent_id, s.role, s.name) == (2, "a", "llm", SUMMARY_NAME)
    assert repr(s) == "Node(s, llm, depth=3, cum=40, epoch=7)"
    assert not Node("t", 3, None, "tool", SUMMARY_NAME, 1).is_summary
    assert not Node("u", 3, None, "llm", None, 1).is_summary
    assert SUMMARY_NAME == "context/summary"


def test_a_summary_of_the_root_alone_is_active():
    rows = {n.id: n for n in chain("abc")}
    s = summary("s", rows["a"], 9)  # covers one node: the root
    assert s.cover_count == 1 and Node("x", 1, None, "user", None, 1).cover_count == 0
    assert active_summary([s], ancestors_of("c", rows), 3) is s
    assert active_summary([s], ancestors_of("a", rows), 1) is s
