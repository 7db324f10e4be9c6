"""The compaction log: what `%summary` shows about each compaction ocw made.

Pure rules over session metadata. metadata["compactions"] is a list of entries,
oldest first — {summary, trigger, at, before, after, folded, covers, focus, lost,
summarizer ('provider/model' that wrote it), own_summarizer} —
appended in the same transaction as the summary it describes (Session.
_persist_summary's change(row)), so an entry exists exactly when its summary
does. Bounded (LOG_MAX): the metadata is read on every change of the session
row, so it must not grow with the session's age; the lifetime count stays in
metadata["context_compaction_count"], and an older summary whose entry fell
off is still shown, from its node, without its figures.
"""
from __future__ import annotations

KEY = "compactions"
LOG_MAX = 50


def entries(metadata: dict) -> list[dict]:
    """The log's entries, oldest first (well-formed ones only)."""
    value = metadata.get(KEY)
    return [e for e in value if isinstance(e, dict) and isinstance(e.get("summary"), str)] \
        if isinstance(value, list) else []


def with_entry(metadata: dict, entry: dict) -> dict:
    """New metadata with `entry` appended (the oldest dropped past LOG_MAX)."""
    new = dict(metadata)
    new[KEY] = (entries(metadata) + [dict(entry)])[-LOG_MAX:]
    return new


def entry_for(metadata: dict, summary_id: str) -> dict | None:
    return next((e for e in entries(metadata) if e["summary"] == summary_id), None)
