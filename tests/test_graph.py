"""BranchIndex: the pure in-memory branch with prefix sums."""
from ocw.graph import SUMMARY_NAME, BranchIndex, NodeMeta


def chain(g: BranchIndex, ids, parent=None, tokens=10, start_seq=0):
    for i, nid in enumerate(ids):
        g.add(NodeMeta(nid, start_seq + i, parent, "user" if i % 2 == 0 else "assistant", None, tokens))
        parent = nid
    return parent


def test_move_head_forward_back_and_fork_keeps_prefix_sums_exact():
    g = BranchIndex()
    chain(g, ["a", "b", "c", "d"], tokens=5)
    g.move_head("d")
    assert g.path == ["a", "b", "c", "d"] and g.prefix == [0, 5, 10, 15, 20]
    g.move_head("b")  # rewind
    assert g.path == ["a", "b"] and g.tokens_from(0) == 10 and "c" not in g.index
    g.add(NodeMeta("x", 10, "b", "user", None, 7))  # fork under b
    g.move_head("x")
    assert g.path == ["a", "b", "x"] and g.tokens_from(1) == 12
    g.move_head("d")  # switch back to the other branch
    assert g.path == ["a", "b", "c", "d"] and g.tokens_from(2) == 10
    assert [leaf["id"] for leaf in g.leaves()] == ["d", "x"]
    g.move_head(None)
    assert g.path == [] and g.prefix == [0]


def test_active_summary_follows_the_branch_and_falls_back():
    g = BranchIndex()
    chain(g, ["a", "b", "c", "d", "e", "f"])
    g.move_head("f")
    s1 = NodeMeta("s1", 20, "b", "llm", SUMMARY_NAME, 3, cover_count=2)
    s2 = NodeMeta("s2", 21, "d", "llm", SUMMARY_NAME, 4, cover_count=4, supersedes="s1")
    g.add(s1)
    g.add(s2)
    assert g.active_summary() is s2
    g.move_head("c")  # rewind into s2's range: s1 still fits, s2 does not
    assert g.active_summary() is s1
    g.move_head("a")  # before both
    assert g.active_summary() is None
    assert all(leaf["id"] not in ("s1", "s2") for leaf in g.leaves())
