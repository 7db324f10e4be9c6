"""ocw's typed errors.

One class per failure kind. The notebook layer turns every `OcwError` into a
one-line IPython `UsageError` whose text says what to do (`hint`); set
`OCW_DEBUG=1` to see tracebacks instead.
"""
from __future__ import annotations


class OcwError(Exception):
    """Base class. `hint` is the one line a user reads: what happened, what to do."""

    hint: str = ""

    def __init__(self, message: str = "", *, hint: str | None = None):
        super().__init__(message)
        if hint is not None:
            self.hint = hint

    # An error whose text is ocw's own carries its ocw.text.i18n key, so a message that
    # quotes it can say it in the user's language (a provider's words stay as said).
    key: str | None = None
    params: dict = {}

    def user_message(self) -> str:
        msg = str(self) or self.__class__.__name__
        return f"{msg} — {self.hint}" if self.hint else msg

    @classmethod
    def localized(cls, key: str, **params) -> "OcwError":
        """An error in ocw's own words: English text, plus the key to say it in another language."""
        from ocw.text.i18n import text

        err = cls(text(key, "en", **params))
        err.key, err.params = key, dict(params)
        return err


class InvalidArgument(OcwError, ValueError):
    """A bad value handed to ocw's public API (`Store`, `Session` methods).

    The one rule for the API: every bad argument raises this class before
    anything is written. It is a `ValueError`, so Python code catches it the usual
    way, and an `OcwError`, so the notebook shows it as one line. The message
    names the argument and what it takes."""


class CommandUsage(OcwError):
    """A command typed wrongly (an unknown option, a count that is not one): the
    message says how it is typed."""


class StoreError(OcwError):
    """The DuckDB file could not be opened, read or written."""


class BadDatabasePath(StoreError, InvalidArgument):
    """The database path cannot name an ocw file (empty, a directory, under a file...)."""

    hint = "set OCW_DB or %config Ocw.db to a file path such as ~/ocw.duckdb"


class ForeignDatabase(StoreError):
    """The file is a DuckDB database that ocw did not write: ocw leaves it alone."""

    hint = "point OCW_DB or %config Ocw.db at a new file, or at one ocw made"


class NewerSchema(StoreError):
    """The file was written by a newer ocw (a higher schema version)."""

    hint = "upgrade ocw (pip install -U ocw), or use another file"


class SessionNotFound(StoreError):
    hint = "list sessions with %sessions, or start one with %%chat"


class StoreBusy(StoreError):
    hint = "another process holds the database file; try again, or set OCW_DB to another file"


class CompactionInProgress(OcwError):
    hint = "wait for the running compaction to finish"


class ConfigError(OcwError):
    """A configuration value is invalid."""


class ProviderError(OcwError):
    """A model provider failed. Carries what the server said, never the key."""

    hint = "check %ocw doctor"

    def __init__(
        self,
        message: str = "",
        *,
        status: int | None = None,
        request_id: str | None = None,
        body: str | None = None,
        hint: str | None = None,
    ):
        super().__init__(message, hint=hint)
        self.status = status
        self.request_id = request_id
        self.body = body

    def __repr__(self) -> str:
        return (
            f"{self.__class__.__name__}({str(self)!r}, status={self.status!r}, "
            f"request_id={self.request_id!r})"
        )


class ContextOverflowError(ProviderError):
    """The prompt is larger than the model's context window (413, context_length_exceeded,
    Anthropic "prompt is too long"). Never retried as-is: the turn compacts and retries once.

    ``limit`` is the window the server stated and ``prompt_tokens`` the prompt size
    it counted, read from its own words (ocw.providers.overflow); None when it
    did not say. A ``prompt_tokens`` under ``limit`` means the prompt fits but
    the room asked for the reply (max_tokens) does not."""

    hint = "run %compact, or start a new session with %new"

    def __init__(self, message: str = "", *, limit: int | None = None, prompt_tokens: int | None = None, **kw):
        super().__init__(message, **kw)
        self.limit = limit
        self.prompt_tokens = prompt_tokens

    def __repr__(self) -> str:
        return (
            f"{self.__class__.__name__}({str(self)!r}, status={self.status!r}, "
            f"request_id={self.request_id!r}, limit={self.limit!r}, prompt_tokens={self.prompt_tokens!r})"
        )


class RateLimitError(ProviderError):
    hint = "the provider is rate limiting; wait a moment and run the cell again"

    def __init__(self, message: str = "", *, retry_after: float | None = None, **kw):
        super().__init__(message, **kw)
        self.retry_after = retry_after


class AuthError(ProviderError):
    hint = "set the provider's API key (OPENAI_API_KEY / ANTHROPIC_API_KEY) and check it with %ocw doctor"


class ProviderTimeout(ProviderError):
    hint = "the provider did not answer in time; run the cell again or raise %config Ocw.timeout"


class ProviderConnectionError(ProviderError):
    hint = "could not reach the provider; check OCW_BASE_URL and %ocw doctor"


class ServerError(ProviderError):
    hint = "the provider had an internal error; run the cell again later"


class MalformedResponse(ProviderError):
    hint = "the provider sent a response ocw cannot read; check OCW_BASE_URL points at a compatible API"


class EmptyReply(ProviderError):
    """The provider answered, validly, with no text and no tool call."""

    hint = "nothing was stored; run the cell again, or try another model (%%chat --model ...)"


class BadRequest(ProviderError):
    hint = "the provider rejected the request; check the model name and options"


class ToolError(OcwError):
    """A tool could not be registered (bad type hint, bad name)."""
