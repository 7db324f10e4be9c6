"""Synced traitlets that travel as changes, not as state (issue 28 item 2).

ipywidgets sends a traitlet's whole value each time it is assigned: the chat widget's
`messages` (every loaded message) went over the comm whole on every turn. A widget that
mixes in `Changes` names its large traitlets in `_CHANGES`; for those:

- The Python value is always the whole, current value, and the traitlets stay
  `sync=True`: a front end that opens the comm or asks for the state (a page reload,
  Voilà, a second browser) gets them whole from `get_state()`, with
  `snapshot_revision` — the revision that state is at.
- An assignment is never sent as state. Each burst of assignments (one `hold_sync`, or
  one assignment outside it) becomes one custom message `{"kind": "ocw-changes", "rev":
  r, "ops": [...]}`: a list's splice (`at`, `remove`, `items`: only what differs between
  the old and new value), a string's kept prefix plus what follows (`keep` counted in
  UTF-16 code units, as JavaScript indexes strings), or the new value of anything else.
  So a turn costs the comm what is new, whatever is loaded.
- `snapshot_revision` is never sent as state either: a front end has the value its
  whole state came with. A view asks (`snapshot()`, with the revision it holds) when it is
  rendered — its model's state may predate changes it never saw — and whenever a message's
  `rev` is not its own + 1 (it missed one, e.g. across a reconnection): the answer is the
  whole state only when the view is behind. So nothing is resent per turn to keep views
  current, and no view shows something wrong.

- A long string the browser already holds in a `_HELD` traitlet (the chat's `pending`
  message and `streaming` reply) is not sent again when a list entry repeats it (the
  stored message the turn ends with): the entry's field reads `{"$held": name}`, the value
  `name` held before the message. So a turn's text crosses the comm once.

Why the splices are exact: the browser applies each message's ops in order to the value
it holds at `rev - 1`, and Python computed them from its value at `rev - 1` (recorded at
the first assignment of the burst) to its value at `rev`; both sides hold the same
value at every revision, or the revision check sends the view to `snapshot()`.
"""
from __future__ import annotations

import contextlib
from typing import Any

import traitlets as t

CHANGES_KIND = "ocw-changes"


def _same(a: Any, b: Any) -> bool:
    return a is b or a == b


def list_ops(name: str, old: list, new: list) -> list[dict]:
    """Splices that turn `old` into `new`: a front trim when `new` starts inside `old`
    (a list that keeps only its newest entries), then one splice of what lies between
    the common prefix and the common suffix. Equal lists: none."""
    ops: list[dict] = []
    if old and new and not _same(old[0], new[0]):
        k = next((i for i in range(1, len(old)) if _same(old[i], new[0])), 0)
        if k:
            ops.append({"name": name, "at": 0, "remove": k, "items": []})
            old = old[k:]
    n, m, p = len(old), len(new), 0
    while p < n and p < m and _same(old[p], new[p]):
        p += 1
    s = 0
    while s < n - p and s < m - p and _same(old[n - 1 - s], new[m - 1 - s]):
        s += 1
    if n - p - s == m - p - s == 1 and isinstance(old[p], dict) and isinstance(new[p], dict):
        ops.append(_item_op(name, p, old[p], new[p]))  # one entry changed (the current branch grew)
    elif p < n - s or p < m - s:
        ops.append({"name": name, "at": p, "remove": n - p - s, "items": list(new[p:m - s])})
    return ops


def _item_op(name: str, i: int, old: dict, new: dict) -> dict:
    """Entry i's changed keys (`set`) and dropped ones (`drop`), or the entry whole if that is as short."""
    changed = {k: v for k, v in new.items() if k not in old or not _same(old[k], v)}
    dropped = [k for k in old if k not in new]
    if len(changed) + len(dropped) >= len(new):
        return {"name": name, "at": i, "remove": 1, "items": [new]}
    return {"name": name, "index": i, "set": changed, "drop": dropped}


HELD_MIN = 32  # shorter strings are sent again: a reference would save nothing


def _reuse(ops: list[dict], held: dict[str, str]) -> list[dict]:
    """`ops` with each list entry's string field that equals a held value replaced by a
    reference to it (new dicts: the widget's own values are never changed)."""
    if not held:
        return ops

    def ref(entry):
        if not isinstance(entry, dict):
            return entry
        return {k: {"$held": held[v]} if isinstance(v, str) and v in held else v for k, v in entry.items()}

    out = []
    for op in ops:
        if "items" in op:
            op = dict(op, items=[ref(e) for e in op["items"]])
        elif "set" in op:
            op = dict(op, set=ref(op["set"]))
        out.append(op)
    return out


def _common_prefix(a: str, b: str) -> int:
    """The length of a's and b's common prefix, by halving (slices compare in C)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def value_ops(name: str, old: Any, new: Any) -> list[dict]:
    """The ops that turn `old` into `new` in the browser (see the module docstring)."""
    if _same(old, new):
        return []
    if isinstance(old, list) and isinstance(new, list):
        return list_ops(name, old, new)
    if isinstance(old, str) and isinstance(new, str):
        p = _common_prefix(old, new)
        if p:
            return [{"name": name, "keep": len(old[:p].encode("utf-16-le")) // 2, "add": new[p:]}]
    return [{"name": name, "value": new}]


class Changes(t.HasTraits):
    """Mix into an ipywidgets widget (before the widget class): see the module docstring."""

    _CHANGES: tuple[str, ...] = ()
    _HELD: tuple[str, ...] = ()  # string traitlets (of _CHANGES) whose held value a list entry may reuse
    snapshot_revision = t.Int(0, help="The revision of the traitlets sent as changes (a front end keeps "
                                      "the value its whole state came with).").tag(sync=True)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._old: dict[str, Any] = {}  # name -> its value at the last revision, while a burst runs
        super().__init__(*args, **kwargs)

    def notify_change(self, change: Any) -> None:
        name = change.get("name")
        if name in self._CHANGES and change.get("type") == "change" and getattr(self, "_old", None) is not None:
            self._old.setdefault(name, change["old"])
            super().notify_change(change)
            if not self._holding_sync:
                self._flush()
            return
        super().notify_change(change)

    def _should_send_property(self, key: str, value: Any) -> bool:
        if key in self._CHANGES or key == "snapshot_revision":
            return False  # sent as changes (_flush), or whole by get_state()
        return super()._should_send_property(key, value)

    @contextlib.contextmanager
    def hold_sync(self):
        """ipywidgets' hold_sync, plus: the burst's changes go out as one message after
        the held state."""
        if self._holding_sync:
            yield
            return
        msg = None
        try:
            with super().hold_sync():
                try:
                    yield
                finally:
                    msg = self._take_changes()
        finally:
            self._send_changes(msg)

    def _take_changes(self) -> dict | None:
        old, self._old = self._old, {}
        held = {old.get(n, getattr(self, n)): n for n in self._HELD}  # what the browser holds now
        held = {v: n for v, n in held.items() if isinstance(v, str) and len(v) >= HELD_MIN}
        ops = [op for name, value in old.items()
               for op in _reuse(value_ops(name, value, getattr(self, name)), held)]
        if not ops:
            return None
        self.snapshot_revision = rev = self.snapshot_revision + 1
        return {"kind": CHANGES_KIND, "rev": rev, "ops": ops}

    def _flush(self) -> None:
        self._send_changes(self._take_changes())

    def _send_changes(self, msg: dict | None) -> None:
        # Widget.send's message, on the comm itself: a command's answer (anywidget answers
        # through self.send) and the changes never share a path.
        if msg is not None and self.comm is not None:
            self._send({"method": "custom", "content": msg})

    def snapshot(self, rev: Any = None) -> dict:
        """{rev}, and the whole state of the changed traitlets when `rev` (the revision a
        view holds) is not the current one."""
        if rev == self.snapshot_revision and isinstance(rev, int):
            return {"rev": rev}
        return {"rev": self.snapshot_revision, "state": {name: getattr(self, name) for name in self._CHANGES}}


__all__ = ["CHANGES_KIND", "Changes", "list_ops", "value_ops"]
