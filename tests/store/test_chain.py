"""A chain's rows (ocw/store/chain.py): depth and running total from the parent, the
count epoch kept only under a parent of the row's epoch (else −1, recounted on use),
HEAD moved to the last node with what `change(row, parent)` adds. Both stores write
these numbers (tests/store/test_store.py and test_pg_round_trips.py read them back)."""
from __future__ import annotations

from ocw.context.graph import Node
from ocw.store.chain import chain_rows


def _msg(nid, tokens, role="user", name=None):
    return {"id": nid, "role": role, "name": name, "content": [{"type": "text", "text": nid}], "tokens": tokens}


def _view(nodes):
    return [(n.id, n.seq, n.parent_id, n.role, n.name, n.tokens, n.depth, n.cum, n.epoch) for n in nodes]


def test_a_chain_under_a_parent_counts_on_from_its_depth_and_total():
    row = {"head_id": "p", "count_epoch": 3}
    parent = Node("p", 7, None, "assistant", None, 40, depth=5, cum=900, epoch=3)
    written, fields = chain_rows(row, parent, [_msg("a", 12), _msg("b", 30, "assistant", "bot")], None)
    assert _view(written) == [("a", 0, "p", "user", None, 12, 6, 912, 3),
                              ("b", 0, "a", "assistant", "bot", 30, 7, 942, 3)]
    assert fields == {"head_id": "b"}


def test_the_first_chain_of_a_session_starts_at_depth_one():
    written, fields = chain_rows({"head_id": None, "count_epoch": 0}, None, [_msg("a", 5), _msg("b", 6)], None)
    assert _view(written) == [("a", 0, None, "user", None, 5, 1, 5, 0), ("b", 0, "a", "user", None, 6, 2, 11, 0)]
    assert fields == {"head_id": "b"}


def test_a_parent_without_counts_counts_as_zero():
    parent = Node("p", 1, None, "user", None, 9, depth=None, cum=None, epoch=2)
    written, _ = chain_rows({"head_id": "p", "count_epoch": 2}, parent, [_msg("a", 4)], None)
    assert _view(written) == [("a", 0, "p", "user", None, 4, 1, 4, 2)]


def test_a_parent_of_another_epoch_marks_the_chain_stale():
    for parent_epoch in (1, 3):  # either side of the row's epoch 2
        parent = Node("p", 1, None, "user", None, 9, depth=1, cum=9, epoch=parent_epoch)
        written, _ = chain_rows({"head_id": "p", "count_epoch": 2}, parent, [_msg("a", 4), _msg("b", 1)], None)
        assert [n.epoch for n in written] == [-1, -1]
        assert [(n.depth, n.cum) for n in written] == [(2, 13), (3, 14)]  # still counted on from the parent


def test_token_counts_given_as_text_are_added_as_numbers():
    written, _ = chain_rows({"head_id": None, "count_epoch": 0}, None, [_msg("a", "7"), _msg("b", "8")], None)
    assert [(n.tokens, n.cum) for n in written] == [(7, 7), (8, 15)]


def test_change_sees_the_row_and_parent_and_adds_its_columns():
    row = {"head_id": "p", "count_epoch": 0}
    parent = Node("p", 1, None, "user", None, 9, depth=1, cum=9, epoch=0)
    seen = []

    def change(r, p):
        seen.append((r, p))
        return {"usage_sample": 1234, "model": "gpt-4o"}

    _, fields = chain_rows(row, parent, [_msg("a", 1)], change)
    assert seen == [(row, parent)]
    assert fields == {"head_id": "a", "usage_sample": 1234, "model": "gpt-4o"}


def test_change_may_add_nothing():
    for extra in (None, {}):
        _, fields = chain_rows({"head_id": None, "count_epoch": 0}, None, [_msg("a", 1)], lambda r, p: extra)
        assert fields == {"head_id": "a"}


def test_no_nodes_leaves_head_where_it_is():
    written, fields = chain_rows({"head_id": "p", "count_epoch": 0}, None, [], lambda r, p: {"model": "m"})
    assert written == [] and fields == {"head_id": "p", "model": "m"}
