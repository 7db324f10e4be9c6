"""A summarizer of its own (ocw/conversation/summarizer.py), on a real DuckDB file: its
window (the provider's, 8,192 when unstated, lowered by what its server says), learned
in one write under its own key — the chat's window and calibration never move — and
what the panel shows of it."""
from __future__ import annotations

from ocw.conversation import summarizer


def test_the_window_is_the_providers_or_8192_and_a_learned_one_lowers_it(store, fake_summarizer):
    s = store.create_session(context_window=16_000)
    assert summarizer.window(s, fake_summarizer(context_window=32_000)) == 32_000
    unstated = fake_summarizer()
    assert summarizer.configured_window(unstated) == 8_192 and summarizer.window(s, unstated) == 8_192
    assert summarizer.configured_window(fake_summarizer(context_window=0)) == 8_192


def test_a_window_learned_from_the_server_is_one_write_of_its_own(store, fake_summarizer):
    s = store.create_session(context_window=16_000)
    p = fake_summarizer(context_window=32_000)
    rev, chat = s._rev, (s.context_window, s.metadata.get("learned_window"), s.metadata.get("calibration"))
    assert summarizer.learn_window(s, p, 4_096, "server", reported=True) is True
    assert summarizer.window(s, p) == 4_096 and s._rev == rev + 1
    assert s.metadata["summarizer"]["learned_window"] == {"tokens": 4_096, "source": "server",
                                                          "model": "fake-summarizer"}
    assert (s.context_window, s.metadata.get("learned_window"), s.metadata.get("calibration")) == chat
    assert summarizer.learn_window(s, p, 4_096, "server", reported=True) is False  # the same: nothing written
    assert s._rev == rev + 1
    assert summarizer.learn_window(s, p, 100, "server", reported=True) is False  # under 256: a misreading
    assert summarizer.learn_window(s, p, 8_000, "overflow") is False  # an overflow never raises it
    assert summarizer.window(s, p) == 4_096 and s._rev == rev + 1
    small = fake_summarizer(context_window=2_000)  # its own window is smaller than the one learned:
    assert summarizer.learn_window(s, small, 3_000, "server", reported=True) is False  # stored, not changed
    assert summarizer.window(s, small) == 2_000 and s.metadata["summarizer"]["learned_window"]["tokens"] == 3_000


def test_samples_blend_into_the_summarizers_calibration_and_the_panel_names_it(store, fake_summarizer):
    s = store.create_session(context_window=16_000)
    p = fake_summarizer(context_window=32_000)
    meta = {"calibration": {"model": "chat", "ratio": 1.3}}
    assert summarizer.with_samples(meta, [], "fake-summarizer") is meta  # nothing learned: the same dict
    new = summarizer.with_samples(meta, [(1_300, 1_000)] * 3, "fake-summarizer")
    assert new["calibration"] == meta["calibration"] and new["summarizer"]["calibration"]["model"] == "fake-summarizer"
    assert summarizer.describe(s, p) == {"name": "fake/fake-summarizer", "window": 32_000, "calibration": 1.0,
                                         "samples": 0}

    class Bare:
        pass

    assert summarizer.name_of(Bare()) == "offline/?"
