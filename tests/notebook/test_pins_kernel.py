"""%pin, %pins, %unpin, %memory in a real kernel (jupyter_client + ipykernel), the model at
the loopback OpenAI-compatible server, which counts what it receives (issue 22 item 6,
issue 29 item 2). A mistake is one UsageError line, with no traceback and nothing written."""
from __future__ import annotations


import pytest

from refserver import RefServer
from test_kernel import loopback_kernel

RULE = "Amounts in orders.amount_cents are cents, never dollars."
PAD = "the garden has tomatoes and basil. " * 20


@pytest.fixture(scope="module")
def srv():
    s = RefServer().start()
    s.summary_text = "The user plans a garden."
    yield s
    s.stop()


@pytest.fixture(scope="module")
def k(srv, tmp_path_factory):
    yield from loopback_kernel(srv.openai_url, tmp_path_factory.mktemp("pins-kernel"), "sk-test-PINS-0123456789",
                               window="4000")


def sent(srv) -> str:
    return [r for r in srv.requests if not r.is_summary][-1].text


def chat(k, srv, text: str) -> None:
    srv.script(text="Noted.")  # not the server's echo, which would quote the pins block back
    k.run("%%chat\n" + text)


def test_pins_through_the_magics_reach_the_model_verbatim_after_a_compaction(k, srv):
    assert "New session 'k-pins'" in k.run("%new --name k-pins").stdout
    chat(k, srv, "hello " + PAD)
    assert k.run(f"%pin {RULE}").stdout.startswith("Pinned as 1 (")
    k.run("limits = {'p95_ms': 741}")
    assert k.run("%pin {limits}").stdout.startswith("Pinned as 2 (")
    for i in range(4):
        chat(k, srv, f"turn {i} " + PAD)
    assert sent(srv).count(RULE) == 1
    assert k.run("%compact 100").stdout.startswith("Context compacted")
    k.run("limits['p95_ms'] = 999")
    chat(k, srv, "after")
    text = sent(srv)
    assert text.count(RULE) == 1 and text.count("{'p95_ms': 741}") == 1 and "999" not in text
    assert "hello the garden" not in text  # the first turn is folded; the pins are not
    occ = k.occupancy()
    assert occ["breakdown"]["pins"] > 0 and occ["compaction_count"] == 1
    pins = k.run("%pins").stdout.splitlines()
    assert pins[0] == "Pinned (the model reads these verbatim after every compaction):"
    assert pins[1].startswith(f"  1. {RULE}  (") and pins[2].startswith("  2. {'p95_ms': 741}  (")
    assert k.run("%unpin 1").stdout.startswith("Unpinned 1:")
    chat(k, srv, "again")
    assert RULE not in sent(srv)
    assert "[Pinned by the user: kept verbatim whatever is compacted]\n[pin 2]\n{'p95_ms': 741}" in sent(srv)
    assert k.py("[e['op'] for e in ocw.current_session().metadata['pins']]") == ["pin", "pin", "unpin"]
    shown = k.run("%memory --all").displays[-1]["content"]["data"]  # a notebook gets sanitized HTML
    assert shown["text/plain"].startswith("Session memory:") and "  2. {'p95_ms': 741}  (" in shown["text/plain"]
    assert "<li>2. {'p95_ms': 741} <em>(" in shown["text/html"].replace("&#39;", "'")


@pytest.mark.parametrize("line, message", [
    ("%unpin 99", "there is no pin 99"),
    ("%pin", "%pin takes what to pin"),
    ("%pin {nope}", "{nope}: no variable 'nope' in this notebook"),
    ("%memory --forget 5", "there is no memory item 5"),
])
def test_bad_input_is_one_usage_error_line(k, line, message):
    before = k.py("(ocw.current_session().generation, ocw.current_session().metadata.get('pins'))")
    r = k.run(line, ok=False)
    assert not r.ok and r.errors == [] and r.stdout == ""  # IPython shows a UsageError as one stderr line
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("UsageError: ") and message in lines[0], r.stderr
    assert k.py("(ocw.current_session().generation, ocw.current_session().metadata.get('pins'))") == before


def test_memory_before_any_compaction_says_what_will_go_there(k):
    k.run("%new --name k-empty")
    out = k.run("%memory").displays[-1]["content"]["data"]["text/plain"]
    assert "No session memory yet. At the first compaction ocw keeps here what stays true" in out
    assert "Nothing pinned yet" in out
