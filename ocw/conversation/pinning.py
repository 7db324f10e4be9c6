"""A session's pins and forgets: the writes, and what they change in what the model reads.

The rules are in ocw/context/pins.py (pure). Here:
- Writes are appends: each pin, unpin or forget adds one event to the list in
  the session's metadata, inside the store's transaction on the row as the
  store holds it then (`Session._write`), with the occupancy generation bumped
  (what renders changed without HEAD moving, so a measured figure no longer
  describes it and the ring goes back to its estimate). Nothing is deleted.
- Reads: the pins message (its own block of the request, its own row of the
  panel) and the active summary with forgotten memory items taken out of the
  memory block the model reads. Counts are cached by what they depend on.
"""
from __future__ import annotations

import datetime as _dt

from ocw.context import memory as mem
from ocw.context import pins as rules
from ocw.text.errors import InvalidArgument
from ocw.text.secrets import redact, scrub
from ocw.text.tokens import count_message, count_text

MAX_PIN_CHARS = 20_000  # a pin is read on every request: a sentence, a schema, a small value
# The pins together may take at most this share of the window: they are in every request and no
# compaction can shrink them, so more would leave a compaction nothing to win back.
WINDOW_SHARE = 0.25


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _append(session, event_of) -> dict:
    """Append the event `event_of(metadata)` builds (on the row as stored), bump the generation."""
    made: list[dict] = []

    def change(row):
        meta = dict(row["metadata"])
        event = event_of(meta)
        made.append(event)
        meta[rules.LOG_KEY] = rules.events(meta) + [event]
        return {"metadata": meta, "occupancy_generation": row["occupancy_generation"] + 1}

    with session._lock:
        session.sync()
        session._write(change)
    session._publish()
    return made[-1]


def carried_pins(texts: list[str]) -> dict:
    """The metadata a new session's pins start with when another session's pins are
    carried over (`%new --from-summary`): one fresh "pin" record each, numbered from 1.
    The texts were masked when first pinned and are kept as they are."""
    at = _now()
    return {rules.LOG_KEY: [{"op": "pin", "n": i, "text": t, "at": at, "source": "carried"}
                            for i, t in enumerate(texts, 1)]}


def pin(session, text: str, source: str = "text") -> dict:
    """Pin `text` (secrets masked, as everywhere); returns the pin event {n, text, at, source}."""
    if not isinstance(text, str) or not text.strip():
        raise InvalidArgument("nothing to pin", hint="write the text after %pin, or %pin {name} for a variable")
    if len(text) > MAX_PIN_CHARS:
        raise InvalidArgument(f"the pin is {len(text):,} characters; at most {MAX_PIN_CHARS:,}",
                              hint="pin the part the model must keep")
    clean = scrub(redact(text.strip("\n")))
    session.sync()
    meta = session._row["metadata"]
    after = rules.current(meta) + [{"n": rules.next_number(meta), "text": clean}]
    tokens, room = block_tokens(after, session.encoding.name), int(session.context_window * WINDOW_SHARE)
    if tokens > room:
        raise InvalidArgument(f"the pins would take {tokens:,} tokens; at most {room:,} "
                              f"({WINDOW_SHARE:.0%} of the {session.context_window:,}-token window)",
                              hint="pin a shorter text, or %unpin one first (%pins lists them)")
    return _append(session, lambda meta: {"op": "pin", "n": rules.next_number(meta), "text": clean,
                                          "at": _now(), "source": source})


def block_tokens(pins: list[dict], encoding: str) -> int:
    """Tokens of the pins message the model reads (what the panel's Pinned row counts)."""
    if not pins:
        return 0
    return count_message("llm", [{"type": "text", "text": rules.render(pins)}], encoding, rules.PINS_NAME)


def unpin(session, n: int) -> dict:
    """Unpin pin number `n` (as `%pins` numbers it); an unknown number is refused."""
    session.sync()
    live = {p["n"]: p for p in rules.current(session._row["metadata"])}
    if n not in live:
        raise InvalidArgument(f"there is no pin {n}" + (f"; the pins are {', '.join(map(str, live))}" if live
                                                         else "; nothing is pinned"),
                              hint="%pins lists them with their numbers")
    _append(session, lambda meta: {"op": "unpin", "n": n, "at": _now()})
    return live[n]


def pins(session) -> list[dict]:
    session.sync()
    return rules.current(session._row["metadata"])


def memory(session, *, forgotten: bool = True) -> mem.Memory:
    """The active summary's memory, forgotten items marked (the memory the model reads)."""
    session.sync()
    s = session.active_summary()
    if s is None:
        return mem.Memory()
    m = mem.from_blocks(session._contents([s])[s.id])
    return rules.apply_forgets(m, rules.forgets(session._row["metadata"])) if forgotten else m


def forget(session, n: int) -> mem.Item:
    """Forget memory item `n` (as `%memory` numbers it): appended, never deleted."""
    listing = rules.listed(memory(session))
    if not 1 <= n <= len(listing):
        raise InvalidArgument(f"there is no memory item {n}" + (f"; the items are 1 to {len(listing)}" if listing
                                                                 else "; the memory is empty"),
                              hint="%memory lists them with their numbers")
    item = listing[n - 1][2]
    upto = session._head.depth if session._head is not None else 0
    _append(session, lambda meta: rules.forget_event(item, upto, _now()))
    return item


# -- what the model reads (called by the branch view) ----------------------------------
def pins_message(view) -> dict | None:
    live = rules.current(view._row["metadata"])
    if not live:
        return None
    return rules.pins_message(live, pins_tokens(view))


def pins_tokens(view) -> int:
    live = rules.current(view._row["metadata"])
    if not live:
        return 0
    key = ("pins", view.encoding.name, rules.render(live))
    if key not in view._fixed_cache:
        view._fixed_cache[key] = block_tokens(live, view.encoding.name)
    return view._fixed_cache[key]


def _forgets(view) -> list[dict]:
    return rules.forgets(view._row["metadata"])


def summary_read(view, s, blocks: list[dict] | None = None) -> tuple[list[dict], int, int]:
    """The active summary as the model reads it — (blocks, tokens, of which the memory
    block's): with forgets, the memory block without the forgotten items and the prose
    without the sentences that state them (as a compaction's `drop_stale` would), counted
    anew; without, the stored node and its stored counts."""
    fs = _forgets(view)
    if not fs:
        return (blocks if blocks is not None else view._contents([s])[s.id]), view._summary_tokens(s), \
            view._memory_tokens(s)
    cache = view.__dict__.setdefault("_forgotten_summary_cache", {})
    key = (s.id, view.epoch, len(fs))
    if key not in cache:
        from ocw.context.summary_text import drop_stale
        from ocw.context.graph import SUMMARY_NAME

        stored = blocks if blocks is not None else view._contents([s])[s.id]
        m = rules.apply_forgets(mem.from_blocks(stored), fs)
        gone = {i.value for i in m.items if i.status == rules.FORGOTTEN} - {i.value for i in m.current()}
        prose = [dict(b, text=drop_stale(b["text"], gone)) if b.get("type") == "text" else b
                 for b in mem.prose_blocks(stored)]
        block = mem.to_block(m) if any(mem.BLOCK_KEY in b for b in stored if isinstance(b, dict)) else None
        new = prose + ([block] if block else [])
        enc = view.encoding.name
        cache.clear()
        cache[key] = (new, count_message("llm", new, enc, SUMMARY_NAME),
                      count_text(block["text"], enc) if block else 0)
    return cache[key]
