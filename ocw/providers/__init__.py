"""Model providers: OpenAI-compatible, Anthropic, and the built-in offline model.

`make_provider` is the one constructor the session and the magics use, so keys
and defaults are resolved in one place: keys come from the arguments or the
environment (never from the DuckDB file), and the offline model needs neither
a key nor a network.
"""
from __future__ import annotations

import os

from .anthropic import AnthropicProvider
from .base import SUMMARY_MARKER, Provider, Reply, StreamCallback, Usage
from .offline import OfflineProvider
from .openai import OpenAIProvider

PROVIDERS = ("offline", "openai", "anthropic")
DEFAULT_MODELS = {"offline": "ocw-offline", "openai": "gpt-4o-mini", "anthropic": "claude-sonnet-4-5"}
KEY_ENV = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}

__all__ = [
    "make_provider",
    "Provider",
    "Reply",
    "Usage",
    "StreamCallback",
    "SUMMARY_MARKER",
    "OfflineProvider",
    "OpenAIProvider",
    "AnthropicProvider",
    "PROVIDERS",
    "DEFAULT_MODELS",
    "KEY_ENV",
]


def make_provider(
    name: str = "offline",
    *,
    model: str | None = None,
    base_url: str | None = None,
    api_key: str | None = None,
    timeout: float = 60.0,
    max_retries: int = 2,
    context_window: int | None = None,
) -> Provider:
    """Build a provider by name ("offline" | "openai" | "anthropic").

    A missing key is not an error here (a local OpenAI-compatible server needs
    none); the official hosts refuse to send a request without one (AuthError).
    """
    key = (name or "offline").strip().lower()
    if key == "offline":
        return OfflineProvider(model or DEFAULT_MODELS["offline"], context_window=context_window)
    if key not in KEY_ENV:
        raise ValueError(f"unknown provider {name!r}; choose one of {', '.join(PROVIDERS)}")
    cls = OpenAIProvider if key == "openai" else AnthropicProvider
    return cls(
        model or DEFAULT_MODELS[key],
        base_url=base_url,
        api_key=api_key if api_key is not None else os.environ.get(KEY_ENV[key]),
        timeout=timeout,
        max_retries=max_retries,
        context_window=context_window,
    )
