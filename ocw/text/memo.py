"""Content-addressed memos: what a pure function returned for a text, kept for the kernel's life.

A compaction reads every folded message in four passes (the summarizer, the memory, the
facts, what was lost), and each pass reads a message line by line or sentence by sentence
with functions of that text alone. Each such function's results are kept here, keyed by the
text (and whatever else the function reads), so a line is read once per kernel however
many passes and compactions read it — and a line read ahead, in the pause after the turn
that wrote it (ocw/conversation/read_ahead.py), is not read during the compaction at all.

Why a hit is always right: the key is everything the function reads and the function is
pure, so the value is exactly what a fresh call returns. Why it stays small: each entry
weighs its text's length, and past a memo's `max_size` characters the older half of the
entries is dropped (a dict keeps insertion order), so a memo holds about `max_size`
characters of text (and what was read from them) whatever a kernel reads; a dropped entry
is only read again. Two threads (the kernel's and the read-ahead worker) may add at once:
an item set is one step under the GIL, and the drop holds a lock and walks a snapshot of
the keys.
"""
from __future__ import annotations

import threading
import weakref
from typing import Callable, Hashable, TypeVar

V = TypeVar("V")

# The characters of text each of ocw's memos keeps: the lines of a ~1M-token tail (~3.5 MB),
# so a compaction of any window finds what was read ahead; what is read from them weighs a
# few times as much (sentences, words, matches). A 128k window's tail is a tenth of it.
TEXT_BOUND = 4_000_000


class Memo(dict):
    """A dict of results with a bound on the text it keeps: `keep(key, value, size)` adds an
    entry weighing `size` characters (its text's length; 1 by default); past `max_size` the
    older half of the entries goes. `get_or(key, fn, size)` returns the kept value or keeps fn()'s."""

    def __init__(self, max_size: int):
        super().__init__()
        if max_size < 2:
            raise ValueError("a memo keeps at least 2 characters")
        self.max_size = max_size
        self.size = 0
        self._sizes: dict = {}
        self._drop_lock = threading.Lock()
        _ALL.append(weakref.ref(self))

    def keep(self, key: Hashable, value: V, size: int = 1) -> V:
        if self.size + size > self.max_size:
            self._drop_older_half()
        if key not in self:
            self._sizes[key] = size
            self.size += size
        self[key] = value
        return value

    def get_or(self, key: Hashable, fn: Callable[[], V], size: int = 1) -> V:
        value = self.get(key, _MISSING)
        return self.keep(key, fn(), size) if value is _MISSING else value

    def _drop_older_half(self) -> None:
        with self._drop_lock:
            if self.size < self.max_size // 2:
                return  # another thread dropped them meanwhile
            keys = list(self)
            for key in keys[: max(1, len(keys) // 2)]:
                self.pop(key, None)
                self.size -= self._sizes.pop(key, 0)


_MISSING = object()
_ALL: list = []  # weak references to every memo made


def forget_all() -> None:
    """Empty every memo (a test starts from a kernel that has read nothing)."""
    _ALL[:] = [r for r in _ALL if r() is not None]
    for memo in [r() for r in _ALL]:
        if memo is None:
            continue
        with memo._drop_lock:
            memo.clear()
            memo._sizes.clear()
            memo.size = 0
