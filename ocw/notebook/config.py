"""ocw's options: a traitlets Configurable, so `%config Ocw.<option>` and
`ipython_config.py` work; environment variables give the common defaults.

Secrets come from the environment (OPENAI_API_KEY / ANTHROPIC_API_KEY) or
`%config Ocw.api_key`; they are never written to the DuckDB file, and the
repr of this object masks them.

Every option is checked where it comes in: a validator per option for
`%config` and `ipython_config.py` (a refused value leaves the old one), and the
same checks (ocw.text.checks) on the environment defaults, which traitlets does not
validate — a bad OCW_* value is a one-line ConfigError naming the variable.
"""
from __future__ import annotations

import os
import re

from traitlets import Bool, Enum, Float, Int, TraitError, Unicode, default, validate
from traitlets.config import Configurable

from ocw.text import checks
from ocw.text.errors import BadDatabasePath, ConfigError, InvalidArgument, OcwError

from ocw.providers.registry import NAMES as PROVIDER_NAMES  # noqa: E402  (the one table of providers)

KNOWN_WINDOWS = [  # (model prefix, context window), most specific first
    ("gpt-4o", 128_000), ("gpt-4.1", 1_047_576), ("gpt-4.5", 128_000), ("gpt-5", 400_000),
    ("o1", 200_000), ("o3", 200_000), ("o4", 200_000), ("gpt-4-turbo", 128_000), ("gpt-4", 8_192),
    ("gpt-3.5", 16_385), ("claude", 200_000), ("ocw-offline", 8_192),
]
DEFAULT_WINDOW = 8_192


def known_context_window(model: str | None) -> int:
    """The model's window when we know it; local and unknown models get 8k (set
    OCW_CONTEXT_WINDOW to the real figure)."""
    m = (model or "").lower().rsplit("/", 1)[-1]
    for prefix, window in KNOWN_WINDOWS:
        if m.startswith(prefix):
            return window
    return DEFAULT_WINDOW


def parse_auto_compact(value) -> float:
    """`off`/`0`/`false` → 0.0 (off); a ratio 0.1–0.99 or a percent 10–99 → ratio.
    Anything else is a ConfigError that names the value (a typo in OCW_AUTO_COMPACT
    must not silently turn automatic compaction off or make every cell fail)."""
    raw = value
    if isinstance(value, str):
        v = value.strip().lower().rstrip("%").strip()
        if v in ("off", "no", "false", "0", "none", ""):
            return 0.0
        try:
            value = float(v)
        except ValueError:
            value = None
    try:
        value = float(value)
    except (TypeError, ValueError):
        value = float("nan")
    if value > 1:
        value /= 100.0
    if not (value == 0 or 0.1 <= value < 1.0):  # NaN fails both
        raise ConfigError(f"OCW_AUTO_COMPACT={raw!r} is not a threshold",
                          hint="use a share of the window (0.8), a percent (80) or off")
    return value


def _trait(check, value, arg: str, **kw):
    """Run an ocw.text.checks function for a validator: its InvalidArgument becomes the
    TraitError traitlets expects (IPython's %config prints it in one line)."""
    try:
        return check(value, arg, **kw)
    except InvalidArgument as e:
        raise TraitError(str(e)) from None


_ON, _OFF = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def _switch_from_env(var: str, unset: bool, hint: str) -> bool:
    """An on/off variable: unset or empty is `unset`; anything but on/off words is refused
    by name (a typo must not silently mean the default)."""
    v = os.environ.get(var, "").strip().lower()
    if not v:
        return unset
    if v in _ON or v in _OFF:
        return v in _ON
    raise ConfigError(f"{var}={os.environ[var]!r} is neither on nor off", hint=hint)


def _from_env(var: str, check, hint: str):
    value = os.environ.get(var) or None
    if value is None:
        return None
    try:
        return check(value, var)
    except InvalidArgument as e:
        raise ConfigError(f"{var}={value!r}: {e}", hint=hint) from None


def _provider_name(value, arg: str) -> str:
    """A provider's name (any case, spaces around allowed), lowercased."""
    return checks.choice(value.strip().lower() if isinstance(value, str) else value, arg, PROVIDER_NAMES)


def ownership_check(value, *, look_inside: bool = False) -> str:
    """The database path `value` names (ocw.store.duckdb.ownership.check_path); with look_inside,
    an existing DuckDB file must also be ocw's (a read-only look; skipped while
    another process holds the file — the store checks again when it opens it)."""
    from ocw.store.duckdb import ownership
    from ocw.store.postgres import url as pg_url

    if pg_url.is_postgres_url(value):  # before any file check: a URL never becomes a folder
        url = pg_url.checked(value)
        if look_inside:
            import importlib.util

            if importlib.util.find_spec("psycopg") is None:
                from ocw.store.postgres.conn import driver

                driver()  # the one-line "not installed" error
        return url
    path = ownership.check_path(value)
    if look_inside and ownership.is_existing_database(path):
        ownership.classify_file(path)
    return path


class WholeNumber(Int):
    """An Int that refuses bools: traitlets would store True as 1 (4e9 stays 4000000000,
    as traitlets documents)."""

    def validate(self, obj, value):
        if isinstance(value, bool):
            self.error(obj, value)
        return super().validate(obj, value)


class Number(Float):
    """A Float that refuses bools: traitlets would store True as 1.0."""

    def validate(self, obj, value):
        if isinstance(value, bool):
            self.error(obj, value)
        return super().validate(obj, value)


class SecretStr(str):
    """An API key: a real str for the provider, but its repr (what `%config Ocw` and
    an `Out[]` show) never reveals it."""

    def __repr__(self) -> str:
        return "'<hidden>'"


class Ocw(Configurable):
    """Options for ocw (`%config Ocw` lists them)."""

    provider = Enum(list(PROVIDER_NAMES), config=True,
                    help="Which model provider to use: offline (built in, no key), openai (any OpenAI-compatible server), anthropic. Env: OCW_PROVIDER.")
    model = Unicode(allow_none=True, config=True, help="Model name; default depends on the provider. Env: OCW_MODEL.")
    base_url = Unicode(allow_none=True, config=True,
                       help="Base URL of the provider's API, e.g. http://localhost:11434/v1 for Ollama. Env: OCW_BASE_URL.")
    api_key = Unicode(None, allow_none=True, config=True,
                      help="API key. Prefer OPENAI_API_KEY / ANTHROPIC_API_KEY in the environment; never stored.")
    context_window = WholeNumber(0, config=True,
                         help="Context window in tokens, 1 to 2**31-1; 0 uses the model's known window (8192 when unknown). Env: OCW_CONTEXT_WINDOW.")
    summary_provider = Unicode(None, allow_none=True, config=True,
                               help="A summarizer of its own for compactions (manual, automatic, reactive): its "
                                    "provider (offline, openai, anthropic); its key comes from the same place as "
                                    "that provider's. Unset (and summary_model, summary_base_url unset): the chat "
                                    "model summarizes. Env: OCW_SUMMARY_PROVIDER.")
    summary_model = Unicode(None, allow_none=True, config=True,
                            help="The summarizer's model (default: the chat model on the chat's provider, else "
                                 "that provider's default); it has its own window and calibration. "
                                 "Env: OCW_SUMMARY_MODEL.")
    summary_base_url = Unicode(None, allow_none=True, config=True,
                               help="The summarizer's server, e.g. http://localhost:8081/v1 (default: the chat's "
                                    "base URL on the chat's provider). Env: OCW_SUMMARY_BASE_URL.")
    db = Unicode("", config=True, help="DuckDB file holding the sessions (a new file, or one ocw wrote; ':memory:' keeps nothing), or a team's PostgreSQL database as postgresql://user@host/database (the password is never shown or kept; PGPASSWORD, ~/.pgpass and service files work). Env: OCW_DB; default ~/.local/share/ocw/ocw.duckdb.")
    lang = Enum(["en", "zh"], config=True, help="Language of system messages. Env: OCW_LANG.")
    auto_compact = Number(0.8, config=True,
                         help="Compact automatically before a request whose budget reaches this share of the window (0 = off). Env: OCW_AUTO_COMPACT (e.g. 0.8, 80 or off).")
    reactive_compact = Enum(["auto", "ask", "off"], "auto", config=True,
                            help="What a request the server refuses as too long does: auto (compact and retry once), "
                                 "ask (stop the cell and offer %compact, %compact N or %new), off (stop the cell with "
                                 "the refusal and the fixes). Neither ask nor off compacts anything.")
    system_prompt = Unicode("You are a helpful assistant working inside a Jupyter notebook. Answer in Markdown.",
                            config=True, help="System prompt for new sessions.")
    max_output_tokens = WholeNumber(4096, config=True, help="Most tokens a reply may have (1 to 2**31-1).")
    timeout = Number(60.0, config=True, help="Seconds to wait for the provider (above 0).")
    lock_timeout = Number(10.0, config=True,
                          help="Seconds a write waits while another kernel holds the session (the DuckDB file, or "
                               "the session's row on PostgreSQL) before giving up in one line that names it "
                               "(above 0).")
    max_retries = WholeNumber(2, config=True, help="Retries on 408/409/429/5xx, honoring Retry-After (0 to 10).")
    tools = Bool(False, config=True, help="Offer the built-in read-only tools (variables, describe, read_file) to the model.")
    max_tool_steps = WholeNumber(8, config=True, help="Most model→tool→model steps in one turn (1 to 1000).")
    tool_result_cap = WholeNumber(4000, config=True, help="Tokens of one tool result the model reads (at least 1); the rest is cut (the store keeps it whole).")
    debug = Bool(False, config=True, help="Show tracebacks instead of one-line errors. Env: OCW_DEBUG=1.")
    prune_tool_output = Bool(True, config=True,
                             help="Before compacting at the auto-compact line, replace old tool results (beyond the "
                                  "newest ones that fit the kept tail) by one-line stubs in what the model reads; "
                                  "no LLM call, the store keeps them whole. False turns it off.")
    status_line = Bool(True, config=True,
                       help="After each %%chat reply, print one quiet line with the context figure (percent, "
                            "tokens of the window, the auto-compact line, compactions so far). False turns it off.")
    warm_up = Bool(True, config=True,
                   help="After %load_ext, load the tokenizer and the database driver in a background thread, so the "
                        "first %%chat is about as quick as the next ones (nothing is opened or sent). Env: OCW_WARM_UP=0 "
                        "turns it off.")

    @default("provider")
    def _default_provider(self):
        value = os.environ.get("OCW_PROVIDER", "offline").strip().lower() or "offline"
        if value not in PROVIDER_NAMES:
            # Falling back to the offline model would answer as if the typo had worked.
            raise ConfigError(f"OCW_PROVIDER={value!r} is not a provider",
                              hint=f"use one of {', '.join(PROVIDER_NAMES)}, or %config Ocw.provider = 'openai'")
        return value

    @default("model")
    def _default_model(self):
        return _from_env("OCW_MODEL", checks.model, "use a model name such as gpt-4o-mini, or unset it")

    @default("base_url")
    def _default_base_url(self):
        return _from_env("OCW_BASE_URL", checks.url, "use a URL such as http://localhost:11434/v1, or unset it")

    @default("summary_provider")
    def _default_summary_provider(self):
        return _from_env("OCW_SUMMARY_PROVIDER", _provider_name,
                         f"use one of {', '.join(PROVIDER_NAMES)}, or unset it for the chat's provider")

    @default("summary_model")
    def _default_summary_model(self):
        return _from_env("OCW_SUMMARY_MODEL", checks.model, "use a model name such as gpt-4o-mini, or unset it")

    @default("summary_base_url")
    def _default_summary_base_url(self):
        return _from_env("OCW_SUMMARY_BASE_URL", checks.url,
                         "use a URL such as http://localhost:8081/v1, or unset it")

    @default("context_window")
    def _default_window(self):
        v = os.environ.get("OCW_CONTEXT_WINDOW", "").strip().replace("_", "").replace(",", "")
        if not v:
            return 0
        if not re.fullmatch(r"[0-9]+", v) or int(v) > checks.INT32_MAX:
            raise ConfigError(f"OCW_CONTEXT_WINDOW={v!r} is not a number of tokens",
                              hint="use a whole number up to 2147483647 such as 128000, or 0 for the model's known window")
        return int(v)

    @default("db")
    def _default_db(self):
        from ocw.store.postgres import url as pg_url
        from ocw.store.paths import default_db_path

        value = default_db_path()
        try:
            return ownership_check(value)
        except BadDatabasePath as e:
            shown = pg_url.redact(value)
            raise BadDatabasePath(f"OCW_DB={shown!r}: {e}" if os.environ.get("OCW_DB") else str(e)) from None

    @default("lang")
    def _default_lang(self):
        raw = os.environ.get("OCW_LANG", "")
        v = raw.strip().lower()
        if v in ("", "c", "posix") or re.match(r"en([_.@-]|$)", v):
            return "en"
        if re.match(r"zh([_.@-]|$)", v):
            return "zh"
        raise ConfigError(f"OCW_LANG={raw!r} is not a language ocw speaks",
                          hint="use en or zh (zh_CN.UTF-8 and the like work too), or unset it")

    @default("auto_compact")
    def _default_auto(self):
        v = os.environ.get("OCW_AUTO_COMPACT")
        return parse_auto_compact(v) if v is not None else 0.8

    @default("debug")
    def _default_debug(self):
        return _switch_from_env("OCW_DEBUG", False, "use OCW_DEBUG=1 for tracebacks, 0 (or unset) for one-line errors")

    @default("warm_up")
    def _default_warm_up(self):
        return _switch_from_env("OCW_WARM_UP", True,
                                "use OCW_WARM_UP=0 to load lazily, 1 (or unset) to warm up after %load_ext")

    # -- validators: one per option (%config, ipython_config.py, Ocw(...)) ------------------
    @validate("auto_compact")
    def _check_auto(self, proposal):
        v = proposal["value"]
        if v != 0 and not (0.1 <= v < 1.0):  # NaN and infinity fail both
            raise TraitError(f"Ocw.auto_compact = {v!r} is not a threshold: use a share of the window "
                             "between 0.1 and 0.99 (e.g. 0.8), or 0 for off")
        return v

    @validate("api_key")
    def _hide_key(self, proposal):
        v = proposal["value"]
        if v is None:
            return v
        _trait(checks.api_key, v, "Ocw.api_key")
        return v if isinstance(v, SecretStr) else SecretStr(v)

    @validate("model", "summary_model")
    def _check_model(self, proposal):
        v = proposal["value"]
        return v if v is None else _trait(checks.model, v, f"Ocw.{proposal['trait'].name}")

    @validate("base_url", "summary_base_url")
    def _check_base_url(self, proposal):
        v = proposal["value"]
        return v if v is None else _trait(checks.url, v, f"Ocw.{proposal['trait'].name}")

    @validate("summary_provider")
    def _check_summary_provider(self, proposal):
        v = proposal["value"]
        return v if v is None else _trait(_provider_name, v, "Ocw.summary_provider")

    @validate("db")
    def _check_db(self, proposal):
        try:
            return ownership_check(proposal["value"], look_inside=True)
        except OcwError as e:  # a TraitError, or traitlets keeps the refused value
            raise TraitError(f"Ocw.db: {e.user_message()}") from None

    @validate("system_prompt")
    def _check_system_prompt(self, proposal):
        return _trait(checks.text, proposal["value"], "Ocw.system_prompt")

    @validate("context_window")
    def _check_window(self, proposal):
        return _trait(checks.integer, proposal["value"], "Ocw.context_window", low=0,
                      zero_means="the model's known window")

    @validate("max_output_tokens", "tool_result_cap")
    def _check_tokens(self, proposal):
        return _trait(checks.integer, proposal["value"], f"Ocw.{proposal['trait'].name}", low=1)

    @validate("max_tool_steps")
    def _check_steps(self, proposal):
        return _trait(checks.integer, proposal["value"], "Ocw.max_tool_steps", low=1, high=1000)

    @validate("max_retries")
    def _check_retries(self, proposal):
        return _trait(checks.integer, proposal["value"], "Ocw.max_retries", low=0, high=10)

    @validate("timeout")
    def _check_timeout(self, proposal):
        return _trait(checks.seconds, proposal["value"], "Ocw.timeout")

    @validate("lock_timeout")
    def _check_lock_timeout(self, proposal):
        return _trait(checks.seconds, proposal["value"], "Ocw.lock_timeout")

    ENV_OPTIONS = ("provider", "model", "base_url", "context_window", "db", "lang", "auto_compact", "debug",
                   "summary_provider", "summary_model", "summary_base_url")
    # Read from the environment again at every command while nothing else set them:
    # `%env OCW_BASE_URL=...` (or os.environ) takes effect at the next cell, as a key does.
    PER_CELL = ("base_url", "summary_base_url")

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        # Set so far means configured (a config file, a keyword): those stay as they are.
        self._configured = {n for n in self.PER_CELL if n in self._trait_values}
        self.observe(lambda change: self._configured.add(change["name"]), names=list(self.PER_CELL))

    def check_environment(self) -> None:
        """Read every option that has an OCW_* default, so that a bad value is refused,
        by name, at the first command — not later, or never, when that option is
        first needed (a bad OCW_DEBUG would otherwise pass unnoticed). A PER_CELL option
        nothing configured is read from the environment afresh (a default is computed,
        not set, so it fires no observer and stays unconfigured)."""
        for name in self.PER_CELL:
            if name not in self._configured:
                self._trait_values.pop(name, None)
        for name in self.ENV_OPTIONS:
            getattr(self, name)

    @classmethod
    def class_get_trait_help(cls, trait, inst=None, helptext=None):
        """`%config Ocw` lists current values; a bad OCW_* value is shown as its one-line
        error there instead of breaking the whole listing."""
        if inst is not None:
            try:
                getattr(inst, trait.name)
            except OcwError as e:
                text = super().class_get_trait_help(trait, None, helptext)
                return f"{text}\n    Current: (not usable: {e.user_message()})"
        return super().class_get_trait_help(trait, inst, helptext)

    def peek(self, name: str):
        """The option's value as a command would read it now, without fixing a default
        that is not fixed yet: `%load_ext`'s warm-up looks before the first command, and
        an OCW_* variable set after `%load_ext` (but before that command) must still count."""
        cached = name in self._trait_values
        value = getattr(self, name)
        if not cached and name not in self._configured:
            self._trait_values.pop(name, None)
        return value

    # -- derived ------------------------------------------------------------------
    def resolved_model(self) -> str:
        from ocw.providers.registry import info

        return self.model or info(self.provider).default_model

    def resolved_window(self, model: str) -> int:
        """The window a session of `model` gets: Ocw.context_window when set, else the model's known one."""
        return self.context_window or known_context_window(model)

    def own_summarizer(self) -> bool:
        """Whether compactions call a summarizer of its own (any of the three summary_* set)."""
        return bool(self.summary_provider or self.summary_model or self.summary_base_url)

    def key_env(self) -> str | None:
        from ocw.providers.registry import info

        return info(self.provider).key_env

    def has_key(self) -> bool:
        from ocw.providers.registry import resolve_key

        return bool(resolve_key(self.provider, self.api_key))

    def __repr__(self) -> str:
        key = "<set>" if self.api_key else "<unset>"
        return (f"Ocw(provider={self.provider!r}, model={self.resolved_model()!r}, base_url={self.base_url!r}, "
                f"api_key={key}, db={self.db!r}, lang={self.lang!r}, auto_compact={self.auto_compact})")


def make_config(shell) -> tuple[Ocw, list[str]]:
    """`Ocw(parent=shell)`, leaving out configured values its validators refuse, with
    one line for each. IPython's %config merges a value into the shell's own
    config even when Ocw refused it, and a bad line in ipython_config.py would
    otherwise make `%load_ext ocw` itself fail with a traceback."""
    try:
        return Ocw(parent=shell), []
    except TraitError:
        pass
    section = shell.config.get("Ocw", {})
    dropped = []
    for key in list(section):
        try:
            Ocw(**{key: section[key]})
        except TraitError as e:
            dropped.append(f"ocw: ignored Ocw.{key} from the configuration: {e}")
            del section[key]
    return Ocw(parent=shell), dropped
