"""Pins and forgets: what the user fixed in the context, and what they took out of the memory.

A pin is text the model must read verbatim after every compaction ("the
schema is ...", a variable's value, a message). A forget takes one item out
of the session memory. Both are records appended to a list in the session's
metadata (`LOG_KEY`): `pin`, `unpin` and `forget` events, never edited, never
removed, so the history of what was pinned and forgotten stays readable and a
store transfer or a JSON export carries it whole.

Invariants, and why they hold:
- Verbatim, never folded: the pins travel as their own message (`PINS_NAME`)
  that has no node id, so the compaction plan (which folds only messages with
  an id) and snip (which keeps it, as the summary) never touch it; the summary
  is never their carrier.
- A pin's number is fixed when it is made (one more than the highest so far),
  so `%unpin 2` means the pin `%pins` listed as 2, whatever was unpinned since.
- Forgetting survives compactions (`apply_forgets`): an item matching a forget
  (kind, key and value) that was said at or before the turn the forget was made
  at is marked `forgotten`, in the memory a compaction stores and in the one the
  model reads. The memory pass may re-derive it from the turns it folds later
  (they were said before the forget), and this rule marks it again; only the
  same fact said after the forget is current again (latest wins, as everywhere).
  Marked stale, its value is never re-added by the identifier pass either.

Pure: no I/O.
"""
from __future__ import annotations

from ocw.context.memory import KINDS, SECTION_TITLES, Item, Memory

LOG_KEY = "pins"  # the session metadata's append-only list of pin / unpin / forget events
PINS_NAME = "context/pins"  # the name of the pins message in the rendered history
PINS_HEADER = "[Pinned by the user: kept verbatim whatever is compacted]"
FORGOTTEN = "forgotten"


def events(metadata: dict) -> list[dict]:
    log = (metadata or {}).get(LOG_KEY)
    return [e for e in log if isinstance(e, dict)] if isinstance(log, list) else []


def current(metadata: dict) -> list[dict]:
    """The pins in force, oldest first: each {n, text, at, source}."""
    live: dict[int, dict] = {}
    for e in events(metadata):
        if e.get("op") == "pin" and isinstance(e.get("n"), int) and isinstance(e.get("text"), str):
            live[e["n"]] = e
        elif e.get("op") == "unpin":
            live.pop(e.get("n"), None)
    return [live[n] for n in sorted(live)]


def next_number(metadata: dict) -> int:
    return 1 + max((e["n"] for e in events(metadata) if e.get("op") == "pin" and isinstance(e.get("n"), int)),
                   default=0)


def forgets(metadata: dict) -> list[dict]:
    return [e for e in events(metadata) if e.get("op") == "forget"]


def render(pins: list[dict]) -> str:
    """The pins as the model reads them: each text as it was pinned."""
    if not pins:
        return ""
    return PINS_HEADER + "\n" + "\n\n".join(f"[pin {p['n']}]\n{p['text']}" for p in pins)


def pins_message(pins: list[dict], tokens: int) -> dict:
    return {"role": "llm", "name": PINS_NAME, "content": [{"type": "text", "text": render(pins)}], "tokens": tokens}


def _matches(item: Item, f: dict) -> bool:
    return (item.kind, item.key, item.value) == (f.get("kind"), f.get("key"), f.get("value")) \
        and isinstance(f.get("upto"), int) and item.turn <= f["upto"]


def apply_forgets(memory: Memory, fs: list[dict]) -> Memory:
    """`memory` with every current item a forget covers marked forgotten (a new Memory)."""
    if not fs:
        return memory
    items = []
    for i in memory.items:
        i = Item(**i.__dict__)
        if i.status == "current" and any(_matches(i, f) for f in fs):
            i.status = FORGOTTEN
        items.append(i)
    return Memory(items, memory.evicted)


def listed(memory: Memory) -> list[tuple[int, str, Item]]:
    """The current items as `%memory` numbers them: (n, section title, item), by
    section in KINDS order, newest first within one — the order `render` shows."""
    out = []
    for kind in KINDS:
        for item in sorted(memory.current(kind), key=lambda i: -i.turn):
            out.append((len(out) + 1, SECTION_TITLES[kind], item))
    return out


def forget_event(item: Item, upto: int, at: str) -> dict:
    return {"op": "forget", "kind": item.kind, "key": item.key, "value": item.value, "turn": item.turn,
            "upto": upto, "at": at}
