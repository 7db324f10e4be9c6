"""The session memory (DESIGN.md §4b): what is current, beside the summary's prose.

A rolled summary keeps what recurs and loses what was said once — a decision,
a TODO, "answer in Chinese from now on" — and it cannot tell a value that was
changed from its replacement. The memory is a list of items, each with its
kind, key, value, the turn it came from and a status; it is rebuilt at every
compaction from the previous memory plus the newly folded turns (`update`),
never from the summary's prose, so nothing in it decays with the number of
compactions.

Invariants, and why they hold:
- Latest wins: `merge` applies events in turn order; an item with the key of a
  current one of its kind supersedes it, so at most one value per key is
  current. Superseded, retracted and closed items stay in the stored list (so
  the identifier pass never re-adds them) but `render` shows only current ones:
  the model never reads a stale value as current.
- Grounded: `ground` drops every item whose value does not occur in the source
  (the folded turns and the previous memory), so a summarizer that invents a
  column or a date cannot plant it.
- Within budget: `fit` evicts oldest first, working set first and instructions
  and decisions last, until the rendered memory fits its share of the window,
  and counts what it evicted (`Memory.evicted`), which `render` says.

Pure: no I/O; the compaction stores the memory in the summary node's second
block (`to_block` / `from_blocks`), in the same transaction as the summary.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from ocw.text.tokens import count_text

KINDS = ("instruction", "decision", "setting", "todo", "working")
STATUSES = ("current", "superseded", "retracted", "closed", "forgotten")  # forgotten: by the user (context/pins.py)
# Eviction: the first kinds here go first (oldest first within a kind).
EVICT_ORDER = ("working", "todo", "setting", "decision", "instruction")
MEMORY_HEADER = "[Session memory: current facts; what was changed, retracted or closed is not listed]"
SECTION_TITLES = {"instruction": "Standing instructions and preferences", "decision": "Decisions",
                  "setting": "Current settings and values", "todo": "Open TODOs and questions",
                  "working": "Working set (newest first)"}
BLOCK_KEY = "ocw_memory"  # the summary node's memory block carries the items under this key
WINDOW_SHARE = 0.10  # the memory's share of the window (DESIGN.md §4b)


@dataclass
class Item:
    kind: str
    key: str
    value: str
    turn: int
    status: str = "current"
    detail: str = ""  # a decision's rejected option, a working item's sub-kind (path, url, commit, ...)

    def to_json(self) -> dict:
        return {"kind": self.kind, "key": self.key, "value": self.value, "turn": self.turn,
                "status": self.status, "detail": self.detail}

    @classmethod
    def from_json(cls, d: dict) -> "Item | None":
        try:
            item = cls(str(d["kind"]), str(d["key"]), str(d["value"]), int(d["turn"]),
                       str(d.get("status", "current")), str(d.get("detail", "")))
        except (KeyError, TypeError, ValueError):
            return None
        return item if item.kind in KINDS and item.status in STATUSES and item.value.strip() else None

    def line(self) -> str:
        if self.kind == "setting":
            return f"- {self.key} = {self.value} (turn {self.turn})"
        if self.kind == "decision" and self.detail:
            return f"- {self.value}, over {self.detail} (turn {self.turn})"
        if self.kind == "working" and self.detail:
            return f"- {self.detail}: {self.value} (turn {self.turn})"
        return f"- {self.value} (turn {self.turn})"


@dataclass
class Event:
    """What one sentence said: a new item, or a retraction / closing of `target`."""
    action: str  # "add" | "retract" | "close"
    turn: int
    item: Item | None = None
    target: str = ""


@dataclass
class Memory:
    items: list[Item] = field(default_factory=list)
    evicted: int = 0  # items evicted for room over the session's life

    def current(self, kind: str | None = None) -> list[Item]:
        return [i for i in self.items if i.status == "current" and (kind is None or i.kind == kind)]

    def stale_values(self) -> set[str]:
        """Values the memory marks superseded, retracted or closed and holds nowhere as
        current: the identifier pass must never re-add them."""
        live = {i.value for i in self.current()}
        return {i.value for i in self.items if i.status != "current" and i.value not in live}

    def to_json(self) -> dict:
        return {"v": 1, "evicted": self.evicted, "items": [i.to_json() for i in self.items]}

    @classmethod
    def from_json(cls, d) -> "Memory":
        if not isinstance(d, dict) or not isinstance(d.get("items"), list):
            return cls()
        items = [x for x in (Item.from_json(e) for e in d["items"] if isinstance(e, dict)) if x is not None]
        ev = d.get("evicted", 0)
        return cls(items, ev if isinstance(ev, int) and ev >= 0 else 0)


def norm_key(text: str) -> str:
    """One key for the ways a name is written: `Batch size`, `batch_size`, `the batch-size`."""
    k = re.sub(r"[`'\"]", "", text.strip().lower())
    k = re.sub(r"^(?:the|our|my|your|a|an)\s+", "", k)
    return re.sub(r"[\s\-]+", "_", k).strip("_.,:;")


def _terms(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z0-9_./-]+", text.lower()) if len(w) > 2 and w not in _STOP}


_STOP = frozenset("the and for with that this from into about then them they their there have has had was were "
                  "will would should could can not all any our your you its it's let's lets need needs".split())


def _mentions(item: Item, target: str) -> bool:
    """Does a retraction or closing that names `target` concern `item`?"""
    t = target.strip().strip("`'\".,").lower()
    if not t:
        return False
    if norm_key(t) in (item.key, norm_key(item.value)) or t in item.value.lower().split():
        return True
    if re.search(r"[./_\d]", t) and t in item.value.lower():  # an identifier inside the value
        return True
    tt, vt = _terms(t), _terms(item.value + " " + item.key)
    named = {w for w in tt if re.search(r"[./_\d]", w)}
    if named and not named <= vt:
        return False  # the target names an identifier this item does not hold: another item
    return len(tt) >= 1 and len(tt & vt) >= max(1, (len(tt) + 1) // 2) and item.kind in ("todo", "decision",
                                                                                         "instruction")


def same_key(a: str, b: str) -> bool:
    """One setting named with or without a lead-in ("second_thought_batch_size" and
    "batch_size"): equal keys, or one ends with the other when that other has two words
    or more (a one-word key such as "size" is too vague to match a longer one)."""
    if a == b:
        return True
    short, long_ = sorted((a, b), key=len)
    return short.count("_") >= 1 and long_.endswith("_" + short)


def merge(memory: Memory, events: list[Event]) -> Memory:
    """Apply events in order, latest wins. Returns a new Memory (the old is untouched)."""
    items = [Item(**i.__dict__) for i in memory.items]
    for e in sorted(events, key=lambda e: e.turn):
        if e.action == "add" and e.item is not None:
            new = e.item
            same = [i for i in items if i.status == "current" and i.kind == new.kind and
                    (same_key(i.key, new.key) or (new.kind == "decision" and new.detail and
                                          {norm_key(i.value), norm_key(i.detail)} & {norm_key(new.value), norm_key(new.detail)}))]
            if any(i.value == new.value and i.detail == new.detail for i in same):
                for i in same:
                    if i.value == new.value:
                        i.turn = max(i.turn, new.turn)  # said again: newer, not new
                continue
            for i in same:
                i.status = "superseded"
            # A value retracted earlier and stated again is current again (latest wins).
            items = [i for i in items if not (i.status == "retracted" and i.kind == new.kind and i.value == new.value)]
            items.append(new)
        elif e.action in ("retract", "close"):
            kinds = ("todo",) if e.action == "close" else KINDS
            hit = False
            for i in items:
                if i.status == "current" and i.kind in kinds and _mentions(i, e.target):
                    i.status = "retracted" if e.action == "retract" else "closed"
                    hit = True
            target = e.target.strip().strip("`'\".,")
            if e.action == "retract" and not hit and re.search(r"[./_\d]", target) and " " not in target:
                # An identifier retracted before the memory held it (mentioned in passing):
                # recorded as retracted so the identifier pass never lists it as current.
                items.append(Item("working", norm_key(target), target, e.turn, "retracted"))
    # Closed, superseded and retracted items stay (never rendered) so they are never re-added.
    return Memory(items, memory.evicted)


def ground(items: list[Item], source: str) -> list[Item]:
    """Only items whose value (and a decision's rejected option) occurs in `source`."""
    if not items:
        return []  # (the offline model's compactions ground no answer of their own: nothing to lower)
    low = source.lower()
    return [i for i in items if i.value.strip().lower() in low and (not i.detail or i.kind != "decision"
                                                                     or i.detail.lower() in low)]


def render(memory: Memory) -> str:
    """The memory as the model reads it: current items only, by kind, newest first."""
    parts = [MEMORY_HEADER]
    for kind in KINDS:
        cur = sorted(memory.current(kind), key=lambda i: -i.turn)
        if cur:
            parts.append(f"{SECTION_TITLES[kind]}:\n" + "\n".join(i.line() for i in cur))
    if memory.evicted:
        parts.append(f"({memory.evicted} older working-set or TODO items were evicted to keep the memory "
                     "within its budget.)")
    return "\n".join(parts) if len(parts) > 1 or memory.evicted else ""


def fit(memory: Memory, budget: int, encoding: str) -> Memory:
    """Evict current items, oldest first in EVICT_ORDER, until `render` fits `budget`
    tokens. Stale items (never rendered) are capped at as many as the current ones."""
    m = Memory([Item(**i.__dict__) for i in memory.items], memory.evicted)
    stale = [i for i in m.items if i.status != "current"]
    if len(stale) > max(64, len(m.current())):
        drop = {id(i) for i in sorted(stale, key=lambda i: i.turn)[: len(stale) - max(64, len(m.current()))]}
        m.items = [i for i in m.items if id(i) not in drop]
    order = {k: n for n, k in enumerate(EVICT_ORDER)}
    while m.current() and count_text(render(m), encoding) > budget:
        victim = min(m.current(), key=lambda i: (order[i.kind], i.turn))
        m.items.remove(victim)
        m.evicted += 1
    return m


def budget_for(window: int) -> int:
    return max(128, int(window * WINDOW_SHARE))


def to_block(memory: Memory) -> dict | None:
    """The summary node's memory block: the rendered text the model reads, and the
    items under BLOCK_KEY (providers read only a block's text)."""
    text = render(memory)
    if not text and not memory.items:
        return None
    return {"type": "text", "text": text, BLOCK_KEY: memory.to_json()}


def from_blocks(blocks: list[dict]) -> Memory:
    for b in blocks or ():
        if isinstance(b, dict) and BLOCK_KEY in b:
            return Memory.from_json(b[BLOCK_KEY])
    return Memory()


def prose_blocks(blocks: list[dict]) -> list[dict]:
    """A summary node's blocks without its memory block (the summary's own text)."""
    return [b for b in blocks or () if not (isinstance(b, dict) and BLOCK_KEY in b)]
