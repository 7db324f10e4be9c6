"""Argument checks at ocw's edges: the public API, the magics and `%config`.

Invariant: a value that passes is one the store can hold and the rest of ocw
reads as meant — no bool passing for an int, no NaN, no number outside DuckDB's
INTEGER, no text DuckDB cannot encode (a lone surrogate). Every check raises
`InvalidArgument` (a ValueError and an OcwError) naming the argument and what
it takes, before anything is written or sent. Pure functions, no I/O.
"""
from __future__ import annotations

import json
import math
import re
import unicodedata
from urllib.parse import urlsplit

from ocw.text.errors import InvalidArgument

INT32_MAX = 2**31 - 1  # DuckDB INTEGER, the type of every stored count and window
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
# Bidirectional controls: in a name they make it read reversed or reordered where it is
# shown (U+202E in a widget's title), so a name that looks like another can be made.
_BIDI = re.compile(r"[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
MAX_NAME_CHARS = 1024  # a name is a label (a notebook's path at most), not a document


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def integer(value, arg: str, *, low: int = 1, high: int = INT32_MAX, zero_means: str | None = None) -> int:
    """A whole number in [low, high] (bools and floats refused, even 3.0)."""
    if not _is_int(value) or not low <= value <= high:
        takes = f"a whole number from {low} to {'2**31-1' if high == INT32_MAX else high}"
        if zero_means:
            takes += f" (0: {zero_means})"
        raise InvalidArgument(f"{arg} takes {takes}, not {_show(value)}")
    return value


def window(value, arg: str = "context_window") -> int:
    """A context window: a positive whole number of tokens DuckDB's INTEGER holds."""
    return integer(value, arg, low=1)


def seconds(value, arg: str) -> float:
    """A finite number of seconds above 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (0 < value < math.inf):
        raise InvalidArgument(f"{arg} takes a number of seconds above 0 (e.g. 60), not {_show(value)}")
    return float(value)


def unstorable(text: str) -> str | None:
    """Why DuckDB cannot hold `text` (a lone surrogate, where), or None."""
    try:
        text.encode("utf-8")
        return None
    except UnicodeEncodeError as e:
        return f"a lone surrogate (U+{ord(text[e.start]):04X}) at character {e.start + 1}"


_SURROGATE = re.compile("[\ud800-\udfff]")


def repaired(value):
    """Model- or tool-supplied text made storable: each lone surrogate becomes U+FFFD.
    (A paid reply is never refused after the fact; the user's own text is refused
    before the request instead, by `text`.)"""
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        return [repaired(v) for v in value]
    if isinstance(value, dict):
        return {repaired(k): repaired(v) for k, v in value.items()}
    return value


def text(value, arg: str, *, allow_empty: bool = True) -> str:
    """Text the store can hold."""
    if not isinstance(value, str):
        raise InvalidArgument(f"{arg} takes text (str), not {_show(value)}")
    if not allow_empty and not value.strip():
        raise InvalidArgument(f"{arg} is empty; it takes some text")
    why = unstorable(value)
    if why:
        raise InvalidArgument(f"{arg} contains {why}, which cannot be stored; remove that character "
                              "(it is half of an emoji or other character that was cut in two)")
    return value


def name(value, arg: str) -> str:
    """A session name or model name: one line of printable text, not blank."""
    text(value, arg, allow_empty=False)
    bad = _CONTROL.search(value)
    if bad:
        raise InvalidArgument(f"{arg} takes one line of printable text; it contains "
                              f"{unicodedata.name(bad.group(), repr(bad.group()))} at character {bad.start() + 1}")
    bidi = _BIDI.search(value)
    if bidi:
        raise InvalidArgument(f"{arg} takes text without bidirectional controls; it contains "
                              f"{unicodedata.name(bidi.group(), 'U+%04X' % ord(bidi.group()))} at character "
                              f"{bidi.start() + 1}")
    if len(value) > MAX_NAME_CHARS:
        raise InvalidArgument(f"{arg} takes at most {MAX_NAME_CHARS:,} characters, not {len(value):,}")
    if value != value.strip():
        raise InvalidArgument(f"{arg} takes text without leading or trailing spaces, not {shown(value)!r}")
    return value


def shown(value: str) -> str:
    """A name as every surface shows it: controls and bidirectional characters as
    escapes (`\\u202e`), so a name stored before they were refused reads the same, and
    in its own order, in `%session`, `%sessions` and the widgets."""
    if not _CONTROL.search(value) and not _BIDI.search(value):
        return value
    return "".join(c.encode("unicode_escape").decode("ascii") if _CONTROL.match(c) or _BIDI.match(c) else c
                   for c in value)


def model(value, arg: str = "model") -> str:
    """A model name as providers spell them (no spaces: `gpt-4o mini` is a typo)."""
    name(value, arg)
    if any(c.isspace() for c in value):
        raise InvalidArgument(f"{arg} takes a model name without spaces (e.g. gpt-4o-mini), not {value!r}")
    return value


def choice(value, arg: str, options) -> str:
    if not isinstance(value, str) or value not in options:
        raise InvalidArgument(f"{arg} takes one of {', '.join(options)}, not {_show(value)}")
    return value


def url(value, arg: str = "base_url") -> str:
    """An http(s) URL with a host."""
    if not isinstance(value, str):
        raise InvalidArgument(f"{arg} takes an http(s) URL, not {_show(value)}")
    parts = urlsplit(value.strip()) if not _CONTROL.search(value) else None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname or " " in value.strip():
        raise InvalidArgument(f"{arg} takes an http(s) URL such as http://localhost:11434/v1, not {value!r}")
    return value.strip()


def api_key(value, arg: str = "api_key") -> str:
    """A key as an HTTP header carries it. The message never shows the value."""
    if not isinstance(value, str) or not value:
        raise InvalidArgument(f"{arg} takes the key as text (None reads it from the environment)")
    if not value.isascii() or any(c.isspace() or not c.isprintable() for c in value):
        raise InvalidArgument(f"{arg} contains spaces, line breaks or non-ASCII characters, which no key has; "
                              "paste it again")
    return value


def json_object(value, arg: str) -> dict:
    """A dict the store can write as JSON (string keys, no NaN, storable text)."""
    if not isinstance(value, dict):
        raise InvalidArgument(f"{arg} takes a dict, not {_show(value)}")
    try:
        dumped = json.dumps(value, allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError) as e:
        raise InvalidArgument(f"{arg} must be plain JSON (str keys; str, number, bool, None, list, dict;"
                              f" no NaN or infinity): {e}") from None
    if json.loads(dumped) != value:  # non-str keys come back as strings: say so rather than change them
        raise InvalidArgument(f"{arg} must be plain JSON with str keys (tuples become lists, 1 becomes '1')")
    why = unstorable(dumped)
    if why:
        raise InvalidArgument(f"{arg} contains {why}, which cannot be stored")
    return value


def _show(value) -> str:
    r = repr(value)
    return (r[:60] + "…") if len(r) > 60 else r
