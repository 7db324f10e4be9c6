""""Compacting… 2 of 5 · 3.1 s" in the running cell, in place.

A compaction of more than one summarizer call (a long history on a small summarizer
window) takes a while; the cell says how far it is — which call of the chunked plan,
and the time so far — by updating one display instead of printing a line per step,
and clears it when the compaction ends (its outcome is the system message below).
A one-call compaction shows nothing here: it is as quick as a reply, and the started
and finished messages say all there is. Text front ends (a terminal, jupyter console,
which drops display updates) get nothing from here either: `rich()` says which.

The listener runs on the thread that compacts, which is the cell's own, so the display
lands in the cell that runs the compaction.
"""
from __future__ import annotations

from typing import Callable

from ocw.context import events as ev
from ocw.text.i18n import system_message


class CellProgress:
    def __init__(self, session, rich: Callable[[], bool]):
        self.session, self.rich, self.handle = session, rich, None

    def __call__(self, name: str, payload: dict) -> None:
        if name == ev.COMPACTION_PROGRESS:
            if int(payload.get("calls") or 1) < 2 or not self.rich():
                return
            from IPython.display import display

            bundle = {"text/plain": system_message(name, payload, getattr(self.session, "lang", None))}
            if self.handle is None:
                self.handle = display(bundle, raw=True, display_id=True)
            else:
                self.handle.update(bundle, raw=True)
        elif name in (ev.COMPACTION_FINISHED, ev.COMPACTION_FAILED) and self.handle is not None:
            handle, self.handle = self.handle, None
            handle.update({"text/plain": ""}, raw=True)


def watch(session, rich: Callable[[], bool]) -> Callable[[], None]:
    """Show `session`'s compaction progress in the running cell; returns the unsubscribe."""
    return session.events.subscribe(CellProgress(session, rich))
