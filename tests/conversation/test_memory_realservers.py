"""Issue 22 on the real servers: the structured summarizer request and its fallback.

Against llama.cpp's `llama-server` (both wire formats) and the llama-cpp-python server,
each with the tiny random-weight 2,048-token model: a compaction sends the structured
memory request (the ask in the system prompt, the current memory in the input); the
model answers garbage, so nothing of its answer becomes memory — the memory is exactly
what the deterministic pass makes of the folded turns — the fallback is said in one
line, and the compaction still succeeds.
"""
from __future__ import annotations

import json

import pytest

from ocw.context.memory import Memory, from_blocks
from ocw.context.memory_rules import update
from ocw.providers.anthropic import AnthropicProvider
from ocw.providers.openai import OpenAIProvider
from ocw.text.i18n import MESSAGES
from ocw.text.prompts import CURRENT_MEMORY_OPEN, MEMORY_REQUEST

SAID = ["Please set the batch size to 64.", "From now on answer in Chinese.", "Let's bump batch_size to 128 now.",
        "The raw dump is data/raw/events_7q.parquet.", "TODO: rerun the qz_eval suite."]
PAD = "We keep reading the logs of the nightly job."


class Recording:
    """The real provider, recording each summary request's system prompt and input."""

    def __init__(self, inner):
        self._inner, self.calls = inner, []

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def complete(self, messages, *, system=None, **kw):
        reply = self._inner.complete(messages, system=system, **kw)
        self.calls.append((system or "", json.dumps(messages), reply.text or ""))
        return reply


CASES = {
    "llama-server/openai": ("llama_server", "openai"),
    "llama-server/anthropic": ("llama_server", "anthropic"),
    "llama-cpp-python/openai": ("llama_cpp_python_server", "openai"),
}


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("case", list(CASES))
def test_the_tiny_models_garbage_never_becomes_memory(case, request, store):
    fixture, wire = CASES[case]
    server = request.getfixturevalue(fixture)
    cls, url = (OpenAIProvider, server.openai_url) if wire == "openai" else (AnthropicProvider, server.anthropic_url)
    provider = Recording(cls(server.model, base_url=url, api_key="x", timeout=120))
    s = store.create_session(model=server.model, context_window=2_048)
    s.learn_calibration(2_000, 1_000)  # the server counts ~2× ocw's estimate (tests/test_realservers)
    for t in SAID:
        s.append("user", f"{t} {PAD}")
        s.append("assistant", f"Noted. {PAD}")
    try:
        for _ in range(3):  # the random-weights model sometimes ends at once: an empty summary, asked again
            before = (s.head, s.generation, s.compaction_count)
            r = s.compact(keep_recent_tokens=40, provider=provider)
            if not (r.outcome == "failed" and "empty summary" in (r.reason or "")):
                break
            assert (s.head, s.generation, s.compaction_count) == before  # a failed compaction changed nothing
    finally:
        provider.close()
    assert r.outcome == "succeeded", r.reason
    assert provider.calls, "a real model must be asked (not the structural summary)"
    system, body, _ = provider.calls[0]
    assert MEMORY_REQUEST.splitlines()[0] in system and CURRENT_MEMORY_OPEN in body
    # The tiny model's answer is no JSON memory: the fallback, said once, on one line.
    assert r.payload.get("memory_fallback") is True
    assert r.message("en").count(MESSAGES["en"]["memory_fallback"]) == 1 and "\n" not in r.message("en")
    node = s.active_summary()
    m = from_blocks(s._contents([node])[node.id])
    # Exactly the deterministic memory of the folded turns: nothing of the model's text.
    texts = [(k + 1, "user" if k % 2 == 0 else "assistant", x)
             for k, x in enumerate(y for t in SAID for y in (f"{t} {PAD}", f"Noted. {PAD}"))][: node.cover_count]
    # (Its room is a quarter of what the compaction replaced: what did not fit was evicted, and said.)
    alone = update(Memory(), texts, budget=10_000, encoding=s.encoding.name)
    got = [(i.kind, i.key, i.value, i.status) for i in m.items]
    assert got and set(got) <= {(i.kind, i.key, i.value, i.status) for i in alone.items}
    assert len(got) + m.evicted == len(alone.items)
    said = "\n".join(x for _, _, x in texts)
    assert all(i.value in said for i in m.items)
