"""A summarizer call the server refuses as too long (the chat's own model, or a summarizer
of its own): the compaction tries once more, planned to what the server said, so a model
that counts more tokens than ocw's calibration knows (a gateway whose usage cannot be
trusted leaves it at 1.0) does not fail every compaction from then on. The case that
found it: LiteLLM → llama-cpp-python on a 2,048-token window, one empty summary, and the
next fold (twice as long) refused on every later turn, so the session only snipped.
Real DuckDB file; the summarizer is the offline model behind a server-like refusal."""
from __future__ import annotations

import pytest

from ocw.bench.build import build_session
from ocw.conversation import compaction
from ocw.context.engine import refit
from ocw.providers.offline import OfflineProvider
from ocw.text.errors import ContextOverflowError


def refusal(limit=None, prompt_tokens=None) -> ContextOverflowError:
    return ContextOverflowError("HTTP 400: too long", status=400, limit=limit, prompt_tokens=prompt_tokens)


def test_the_retry_plans_with_the_stated_window_and_the_stated_prompt_size():
    assert refit((8_192, 1.0), refusal(limit=2_048), 1_000) == (2_048, 1.0)
    assert refit((8_192, 1.0), refusal(limit=256), 1_000) == (256, 1.0)  # the smallest window read as one
    assert refit((8_192, 1.0), refusal(limit=255), 1_000) is None  # under it: no call fits, no retry
    assert refit((2_048, 1.0), refusal(limit=4_096, prompt_tokens=2_278), 1_200) == (2_048, 2_278 / 1_200)
    assert refit((2_048, 1.5), refusal(prompt_tokens=2_500), 1_000) == (2_048, 2.5)
    assert refit((2_048, 1.5), refusal(prompt_tokens=100_000), 1_000) == (2_048, 8.0)  # capped at the widest ratio
    assert refit((2_048, 1.5), refusal(prompt_tokens=2_500), 0) == (2_048, 3.0)  # no estimate: no ratio


@pytest.mark.parametrize("err", [refusal(), refusal(limit=4_096), refusal(limit=2_048, prompt_tokens=1_200),
                                 refusal(limit=True, prompt_tokens=True)],
                         ids=["nothing stated", "a wider window", "the prompt fits, the reply does not", "bools"])
def test_a_refusal_that_tightens_nothing_plans_as_if_every_token_counted_twice(err):
    assert refit((2_048, 1.25), err, 1_000) == (2_048, 2.5)


class CountsMore:
    """The chat's model behind its server: it counts `scale` times ocw's estimate, states
    the prompt size it counted when it refuses, and may refuse every call (`always`)."""

    name, offline = "tiny-server", True

    def __init__(self, window: int, scale: float, always: bool = False, states_window: bool = False):
        self.context_window, self.scale, self.always, self.sizes = window, scale, always, []
        self.states_window = states_window
        self.model, self.inner = "gpt-4o", OfflineProvider(context_window=10**9)

    def complete(self, messages, system=None, max_tokens=None):
        used = int(self.inner.prompt_tokens(messages, system) * self.scale)
        self.sizes.append(used + (max_tokens or 0))
        if used + (max_tokens or 0) > self.context_window or self.always:
            raise ContextOverflowError("HTTP 400: this model's maximum context length is exceeded", status=400,
                                       prompt_tokens=used, limit=self.context_window if self.states_window else None)
        return self.inner.complete(messages, system=system, max_tokens=max_tokens)


def session(store, name):
    return build_session(store, 60, window=16_000, verify=2, name=name, id_salt=name + "_")


def test_a_model_counting_twice_the_estimate_is_refused_once_then_summarized_within_its_window(store):
    model = CountsMore(window=16_000, scale=2.0)
    s = session(store, "twice")
    count, window = s.compaction_count, s.context_window
    res = compaction.compact(s, provider=model)
    assert res.outcome == "succeeded", (res.error, model.sizes)
    assert model.sizes[0] > 16_000  # planned at calibration 1.0: over the window at the real count
    assert len(model.sizes) >= 3 and all(n <= 16_000 for n in model.sizes[1:])  # the retry fits, in more calls
    assert s.compaction_count == count + 1 and s.context_window == window == 16_000
    assert "learned_window" not in s.metadata  # the chat's window is learned from its turns, announced


def test_a_second_refusal_fails_the_compaction_and_leaves_the_session_as_it_was(store):
    model = CountsMore(window=16_000, scale=2.0, always=True)
    s = session(store, "again")
    before = (s.head, s.generation, s.compaction_count, s.active_summary(), s.occupancy()["total"])
    res = compaction.compact(s, provider=model, trigger="auto")
    assert res.outcome == "failed" and "maximum context length" in res.error
    assert len(model.sizes) == 2  # the refused call and one retry, never a third
    assert model.sizes[0] > 16_000 >= model.sizes[1]  # the retry was planned to fit at the stated measure
    assert (s.head, s.generation, s.compaction_count, s.active_summary(), s.occupancy()["total"]) == before
    assert s.auto_compact_failures == 1


def test_a_refusal_stating_a_window_no_call_fits_is_not_retried(store):
    class Tiny(CountsMore):
        def complete(self, messages, system=None, max_tokens=None):
            self.sizes.append(0)
            raise ContextOverflowError("HTTP 400: n_ctx 50", status=400, limit=50, prompt_tokens=900)

    model = Tiny(window=16_000, scale=1.0)
    s = session(store, "tiny")
    res = compaction.compact(s, provider=model)
    assert res.outcome == "failed" and "n_ctx 50" in res.error and len(model.sizes) == 1


def test_a_retry_planned_to_the_server_with_no_room_for_a_call_stores_the_structural_summary_and_says_so(store):
    # The server holds 1,000 of its tokens and counts ~2.1× ocw's estimate: < 500 estimated, less
    # than the summary's room and one call's least input together. No second request is sent.
    model = CountsMore(window=1_000, scale=2.0, states_window=True)
    s = session(store, "tight")
    res = compaction.compact(s, provider=model)
    assert res.outcome == "succeeded" and len(model.sizes) == 1 and model.sizes[0] > 1_000
    assert 450 < res.payload["structural_window"] <= 500 and s.compaction_count == 1  # 1,000 ÷ the stated ~2.1
    assert "learned_window" not in s.metadata and s.context_window == 16_000
