"""An exact compaction count with two kernels on one session (issue 23, DESIGN.md §5):
a usage sample belongs to the context its request was built on. Kernel B compacts
while kernel A's request is on the wire; A's reply is stored without its (stale)
sample, so A's next ordinary turn is no "drop" and no compaction is inferred.
Two Store objects on one database stand for the two kernels (each reads the file
anew in every write's transaction), on DuckDB and on PostgreSQL."""
from __future__ import annotations

import pytest

import ocw
from ocw.conversation.turn import run_turn
from ocw.providers.base import Reply, Usage
from ocw.text.tokens import count_message

FILLER = "The team reviewed the ingestion pipeline and weighed throughput against latency once more. "


class Provider:
    """Replies 'ok' with usage = the prompt's own count (+5); `during` runs while the
    request is on the wire (the other kernel's work)."""

    name, offline, context_window = "scripted", False, None

    def __init__(self, during=None):
        self.during = during
        self.requests = 0

    def stream(self, messages, *, system=None, tools=None, max_tokens=None, on_event=None):
        self.requests += 1
        if self.during:
            self.during()
            self.during = None
        if on_event:
            on_event("text", "ok")
        prompt = sum(count_message(m["role"], m["content"], "cl100k_base") for m in messages)
        return Reply(content=[{"type": "text", "text": "ok"}], usage=Usage(prompt, 5))

    def complete(self, messages, *, system=None, max_tokens=None):
        return Reply(content=[{"type": "text", "text": "Summary: the pipeline review."}], usage=Usage())

    def close(self):
        pass


@pytest.fixture(params=["duckdb", "postgresql"])
def where(request, tmp_path):
    return str(tmp_path / "two.duckdb") if request.param == "duckdb" else request.getfixturevalue("pg_url")


def test_a_compaction_in_another_kernel_mid_request_is_counted_once(where):
    a_store, b_store = ocw.Store(where), ocw.Store(where)
    try:
        a = a_store.create_session(model="tiny", provider="openai", context_window=16_000, system_prompt="Be brief.")
        a.append_many([("user" if i % 2 == 0 else "assistant", f"turn {i} " + FILLER * 10) for i in range(40)])
        b = b_store.open_session(a.id)
        run_turn(a, "first", Provider(), threshold=0)  # a baseline before anything
        assert a.metadata["context_window"]["used"] > 0 and a.compaction_count == 0

        def other_kernel_compacts():
            b.sync()
            assert b.compact(provider=Provider()).outcome == "succeeded"

        run_turn(a, "second", Provider(during=other_kernel_compacts), threshold=0)
        a.sync()
        assert a.compaction_count == 1
        assert a.metadata.get("context_window") is None  # the stale sample is no baseline
        run_turn(a, "third", Provider(), threshold=0)  # smaller than the stale sample
        assert a.metadata["context_window"]["used"] > 0  # this one is a baseline again
        run_turn(a, "fourth", Provider(), threshold=0)
        b.sync()
        for s in (a, b):
            assert s.compaction_count == 1 and s.occupancy()["compaction_inferred"] == 0
    finally:
        a_store.close()
        b_store.close()


def test_two_kernels_two_hundred_turns_count_exactly_the_compactions_made(where):
    """Issue 23's acceptance: two kernels take turns on one session for 200 turns with
    automatic compaction on a small window, and every 7th request the other kernel
    compacts while it is on the wire. The count is the compactions made, none inferred."""
    stores = [ocw.Store(where), ocw.Store(where)]
    try:
        a = stores[0].create_session(model="tiny", provider="openai", context_window=3_000, system_prompt="Be brief.")
        kernels = [a, stores[1].open_session(a.id)]
        made = 0

        def other_compacts(other):
            def run():
                nonlocal made
                other.sync()
                made += other.compact(provider=Provider()).outcome == "succeeded"
            return run

        for i in range(200):
            me, other = kernels[i % 2], kernels[1 - i % 2]
            me.sync()
            during = other_compacts(other) if i % 7 == 6 else None
            res = run_turn(me, f"turn {i}: " + FILLER * 3, Provider(during=during), threshold=0.8)
            made += sum(c.outcome == "succeeded" for c in res.compactions)
        assert made >= 20  # compactions happened, by both triggers and both kernels
        for s in kernels:
            s.sync()
            occ = s.occupancy()
            assert s.compaction_count == made and occ["compaction_inferred"] == 0, (s.compaction_count, made)
    finally:
        for st in stores:
            st.close()
