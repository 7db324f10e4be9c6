"""Small windows (issue 10, items 3, 4, 6): `%compact` must free real room on a 6k and a
1.5k window, the same tail rule holds for every trigger, and every no-op says why.

Through the magics in a real IPython shell on the offline model (it summarizes
within max_tokens and counts usage like ocw's estimate), plus the calibrated case
at the Session level with a summarizer whose usage is ~1.9× the estimate.
"""
from __future__ import annotations

import re

import pytest

import ocw
from ocw.providers.base import Reply, Usage
from ocw.text.tokens import count_message, count_text

TOPIC = "The nightly job in etl/load_{i}.py reads orders_{i}.csv and writes 3.{i} GB to s3://bucket/day{i}. "
FINISHED = re.compile(r"^Context compacted: covered (\d+) older messages?, ([\d,]+) → ([\d,]+) tokens$")


def fill_to(s, ratio: float, words: int) -> None:
    """Append user/assistant pairs of about `words` words until the ring shows `ratio`."""
    i = 0
    while True:
        pair = [("user", TOPIC.format(i=i) * max(1, words // 25)),
                ("assistant", f"Noted {i}. " + "The load looks fine today. " * max(1, words // 6))]
        nxt = sum(count_message(r, [{"type": "text", "text": t}], s.encoding.name) for r, t in pair)
        if (s.occupancy()["total"] + nxt) / s.context_window > ratio:
            break
        s.append_many(pair)
        i += 1


def run(ip, line, capsys):
    capsys.readouterr()
    res = ip.run_cell(line)
    out, err = capsys.readouterr()
    assert res.error_in_exec is None, err
    return out.strip()


def session_on(ip, window: int, capsys):
    run(ip, f"%config Ocw.context_window = {window}", capsys)
    run(ip, "%new --name small", capsys)
    return ocw.current_session()


def test_compact_on_a_6k_window_at_55_percent_lands_under_40(ip, capsys):
    s = session_on(ip, 6_000, capsys)
    fill_to(s, 0.55, words=100)
    before = s.occupancy()
    assert 0.50 <= before["ratio"] <= 0.55

    out = run(ip, "%compact", capsys)

    m = FINISHED.match(out)
    assert m, out
    after = s.occupancy()
    assert int(m[1]) > 0 and m[2] == f"{before['total']:,}" and m[3] == f"{after['total']:,}"
    assert after["ratio"] < 0.40, after["ratio"]
    # The tail kept is at most 25 % of the window (1,500 tokens), five messages allowed.
    tail = s.tail()
    assert sum(n.tokens for n in tail) <= 1_500 or len(tail) <= 5


def test_compact_on_a_1_5k_window_at_109_percent_lands_under_the_80_line(ip, capsys):
    s = session_on(ip, 1_500, capsys)
    run(ip, "%config Ocw.auto_compact = 0", capsys)  # let it grow past the window
    fill_to(s, 1.09, words=30)
    before = s.occupancy()
    assert 1.0 < before["ratio"] <= 1.09

    out = run(ip, "%compact", capsys)

    assert FINISHED.match(out), out
    assert s.occupancy()["ratio"] < 0.80


def test_compact_twice_then_the_seeds_no_op_text(ip, capsys):
    s = session_on(ip, 6_000, capsys)
    fill_to(s, 0.55, words=100)
    assert FINISHED.match(run(ip, "%compact", capsys))
    assert run(ip, "%compact", capsys) == "Context is already compacted; no older messages to fold."


def test_no_op_texts_for_a_never_compacted_session(ip, capsys):
    s = session_on(ip, 6_000, capsys)
    s.append_many([("user", "hi"), ("assistant", "hello")])
    assert run(ip, "%compact", capsys) == "Nothing to compact yet: the conversation has fewer than 4 messages."
    s.append_many([("user", "and more"), ("assistant", "sure")])
    assert run(ip, "%compact", capsys) == ("Nothing to compact yet: the whole conversation fits in the recent part "
                                           "that compaction keeps.")
    assert s.compaction_count == 0
    run(ip, "%config Ocw.lang = 'zh'", capsys)
    assert run(ip, "%compact", capsys) == "暂无可压缩的内容：整个对话都在压缩时保留的最近部分之内。"


class ScaledSummarizer:
    """A summarizer that answers briefly and reports its input ~`scale`× ocw's estimate,
    as a local model's tokenizer does."""

    name, model, offline = "scaled", "scaled", False

    def __init__(self, scale: float, context_window: int):
        self.scale, self.context_window, self.max_tokens = scale, context_window, []

    def complete(self, messages, system=None, max_tokens=None):
        self.max_tokens.append(max_tokens)
        prompt = count_text(system or "") + sum(count_message(m["role"], m["content"], "cl100k_base")
                                                for m in messages)
        return Reply(content=[{"type": "text", "text": "Summary: nightly loads, etl/load_N.py, fine."}],
                     usage=Usage(int(prompt * self.scale), 12))


@pytest.mark.parametrize("window", [2_048, 6_000])
def test_calibrated_compaction_lands_well_under_the_line(store, window):
    """The session learned that the model counts 1.9× the estimate: the tail, the
    summarizer's sizes and the result are judged in the model's tokens."""
    s = store.create_session(model="tiny", context_window=window, system_prompt="Be brief.")
    fill_to(s, 0.5, words=40)
    s.record_usage(int(s.occupancy()["estimated_total"] * 1.9))  # a measured sample: 1.9×
    assert s.calibration == pytest.approx(1.9, abs=0.01)
    before = s.occupancy()
    assert before["ratio"] > 0.9  # the ring shows the model's own count
    summarizer = ScaledSummarizer(1.9, window)

    r = s.compact(provider=summarizer)

    assert r.outcome == "succeeded" and r.tokens_before == before["total"]
    after = s.occupancy()
    assert after["total"] == r.tokens_after and after["ratio"] < 0.6, after["ratio"]
    # The summarizer was asked for an answer sized in the model's tokens (1.9× the estimate's room).
    assert all(m >= 256 * 1.9 - 1 for m in summarizer.max_tokens)
    # Its own usage kept the calibration where it was (1.9 measured on its input too).
    assert s.calibration == pytest.approx(1.9, abs=0.05)
