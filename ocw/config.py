"""ocw's options: a traitlets Configurable, so `%config Ocw.<option>` and
`ipython_config.py` work; environment variables give the common defaults.

Secrets come from the environment (OPENAI_API_KEY / ANTHROPIC_API_KEY) or
`%config Ocw.api_key`; they are never written to the DuckDB file, and the
repr of this object masks them.
"""
from __future__ import annotations

import os

from traitlets import Bool, Enum, Float, Int, TraitError, Unicode, default, validate
from traitlets.config import Configurable

from .errors import ConfigError

from .providers.registry import NAMES as PROVIDER_NAMES  # noqa: E402  (the one table of providers)

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
    context_window = Int(0, config=True,
                         help="Context window in tokens; 0 uses the model's known window (8192 when unknown). Env: OCW_CONTEXT_WINDOW.")
    db = Unicode("", config=True, help="DuckDB file holding the sessions. Env: OCW_DB; default ~/.local/share/ocw/ocw.duckdb.")
    lang = Enum(["en", "zh"], config=True, help="Language of system messages. Env: OCW_LANG.")
    auto_compact = Float(0.8, config=True,
                         help="Compact automatically before a request whose budget reaches this share of the window (0 = off). Env: OCW_AUTO_COMPACT (e.g. 0.8, 80 or off).")
    system_prompt = Unicode("You are a helpful assistant working inside a Jupyter notebook. Answer in Markdown.",
                            config=True, help="System prompt for new sessions.")
    max_output_tokens = Int(4096, config=True, help="Most tokens a reply may have.")
    timeout = Float(60.0, config=True, help="Seconds to wait for the provider.")
    max_retries = Int(2, config=True, help="Retries on 408/409/429/5xx, honoring Retry-After.")
    tools = Bool(False, config=True, help="Offer the built-in read-only tools (variables, describe, read_file) to the model.")
    max_tool_steps = Int(8, config=True, help="Most model→tool→model steps in one turn.")
    tool_result_cap = Int(4000, config=True, help="Tokens of one tool result the model reads; the rest is cut (the store keeps it whole).")
    debug = Bool(False, config=True, help="Show tracebacks instead of one-line errors. Env: OCW_DEBUG=1.")

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
        return os.environ.get("OCW_MODEL") or None

    @default("base_url")
    def _default_base_url(self):
        return os.environ.get("OCW_BASE_URL") or None

    @default("context_window")
    def _default_window(self):
        v = os.environ.get("OCW_CONTEXT_WINDOW", "").strip().replace("_", "").replace(",", "")
        if not v:
            return 0
        if not v.isdigit():
            raise ConfigError(f"OCW_CONTEXT_WINDOW={v!r} is not a number of tokens",
                              hint="use a whole number such as 128000, or 0 for the model's known window")
        return int(v)

    @default("db")
    def _default_db(self):
        from .store import default_db_path

        return default_db_path()

    @default("lang")
    def _default_lang(self):
        return "zh" if os.environ.get("OCW_LANG", "en").lower().startswith("zh") else "en"

    @default("auto_compact")
    def _default_auto(self):
        v = os.environ.get("OCW_AUTO_COMPACT")
        return parse_auto_compact(v) if v is not None else 0.8

    @default("debug")
    def _default_debug(self):
        return os.environ.get("OCW_DEBUG", "").strip().lower() not in ("", "0", "false", "no", "off")

    @validate("auto_compact")
    def _check_auto(self, proposal):
        v = proposal["value"]
        if v != 0 and not (0.1 <= v < 1.0):
            raise TraitError(f"Ocw.auto_compact = {v!r} is not a threshold: use a share of the window "
                             "between 0.1 and 0.99 (e.g. 0.8), or 0 for off")
        return v

    @validate("api_key")
    def _hide_key(self, proposal):
        v = proposal["value"]
        return SecretStr(v) if isinstance(v, str) and not isinstance(v, SecretStr) else v

    @validate("context_window", "max_tool_steps", "tool_result_cap", "max_output_tokens")
    def _check_nonneg(self, proposal):
        if proposal["value"] < 0:
            raise TraitError(f"{proposal['trait'].name} must be ≥ 0")
        return proposal["value"]

    # -- derived ------------------------------------------------------------------
    def resolved_model(self) -> str:
        from .providers.registry import info

        return self.model or info(self.provider).default_model

    def resolved_window(self, model: str | None = None) -> int:
        return self.context_window or known_context_window(model or self.resolved_model())

    def key_env(self) -> str | None:
        from .providers.registry import info

        return info(self.provider).key_env

    def has_key(self) -> bool:
        from .providers.registry import resolve_key

        return bool(resolve_key(self.provider, self.api_key))

    def __repr__(self) -> str:
        key = "<set>" if self.api_key else "<unset>"
        return (f"Ocw(provider={self.provider!r}, model={self.resolved_model()!r}, base_url={self.base_url!r}, "
                f"api_key={key}, db={self.db!r}, lang={self.lang!r}, auto_compact={self.auto_compact})")
