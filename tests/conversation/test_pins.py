"""Pins and forgets (issue 22 item 6, issue 29 item 2) on a real DuckDB file: a pin is
its own block of the request and its own row of the panel, goes verbatim through
every compaction, and pins, unpins and forgets are appended records, never deletions."""
from __future__ import annotations

import pytest

from ocw.context import pins as rules
from ocw.context.memory import from_blocks, render
from ocw.conversation import pinning
from ocw.conversation.request import to_provider_messages
from ocw.text.errors import OcwError

PAD = " ".join(f"filler{i}" for i in range(250))
SCHEMA = "orders(id INT, region_id INT, amount_cents BIGINT) -- amounts are in cents, never dollars"


def chatter(s, lines):
    for t in lines:
        s.append("user", t + " " + PAD)
        s.append("assistant", "ok " + PAD)


def sent_text(s) -> str:
    system, msgs = to_provider_messages(s.rendered_history())
    return system + "\n".join(b.get("text", "") for m in msgs for b in m["content"])


def test_a_pin_is_its_own_block_and_its_own_row(store):
    s = store.create_session(model="ocw-offline", context_window=8192)
    chatter(s, ["hello"])
    before = s.occupancy()
    assert before["breakdown"]["pins"] == 0
    p = pinning.pin(s, SCHEMA)
    assert p["n"] == 1 and p["text"] == SCHEMA
    hist = s.rendered_history()
    block = [m for m in hist if m.get("name") == rules.PINS_NAME]
    assert len(block) == 1 and "id" not in block[0]  # no node id: the compaction plan never folds it
    assert SCHEMA in block[0]["content"][0]["text"]
    occ = s.occupancy()
    assert occ["breakdown"]["pins"] == block[0]["tokens"] > 0
    assert occ["total"] == before["total"] + occ["breakdown"]["pins"]
    assert s.generation == before["generation"] + 1  # what renders changed without HEAD moving


def test_pins_go_verbatim_through_every_compaction(store):
    s = store.create_session(model="ocw-offline", context_window=8192)
    chatter(s, ["We start."])
    pinning.pin(s, SCHEMA)
    for round_ in range(3):
        chatter(s, [f"round {round_} turn {k}" for k in range(6)])
        r = s.compact(keep_recent_tokens=300)
        assert r.outcome == "succeeded" and r.tokens_after < r.tokens_before
        node = s.active_summary()
        assert SCHEMA not in "\n".join(b.get("text", "") for b in s._contents([node])[node.id])  # never folded in
        assert sent_text(s).count(SCHEMA) == 1
    assert s.compaction_count == 3


def test_unpin_is_an_appended_record_and_numbers_stay(store):
    s = store.create_session(model="ocw-offline", context_window=8192)
    chatter(s, ["hi"])
    for t in ("first pin", "second pin", "third pin"):
        pinning.pin(s, t)
    assert pinning.unpin(s, 2)["text"] == "second pin"
    assert [(p["n"], p["text"]) for p in pinning.pins(s)] == [(1, "first pin"), (3, "third pin")]
    assert pinning.pin(s, "fourth pin")["n"] == 4  # never reuses a number
    log = rules.events(s.metadata)
    assert [e["op"] for e in log] == ["pin", "pin", "pin", "unpin", "pin"]  # nothing deleted
    assert "second pin" not in sent_text(s) and "third pin" in sent_text(s)
    with pytest.raises(OcwError, match="no pin 2; the pins are 1, 3, 4"):
        pinning.unpin(s, 2)
    with pytest.raises(OcwError, match="no pin 99"):
        pinning.unpin(s, 99)
    with pytest.raises(OcwError, match="nothing to pin"):
        pinning.pin(s, "   ")


def test_a_pinned_secret_is_masked(store, monkeypatch):
    monkeypatch.setenv("MY_SERVICE_TOKEN", "tok-1234567890abcdef")
    s = store.create_session(model="ocw-offline", context_window=8192)
    p = pinning.pin(s, "call it with tok-1234567890abcdef and postgresql://me:hunter22@db/x")
    assert "tok-1234567890abcdef" not in p["text"] and "hunter22" not in p["text"]
    assert "tok-1234567890abcdef" not in str(s.metadata) and "hunter22" not in sent_text(s)


def test_pins_are_refused_when_too_long(store):
    s = store.create_session(model="ocw-offline", context_window=32_768)  # room for 20,000 characters
    assert pinning.pin(s, "x" * 20_000)["n"] == 1
    with pytest.raises(OcwError, match="20,001 characters; at most 20,000"):
        pinning.pin(s, "x" * 20_001)


def _memory_session(store):
    s = store.create_session(model="ocw-offline", context_window=8192)
    chatter(s, ["Please set the batch size to 64.", "From now on answer in Chinese.",
                "Load data/raw/events.parquet first.", "more", "more"])
    assert s.compact(keep_recent_tokens=300).outcome == "succeeded"
    return s


def test_forget_takes_an_item_out_of_what_the_model_reads_and_survives_compactions(store):
    s = _memory_session(store)
    listing = rules.listed(pinning.memory(s))
    n = next(k for k, _, i in listing if i.value == "data/raw/events.parquet")
    before = s.occupancy()["breakdown"]["memory"]
    assert "data/raw/events.parquet" in sent_text(s)
    item = pinning.forget(s, n)
    assert item.value == "data/raw/events.parquet"
    assert "data/raw/events.parquet" not in sent_text(s)
    assert "batch_size = 64" in sent_text(s)  # the rest of the memory is still read
    assert item.value not in [i.value for _, _, i in rules.listed(pinning.memory(s))]  # %memory no longer lists it
    assert s.occupancy()["breakdown"]["memory"] < before
    assert [e["op"] for e in rules.events(s.metadata)] == ["forget"]
    chatter(s, ["round two", "again", "again", "again"])
    assert s.compact(keep_recent_tokens=300).outcome == "succeeded"
    node = s.active_summary()
    stored = from_blocks(s._contents([node])[node.id])
    assert "data/raw/events.parquet" not in render(stored)
    assert "data/raw/events.parquet" not in sent_text(s)
    assert any(i.value == "data/raw/events.parquet" and i.status == "forgotten" for i in stored.items)
    with pytest.raises(OcwError, match="no memory item 99"):
        pinning.forget(s, 99)


def test_a_forgotten_item_said_before_the_forget_is_not_re_added(store):
    s = _memory_session(store)
    chatter(s, ["Please set the batch size to 64."])  # said again, still in the tail
    n = next(k for k, _, i in rules.listed(pinning.memory(s)) if i.key == "batch_size")
    pinning.forget(s, n)
    chatter(s, ["more", "more", "more"])
    assert s.compact(keep_recent_tokens=300).outcome == "succeeded"
    assert "batch_size" not in {i.key for i in pinning.memory(s).current()}
    # Said after the forget: current again (latest wins).
    chatter(s, ["Please set the batch size to 256.", "more", "more", "more"])
    assert s.compact(keep_recent_tokens=300).outcome == "succeeded"
    assert {i.key: i.value for i in pinning.memory(s).current("setting")}["batch_size"] == "256"


def test_pins_survive_a_reopen(tmp_db):
    import ocw

    st = ocw.Store(tmp_db)
    s = st.create_session(model="ocw-offline", context_window=8192, name="p")
    pinning.pin(s, SCHEMA)
    st.close()
    st2 = ocw.Store(tmp_db)
    try:
        s2 = st2.open_session("p")
        assert [p["text"] for p in pinning.pins(s2)] == [SCHEMA]
        assert SCHEMA in sent_text(s2)
    finally:
        st2.close()


def test_the_pins_together_take_at_most_a_quarter_of_the_window(store):
    from ocw.conversation.pinning import block_tokens

    s = store.create_session(model="ocw-offline", context_window=4096)
    room = 1024  # 25 % of 4,096
    base = block_tokens([{"n": 1, "text": ""}], s.encoding.name)
    fits = "a" + " a" * (room - base - 1)  # one token per " a"
    assert block_tokens([{"n": 1, "text": fits}], s.encoding.name) == room
    with pytest.raises(OcwError, match="the pins would take 1,025 tokens; at most 1,024 "
                                       r"\(25% of the 4,096-token window\)"):
        pinning.pin(s, fits + " a")
    assert pinning.pins(s) == []  # nothing written
    pinning.pin(s, fits)
    assert s.occupancy()["breakdown"]["pins"] == room
    with pytest.raises(OcwError, match="at most 1,024"):
        pinning.pin(s, "one more")


def test_summary_views_show_the_memory_the_model_reads(store):
    from ocw.notebook.summary_view import summary_text

    s = _memory_session(store)
    assert "events.parquet" in summary_text(s)
    n = next(k for k, _, i in rules.listed(pinning.memory(s)) if i.value == "data/raw/events.parquet")
    pinning.forget(s, n)
    assert "data/raw/events.parquet" not in summary_text(s)  # %summary
    (active,) = [x for x in s.branch_summaries() if x["active"]]  # the chat widget's capsule
    assert "data/raw/events.parquet" not in "\n".join(b.get("text", "") for b in active["content"])
    assert "batch_size = 64" in summary_text(s)


def test_the_records_cannot_be_rewritten_through_set_metadata(store):
    s = store.create_session(model="ocw-offline", context_window=8192)
    pinning.pin(s, "kept")
    with pytest.raises(OcwError, match=r"set_metadata\(\)\['pins'\] holds the pin and forget records"):
        s.set_metadata(pins=[])
    with pytest.raises(OcwError, match=r"metadata\['pins'\]"):
        store.create_session(model="ocw-offline", metadata={"pins": [{"op": "pin", "n": 1, "text": "x"}]})
    assert [p["text"] for p in pinning.pins(s)] == ["kept"]
    s.set_metadata(note="other keys are fine")
    assert s.metadata["note"] == "other keys are fine"


def test_malformed_records_are_not_pins_and_a_forget_covers_what_was_said_up_to_its_turn():
    from ocw.context.memory import Item, Memory

    meta = {"pins": ["junk", {"op": "pin", "n": "1", "text": "n is text"}, {"op": "pin", "n": 2, "text": None},
                     {"op": "pin", "n": 3, "text": "kept"}, {"op": "unpin", "n": 9}]}
    assert [(p["n"], p["text"]) for p in rules.current(meta)] == [(3, "kept")]
    assert rules.next_number(meta) == 4 and rules.next_number({}) == 1
    said_at_7 = Item("setting", "batch_size", "64", 7)
    said_at_8 = Item("setting", "batch_size", "64", 8)
    f = rules.forget_event(said_at_7, 7, "t")
    got = rules.apply_forgets(Memory([said_at_7, said_at_8]), [f])
    assert [i.status for i in got.items] == ["forgotten", "current"]  # at the forget's turn: covered; after: not
    assert said_at_7.status == "current"  # a new Memory; the one given is untouched


def test_carried_pins_start_numbered_from_one(store):
    s = store.create_session(model="ocw-offline", context_window=8192, pins=["first carried", "second carried"])
    assert [(p["n"], p["text"], p["source"]) for p in pinning.pins(s)] == [(1, "first carried", "carried"),
                                                                          (2, "second carried", "carried")]
    assert pinning.pin(s, "mine")["n"] == 3
    assert pinning.unpin(s, 1)["text"] == "first carried"


def test_the_memory_read_is_the_stores_after_another_kernel_forgot(store):
    import ocw

    s = _memory_session(store)
    n = next(k for k, _, i in rules.listed(pinning.memory(s)) if i.value == "data/raw/events.parquet")
    other = ocw.Store(store.path)
    try:
        pinning.forget(other.open_session(s.id), n)
    finally:
        other.close()
    assert "data/raw/events.parquet" not in [i.value for _, _, i in rules.listed(pinning.memory(s))]
