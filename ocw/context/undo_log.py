"""Undone compactions: pure rules over session metadata.

`%compact --undo` never deletes the summary it undoes. It appends an entry
{summary, at} to metadata["undone_summaries"] in the same transaction that bumps
the generation (ocw/conversation/undo.py), and the branch view leaves every
summary listed there out when it picks the active one. So the one before it (or
none) renders again, and undoing is itself undoable only by compacting again —
nothing is ever lost. The list is not bounded like the compaction log: an entry
that fell off would bring its summary back to life. Each entry is one user action,
so it grows with what the user did, not with the session's age.

The lifetime compaction count (metadata["context_compaction_count"]) is never
decreased: it counts compactions that happened; `undone_count` says how many of
them were undone.
"""
from __future__ import annotations

KEY = "undone_summaries"


def entries(metadata: dict) -> list[dict]:
    value = metadata.get(KEY)
    return [e for e in value if isinstance(e, dict) and isinstance(e.get("summary"), str)] \
        if isinstance(value, list) else []


def undone_ids(metadata: dict) -> frozenset[str]:
    return frozenset(e["summary"] for e in entries(metadata))


def undone_count(metadata: dict) -> int:
    return len(entries(metadata))


def with_undone(metadata: dict, summary_id: str, at: str) -> dict:
    """New metadata with `summary_id` undone (the same metadata if it already is)."""
    if summary_id in undone_ids(metadata):
        return metadata
    new = dict(metadata)
    new[KEY] = entries(metadata) + [{"summary": summary_id, "at": at}]
    return new
