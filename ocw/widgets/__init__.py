"""The widgets, Python side: the context ring with its breakdown panel (`ring.py`)
and the chat widget (`chat.py`), plus what both share (`base.py`).

The top layer. Python owns the state: a widget copies what the session
publishes (its events and reads) into synced traitlets, and the browser side
(`widgets/*.js` at the repository root) shows it and sends actions back; a
widget computes no occupancy and stores nothing. It may import every layer
below (notebook, conversation, store, context, providers, text); nothing in
ocw imports it but the package root, which hands `make` to the runtime.
"""
from __future__ import annotations


def make(kind: str, runtime):
    """A new widget of `kind` ("ring" or "chat") for the runtime's current session."""
    if kind == "ring":
        from ocw.widgets.ring import ContextWidget

        return ContextWidget(session=runtime.current_session(), compact=runtime.compact_action,
                             lang=runtime.config.lang)
    if kind == "chat":
        from ocw.widgets.chat import ChatWidget

        return ChatWidget(runtime=runtime, ring=runtime.context_widget(), session=runtime.current_session(),
                          lang=runtime.config.lang)
    raise ValueError(f"unknown widget kind {kind!r}")
