"""Ask a server for its context window, from the endpoints servers already have.

Invariants: :func:`probe_window` never raises (a probe that fails is a window
not learned, never a failed turn), never contacts the official hosts
(api.openai.com, api.anthropic.com publish no window endpoint, and a turn
should not pay for one), and stays within one overall ``timeout`` however
many endpoints it tries. It returns ``(tokens, source label)`` or ``None``.

Where each server states its window (per request, the smallest that matters):
- llama.cpp ``llama-server``: ``GET /v1/models`` → ``data[].meta.n_ctx`` (the
  per-slot window: with ``-np 2 -c 2048`` it says 1024, as does its 400),
  and ``GET /props`` → ``default_generation_settings.n_ctx``;
- vLLM: ``GET /v1/models`` → ``data[].max_model_len``;
- OpenRouter: ``GET {base}/models`` → ``data[].context_length`` (and
  ``top_provider.context_length`` when smaller);
- Ollama: ``POST /api/show {"model"}`` → ``model_info["<arch>.context_length"]``
  and a ``num_ctx`` line in ``parameters`` (the smaller wins), and
  ``GET /api/ps`` → ``models[].context_length`` for a loaded model (the window
  it really runs with; Ollama truncates silently to it);
- LM Studio: ``GET /api/v0/models`` → ``loaded_context_length``, else
  ``max_context_length``;
- llama-cpp-python has no such endpoint (its ``/v1/models`` lists ids only):
  ``None``; its window is learned from its first overflow error instead.

Cheapest likely first: the OpenAI-style model list (one small GET that most
servers answer and that tells them apart by ``owned_by``), then the
server-specific endpoints, in an order guessed from the port (Ollama 11434,
LM Studio 1234) and from what the list said.
"""
from __future__ import annotations

import re
import time
from typing import Any, Callable

import httpx

OFFICIAL_HOSTS = ("api.openai.com", "api.anthropic.com")
OLLAMA_PORT, LMSTUDIO_PORT = 11434, 1234

# fetch(method, url, json_body, timeout) -> the JSON object answered with 200, else None
Fetch = Callable[[str, str, Any, float], "dict | None"]
Found = "tuple[int, str] | None"


def _pos_int(v: Any) -> int | None:
    if isinstance(v, bool):
        return None
    try:
        n = int(v)
    except (TypeError, ValueError):
        return None
    return n if n > 0 else None


def _entry(doc: dict | None, model: str, key: str = "id") -> dict | None:
    """The list entry for ``model``, or the only entry when the server serves one."""
    data = doc.get("data") if isinstance(doc, dict) else None
    if not isinstance(data, list):
        return None
    entries = [e for e in data if isinstance(e, dict)]
    for e in entries:
        if e.get(key) == model:
            return e
    return entries[0] if len(entries) == 1 else None


def window_from_models(doc: dict | None, model: str, *, openrouter: bool = False) -> Found:
    """An OpenAI-style model list: llama.cpp ``meta.n_ctx``, vLLM ``max_model_len``,
    OpenRouter ``context_length``."""
    e = _entry(doc, model)
    if e is None:
        return None
    meta = e.get("meta") if isinstance(e.get("meta"), dict) else {}
    if _pos_int(meta.get("n_ctx")):
        return _pos_int(meta["n_ctx"]), "llama.cpp /v1/models"
    if _pos_int(e.get("max_model_len")):
        return _pos_int(e["max_model_len"]), "vLLM /v1/models"
    if openrouter and _pos_int(e.get("context_length")):
        top = e.get("top_provider") if isinstance(e.get("top_provider"), dict) else {}
        n = min(x for x in (_pos_int(e["context_length"]), _pos_int(top.get("context_length"))) if x)
        return n, "OpenRouter /models"
    return None


def owner_of(doc: dict | None, model: str) -> str:
    """Who the model list says serves the model (``owned_by``), lower case."""
    e = _entry(doc, model)
    return str(e.get("owned_by") or "").lower() if e else ""


def window_from_props(doc: dict | None) -> Found:
    """llama.cpp ``GET /props``."""
    settings = doc.get("default_generation_settings") if isinstance(doc, dict) else None
    n = _pos_int(settings.get("n_ctx")) if isinstance(settings, dict) else None
    return (n, "llama.cpp /props") if n else None


_NUM_CTX = re.compile(r"^\s*num_ctx\s+(\d+)\s*$", re.MULTILINE)


def window_from_ollama_show(doc: dict | None) -> Found:
    """Ollama ``POST /api/show``: the model's own window, lowered by a ``num_ctx`` parameter."""
    if not isinstance(doc, dict):
        return None
    info = doc.get("model_info") if isinstance(doc.get("model_info"), dict) else {}
    arch = info.get("general.architecture")
    n = _pos_int(info.get(f"{arch}.context_length")) if arch else None
    if n is None:  # an architecture key ocw does not know: any "*.context_length"
        n = next((_pos_int(v) for k, v in info.items() if str(k).endswith(".context_length") and _pos_int(v)), None)
    params = doc.get("parameters")
    m = _NUM_CTX.search(params) if isinstance(params, str) else None
    found = [x for x in (n, _pos_int(m.group(1)) if m else None) if x]
    return (min(found), "Ollama /api/show") if found else None


def window_from_ollama_ps(doc: dict | None, model: str) -> Found:
    """Ollama ``GET /api/ps``: the window a loaded model runs with."""
    models = doc.get("models") if isinstance(doc, dict) else None
    for m in models if isinstance(models, list) else []:
        names = (m.get("name"), m.get("model")) if isinstance(m, dict) else ()
        if (model in names or f"{model}:latest" in names) and _pos_int(m.get("context_length")):
            return _pos_int(m["context_length"]), "Ollama /api/ps"
    return None


def window_from_lmstudio(doc: dict | None, model: str) -> Found:
    """LM Studio ``GET /api/v0/models``: the loaded window, else the model's maximum."""
    e = _entry(doc, model)
    if e is None:
        return None
    n = _pos_int(e.get("loaded_context_length")) or _pos_int(e.get("max_context_length"))
    return (n, "LM Studio /api/v0/models") if n else None


def model_from_models(doc: dict | None) -> str | None:
    """The model a server serves, from its OpenAI-style list: the first id it lists
    (llama-server and llama-cpp-python list the one they loaded)."""
    data = doc.get("data") if isinstance(doc, dict) else None
    ids = [str(e["id"]) for e in data if isinstance(e, dict) and isinstance(e.get("id"), str) and e["id"].strip()] \
        if isinstance(data, list) else []
    return ids[0] if ids else None


def served_model(fetch: Fetch, *, models_url: str, timeout: float = 2.0) -> str | None:
    """The model the server at ``models_url`` serves, or None; like the window probe it
    never raises and never asks the official hosts (their default model is ocw's)."""
    try:
        host = httpx.URL(models_url).host
    except Exception:
        return None
    if not host or host in OFFICIAL_HOSTS:
        return None
    try:
        return model_from_models(fetch("GET", models_url, None, max(0.05, timeout)))
    except Exception:
        return None


def _smallest(*found: Found) -> Found:
    known = [f for f in found if f]
    return min(known, key=lambda f: f[0]) if known else None


def probe_window(fetch: Fetch, *, models_url: str, root: str, model: str, timeout: float = 2.0) -> Found:
    """The window the server at ``root`` reports for ``model`` (see module doc)."""
    try:
        url = httpx.URL(root)
        host, port = url.host, url.port
    except Exception:
        return None
    if not host or host in OFFICIAL_HOSTS:
        return None
    deadline = time.monotonic() + max(0.05, timeout)

    def get(method: str, path_or_url: str, body: Any = None) -> dict | None:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        target = path_or_url if "://" in path_or_url else root + path_or_url
        try:
            return fetch(method, target, body, left)
        except Exception:
            return None

    def ollama() -> Found:
        return _smallest(window_from_ollama_show(get("POST", "/api/show", {"model": model})),
                         window_from_ollama_ps(get("GET", "/api/ps"), model))

    def lmstudio() -> Found:
        return window_from_lmstudio(get("GET", "/api/v0/models"), model)

    def props() -> Found:
        return window_from_props(get("GET", "/props"))

    if port == OLLAMA_PORT:
        return ollama()
    if port == LMSTUDIO_PORT:
        return lmstudio()
    listing = get("GET", models_url)
    found = window_from_models(listing, model, openrouter=host.endswith("openrouter.ai"))
    if found or host.endswith("openrouter.ai"):
        return found
    owner = owner_of(listing, model)
    if owner in ("vllm", "me"):  # vLLM states it in the list; llama-cpp-python ("me") has no endpoint
        return None
    if owner == "llamacpp":
        return props()
    if owner in ("library", "ollama"):
        return ollama()
    for step in (props, ollama, lmstudio):  # a server the list did not name
        found = step()
        if found or time.monotonic() >= deadline:
            return found
    return None
