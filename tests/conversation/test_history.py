"""ocw.conversation.history: the reads the chat widget and `%branch` show, on a real DuckDB
file — a page of the branch (oldest first, ending at HEAD or just above a shown message),
the summaries over the branch (tests/conversation/test_session.py), the branch tree."""
from __future__ import annotations

import pytest

import ocw
from ocw.text.errors import InvalidArgument


@pytest.fixture
def long(store):
    s = store.create_session(name="pages")
    ids = s.append_many([("user" if i % 2 == 0 else "assistant", f"m{i}") for i in range(10)])
    return s, ids


def texts(rows):
    return [r["content"][0]["text"] for r in rows]


def test_a_page_ends_at_head_and_says_whether_older_messages_exist(long):
    s, ids = long
    rows, older = s.page(limit=4)
    assert texts(rows) == ["m6", "m7", "m8", "m9"] and older is True
    assert [r["depth"] for r in rows] == [7, 8, 9, 10] and rows[0]["parent_id"] == ids[5]
    assert rows[0]["role"] == "user" and rows[1]["role"] == "assistant"
    rows, older = s.page(before=ids[6], limit=4)  # just above the oldest shown
    assert texts(rows) == ["m2", "m3", "m4", "m5"] and older is True
    rows, older = s.page(before=ids[2], limit=4)  # fewer than a page left: the root is reached
    assert texts(rows) == ["m0", "m1"] and older is False
    rows, older = s.page(before=ids[4], limit=4)  # exactly a page left, down to the root
    assert texts(rows) == ["m0", "m1", "m2", "m3"] and older is False
    assert s.page(before=ids[0]) == ([], False)
    rows, older = s.page()  # the default page (40) holds all ten
    assert texts(rows) == [f"m{i}" for i in range(10)] and older is False


@pytest.mark.parametrize("limit", [0, -1, 1.5, True, "4"])
def test_a_page_size_that_is_not_a_whole_number_of_at_least_one_is_refused(long, limit):
    s, _ = long
    with pytest.raises(ValueError, match="limit takes a whole number ≥ 1"):
        s.page(limit=limit)


def test_a_page_above_something_not_on_the_branch_is_refused(long):
    s, ids = long
    s.rewind(ids[5])
    s.append("user", "a fork")
    for bad in (ids[7], "n_nothing", 42):
        with pytest.raises(InvalidArgument, match="is not a message on the current branch"):
            s.page(before=bad)
    assert texts(s.page(before=ids[5], limit=2)[0]) == ["m3", "m4"]


def test_a_page_far_above_the_loaded_rows_loads_them(tmp_db):
    """A session reopened reads its tail; a page further up loads older rows in chunks."""
    st = ocw.Store(tmp_db)
    s = st.create_session(name="deep")
    ids = s.append_many([("user", f"m{i}") for i in range(1200)])
    st.close()
    st = ocw.Store(tmp_db)
    try:
        s = st.open_session("deep")
        rows, older = s.page(before=ids[3], limit=2)
        assert texts(rows) == ["m1", "m2"] and older is True
    finally:
        st.close()


def test_the_branch_tree_names_each_leaf_where_it_leaves_heads_path(long):
    s, ids = long
    s.rewind(ids[5])
    s.append("user", "asked again")
    fork_a = s.append("assistant", "answered again")
    tree = {b["id"]: b for b in s.branch_tree()}
    old, new = tree[ids[9]], tree[fork_a]
    assert new["current"] and new["leaf"] and new["fork_id"] is None and new["first_id"] is None
    assert (old["current"], old["leaf"], old["fork_id"], old["fork_depth"], old["first_id"]) == \
        (False, True, ids[5], 6, ids[6])
    assert old["first_content"][0]["text"] == "m6" and old["last_content"][0]["text"] == "m8"
    assert old["leaf_content"][0]["text"] == "m9"
    s.rewind(ids[3])  # HEAD inside the shared stretch: an entry of its own, not a leaf
    tree = {b["id"]: b for b in s.branch_tree()}
    assert tree[ids[3]]["current"] and not tree[ids[3]]["leaf"]
    assert tree[fork_a]["fork_id"] == ids[3] and tree[fork_a]["first_id"] == ids[4]
    assert tree[fork_a]["last_content"][0]["text"] == "asked again"


def test_a_branch_that_only_answers_again_has_no_question_of_its_own(long):
    """A reply regenerated at a user message: the branch left behind differs only in its
    answer — its last question is the shared one at the fork, not one of its own."""
    s, ids = long
    s.rewind(ids[8])  # the user message m8 (depth 9): answer it again
    again = s.append("assistant", "m9, answered again")
    tree = {b["id"]: b for b in s.branch_tree()}
    old = tree[ids[9]]
    assert (old["fork_id"], old["fork_depth"], old["first_id"]) == (ids[8], 9, ids[9])
    assert old["last_user_id"] is None and old["last_content"] is None
    assert old["leaf_content"][0]["text"] == "m9" and tree[again]["current"]
    # One message further up, the fork is an answer and the branch asks its own question.
    s.rewind(ids[7])
    s.append("user", "m8, asked differently")
    old = {b["id"]: b for b in s.branch_tree()}[ids[9]]
    assert (old["fork_depth"], old["last_user_id"]) == (8, ids[8])
    assert old["last_content"][0]["text"] == "m8"


def test_the_module_page_without_before_ends_at_head(long):
    """history.page(view): `before` left out is HEAD's page, as Session.page's is."""
    from ocw.conversation import history

    s, ids = long
    rows, older = history.page(s, limit=3)
    assert texts(rows) == ["m7", "m8", "m9"] and older is True
    assert (rows, older) == s.page(limit=3)
    assert texts(history.page(s)[0]) == [f"m{i}" for i in range(10)]
