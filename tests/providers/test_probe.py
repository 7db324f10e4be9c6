"""The window probe: each server's own endpoint, read from literal documents;
the order endpoints are tried in; the bounds (official hosts never contacted,
one overall timeout, never raises); and the providers against the refserver."""
from __future__ import annotations

import socket
import threading

import pytest

from ocw.providers import AnthropicProvider, OfflineProvider, OpenAIProvider
from ocw.providers import probe as pr

# -- literal documents, as each server answers -----------------------------------------
LLAMA_SERVER_MODELS = {"models": [{"name": "tiny", "model": "tiny"}], "object": "list", "data": [
    {"id": "tiny", "aliases": ["tiny"], "tags": [], "object": "model", "created": 1796075759, "owned_by": "llamacpp",
     "meta": {"vocab_type": 2, "n_vocab": 1759, "n_ctx": 2048, "n_ctx_train": 2048, "n_embd": 64}}]}
LLAMA_SERVER_PROPS = {"default_generation_settings": {"n_ctx": 1024, "params": {}}, "total_slots": 2,
                      "model_alias": "tiny"}
LLAMA_CPP_PYTHON_MODELS = {"object": "list", "data": [{"id": "tiny", "object": "model", "owned_by": "me",
                                                       "permissions": []}]}
VLLM_MODELS = {"object": "list", "data": [{"id": "Qwen/Qwen2.5-7B-Instruct", "object": "model", "created": 1,
                                           "owned_by": "vllm", "root": "Qwen/Qwen2.5-7B-Instruct", "parent": None,
                                           "max_model_len": 32768, "permission": []}]}
OPENROUTER_MODELS = {"data": [
    {"id": "openai/gpt-4o", "name": "OpenAI: GPT-4o", "context_length": 128000,
     "top_provider": {"context_length": 128000, "max_completion_tokens": 16384, "is_moderated": True}},
    {"id": "meta-llama/llama-3.1-8b-instruct", "context_length": 131072,
     "top_provider": {"context_length": 16384, "max_completion_tokens": 16384}}]}
OLLAMA_SHOW = {"modelfile": "# Modelfile ...", "parameters": 'num_ctx                        8192\n'
               'stop                           "<|eot_id|>"', "template": "{{ .Prompt }}",
               "details": {"format": "gguf", "family": "llama"},
               "model_info": {"general.architecture": "llama", "general.parameter_count": 8030261248,
                              "llama.context_length": 131072, "llama.embedding_length": 4096}}
OLLAMA_PS = {"models": [{"name": "llama3.1:latest", "model": "llama3.1:latest", "size": 5137025024,
                         "digest": "abc", "expires_at": "2026-11-30T22:00:00Z", "size_vram": 0,
                         "context_length": 4096}]}
OLLAMA_V1_MODELS = {"object": "list", "data": [{"id": "llama3.1:latest", "object": "model", "created": 1,
                                                "owned_by": "library"}]}
LMSTUDIO_V0 = {"object": "list", "data": [
    {"id": "qwen2-vl-7b-instruct", "object": "model", "type": "vlm", "state": "not-loaded", "max_context_length": 32768},
    {"id": "meta-llama-3.1-8b-instruct", "object": "model", "type": "llm", "state": "loaded",
     "max_context_length": 131072, "loaded_context_length": 4096}]}


def test_parsers_read_each_servers_window():
    assert pr.window_from_models(LLAMA_SERVER_MODELS, "anything") == (2048, "llama.cpp /v1/models")
    assert pr.window_from_props(LLAMA_SERVER_PROPS) == (1024, "llama.cpp /props")
    assert pr.window_from_models(VLLM_MODELS, "Qwen/Qwen2.5-7B-Instruct") == (32768, "vLLM /v1/models")
    assert pr.window_from_models(OPENROUTER_MODELS, "openai/gpt-4o", openrouter=True) == (128000, "OpenRouter /models")
    assert pr.window_from_models(OPENROUTER_MODELS, "meta-llama/llama-3.1-8b-instruct", openrouter=True) == \
        (16384, "OpenRouter /models")  # the provider that serves it offers less than the model
    assert pr.window_from_models(OPENROUTER_MODELS, "openai/gpt-4o") is None  # context_length only on OpenRouter
    assert pr.window_from_ollama_show(OLLAMA_SHOW) == (8192, "Ollama /api/show")  # num_ctx below 131072 wins
    no_param = dict(OLLAMA_SHOW, parameters='stop "<|eot_id|>"')
    assert pr.window_from_ollama_show(no_param) == (131072, "Ollama /api/show")
    odd_arch = {"model_info": {"general.architecture": "qwen3moe", "qwen3moe.context_length": 40960}}
    assert pr.window_from_ollama_show(odd_arch) == (40960, "Ollama /api/show")
    assert pr.window_from_ollama_show({"model_info": {"general.architecture": "x", "y.context_length": 512}}) == \
        (512, "Ollama /api/show")
    assert pr.window_from_ollama_ps(OLLAMA_PS, "llama3.1") == (4096, "Ollama /api/ps")
    assert pr.window_from_ollama_ps(OLLAMA_PS, "llama3.1:latest") == (4096, "Ollama /api/ps")
    assert pr.window_from_ollama_ps(OLLAMA_PS, "mistral") is None
    assert pr.window_from_lmstudio(LMSTUDIO_V0, "meta-llama-3.1-8b-instruct") == (4096, "LM Studio /api/v0/models")
    assert pr.window_from_lmstudio(LMSTUDIO_V0, "qwen2-vl-7b-instruct") == (32768, "LM Studio /api/v0/models")
    assert pr.window_from_models(LLAMA_CPP_PYTHON_MODELS, "tiny") is None


@pytest.mark.parametrize("doc", [None, {}, {"data": "x"}, {"data": [1, 2]}, {"data": [{"meta": {"n_ctx": "lots"}}]},
                                 {"data": [{"meta": {"n_ctx": 0}}]}, {"data": [{"max_model_len": -5}]},
                                 {"data": [{"max_model_len": True}]}, {"default_generation_settings": []},
                                 {"model_info": "x", "parameters": 5}, {"models": "x"}])
def test_parsers_ignore_what_is_not_a_window(doc):
    assert pr.window_from_models(doc, "m") is None and pr.window_from_props(doc) is None
    assert pr.window_from_ollama_show(doc) is None and pr.window_from_ollama_ps(doc, "m") is None
    assert pr.window_from_lmstudio(doc, "m") is None


def test_a_list_of_several_models_needs_the_exact_id():
    two = {"data": [{"id": "a", "max_model_len": 100}, {"id": "b", "max_model_len": 200}]}
    assert pr.window_from_models(two, "b") == (200, "vLLM /v1/models")
    assert pr.window_from_models(two, "c") is None


# -- the order endpoints are tried in (the servers themselves are not here) ---------------
class Server:
    """A scripted answer per (method, path); records the calls, in order."""

    def __init__(self, routes: dict):
        self.routes, self.calls = routes, []

    def __call__(self, method, url, body, timeout):
        path = "/" + url.split("/", 3)[3]
        self.calls.append((method, path, body))
        assert 0 < timeout <= 2.0
        answer = self.routes.get((method, path))
        if isinstance(answer, Exception):
            raise answer
        return answer


def probe(routes, url="http://127.0.0.1:8080", model="m", models_url=None):
    s = Server(routes)
    found = pr.probe_window(s, models_url=models_url or url + "/v1/models", root=url, model=model, timeout=2.0)
    return found, [(m, p) for m, p, _ in s.calls]


def test_llama_server_answers_from_the_model_list_in_one_request():
    assert probe({("GET", "/v1/models"): LLAMA_SERVER_MODELS}) == ((2048, "llama.cpp /v1/models"),
                                                                   [("GET", "/v1/models")])


def test_an_older_llama_server_without_meta_is_asked_for_props():
    old = {"object": "list", "data": [{"id": "m", "object": "model", "owned_by": "llamacpp"}]}
    assert probe({("GET", "/v1/models"): old, ("GET", "/props"): LLAMA_SERVER_PROPS}) == \
        ((1024, "llama.cpp /props"), [("GET", "/v1/models"), ("GET", "/props")])


def test_llama_cpp_python_has_no_window_and_is_asked_nothing_more():
    assert probe({("GET", "/v1/models"): LLAMA_CPP_PYTHON_MODELS}) == (None, [("GET", "/v1/models")])


def test_vllm_from_its_list():
    assert probe({("GET", "/v1/models"): VLLM_MODELS}, model="Qwen/Qwen2.5-7B-Instruct") == \
        ((32768, "vLLM /v1/models"), [("GET", "/v1/models")])


def test_ollama_on_its_port_is_asked_show_and_ps_and_the_smaller_wins():
    found, calls = probe({("POST", "/api/show"): OLLAMA_SHOW, ("GET", "/api/ps"): OLLAMA_PS},
                         url="http://127.0.0.1:11434", model="llama3.1")
    assert found == (4096, "Ollama /api/ps") and calls == [("POST", "/api/show"), ("GET", "/api/ps")]
    found, _ = probe({("POST", "/api/show"): OLLAMA_SHOW}, url="http://127.0.0.1:11434", model="llama3.1")
    assert found == (8192, "Ollama /api/show")  # not loaded: no /api/ps entry


def test_ollama_elsewhere_is_recognised_by_its_list():
    found, calls = probe({("GET", "/v1/models"): OLLAMA_V1_MODELS, ("POST", "/api/show"): OLLAMA_SHOW},
                         url="http://gpu-box:8000", model="llama3.1:latest")
    assert found == (8192, "Ollama /api/show") and calls[0] == ("GET", "/v1/models")


def test_lm_studio_on_its_port():
    found, calls = probe({("GET", "/api/v0/models"): LMSTUDIO_V0}, url="http://localhost:1234",
                         model="meta-llama-3.1-8b-instruct")
    assert found == (4096, "LM Studio /api/v0/models") and calls == [("GET", "/api/v0/models")]


def test_openrouter_is_asked_its_model_list_only():
    found, calls = probe({("GET", "/api/v1/models"): OPENROUTER_MODELS}, url="https://openrouter.ai/api",
                         models_url="https://openrouter.ai/api/v1/models", model="openai/gpt-4o")
    assert found == (128000, "OpenRouter /models") and calls == [("GET", "/api/v1/models")]


def test_an_unknown_server_is_asked_each_endpoint_once_then_none():
    found, calls = probe({})
    assert found is None
    assert calls == [("GET", "/v1/models"), ("GET", "/props"), ("POST", "/api/show"), ("GET", "/api/ps"),
                     ("GET", "/api/v0/models")]


def test_fetch_errors_are_a_window_not_learned():
    found, calls = probe({("GET", "/v1/models"): RuntimeError("boom"), ("GET", "/props"): LLAMA_SERVER_PROPS})
    assert found == (1024, "llama.cpp /props")


@pytest.mark.parametrize("url", ["https://api.openai.com/v1", "https://api.anthropic.com", "not a url", ""])
def test_official_hosts_and_bad_urls_are_never_asked(url):
    s = Server({})
    assert pr.probe_window(s, models_url=url + "/models", root=url, model="m", timeout=2.0) is None
    assert s.calls == []


# -- the providers, against real sockets ----------------------------------------------------
def test_providers_probe_the_refserver_as_a_llama_server(refserver):
    refserver.like_llama_server(2048)
    o = OpenAIProvider("ref-model", base_url=refserver.openai_url, api_key="k")
    a = AnthropicProvider("ref-model", base_url=refserver.anthropic_url, api_key="k")
    assert o.probe_window() == (2048, "llama.cpp /v1/models")
    assert a.probe_window() == (2048, "llama.cpp /v1/models")
    assert [(g.method, g.path, g.auth) for g in refserver.probes] == [("GET", "/v1/models", True)] * 2
    assert refserver.requests == []  # probes are GETs, kept apart from the chat requests
    o.close(), a.close()


def test_provider_probe_without_a_window_asks_each_endpoint_and_returns_none(refserver):
    p = OpenAIProvider("ref-model", base_url=refserver.openai_url, api_key="k")
    assert p.probe_window() is None
    assert [(g.method, g.path, g.status) for g in refserver.probes] == [
        ("GET", "/v1/models", 200), ("GET", "/props", 404), ("POST", "/api/show", 404), ("GET", "/api/ps", 404),
        ("GET", "/api/v0/models", 404)]
    assert refserver.requests == []
    p.close()


def test_official_hosts_are_not_contacted(monkeypatch):
    def no_network(*a, **k):
        raise AssertionError("a probe went out to an official host")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setattr(socket, "create_connection", no_network)
    assert OpenAIProvider(api_key="sk-x" * 5).probe_window() is None
    assert AnthropicProvider(api_key="sk-x" * 5).probe_window() is None
    assert OfflineProvider().probe_window() is None


def test_a_server_that_never_answers_gives_none_within_the_timeout():
    """A socket that accepts and never answers: each request waits out the time left;
    the probe gives up once its one overall timeout is spent and does not raise."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    held: list = []
    stop = threading.Event()

    def accept():
        srv.settimeout(0.05)
        while not stop.is_set():
            try:
                held.append(srv.accept()[0])
            except OSError:
                pass

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    p = OpenAIProvider("m", base_url=f"http://127.0.0.1:{srv.getsockname()[1]}/v1", api_key="k", timeout=30)
    try:
        assert p.probe_window(timeout=0.3) is None
        assert len(held) == 1  # stopped at the deadline, not after every endpoint's own timeout
    finally:
        stop.set()
        t.join()
        for c in held:
            c.close()
        srv.close()
        p.close()


# -- the server's own model (issue 24: a local server is sent its model, not ocw's default name) --
@pytest.mark.parametrize("doc, model", [
    (LLAMA_SERVER_MODELS, "tiny"), (LLAMA_CPP_PYTHON_MODELS, "tiny"), (VLLM_MODELS, "Qwen/Qwen2.5-7B-Instruct"),
    (OLLAMA_V1_MODELS, "llama3.1:latest"), (OPENROUTER_MODELS, "openai/gpt-4o"),  # several: the first listed
    ({"data": []}, None), ({"data": [{"id": ""}, {"id": 7}]}, None), ({"data": "tiny"}, None), (None, None),
])
def test_model_from_models_is_the_first_id_listed(doc, model):
    assert pr.model_from_models(doc) == model


def test_served_model_never_asks_the_official_hosts_and_never_raises():
    asked = []

    def fetch(method, url, body, timeout):
        asked.append(url)
        raise OSError("down")

    assert pr.served_model(fetch, models_url="https://api.openai.com/v1/models") is None
    assert pr.served_model(fetch, models_url="https://api.anthropic.com/v1/models") is None
    assert asked == []
    assert pr.served_model(fetch, models_url="http://127.0.0.1:9/v1/models") is None  # raised: None
    assert asked == ["http://127.0.0.1:9/v1/models"]


@pytest.mark.parametrize("cls, url", [(OpenAIProvider, "openai_url"), (AnthropicProvider, "anthropic_url")])
def test_a_provider_reads_the_loopback_servers_own_model_from_its_list(refserver, cls, url):
    p = cls("gpt-4o-mini", base_url=getattr(refserver, url), api_key=None)
    assert p.served_model() == "ref-model"
    assert [(g.method, g.path, g.status) for g in refserver.probes] == [("GET", "/v1/models", 200)]
    assert refserver.requests == []
    p.close()


def test_a_window_of_1_is_a_window_and_0_is_none():
    """_pos_int's edge: any whole number above 0 is a stated window."""
    assert pr.window_from_props({"default_generation_settings": {"n_ctx": 1}}) == (1, "llama.cpp /props")
    assert pr.window_from_props({"default_generation_settings": {"n_ctx": 0}}) is None


def test_ollama_unknown_architecture_takes_a_context_length_key_not_another_number():
    doc = {"model_info": {"general.parameter_count": 8_030_261_248, "newarch.block_count": 32,
                          "newarch.context_length": 131_072}}
    assert pr.window_from_ollama_show(doc) == (131_072, "Ollama /api/show")


@pytest.mark.parametrize("params, want", [
    ("num_ctx                        4096\nstop \"<|eot_id|>\"", 4096),  # Ollama's padding
    ("num_ctx4096", None),  # no space between name and value: not Ollama's num_ctx line
])
def test_ollama_num_ctx_is_the_parameter_name_then_spaces_then_digits(params, want):
    doc = {"model_info": {}, "parameters": params}
    assert pr.window_from_ollama_show(doc) == ((want, "Ollama /api/show") if want else None)
