"""Issue 10's acceptance on the real servers: a long conversation stays alive.

Through `%%chat` in a real IPython shell, against llama.cpp's `llama-server` (both
wire formats) and the llama-cpp-python server, each with the tiny 2,048-token
model, with NO window configured (ocw assumes 8,192 for an unknown model) and a
server whose tokenizer counts ~2× ocw's offline estimate. Before this issue, 5–6
of 20 such turns completed and every later one failed; now all 20 complete,
the window is learned (from the server's endpoint or its overflow error), and
automatic compaction does not fire on every turn.
"""
from __future__ import annotations

import re

import pytest

import ocw

TOPICS = ["the ingestion job", "the flaky merge test", "the 503 errors", "the memory spike", "the DuckDB migration",
          "the retry policy", "the dashboard", "the timeout in worker 7", "the prod config", "the nightly export"]
# The tiny model never writes a parsable structured memory: its fallback is said on the same line.
COMPACTED = re.compile(r"^Context compacted: covered (\d+) older messages?, ([\d,]+) → ([\d,]+) tokens"
                       r"(?:\. The summarizer's session memory did not parse; ocw's own memory pass was used\.)?$", re.M)


def long_turn(i: int) -> str:
    return (f"Turn {i}: let us go through {TOPICS[i % 10]} in detail. We looked at the logs, the metrics and the "
            "configuration, and we still do not know why the job slows down every night around two. ") * 4


def configure(monkeypatch, provider: str, base_url: str) -> None:
    monkeypatch.setenv("OCW_PROVIDER", provider)
    monkeypatch.setenv("OCW_BASE_URL", base_url)
    monkeypatch.setenv("OCW_MODEL", "tiny")
    monkeypatch.setenv("OPENAI_API_KEY" if provider == "openai" else "ANTHROPIC_API_KEY", "x")  # the docs' dummy key


def converse(ip, capsys, turns: int = 20) -> dict:
    ip.run_line_magic("config", "Ocw.max_output_tokens = 64")
    out = {"ok": 0, "empty": 0, "errors": [], "compactions": 0, "ratios": [], "text": ""}
    for i in range(turns):
        capsys.readouterr()
        res = ip.run_cell(f"%%chat\n{long_turn(i)}")
        o, e = capsys.readouterr()
        if res.error_in_exec is None:
            out["ok"] += 1
            out["text"] += o
        elif "the provider returned an empty reply" in e:
            # The random-weight model sometimes ends at its first token. Since issue 11
            # an empty reply is said in one line and the cell stores nothing (a first
            # cell leaves no session behind), so it is counted apart, bounded below,
            # and what it printed is not the conversation's.
            out["empty"] += 1
            continue
        else:
            out["errors"].append(f"turn {i}: {e.strip()[:300]}")
            out["text"] += o
        out["compactions"] += len(COMPACTED.findall(o))
        out["ratios"].append(ocw.current_session().occupancy()["ratio"])
    return out


CASES = {
    "llama-server/openai": ("llama_server", "openai", "llama.cpp /v1/models"),
    "llama-server/anthropic": ("llama_server", "anthropic", "llama.cpp /v1/models"),
    "llama-cpp-python/openai": ("llama_cpp_python_server", "openai", "stated in the server's error"),
}


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("case", list(CASES))
def test_twenty_long_turns_on_a_2048_token_server_all_complete(case, request, ocw_env, monkeypatch, capsys):
    fixture, provider, source = CASES[case]
    server = request.getfixturevalue(fixture)
    configure(monkeypatch, provider, server.openai_url if provider == "openai" else server.anthropic_url)
    ip = request.getfixturevalue("ip")

    run = converse(ip, capsys)

    assert run["ok"] + run["empty"] == 20 and run["ok"] >= 12, run["errors"]
    s = ocw.current_session()
    assert s.configured_window == 8_192  # nothing was configured ...
    assert (s.context_window, s.window_source) == (2_048, source)  # ... the real window was learned
    assert run["text"].count("The model's context window is 2,048 tokens") == 1  # announced once
    # The server counts ~2× ocw's estimate; planning follows its figures.
    assert 1.4 < s.calibration < 2.8
    # Compaction keeps the conversation alive without firing on every turn ...
    assert 3 <= run["compactions"] <= 12 and s.compaction_count >= run["compactions"]
    # ... and after each one the next turn starts well under the 80 % line.
    for before, after in ((int(b.replace(",", "")), int(a.replace(",", ""))) for _, b, a in COMPACTED.findall(run["text"])):
        assert after < before and after / 2_048 < 0.6
    assert "e<redacted>ceeds" not in run["text"]  # the one-letter dummy key redacts nothing


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_session_holding_a_tool_call_keeps_working_on_llama_cpp_python(llama_cpp_python_server, ocw_env,
                                                                         monkeypatch, capsys, request):
    configure(monkeypatch, "openai", llama_cpp_python_server.openai_url)
    ip = request.getfixturevalue("ip")
    ip.run_line_magic("config", "Ocw.max_output_tokens = 32")
    capsys.readouterr()
    assert ip.run_cell("%%chat\nList the files, please.").error_in_exec is None
    s = ocw.current_session()
    # The model called a tool (stored as the tool loop stores it: the call, then its result).
    s.append_many([("assistant", [{"type": "tool_use", "id": "call_1", "name": "list_files", "input": {"dir": "."}}]),
                   ("tool", [{"type": "tool_result", "tool_use_id": "call_1", "content": "a.csv\nb.csv"}])])
    for i in range(3):
        res = ip.run_cell(f"%%chat\nWhat is in file number {i}?")
        _, err = capsys.readouterr()
        assert res.error_in_exec is None, err  # no 500 for "content": null, no retries of it
    roles = [s.node(n)["role"] for n in s.branch()]
    assert roles[:4] == ["user", "assistant", "assistant", "tool"] and len(roles) == 10
