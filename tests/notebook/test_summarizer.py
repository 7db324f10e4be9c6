"""Issue 27, a summarizer of its own: Ocw.summary_provider / summary_model /
summary_base_url through the magics, against two loopback servers — the chat's
requests go to one, the summarizer's to the other, counted on each — with its own
window (probed, or learned from its overflow) and its own calibration."""
from __future__ import annotations

import pytest
from IPython.core.error import UsageError

import ocw
from ocw.conversation import summarizer as own_rules
from refserver import RefServer

USER = "Please keep notes about the garden plan: " + "tomatoes basil " * 45  # ~100 tokens
REPLY = "green leaves grow " * 150  # ~450 tokens
MODEL = "tiny-summarizer"  # a model ocw knows no window for: 8,192 until its server says otherwise


@pytest.fixture
def summ(monkeypatch):
    srv = RefServer().start()
    srv.summary_text = "Summary: the user plans a garden with tomatoes and basil."
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def own_env(openai_env, summ, monkeypatch):
    """The chat on `openai_env`'s server (2,000-token window), the summarizer on `summ`'s."""
    monkeypatch.setenv("OCW_SUMMARY_BASE_URL", summ.openai_url)
    monkeypatch.setenv("OCW_SUMMARY_MODEL", MODEL)
    return openai_env, summ


def run(shell, cell, capsys):
    res = shell.run_cell(cell)
    cap = capsys.readouterr()
    return res, cap.out, cap.err


def chat(shell, text, capsys):
    res, out, err = run(shell, f"%%chat\n{text}", capsys)
    assert res.error_in_exec is None, (out, err)
    return out


def three_long_turns(shell, srv, capsys) -> None:
    """1,725 tokens on a 2,000-token window: under the 80 % line before each request."""
    for i in range(3):
        srv.script(text=f"Reply {i}: " + REPLY)
        chat(shell, f"Turn {i}. " + USER, capsys)


def session():
    s = ocw.current_session()
    s.sync()
    return s


def one_line_usage_error(res, out: str, err: str) -> str:
    assert isinstance(res.error_in_exec, UsageError), (type(res.error_in_exec), out, err)
    assert "Traceback" not in out + err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("UsageError: "), err
    return lines[0]


def test_compact_calls_the_summarizer_server_and_the_chat_server_gets_none(own_env, ip, capsys):
    chat_srv, summ = own_env
    three_long_turns(ip, chat_srv, capsys)
    n_chat = len(chat_srv.requests)
    assert summ.requests == []  # the chat's turns never reach the summarizer
    res, out, err = run(ip, "%compact", capsys)
    assert res.error_in_exec is None, err
    assert out.startswith("Context compacted: covered 4 older messages")
    assert len(chat_srv.requests) == n_chat  # not one request to the chat's server
    assert len(summ.requests) == 1 and summ.requests[0].is_summary
    assert summ.requests[0].body["model"] == MODEL
    s = session()
    entry = s.metadata["compactions"][-1]
    assert entry["summarizer"] == f"openai/{MODEL}" and entry["own_summarizer"] is True
    res, out, err = run(ip, "%summary", capsys)
    assert f"summarized by openai/{MODEL} (a summarizer of its own)" in out
    assert f"by openai/{MODEL}" in out.splitlines()[-1]  # the log line of the compaction
    res, out, err = run(ip, "%context --text", capsys)
    assert res.error_in_exec is None, err
    line = next(ln for ln in out.splitlines() if ln.strip().startswith("Summarizer:"))
    assert line.strip().startswith(f"Summarizer: openai/{MODEL} (its own; window 8,192 tokens")
    assert "Window" not in line and "2,000 tokens" in out  # the chat's window stays the chat's
    w = ocw.notebook.magics.get_runtime().context_widget()  # the ring's panel shows the same row
    assert w.summarizer == {"name": f"openai/{MODEL}", "window": 8192, "calibration": 1.0, "samples": 1}
    assert w.window == 2000


def test_automatic_compaction_in_a_chat_cell_uses_the_summarizer(own_env, ip, capsys):
    chat_srv, summ = own_env
    three_long_turns(ip, chat_srv, capsys)
    chat_srv.script(text="Reply 3: noted.")
    out = chat(ip, "Turn 3. " + USER, capsys)  # over the 80 % line: compacts first
    assert "Context compacted" in out and "Reply 3: noted." in out
    assert [r.is_summary for r in chat_srv.requests] == [False] * 4  # the chat's four turns only
    assert len(summ.requests) >= 1 and all(r.is_summary for r in summ.requests)
    s = session()
    assert s.compaction_count == 1 and s.metadata["compactions"][-1]["trigger"] == "auto"
    assert s.metadata["compactions"][-1]["summarizer"] == f"openai/{MODEL}"


def test_reactive_compaction_after_a_refusal_uses_the_summarizer(own_env, ip, capsys):
    chat_srv, summ = own_env
    ip.run_cell("%config Ocw.auto_compact = 0")  # only the refusal compacts
    three_long_turns(ip, chat_srv, capsys)
    chat_srv.script(overflow=True)  # the chat's server refuses the next request as too long
    chat_srv.script(text="Reply 3: fits now.")
    out = chat(ip, "Turn 3. A short question.", capsys)
    assert "Reply 3: fits now." in out
    assert [r.is_summary for r in chat_srv.requests] == [False] * 5  # three turns, the refusal, the retry
    assert len(summ.requests) >= 1 and all(r.is_summary for r in summ.requests)
    s = session()
    assert [e["trigger"] for e in s.metadata["compactions"]] == ["reactive"]
    assert s.metadata["compactions"][-1]["summarizer"] == f"openai/{MODEL}"


def test_unset_the_chat_server_summarizes_as_before(openai_env, summ, ip, capsys):
    three_long_turns(ip, openai_env, capsys)
    openai_env.script(text="Summary: the garden.")
    res, out, err = run(ip, "%compact", capsys)
    assert res.error_in_exec is None, err
    assert [r.is_summary for r in openai_env.requests] == [False] * 3 + [True]
    assert summ.requests == []
    s = session()
    entry = s.metadata["compactions"][-1]
    assert entry["summarizer"] == f"openai/{s.model}" and entry["own_summarizer"] is False
    res, out, err = run(ip, "%summary", capsys)
    assert "by manual compaction\n" in out and "summarized by" not in out  # reads as it always did
    res, out, err = run(ip, "%context --text", capsys)
    assert "Summarizer" not in out


def test_the_summarizer_calibrates_itself_not_the_chat(own_env, ip, capsys):
    chat_srv, summ = own_env
    summ.usage_scale = 2.0  # the summarizer's tokenizer counts twice ocw's estimate
    three_long_turns(ip, chat_srv, capsys)
    s = session()
    chat_before = (s.calibration, dict(s.metadata).get("calibration"))
    res, out, err = run(ip, "%compact", capsys)
    assert res.error_in_exec is None, err
    s = session()
    assert (s.calibration, s.metadata.get("calibration")) == chat_before  # the chat's stays as it was
    own = s.metadata[own_rules.KEY]["calibration"]
    assert own["model"] == MODEL and own["samples"] == 1
    assert 1.7 < own["ratio"] < 2.1  # measured ÷ estimated of the summarizer's own request
    res, out, err = run(ip, "%context --text", capsys)
    assert f"measured ÷ estimated = {own['ratio']:.2f}, samples: 1)" in out


def test_a_small_summarizer_window_from_its_server_chunks_its_calls(own_env, ip, capsys):
    chat_srv, summ = own_env
    summ.reported_window = 1024  # its /props says n_ctx 1024
    three_long_turns(ip, chat_srv, capsys)
    s = session()
    assert s.context_window == 2000  # the chat's window is the chat's
    assert s.metadata[own_rules.KEY]["learned_window"] == {"tokens": 1024, "source": s.metadata[own_rules.KEY]
                                                           ["learned_window"]["source"], "model": MODEL}
    res, out, err = run(ip, "%compact", capsys)
    assert res.error_in_exec is None, err
    assert len(summ.requests) >= 2  # ~1,100 folded tokens do not fit one call of a 1,024 window
    assert all(r.prompt_tokens <= 1024 for r in summ.requests)
    assert len(chat_srv.requests) == 3


def test_a_summarizer_overflow_teaches_its_window_and_retries(own_env, ip, capsys):
    chat_srv, summ = own_env
    summ.overflow_above = 900  # refuses larger prompts, stating its window
    three_long_turns(ip, chat_srv, capsys)
    res, out, err = run(ip, "%compact", capsys)
    assert res.error_in_exec is None, err
    assert out.startswith("Context compacted")
    s = session()
    assert s.metadata[own_rules.KEY]["learned_window"]["tokens"] == 900
    assert s.context_window == 2000 and s.compaction_count == 1
    answered = [r for r in summ.requests if r.prompt_tokens <= 900]
    assert len(answered) >= 2 and len(summ.requests) > len(answered)  # refused once, then chunked
    assert len(chat_srv.requests) == 3


@pytest.mark.parametrize("line, words", [
    ("%config Ocw.summary_provider = 'nope'", "Ocw.summary_provider takes one of offline, openai, anthropic"),
    ("%config Ocw.summary_model = 'two words'", "Ocw.summary_model"),
    ("%config Ocw.summary_base_url = 'ftp://x'", "Ocw.summary_base_url"),
])
def test_bad_config_values_are_refused_in_one_line(line, words, own_env, ip, capsys, caplog):
    chat(ip, "hello", capsys)  # a command reads the OCW_* defaults
    caplog.clear()
    res, out, err = run(ip, line, capsys)
    assert res.error_in_exec is None and "Traceback" not in out + err
    lines = [r.getMessage() for r in caplog.records]  # IPython's %config logs a refused value
    assert len(lines) == 1 and words in lines[0] and "\n" not in lines[0]
    cfg = ocw.notebook.magics.get_runtime().config
    assert (cfg.summary_provider, cfg.summary_model) == (None, MODEL)  # the old values stay


@pytest.mark.parametrize("var, value", [("OCW_SUMMARY_PROVIDER", "nope"), ("OCW_SUMMARY_MODEL", "two words"),
                                        ("OCW_SUMMARY_BASE_URL", "not a url")])
def test_bad_environment_values_stop_the_cell_in_one_line(var, value, openai_env, summ, monkeypatch, ip, capsys):
    monkeypatch.setenv(var, value)
    res, out, err = run(ip, "%%chat\nhello", capsys)
    line = one_line_usage_error(res, out, err)
    assert var in line and repr(value) in line
    assert openai_env.requests == [] and summ.requests == []


def test_the_summarizers_server_set_by_env_after_load_takes_effect_at_the_next_cell(openai_env, summ, monkeypatch,
                                                                                  ip, capsys):
    """OCW_SUMMARY_BASE_URL is read again at every command while nothing configured it, as OCW_BASE_URL is."""
    three_long_turns(ip, openai_env, capsys)
    monkeypatch.setenv("OCW_SUMMARY_BASE_URL", summ.openai_url)  # after %load_ext and three cells
    res, out, err = run(ip, "%compact", capsys)
    assert res.error_in_exec is None, err
    assert len(summ.requests) == 1 and summ.requests[0].is_summary
    assert [r.is_summary for r in openai_env.requests] == [False] * 3
    # The chat's provider and model, on the summarizer's server.
    assert session().metadata["compactions"][-1]["summarizer"] == f"openai/{session().model}"


def test_the_summarizer_sends_the_chat_providers_key_from_its_variable(own_env, ip, capsys):
    """Same provider as the chat, no %config Ocw.api_key: its requests carry OPENAI_API_KEY."""
    from conftest import DUMMY_KEY

    chat_srv, summ = own_env
    chat(ip, "hello", capsys)
    p = ocw.notebook.magics.get_runtime().summarizer_for(session())
    assert p._headers() == {"authorization": f"Bearer {DUMMY_KEY}"}  # the header each request is sent with


def test_the_summarizers_server_is_asked_its_window_once_per_session(own_env, ip, capsys):
    chat_srv, summ = own_env
    chat(ip, "Turn 0. " + USER, capsys)
    asked = len(summ.probes)  # the first turn readies the summarizer: one probe (its endpoints, in turn)
    assert asked >= 1 and summ.requests == []
    three_long_turns(ip, chat_srv, capsys)
    assert run(ip, "%context --text", capsys)[0].error_in_exec is None
    assert run(ip, "%compact", capsys)[0].error_in_exec is None
    assert len(summ.requests) == 1 and len(summ.probes) == asked  # nothing asked again
    run(ip, "%new", capsys)
    chat(ip, "Turn 0 of another session. " + USER, capsys)
    assert len(summ.probes) == 2 * asked  # a new session asks once
