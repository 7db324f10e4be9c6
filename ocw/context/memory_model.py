"""The session memory from a real summarizer: its structured answer, parsed and grounded.

A real model is asked (ocw/text/prompts.py MEMORY_REQUEST) to write the memory
as JSON between <memory> tags after its summary, given the current memory and
the new turns. This module serializes the current memory for the request
(`current_json`), splits an answer into the summary's prose and the memory
(`split_answer`) and turns the memory into events (`events_of`) that
`memory_rules.update` merges with the deterministic pass, latest wins.

Invariants, and why they hold:
- The memory block never reaches the prose: `split_answer` cuts everything from
  the opening tag on, closed or not, so a broken block is never stored as summary.
- An answer that does not parse gives None, and only None (never a partial
  dict): the caller then keeps the deterministic memory and says so once.
- Grounded: an item's turn is the last folded turn whose text holds its value
  (as whole tokens)
  (else the previous memory's item holding it); a value found in neither has no
  turn and yields no event, so an invented column or date is never planted.
  Retractions and closings are grounded the same way. The model's own turn
  numbers are never read.
"""
from __future__ import annotations

import json
import re

from ocw.context.memory import Event, Item, Memory, norm_key
from ocw.context.memory_rules import clean
from ocw.text.prompts import CURRENT_MEMORY_CLOSE, CURRENT_MEMORY_OPEN, MEMORY_CLOSE, MEMORY_OPEN

SECTIONS = ("instructions", "decisions", "settings", "todos", "working_set", "retracted", "closed")
_MAX_VALUE = 400  # characters: a longer "value" is prose, not a memory item


def to_answer(memory: Memory) -> dict:
    """The memory's current items in the shape the model is asked to answer in."""
    cur = memory.current
    return {"instructions": [i.value for i in cur("instruction")],
            "decisions": [{"chosen": i.value, "over": i.detail} for i in cur("decision")],
            "settings": [{"name": i.key, "value": i.value} for i in cur("setting")],
            "todos": [i.value for i in cur("todo")],
            "working_set": [{"kind": i.detail or "item", "value": i.value}
                            for i in sorted(cur("working"), key=lambda i: -i.turn)],
            "retracted": [], "closed": []}


def dumps(answer: dict) -> str:
    return json.dumps(answer, ensure_ascii=False, separators=(",", ":"))


def current_json(memory: Memory) -> str:
    """The request's current-memory section."""
    return current_json_of(to_answer(memory))


def current_json_of(answer: dict) -> str:
    """The current-memory section for a later call of the same compaction (the
    previous call's answer is the memory so far). Empty sections are left out: the
    request names every key, and a small window has no tokens to spare."""
    return f"{CURRENT_MEMORY_OPEN}\n{dumps({k: v for k, v in answer.items() if v})}\n{CURRENT_MEMORY_CLOSE}"


def split_answer(text: str) -> tuple[str, dict | None]:
    """(the summary's prose, the parsed memory or None). The prose is what precedes
    the opening tag (and follows a closing one); nothing of the block stays in it."""
    text = text or ""
    start = text.find(MEMORY_OPEN)
    if start < 0:
        return text.strip(), None
    end = text.find(MEMORY_CLOSE, start)
    prose = text[:start] + (text[end + len(MEMORY_CLOSE):] if end >= 0 else "")
    if end < 0:
        return prose.strip(), None
    return prose.strip(), parse(text[start + len(MEMORY_OPEN):end])


def parse(raw: str) -> dict | None:
    """The memory JSON (a ```json fence tolerated), or None if it is not an object with
    at least one known section holding a list."""
    raw = raw.strip()
    if raw.startswith("```"):
        raw = raw.strip("`").removeprefix("json").strip()
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    if not isinstance(doc, dict) or not any(isinstance(doc.get(k), list) for k in SECTIONS):
        return None
    return {k: doc[k] for k in SECTIONS if isinstance(doc.get(k), list)}


def _str(x) -> str:
    return x.strip() if isinstance(x, str) and 0 < len(x.strip()) <= _MAX_VALUE else ""


def events_of(answer: dict | None, turns: list[tuple[int, str, str]], old: Memory) -> list[Event]:
    """Events of a parsed answer, each at the turn its value comes from; values found
    neither in the folded turns nor in the old memory are dropped."""
    if not answer:
        return []
    texts = [(t, clean(x).lower()) for t, _, x in turns]
    olds = {i.value.lower(): i.turn for i in old.items}

    def turn_of(value: str) -> int | None:
        v = value.lower()
        # Whole tokens: "64" is not in "filler64", "0.45" is not in "10.457".
        pat = re.compile(r"(?<![\w.])" + re.escape(v) + r"(?![\w]|\.\d)")
        hits = [t for t, x in texts if pat.search(x)]
        return max(hits) if hits else olds.get(v)

    out: list[Event] = []

    def add(kind: str, key: str, value: str, detail: str = "") -> None:
        t = turn_of(value)
        if t is not None and key and (not detail or kind != "decision" or turn_of(detail) is not None):
            out.append(Event("add", t, Item(kind, key, value, t, detail=detail)))

    for v in map(_str, answer.get("instructions", ())):
        if v:
            add("instruction", norm_key(v)[:60], v)
    for d in answer.get("decisions", ()):
        if isinstance(d, dict) and _str(d.get("chosen")):
            add("decision", norm_key(_str(d["chosen"])), _str(d["chosen"]), _str(d.get("over")))
    for s in answer.get("settings", ()):
        if isinstance(s, dict) and _str(s.get("name")) and _str(s.get("value")):
            add("setting", norm_key(_str(s["name"])), _str(s["value"]))
    for v in map(_str, answer.get("todos", ())):
        if v:
            add("todo", norm_key(" ".join(v.split()[:6])), v)
    for w in answer.get("working_set", ()):
        if isinstance(w, dict) and _str(w.get("value")):
            kind = _str(w.get("kind")) or "item"
            add("working", norm_key(f"{kind}:{_str(w['value'])}"), _str(w["value"]), kind)
    for action, section in (("retract", "retracted"), ("close", "closed")):
        for v in map(_str, answer.get(section, ())):
            t = turn_of(v) if v else None
            if t is not None:
                out.append(Event(action, t, target=v))
    return out
