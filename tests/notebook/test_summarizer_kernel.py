"""Issue 27, a summarizer of its own, in a real kernel against two loopback servers
(the chat's requests counted on one, the summarizer's on the other), and with the
real llama-server of ../shared/realserver as the summarizer (its requests counted
with a spy on httpx's send, its window learned from its own /props)."""
from __future__ import annotations


import pytest

from refserver import RefServer
from test_kernel import loopback_kernel

USER = "Please keep notes about the garden plan: " + "tomatoes basil " * 45  # ~100 tokens
REPLY = "green leaves grow " * 150  # ~450 tokens
MODEL = "tiny-summarizer"


@pytest.fixture(scope="module")
def servers():
    chat, summ = RefServer().start(), RefServer().start()
    summ.summary_text = "Summary: the user plans a garden with tomatoes and basil."
    yield chat, summ
    chat.stop()
    summ.stop()


@pytest.fixture(scope="module")
def kernel(servers, tmp_path_factory):
    chat, summ = servers
    yield from loopback_kernel(chat.openai_url, tmp_path_factory.mktemp("kernel"), "sk-test-summ-0123456789",
                               OCW_SUMMARY_BASE_URL=summ.openai_url, OCW_SUMMARY_MODEL=MODEL)



def test_compact_and_automatic_compaction_go_to_the_summarizers_server(kernel, servers):
    chat, summ = servers
    kernel.run("%new --name k-summ")
    for i in range(3):
        chat.script(text=f"Reply {i}: " + REPLY)
        kernel.run(f"%%chat\nTurn {i}. " + USER)
    assert len(chat.requests) == 3 and summ.requests == []

    r = kernel.run("%compact")
    assert "Context compacted" in r.shown(), r.shown()
    assert len(chat.requests) == 3  # the chat's server got no summary request
    assert len(summ.requests) == 1 and summ.requests[0].is_summary and summ.requests[0].body["model"] == MODEL

    for i in range(3, 6):  # over the 80 % line again: the cell compacts first, on the summarizer's server
        chat.script(text=f"Reply {i}: " + REPLY)
        kernel.run(f"%%chat\nTurn {i}. " + USER)
    assert [r.is_summary for r in chat.requests] == [False] * 6
    assert len(summ.requests) >= 2 and all(r.is_summary for r in summ.requests)
    triggers = kernel.py("[e['trigger'] for e in ocw.current_session().metadata['compactions']]")
    assert triggers[0] == "manual" and "auto" in triggers[1:]
    assert kernel.py("sorted({e['summarizer'] for e in ocw.current_session().metadata['compactions']})") == \
        [f"openai/{MODEL}"]
    out = kernel.run("%summary").shown()
    assert f"summarized by openai/{MODEL} (a summarizer of its own)" in out
    out = kernel.run("%context --text").shown()
    assert f"Summarizer: openai/{MODEL} (its own; window 8,192 tokens" in out


def test_the_real_llama_server_as_the_summarizer(llama_server, refserver, monkeypatch, ocw_env, capsys):
    """The chat on the loopback server (8,000-token window), the summary by the tiny model on
    llama-server: its window is what its /props says (2,048), not the chat's."""
    import httpx
    from IPython.core.interactiveshell import InteractiveShell

    from conftest import _reset_ocw

    monkeypatch.setenv("OCW_PROVIDER", "openai")
    monkeypatch.setenv("OCW_BASE_URL", refserver.openai_url)
    monkeypatch.setenv("OPENAI_API_KEY", "x")
    monkeypatch.setenv("OCW_CONTEXT_WINDOW", "8000")
    monkeypatch.setenv("OCW_SUMMARY_BASE_URL", llama_server.openai_url)
    monkeypatch.setenv("OCW_SUMMARY_MODEL", "tiny")
    port = httpx.URL(llama_server.openai_url).port
    sent = []
    real_send = httpx.Client.send
    monkeypatch.setattr(httpx.Client, "send", lambda self, req, **kw: (
        sent.append(req.url.path) if req.url.port == port else None, real_send(self, req, **kw))[1])
    ip = InteractiveShell.instance()
    _reset_ocw(ip)
    ip.run_line_magic("load_ext", "ocw")
    try:
        import ocw

        ip.run_line_magic("config", "Ocw.max_output_tokens = 32")
        for i in range(6):
            refserver.script(text=f"Reply {i}: noted, the nightly export slows down around two.")
            ip.run_cell(f"%%chat\nTurn {i}: the nightly export slows down around two; we read the logs. " * 3)
        s = ocw.current_session()
        assert s.context_window == 8000
        assert s.metadata["summarizer"]["learned_window"]["tokens"] == 2048  # from llama-server's own endpoint
        assert not [p for p in sent if p.endswith("/chat/completions")]  # the chat never went there
        n_chat = len(refserver.requests)
        capsys.readouterr()
        for _ in range(4):  # the random-weight model sometimes answers nothing: that attempt saves nothing
            n = len(sent)
            res = ip.run_cell("%compact 100")
            out = capsys.readouterr().out
            if "the summarizer returned an empty summary" not in out:
                break
        assert res.error_in_exec is None and "Context compacted" in out, out
        assert len([p for p in sent[n:] if p.endswith("/chat/completions")]) >= 1  # the summary: llama-server's
        assert len(refserver.requests) == n_chat  # ... and not one request to the chat's server
        assert s.metadata["compactions"][-1]["summarizer"] == "openai/tiny"
    finally:
        _reset_ocw(ip)
