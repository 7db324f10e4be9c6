"""What a compaction lost: the identifiers and memory items the folded turns had and
the new context does not.

Pure. The new context is what the model reads after the compaction: the new summary
(its prose, its identifier list and its memory block) and the turns it kept. An
identifier (a path, a URL, an id, 250 ms — ocw/context/facts.py's kinds) that occurs
in the folded turns or the old summary and nowhere in that context is lost; so is a
current item of the old memory that the new memory no longer holds and the context
no longer names. Kept in the compaction's log entry (ocw/context/compaction_log.py)
with at most LIST_MAX of each, newest first, and the full counts: the log lives in the
session row, so its size must not grow with what a compaction folded.
"""
from __future__ import annotations

from ocw.context.facts import missing_identifiers

LIST_MAX = 12
MANY = 5  # compactions of one session after which %summary suggests a fresh one


def lost(folded_text: str, context_text: str, old_items=(), new_items=()) -> dict:
    """{identifiers, memory: the first LIST_MAX of each (newest first), n_identifiers, n_memory}."""
    idents = list(reversed(missing_identifiers(folded_text, context_text)))
    kept = {(i.kind, i.key, i.value) for i in new_items}
    items = [i.line()[2:] for i in reversed(list(old_items))
             if getattr(i, "status", "current") == "current" and (i.kind, i.key, i.value) not in kept
             and i.value not in context_text]
    return {"identifiers": idents[:LIST_MAX], "memory": items[:LIST_MAX],
            "n_identifiers": len(idents), "n_memory": len(items)}


def lines(entry_lost: dict | None) -> list[str]:
    """%summary's lines for one compaction's losses ([] when it lost nothing it could name)."""
    if not isinstance(entry_lost, dict):
        return []
    out = []
    for key, count, label in (("identifiers", "n_identifiers", "identifiers"), ("memory", "n_memory", "memory items")):
        values, n = entry_lost.get(key) or [], int(entry_lost.get(count) or 0)
        if n:
            more = f" (+{n - len(values)} more)" if n > len(values) else ""
            out.append(f"lost {n} {label}: " + ", ".join(values) + more)
    return out
