"""API keys: one wrapper that never shows itself, one scrubber, one log filter.

Invariant: a key value long enough to be a secret (``MIN_SECRET_LEN`` = 8
characters or more) never leaves ocw in an error message, an error body or a
record of the ``ocw``, ``httpx`` or ``httpcore`` loggers; a shorter value is
never masked at all.

Why a floor, and why 8. Masking a one-letter key replaced every ``x`` in a
server's error ("e<redacted>ceeds the available conte<redacted>t size") and
hid the words ocw needs to recognise an overflow. The short keys people type
are the placeholders local servers accept and document (``x``, ``EMPTY``,
``none``, ``dummy``, ``ollama``); they protect nothing, and masking them only
mangles text. Every key a hosted provider issues is far longer (20 to 200
characters: ``sk-…``, ``sk-ant-…``, ``sk-or-v1-…``, ``hf_…``), and a string of
8 or more characters is long enough that finding it by accident inside a
server's words is not a practical risk. A key at or above the floor is masked
wherever its whole value occurs (a substring search: a key echoed after
``%3D`` or glued to other text is still the key); nothing shorter than the
whole value is ever masked.

The log filter knows every live :class:`Secret` (a weak set, so a dropped
provider's key is forgotten with it; a PostgreSQL URL's password is one too)
plus ``OPENAI_API_KEY``, ``ANTHROPIC_API_KEY`` and ``PGPASSWORD`` from the
environment, read when a record is filtered. A
logger's filters apply only to the records that logger creates, not to its
children's, so :func:`install_log_filter` attaches the filter to every logger
of the three trees that exists when a provider is built (it imports httpcore
first so that httpcore's module-level loggers exist); it is idempotent and
runs on every provider build.
"""
from __future__ import annotations

import logging
import os
import re
import weakref
from typing import Iterable

MIN_SECRET_LEN = 8
REDACTED = "<redacted>"
# The environment variables that hold provider keys. The one table of providers
# (ocw/providers/registry.py) adds its own when it is imported, which the package
# root does before anything can be redacted; this layer imports nothing of ocw.
ENV_KEYS: list[str] = []


def watch_env(*names: str) -> None:
    """Treat these environment variables as secrets from now on (idempotent)."""
    ENV_KEYS.extend(n for n in names if n not in ENV_KEYS)


LOGGER_TREES = ("ocw", "httpx", "httpcore", "psycopg")
DB_ENV_KEYS = ("PGPASSWORD",)  # libpq's password variable (a PostgreSQL store's; see ocw/store/postgres/url.py)


def is_secret(value: object) -> bool:
    """Whether a key value is long enough to be worth masking (see module doc)."""
    return isinstance(value, str) and len(value) >= MIN_SECRET_LEN


def scrub_values(text: str | None, values: Iterable[str | None]) -> str | None:
    """``text`` with every whole occurrence of each secret value masked.

    Longest first, so a key that contains another key is masked whole."""
    if not text:
        return text
    for v in sorted({v for v in values if is_secret(v)}, key=len, reverse=True):
        if v in text:
            text = text.replace(v, REDACTED)
    return text


# `user:password@` anywhere in a value or a message: in a URL with two slashes, one
# slash or none (`postgresql:/me:PW@h/db`, `me:PW@h/db`), and a password holding
# `/`, `#`, `?` or `:` (greedy to the token's last `@`). A scheme's own colon is
# not a user's (`(?!//)` after it), so `postgresql://me:PW@h` masks `PW` only.
_CREDENTIAL = re.compile(r"(?<![^\s/'\"(=,;<\[])(?P<user>[^\s:/@'\"]*):(?!//)(?P<pw>[^\s'\"]*)@")
_PASSWORD_PARAM = re.compile(r"(?P<key>\b(?:ssl)?password=)(?P<pw>[^&\s'\"]*)", re.IGNORECASE)


def mask_credentials(text):
    """`text` with the password of every `user:password@` in it replaced by
    <redacted>, whatever the scheme's shape. Why a pattern rather than a parser:
    a mistyped URL is exactly what a parser rejects, and its error would quote
    the password; this runs before any parser or library sees the value."""
    if not isinstance(text, str):
        return text
    if "password=" in text.lower():
        text = _PASSWORD_PARAM.sub(lambda m: m["key"] + REDACTED if m["pw"] else m[0], text)
    if "@" not in text or ":" not in text:
        return text
    return _CREDENTIAL.sub(lambda m: f"{m['user']}:{REDACTED}@", text)


def has_credentials(text) -> bool:
    """Whether `text` holds a `user:password@` (see :func:`mask_credentials`)."""
    return mask_credentials(text) != text


class Secret:
    """An API key that never shows itself in a repr, a log line or a traceback."""

    __slots__ = ("_value", "__weakref__")

    def __init__(self, value: str | None):
        self._value = value or None
        if is_secret(self._value):
            _live.add(self)

    def get(self) -> str | None:
        return self._value

    def __bool__(self) -> bool:
        return self._value is not None

    def __repr__(self) -> str:
        return "<set>" if self._value else "<unset>"

    __str__ = __repr__

    def scrub(self, text: str | None) -> str | None:
        """``text`` with this key masked, if the key is long enough to be a secret."""
        return scrub_values(text, (self._value,))


_live: "weakref.WeakSet[Secret]" = weakref.WeakSet()


def known_values() -> list[str]:
    """Every key value the log filter masks right now: live Secrets and the env keys."""
    values = {s.get() for s in list(_live)}
    values.update(os.environ.get(k) for k in (*ENV_KEYS, *DB_ENV_KEYS))
    return [v for v in values if is_secret(v)]


def scrub(text: str | None) -> str | None:
    """``text`` with every known key and any `user:password@` masked (see
    :func:`known_values`, :func:`mask_credentials`)."""
    return mask_credentials(scrub_values(text, known_values()))


class SecretLogFilter(logging.Filter):
    """Masks known key values in a record's message, exception and stack text.

    It never drops a record: it rewrites it in place (``msg`` becomes the
    formatted, scrubbed text and ``args`` is emptied) only when a key occurs."""

    def filter(self, record: logging.LogRecord) -> bool:
        values = known_values()
        try:
            message = record.getMessage()
        except Exception:  # a broken format string is the logging module's to report
            return True
        clean = mask_credentials(scrub_values(message, values))
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = mask_credentials(scrub_values(record.exc_text, values))
        if record.stack_info:
            record.stack_info = mask_credentials(scrub_values(record.stack_info, values))
        return True


LOG_FILTER = SecretLogFilter()


def _in_trees(name: str) -> bool:
    return any(name == t or name.startswith(t + ".") for t in LOGGER_TREES)


# httpcore imports its HTTP/2 and SOCKS modules (and creates their loggers) only
# when first used: name them so that they are filtered from the start.
_LATE_LOGGERS = ("httpcore.http2", "httpcore.socks")


def install_log_filter() -> None:
    """Attach :data:`LOG_FILTER` to every existing logger of the ocw, httpx and
    httpcore trees (idempotent; see the module doc for why each logger)."""
    try:
        import httpcore  # noqa: F401  (creates httpcore's module-level loggers)
    except ImportError:  # pragma: no cover - httpx always brings it
        pass
    names = {n for n in list(logging.Logger.manager.loggerDict) if _in_trees(n)}
    names |= set(LOGGER_TREES) | set(_LATE_LOGGERS)
    for name in names:
        logger = logging.getLogger(name)
        if LOG_FILTER not in logger.filters:
            logger.addFilter(LOG_FILTER)


# Tool output and echoed text: values of secret-looking environment variables.
_SECRET_NAMES = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH")


def redact(text: str) -> str:
    """Replace the value of every secret-looking environment variable with [redacted]."""
    for name, value in os.environ.items():
        if len(value) >= 8 and any(k in name.upper() for k in _SECRET_NAMES) and value in text:
            text = text.replace(value, "[redacted]")
    return text
