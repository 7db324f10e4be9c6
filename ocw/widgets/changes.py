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
- `revision` (sent as ordinary state, before the changes) is the latest revision. A view
  whose state is older than it — rendered from a model whose state predates changes, or
  one that missed a change (a message with `rev` other than its own + 1) — asks for a
  snapshot (`snapshot()`) instead of showing something wrong.

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
    if p < n - s or p < m - s:
        ops.append({"name": name, "at": p, "remove": n - p - s, "items": list(new[p:m - s])})
    return ops


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
    revision = t.Int(0, help="The latest revision of the traitlets sent as changes.").tag(sync=True)
    snapshot_revision = t.Int(0, help="The revision the whole state is at (equal to revision here; "
                                      "a front end keeps the value it last got whole).").tag(sync=True)

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
        the held state (whose `revision` tells a view to expect them)."""
        if self._holding_sync:
            yield
            return
        msg = None
        try:
            with super().hold_sync():
                try:
                    yield
                finally:
                    msg = self._take_changes()  # its `revision` joins the held state
        finally:
            self._send_changes(msg)

    def _take_changes(self) -> dict | None:
        old, self._old = self._old, {}
        ops = [op for name, value in old.items() for op in value_ops(name, value, getattr(self, name))]
        if not ops:
            return None
        rev = self.revision + 1
        self.snapshot_revision = rev
        self.revision = rev
        return {"kind": CHANGES_KIND, "rev": rev, "ops": ops}

    def _flush(self) -> None:
        self._send_changes(self._take_changes())  # `revision` is sent (as state) inside, first

    def _send_changes(self, msg: dict | None) -> None:
        # Widget.send's message, on the comm itself: a command's answer (anywidget answers
        # through self.send) and the changes never share a path.
        if msg is not None and self.comm is not None:
            self._send({"method": "custom", "content": msg})

    def snapshot(self) -> dict:
        """The whole state of the changed traitlets, for a view that is behind."""
        return {"rev": self.revision, "state": {name: getattr(self, name) for name in self._CHANGES}}


__all__ = ["CHANGES_KIND", "Changes", "list_ops", "value_ops"]
