"""Issue 12, "the first hour as a user": the magics in a real kernel (jupyter_client
KernelManager running ipykernel), on the offline model with no key, as a newcomer meets them.

One kernel for the module; each test works in its own session (`%new --name ...`) and
reads what a notebook would show from the iopub messages. Items:
3 `%sessions` shows whole names; 4 the snip note claims no compaction that did not run;
5 `%config Ocw.lang = 'zh'` switches a widget already shown, and ocw's own compaction
failure reasons are Chinese in Chinese messages; 7 `%clear` stays IPython's;
8 after a compaction that folded everything the offline model answers the question;
9 the no-key error says it once, and "approximate" shows only when a count was inferred.
"""
from __future__ import annotations

import os
import re

import pytest

from test_kernel import Kernel

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    d = tmp_path_factory.mktemp("first-hour")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("OCW_") and k not in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "JPY_SESSION_NAME")}
    env.update(OCW_DB=str(d / "first-hour.duckdb"), OCW_PROVIDER="offline")
    k = Kernel(env, str(d / "kernel.log"))
    try:
        yield k
    finally:
        k.close()


@pytest.fixture
def ocw_loaded(kernel):
    kernel.run("%load_ext ocw\nimport ocw\n%config Ocw.lang = 'en'\n%config Ocw.auto_compact = 0.8\n"
               "%config Ocw.context_window = 0")
    return kernel


def new_session(kernel, name: str) -> None:
    r = kernel.run(f"%new --name {name}")
    assert f"New session {name!r}" in r.stdout


def chat(kernel, text: str, ok=True):
    return kernel.run(f"%%chat\n{text}", ok=ok)


# -- item 7: %clear ----------------------------------------------------------------------------------
def test_ipythons_clear_survives_loading_and_unloading_ocw(kernel):
    kernel.run("%unload_ext ocw", ok=None)  # whatever an earlier test left
    ident = "get_ipython().magics_manager.magics['line']['clear']"
    kernel.run(f"_ipython_clear = {ident}")
    assert kernel.py("type(_ipython_clear.__self__).__name__") == "KernelMagics"
    kernel.run("%load_ext ocw")
    assert kernel.py(f"{ident} == _ipython_clear") is True  # ocw does not replace it
    assert kernel.py("'new' in get_ipython().magics_manager.magics['line']") is True
    r = kernel.run("%clear")
    assert r.ok and "New session" not in r.stdout  # IPython's: clears the screen, starts no session
    assert "%clear" not in kernel.run("%ocw help").stdout
    kernel.run("%unload_ext ocw")
    assert kernel.py(f"{ident} == _ipython_clear") is True  # unloading ocw leaves it in place
    assert kernel.py("'new' in get_ipython().magics_manager.magics['line']") is False


# -- item 3: %sessions --------------------------------------------------------------------------------
def test_sessions_show_whole_names_that_differ_deep_inside(ocw_loaded):
    k = ocw_loaded
    a = "/home/someone/projects/customer-analytics/2024/q3/notebooks/exploration/Untitled.ipynb"
    b = "/home/someone/projects/customer-analytics/2024/q4/notebooks/exploration/Untitled.ipynb"
    for name in (a, b):
        new_session(k, name)
        chat(k, "hello")
    out = k.run("%sessions").stdout
    rows = out.splitlines()
    row_a = [r for r in rows if r.endswith(a)]
    row_b = [r for r in rows if r.endswith(b)]
    assert len(row_a) == 1 and len(row_b) == 1, out  # each name whole, each on its own line
    assert row_b[0].startswith(" * ")  # the current one
    assert rows[0].split() == ["id", "model", "messages", "tokens", "last", "use", "name"]


# -- item 4: the snip note -----------------------------------------------------------------------------
def test_over_window_with_auto_compaction_off_says_nothing_was_compacted(ocw_loaded):
    k = ocw_loaded
    k.run("%config Ocw.auto_compact = 0\n%config Ocw.context_window = 1000")
    new_session(k, "fh-snip")
    for i in range(3):
        chat(k, f"Turn {i}. " + "notes about the garden plan, tomatoes and basil " * 30)
    r = chat(k, "And now?")
    note = [ln for ln in r.stdout.splitlines() if "left out of this request only" in ln]
    assert len(note) == 1, r.stdout
    assert note[0].startswith("The request was over the window and nothing was compacted this turn; ")
    assert "after compaction" not in r.stdout
    assert k.occupancy()["compaction_count"] == 0


# -- item 8: the offline model after a compaction that folded everything --------------------------------
def test_offline_model_answers_the_question_not_the_summary(ocw_loaded):
    k = ocw_loaded
    new_session(k, "fh-folded")
    for i in range(4):
        chat(k, f"Turn {i}: the loader reads events.parquet and retries on timeouts after 30 s. " * 3)
    r = k.run("%compact 0")
    assert r.stdout.startswith("Context compacted: covered 8 older messages")
    r = chat(k, "What should I check next in the loader?")
    reply = r.final_text("text/plain")
    assert "begins \u201cWhat should I check next in the loader?\u201d" in reply, reply
    assert "It is 9 tokens long" in reply and "Summary" not in reply and "425" not in reply


# -- item 9: the no-key error, the "approximate" note ----------------------------------------------------
def test_no_key_error_says_it_once(ocw_loaded):
    k = ocw_loaded
    new_session(k, "fh-nokey")
    r = k.run("%%chat --provider openai\nhi", ok=False)
    assert r.reply["content"]["ename"] == "UsageError"
    line = r.stderr.strip()
    assert line == ("UsageError: openai: no API key; set OPENAI_API_KEY — or %config Ocw.api_key; "
                    "then check with %ocw doctor"), line
    assert line.count("API key") == 1 and line.count("OPENAI_API_KEY") == 1


def test_approximate_only_when_a_count_was_inferred(ocw_loaded):
    k = ocw_loaded
    new_session(k, "fh-count")
    chat(k, "hello")
    chat(k, "and more")
    assert k.run("%compact 0").stdout.startswith("Context compacted")  # ocw's own compaction: exact
    table = k.run("%context --text").stdout
    assert re.search(r"^  Compactions: 1$", table, re.M), table
    assert "approximate" not in table
    # A provider sheds context on its own: its usage drops, one compaction is inferred.
    k.run("s = ocw.current_session(); s.record_usage(500); s.record_usage(400)")
    table = k.run("%context --text").stdout
    assert re.search(r"^  Compactions: 2 \(1 inferred from a drop in provider-reported usage; "
                     r"inferred counts are approximate\)$", table, re.M), table


# -- item 5: language is live --------------------------------------------------------------------------
def comm_updates(run, key: str) -> list:
    """The values of `key` in the widget state updates the kernel sent during `run`."""
    return [m["content"]["data"]["state"][key] for m in run.msgs
            if m["msg_type"] == "comm_msg" and m["content"]["data"].get("method") in ("update", "echo_update")
            and key in m["content"]["data"].get("state", {})]


def test_lang_switch_reaches_a_widget_already_on_screen(ocw_loaded):
    k = ocw_loaded
    new_session(k, "fh-lang")
    chat(k, "hello")
    chat(k, "and more")
    r = k.run("%context")
    assert r.displays and "application/vnd.jupyter.widget-view+json" in r.displays[0]["content"]["data"]
    r = k.run("%compact 0")
    assert r.stdout.startswith("Context compacted")
    r = k.run("%config Ocw.lang = 'zh'")
    labels = comm_updates(r, "labels")
    messages = comm_updates(r, "message")
    assert labels and labels[-1]["compact_now"] == "立即压缩" and labels[-1]["estimate"] == "估算"
    assert messages and messages[-1].startswith("上下文已压缩：覆盖了 4 条较早的消息，")
    assert comm_updates(r, "lang")[-1] == "zh"
    r = k.run("%config Ocw.lang = 'en'")
    assert comm_updates(r, "labels")[-1]["compact_now"] == "Compact now"
    assert comm_updates(r, "message")[-1].startswith("Context compacted: covered 4 older messages, ")


def test_ocws_own_failure_reason_is_chinese_in_a_chinese_message(ocw_loaded):
    k = ocw_loaded
    new_session(k, "fh-zh-failure")
    for i in range(3):
        chat(k, f"Turn {i}: notes on the garden plan.")
    # The summarizer answers nothing: a failure reason in ocw's own words.
    k.run("from ocw.providers.base import Reply, Usage\n"
          "p = ocw.notebook.magics.get_runtime().provider_for(ocw.current_session())\n"
          "p.complete = lambda *a, **kw: Reply(content=[{'type': 'text', 'text': ''}], usage=Usage(10, 0, 0))")
    k.run("%config Ocw.lang = 'zh'")
    try:
        r = k.run("%compact 0")
        assert r.stdout.strip() == "上下文压缩失败：摘要模型返回了空摘要"
        k.run("%config Ocw.lang = 'en'")
        r = k.run("%compact 0")
        assert r.stdout.strip() == "Context compaction failed: the summarizer returned an empty summary"
    finally:
        k.run("%config Ocw.lang = 'en'\ndel p.complete")
