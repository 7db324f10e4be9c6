"""Undo the active compaction: the summary stops rendering, the one before it renders again.

Append-only, like everything ocw stores: no node is deleted. One transaction on the
session row appends the summary's id to the undone list (ocw/context/undo_log.py)
and bumps the generation, so every figure keyed by the generation (the measured
usage sample, the cached active summary, the widgets' views) is read anew; the
usage baseline is cleared as for a rewind, since the next measured prompt is
legitimately larger. The lifetime compaction count is left as it is.

No request is sent: undoing reads the session and writes one row. It takes the
session's compaction lock, so it cannot interleave with a running compaction, and
it refuses when the branch moved between reading and writing.
"""
from __future__ import annotations

import datetime as _dt

from ocw.context import count as count_rules
from ocw.context import undo_log
from ocw.text.errors import CompactionInProgress, OcwError, StoreError
from ocw.text.i18n import text as i18n_text


def undo_compaction(session) -> dict:
    """Undo the active summary of `session`'s branch. Returns {summary, tokens_before,
    tokens_after, active (the summary now active, or None), undone (how many so far),
    count (the lifetime count, unchanged)}. Nothing to undo: a one-line OcwError."""
    lang = getattr(session, "lang", None)
    if not session.compact_lock.acquire(blocking=False):
        raise CompactionInProgress(i18n_text("busy", lang))
    try:
        session.sync()
        active = session.active_summary()
        if active is None:
            raise OcwError(i18n_text("undo_nothing", lang),
                           hint=i18n_text("undo_nothing_hint", lang))
        # What the undo rests on, read before anything else is: a change by another kernel
        # after this point (even one the measuring below adopts, as PostgreSQL's listener
        # may) makes the write refuse instead of undoing on top of it.
        head, generation = session.head, session.generation
        before = session.occupancy()["total"]
        at = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")

        def change(row):
            if row["head_id"] != head or row["occupancy_generation"] != generation:
                raise StoreError("the conversation changed while undoing; nothing was changed")
            meta = undo_log.with_undone(count_rules.clear_baseline(row["metadata"]), active.id, at)
            return {"metadata": meta, "occupancy_generation": row["occupancy_generation"] + 1}

        session._write(change)
        now = session.active_summary()
        after = session.occupancy()["total"]
    finally:
        session.compact_lock.release()
    session._publish()
    return {"summary": active.id, "tokens_before": before, "tokens_after": after,
            "active": now.id if now is not None else None,
            "undone": undo_log.undone_count(session.metadata), "count": session.compaction_count}


def undo_message(result: dict, lang: str | None = None) -> str:
    """The one line `%compact --undo` and the chat widget's Undo say."""
    key = "undo_done_prev" if result["active"] else "undo_done_none"
    return i18n_text(key, lang, summary=result["summary"], active=result["active"] or "",
                     before=f"{result['tokens_before']:,}", after=f"{result['tokens_after']:,}",
                     count=result["count"], undone=result["undone"])
