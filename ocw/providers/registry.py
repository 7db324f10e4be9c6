"""The one table of providers: names, default models, key variables, default hosts.

Everything that names a provider or looks up its key reads it here — the
configuration's choices, `%%chat --provider`, `make_provider`, `%ocw doctor`,
the secrets filter — so they cannot drift. Pure data: importing it pulls in
no HTTP client.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from ocw.text.secrets import watch_env


@dataclass(frozen=True)
class ProviderInfo:
    name: str
    default_model: str
    key_env: str | None  # the environment variable holding its key (None: needs none)
    default_base_url: str | None
    module: str  # where its class lives (imported only when one is built)
    cls: str


PROVIDERS: dict[str, ProviderInfo] = {p.name: p for p in (
    ProviderInfo("offline", "ocw-offline", None, None, "ocw.providers.offline", "OfflineProvider"),
    ProviderInfo("openai", "gpt-4o-mini", "OPENAI_API_KEY", "https://api.openai.com/v1", "ocw.providers.openai",
                 "OpenAIProvider"),
    ProviderInfo("anthropic", "claude-sonnet-4-5", "ANTHROPIC_API_KEY", "https://api.anthropic.com",
                 "ocw.providers.anthropic", "AnthropicProvider"),
)}
NAMES = tuple(PROVIDERS)
KEY_ENVS = tuple(p.key_env for p in PROVIDERS.values() if p.key_env)
watch_env(*KEY_ENVS)  # the secrets filter masks their values wherever they appear


def info(name: str) -> ProviderInfo:
    try:
        return PROVIDERS[(name or "offline").strip().lower()]
    except KeyError:
        raise ValueError(f"unknown provider {name!r}; choose one of {', '.join(NAMES)}") from None


def key_env_of(name: str) -> str:
    """The environment variable a provider's key is read from, for messages."""
    try:
        return info(name).key_env or "no key needed"
    except ValueError:
        return "the provider's API key variable"


def resolve_key(name: str, configured: str | None = None) -> str | None:
    """The key a provider uses: `%config Ocw.api_key` if set, else its environment
    variable, read now (so `%env OPENAI_API_KEY=...` takes effect on the next cell)."""
    if configured:
        return configured
    env = info(name).key_env
    return (os.environ.get(env) or None) if env else None


def key_source(name: str, configured: str | None = None) -> str:
    """Where the key comes from, for `%ocw doctor` (never its value)."""
    return "%config Ocw.api_key" if configured else (info(name).key_env or "not needed")
