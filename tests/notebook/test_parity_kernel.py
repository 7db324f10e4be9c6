"""Issue 17 in a real kernel (jupyter_client + ipykernel): what a notebook receives.

One kernel for the module, offline model, its own DuckDB file, and JPY_SESSION_NAME
naming a notebook in a temp folder (as Jupyter sets it), so the session is the
notebook's and `%ocw export` writes beside it. Each test reads the iopub messages:
the status line is a plain stream line, `%summary` is sanitized HTML, a reference
reaches the stored message, a deletion frees the notebook's session name.
"""
from __future__ import annotations

import os
import re

import pytest

from test_kernel import Kernel

SCRIPT = "<script>alert('ocw')</script>"


@pytest.fixture(scope="module")
def nbk(tmp_path_factory):
    d = tmp_path_factory.mktemp("parity-kernel")
    (d / "nb").mkdir()
    notebook = d / "nb" / "analysis.ipynb"
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("OCW_") and k not in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "JPY_SESSION_NAME")}
    env.update(OCW_PROVIDER="offline", OCW_DB=str(d / "kernel.duckdb"), OCW_CONTEXT_WINDOW="3000",
               JPY_SESSION_NAME=str(notebook))
    k = Kernel(env, str(d / "kernel.log"))
    k.notebook = notebook
    try:
        k.run("%load_ext ocw\nimport ocw")
        yield k
    finally:
        k.close()


def turns(k, first: int, n: int) -> list:
    return [k.run("%%chat\n" + f"Turn {i}: we read src/mod_{i}.py; {SCRIPT} was in it. " * 8) for i in range(first,
                                                                                                        first + n)]


def test_a_notebook_gets_the_status_line_as_text_and_the_summary_as_sanitized_html(nbk):
    runs = turns(nbk, 0, 12)
    for r in runs:
        lines = r.stdout.rstrip("\n").splitlines()
        assert re.fullmatch(r"context \d+ % · [\d,]+ / 3,000 · auto-compact at 80 % · \d compactions?", lines[-1])
        assert not [d for d in r.displays if "context " in d["content"]["data"].get("text/html", "")]
    assert "Context compacted" in "".join(r.stdout for r in runs)
    r = nbk.run("%summary")
    (shown,) = [d for d in r.displays if d["msg_type"] == "display_data"]
    html, plain = shown["content"]["data"]["text/html"], shown["content"]["data"]["text/plain"]
    assert "text/markdown" not in shown["content"]["data"]
    assert "<script" not in html and "&lt;script&gt;" in html and "[active]" in html
    assert SCRIPT in plain and "Compactions so far: 1" in plain


def test_a_reference_is_expanded_in_the_kernel_and_stored_so(nbk):
    nbk.run("rows = [{'city': 'Oslo', 'n': 3}]")
    nbk.run("%%chat\nWhat is in {rows}? Not {{rows}}, not `{rows}`.")
    text = nbk.py("(lambda s: s.node(s.branch()[-2])['content'][0]['text'])(ocw.current_session())")
    assert text == "What is in [{'city': 'Oslo', 'n': 3}]? Not {rows}, not `{rows}`.\n"
    r = nbk.run("%%chat\n{missing}", ok=False)
    assert not r.ok and r.reply["content"]["ename"] == "UsageError" and not r.displays
    assert r.stderr.strip() == ("UsageError: {missing}: no variable 'missing' in this notebook — define it first, "
                                "or write {{missing}} to send the braces as they are")


def test_export_lands_beside_the_notebook_and_delete_frees_its_name(nbk):
    r = nbk.run("%ocw export")
    target = nbk.notebook.parent / "analysis.ocw.md"
    assert r.stdout.strip().endswith(f"as Markdown to {target}") and not r.displays
    md = target.read_text(encoding="utf-8")
    assert md.startswith("<!-- ocw export") and SCRIPT in md  # a file: model text as it is
    sid = nbk.py("ocw.current_session().id")
    r = nbk.run(f"%sessions --delete '{nbk.notebook}'")
    assert "Nothing was deleted; to confirm" in r.stdout and nbk.py("ocw.current_session().id") == sid
    r = nbk.run(f"%sessions --delete '{nbk.notebook}' --yes")
    assert r.stdout.startswith(f"Deleted session '{nbk.notebook}' ({sid})")
    assert nbk.py("ocw.current_session() is None") is True
    nbk.run("%%chat\nA new start.")
    assert nbk.py("ocw.current_session().id") != sid
    assert nbk.py("[ocw.current_session().compaction_count, len(ocw.current_session().branch())]") == [0, 2]
