"""Model providers: OpenAI-compatible, Anthropic, and the built-in offline model.

`make_provider` is the one constructor the session and the magics use, so keys
and defaults are resolved in one place (registry.py): keys come from the
arguments or the environment (never from the DuckDB file), and the offline
model needs neither a key nor a network. Importing this package is cheap: the
HTTP providers (and httpx) load only when one is built. Providers keep nothing
between calls; they may import the text layer only.
"""
from __future__ import annotations

import importlib

from ocw.providers.registry import NAMES as PROVIDERS  # noqa: F401  (the names, in order)
from ocw.providers.registry import PROVIDERS as REGISTRY, info, resolve_key

DEFAULT_MODELS = {name: p.default_model for name, p in REGISTRY.items()}
KEY_ENV = {name: p.key_env for name, p in REGISTRY.items() if p.key_env}

_LAZY = {"OfflineProvider": "offline", "OpenAIProvider": "openai", "AnthropicProvider": "anthropic",
         "Provider": "base", "Reply": "base", "Usage": "base", "StreamCallback": "base", "SUMMARY_MARKER": "base"}

__all__ = ["make_provider", "PROVIDERS", "DEFAULT_MODELS", "KEY_ENV", *_LAZY]


def __getattr__(name):
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(name)


def make_provider(
    name: str = "offline",
    *,
    model: str | None = None,
    base_url: str | None = None,
    api_key: str | None = None,
    timeout: float = 60.0,
    max_retries: int = 2,
    context_window: int | None = None,
):
    """Build a provider by name ("offline" | "openai" | "anthropic").

    A missing key is not an error here (a local OpenAI-compatible server needs
    none); the official hosts refuse to send a request without one (AuthError).
    """
    p = info(name)
    cls = getattr(importlib.import_module(p.module), p.cls)
    if p.key_env is None:
        return cls(model or p.default_model, context_window=context_window)
    return cls(
        model or p.default_model,
        base_url=base_url,
        api_key=api_key if api_key is not None else resolve_key(p.name),
        timeout=timeout,
        max_retries=max_retries,
        context_window=context_window,
    )


def warm_up(name: str) -> None:
    """Pay a provider's one-time costs now (its module and httpx, and for an HTTP
    provider the process's TLS context, ~30–50 ms) so a kernel's first request does
    not; nothing is sent and no key is read. Used by `%load_ext`'s background warm-up."""
    p = info(name)
    importlib.import_module(p.module)
    if p.key_env is not None:
        from ocw.providers.http import warm_tls

        warm_tls()
