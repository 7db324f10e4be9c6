"""A summarizer of its own (Ocw.summary_provider / summary_model / summary_base_url):
its window and its calibration, kept apart from the chat model's.

The notebook layer builds the summarizer's provider (Runtime.summarizer_for) and
hands it to a compaction with `own_summarizer=True`; this module is what the
conversation layer knows about it. Its learned window and calibration live in
session metadata under KEY, in the same shapes ocw/context/calibration.py reads
for the chat model ({"learned_window": …, "calibration": …}), each tagged with
the summarizer model it was learned for — so a sample of the summarizer's
tokenizer never moves the chat's calibration (the chat's figures, threshold and
kept tail are judged in the chat model's tokens), switching the summary model
starts afresh, and both survive a restart.

Unset, nothing here is used: the chat model summarizes with the session's window
and calibration, exactly as before.
"""
from __future__ import annotations

from ocw.context import calibration as cal

KEY = "summarizer"


def state(metadata: dict) -> dict:
    value = metadata.get(KEY)
    return value if isinstance(value, dict) else {}


def configured_window(provider) -> int:
    """The window the provider was built with (its model's known window), 8192 when unstated."""
    own = getattr(provider, "context_window", None)
    return own if cal.positive_int(own) else 8_192


def window(session, provider) -> int:
    """The summarizer's window: its model's known one, lowered by what its server
    reported or stated (never the chat's window: it is another model)."""
    return cal.effective_window(configured_window(provider), state(session.metadata), provider.model)


def calibration(session, provider) -> float:
    return cal.calibration(state(session.metadata), provider.model)


def with_samples(metadata: dict, samples, model: str) -> dict:
    """`metadata` with the summarizer's (measured, estimated) samples blended into its own calibration."""
    own = state(metadata)
    new = cal.with_samples(own, samples, model)
    return metadata if new is own else {**metadata, KEY: new}


def learn_window(session, provider, tokens, source: str, *, reported: bool = False) -> bool:
    """Remember the summarizer's window as its server reported (`reported`) or stated it
    (an overflow). One write; True when the window the summarizer plans with changed."""
    model = provider.model
    if cal.learn_window(state(session.metadata), model, tokens, source, reported=reported) is None:
        return False
    before = window(session, provider)

    def change(row):
        new = cal.learn_window(state(row["metadata"]), model, tokens, source, reported=reported)
        return {"metadata": {**row["metadata"], KEY: new}} if new is not None else None

    session._write(change)
    return window(session, provider) != before


def name_of(provider) -> str:
    """'provider/model', as %summary, the panel and the compaction log show it."""
    return f"{getattr(provider, 'name', None) or 'offline'}/{getattr(provider, 'model', None) or '?'}"


def describe(session, provider) -> dict:
    """What the panel shows about the summarizer of its own."""
    return {"name": name_of(provider), "window": window(session, provider),
            "calibration": calibration(session, provider),
            "samples": cal.calibration_samples(state(session.metadata), provider.model)}
