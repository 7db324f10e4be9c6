"""Pruning a session's old tool output: decide (ocw/context/prune.py), write, report.

- No LLM call: the stubs are made from the stored calls and results alone.
- One write: the prune mark, the generation (what renders changed without
  HEAD moving) and a cleared usage baseline (the next provider sample is
  legitimately smaller; it must not count as a compaction the provider did) go
  in one transaction, refused if the branch moved meanwhile. The store keeps
  every result whole; only rendering changes.
- Worth it or nothing: a prune that frees less than MIN_FREED_SHARE of the
  window writes nothing (the caller compacts instead).
"""
from __future__ import annotations

import datetime as _dt

from ocw.context import count as count_rules
from ocw.context import prune as prune_rules
from ocw.context.cut import default_tail_budget
from ocw.text.errors import StoreError

META_KEY = "tool_prune"  # the active mark: {node, depth, epoch, boundary, saved, results, at}
COUNT_KEY = "tool_prune_count"  # prunes so far (a session's lifetime)


def prune(session, *, keep_tokens: int | None = None) -> dict | None:
    """Stub the old tool results of `session`'s tail beyond `keep_tokens` of the newest
    ones (default: the tail a compaction keeps). Returns {results, freed, before,
    after} in the ring's tokens, or None when nothing worth pruning was found."""
    with session._lock:
        session.sync()
        occ = session.occupancy()
        before, window, factor = occ["total"], session.context_window, session.calibration
        head, generation, epoch = session.head, session.generation, session.epoch
        tail = session.tail()
        contents = session._contents(tail)
        tool_nodes = [(m.id, m.depth, m.tokens) for m in tail
                      if any(b.get("type") == "tool_result" for b in contents[m.id])]
        keep = keep_tokens if keep_tokens is not None else int(default_tail_budget(window) / factor)
        mark_id = prune_rules.choose_mark(tool_nodes, keep)
        if mark_id is None:
            return None
        mark = session._rows.get(mark_id)
        current = session.prune_mark()
        if current is not None and mark.depth <= current.depth:
            return None
        was_saved, was_results = session.pruned()
        stubs = session._pruned_nodes(mark, tail, contents)
        saved, results = sum(s for _, s in stubs.values()), len(stubs)
        if not prune_rules.worth_it(round((saved - was_saved) * factor), window):
            return None
        boundary = session._boundary()
        entry = {"node": mark.id, "depth": mark.depth, "epoch": epoch, "boundary": boundary.id if boundary else None,
                 "saved": saved, "results": results,
                 "at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}

        def change(row):
            if row["head_id"] != head or row["occupancy_generation"] != generation:
                raise StoreError("the conversation changed while pruning; nothing was saved")
            meta = count_rules.clear_baseline(row["metadata"])
            meta[META_KEY] = entry
            meta[COUNT_KEY] = int(meta.get(COUNT_KEY) or 0) + 1
            return {"metadata": meta, "occupancy_generation": generation + 1}

        session._write(change)
    session._publish()
    after = session.occupancy()["total"]
    return {"results": results - was_results, "freed": before - after, "before": before, "after": after}
