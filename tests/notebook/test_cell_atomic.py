"""Issue 12 item 1 and issue 11 item 3: a %%chat cell is all or nothing.

A cell's options (`--provider`, `--model`, `--new`, `--session`) are applied
before the request; if the cell then ends with nothing stored, every change
they made is taken back — the DuckDB rows are byte-for-byte what they were
(all columns, rev and updated_at included), and `%ocw doctor`, `%context`,
`%sessions` and `%compact` see the old provider and model. A cell that
succeeds keeps what its options said, and only that. Real IPython shell, real
DuckDB file, the loopback server.
"""
from __future__ import annotations

import pytest
from IPython.core.error import UsageError

import ocw
import ocw.store.duckdb.store
import ocw.conversation.tools
from ocw.text.errors import StoreError
from ocw.notebook.magics import get_runtime


def run(shell, cell, capsys):
    res = shell.run_cell(cell)
    cap = capsys.readouterr()
    return res, cap.out, cap.err


def ok(shell, cell, capsys) -> str:
    res, out, err = run(shell, cell, capsys)
    assert res.error_in_exec is None, (out, err)
    return out


def one_line_error(shell, cell, capsys) -> str:
    """Run a cell that must fail with a one-line UsageError and no traceback."""
    res, out, err = run(shell, cell, capsys)
    assert isinstance(res.error_in_exec, UsageError), (res.error_in_exec, out, err)
    assert "Traceback" not in out + err
    msg = str(res.error_in_exec)
    assert "\n" not in msg and msg in err
    return msg


def surfaces(shell, capsys) -> dict:
    """What the user reads about the current session: doctor, context, sessions."""
    doctor = ok(shell, "%ocw doctor", capsys)
    context = ok(shell, "%context --text", capsys)
    sessions = ok(shell, "%sessions", capsys)
    pick = lambda text, key: next(line for line in text.splitlines() if line.strip().startswith(key))  # noqa: E731
    return {"provider": pick(doctor, "provider:"), "model": pick(doctor, "model:"), "key": pick(doctor, "API key:"),
            "tokenizer": pick(doctor, "tokenizer:"), "context": context, "sessions": sessions}


# -- --provider / --model --------------------------------------------------------------------------


def test_a_failed_provider_switch_changes_nothing(ip, store_dump, capsys, monkeypatch):
    """The issue's case: no OpenAI key. The cell fails; the session is still on the
    offline model everywhere a user looks, and %compact still works."""
    for i in range(3):
        ok(ip, f"%%chat\nturn {i}: " + "some words about the plan " * 20, capsys)
    rt = get_runtime()
    s = ocw.current_session()
    before_rows, before_seen = store_dump(rt.store), surfaces(ip, capsys)
    assert "offline" in before_seen["provider"] and "ocw-offline" in before_seen["model"]

    msg = one_line_error(ip, "%%chat --provider openai\nhello", capsys)
    assert "OPENAI_API_KEY" in msg

    assert store_dump(rt.store) == before_rows  # every column of every row, rev and updated_at too
    assert surfaces(ip, capsys) == before_seen
    assert (s.provider_name, s.model, s.context_window) == ("offline", "ocw-offline", 8192)
    assert ocw.current_session() is s
    out = ok(ip, "%compact", capsys)
    assert "API key" not in out and ("Context" in out or "Nothing to compact" in out), out


def test_a_successful_switch_changes_only_what_it_says(ip, refserver, monkeypatch, capsys):
    """The control: with a key (the loopback server) the same switch works, and changes
    only what it said: provider and model (with its window); name, prompt, count stay.
    No model was named, so the model is the one the local server lists as its own."""
    ok(ip, "%%chat\nfirst", capsys)
    s = ocw.current_session()
    name, prompt, count = s.name, s.system_prompt, s.compaction_count
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-0000000000000000")
    ip.run_cell(f"%config Ocw.base_url = {refserver.openai_url!r}")
    refserver.script(text="from openai")
    out = ok(ip, "%%chat --provider openai\nsecond", capsys)
    assert "from openai" in out and len(refserver.requests) == 1
    assert (s.provider_name, s.model, s.context_window) == ("openai", "ref-model", 8_192)
    assert refserver.requests[0].body["model"] == "ref-model"
    assert (s.name, s.system_prompt, s.compaction_count) == (name, prompt, count)
    assert "openai" in surfaces(ip, capsys)["provider"]


def test_a_failed_model_switch_after_requests_is_taken_back(oip, openai_env, store_dump, capsys):
    """The request went out with the new model (so the switch was real) and failed:
    the model, window and the measured usage baseline all come back."""
    srv = openai_env
    ok(oip, "%%chat\none", capsys)
    s, rt = ocw.current_session(), get_runtime()
    assert s.occupancy()["basis"] == "measured"  # the first reply's usage sample
    before_rows, before_seen = store_dump(rt.store), surfaces(oip, capsys)
    n = len(srv.requests)

    srv.script(status=500, times=3)  # max_retries 2: three attempts, all fail
    one_line_error(oip, "%%chat --model gpt-4.1\ntwo", capsys)

    sent = srv.requests[n:]
    assert [r.body["model"] for r in sent] == ["gpt-4.1"] * 3
    assert store_dump(rt.store) == before_rows
    assert surfaces(oip, capsys) == before_seen
    assert s.model == "ref-model" and s.occupancy()["basis"] == "measured"


# -- --new, --session, a first cell ---------------------------------------------------------------------


def test_a_failed_new_leaves_the_old_session_under_its_name(oip, openai_env, store_dump, capsys):
    srv = openai_env
    ok(oip, "%%chat\none", capsys)
    old = ocw.current_session()
    rt = get_runtime()
    before = store_dump(rt.store)

    srv.script(status=500, times=3)
    one_line_error(oip, "%%chat --new\nfresh start", capsys)

    assert store_dump(rt.store) == before
    assert [r["name"] for r in rt.store.sessions()] == ["default"]
    assert ocw.current_session() is old and old.name == "default" and len(old.branch()) == 2
    # Control: the same cell with a working server files the old one away.
    ok(oip, "%%chat --new\nfresh start", capsys)
    names = sorted(r["name"] for r in rt.store.sessions())
    assert len(names) == 2 and names[0] == "default" and names[1].startswith("default @ ")
    assert ocw.current_session() is not old and len(ocw.current_session().branch()) == 2


@pytest.mark.parametrize("how", ["%%chat --new\nfresh", "%new"])
def test_file_away_and_create_are_one_transaction(ip, store_dump, monkeypatch, capsys, how):
    """If creating the new session fails after the old one was renamed (in the same
    transaction), the rename is rolled back with it."""
    ok(ip, "%%chat\none", capsys)
    rt = get_runtime()
    before = store_dump(rt.store)

    real = ocw.store.duckdb.store.json.dumps

    class FailingJson:
        loads = staticmethod(ocw.store.duckdb.store.json.loads)  # reading stays as it was

        @staticmethod
        def dumps(value, *a, **kw):
            if isinstance(value, dict) and "context_compaction_count" in value:  # the new session's metadata
                raise StoreError("disk full while creating the session")
            return real(value, *a, **kw)

    monkeypatch.setattr(ocw.store.duckdb.store, "json", FailingJson)
    msg = one_line_error(ip, how, capsys)
    assert "disk full" in msg
    monkeypatch.undo()
    assert store_dump(rt.store) == before
    assert [r["name"] for r in rt.store.sessions()] == ["default"]


def test_a_failed_first_cell_creates_no_session(ip, capsys):
    msg = one_line_error(ip, "%%chat --provider openai\nhello", capsys)
    assert "OPENAI_API_KEY" in msg
    rt = get_runtime()
    assert rt.store.sessions() == [] and rt.current is None
    assert ok(ip, "%context --text", capsys).strip() == "Start a conversation first"


def test_a_failed_session_option_keeps_the_current_session(ip, store_dump, capsys):
    ok(ip, "%%chat\nhere", capsys)
    s = ocw.current_session()
    before = store_dump(get_runtime().store)
    one_line_error(ip, "%%chat --session elsewhere --provider openai\nhello", capsys)
    assert store_dump(get_runtime().store) == before
    assert ocw.current_session() is s and [r["name"] for r in s.store.sessions()] == ["default"]


def test_kept_tool_steps_keep_the_switch(oip, openai_env, capsys):
    """Something was stored (a tool step): the options were used, and they stay."""
    srv = openai_env
    ok(oip, "%%chat\none", capsys)
    oip.run_cell("import ocw\n@ocw.tool\ndef ping() -> str:\n    'Answer pong.'\n    return 'pong'")
    try:
        srv.script(tool_calls=[{"name": "ping", "input": {}}])
        srv.script(status=500, times=3)
        one_line_error(oip, "%%chat --model gpt-4.1\ncall ping", capsys)
    finally:
        ocw.conversation.tools._REGISTERED.pop("ping", None)  # no tool definition left for later tests
    s = ocw.current_session()
    assert s.model == "gpt-4.1" and [s.node(n)["role"] for n in s.branch()][-2:] == ["assistant", "tool"]


# -- the store behind %config Ocw.db -----------------------------------------------------------------


def test_a_refused_database_leaves_the_old_store_working(ip, tmp_path, monkeypatch, capsys):
    """Even when the file cannot be looked at during %config (another process holds
    it), the runtime opens the new store before it lets go of the old one."""
    import duckdb

    from ocw.store.duckdb import ownership

    ok(ip, "%%chat\nhello", capsys)
    rt = get_runtime()
    old_store, old_path, s = rt.store, rt.config.db, ocw.current_session()
    foreign = tmp_path / "theirs.duckdb"
    con = duckdb.connect(str(foreign))
    con.execute("CREATE TABLE t (a INTEGER)")
    con.close()
    monkeypatch.setattr(ownership, "classify_file", lambda path: None)  # "locked: cannot look now"
    ok(ip, f"%config Ocw.db = {str(foreign)!r}", capsys)
    msg = one_line_error(ip, "%%chat\nhi", capsys)
    assert "another application" in msg
    assert rt._store is old_store and old_store.open_session(s.id).branch() == s.branch()
    ok(ip, f"%config Ocw.db = {old_path!r}", capsys)
    ok(ip, "%%chat\nback", capsys)
    assert len(ocw.current_session().branch()) == 4


def test_a_window_learned_by_a_failed_switch_is_undone_and_learned_again(oip, openai_env, store_dump, capsys):
    """The probe's write belongs to the cell: undone with the switch, and asked for
    again by the next attempt (not skipped as already probed)."""
    srv = openai_env
    ok(oip, "%%chat\none", capsys)
    s, rt = ocw.current_session(), get_runtime()
    before = store_dump(rt.store)
    srv.reported_window = 1_500  # /props and /v1/models state it, under the configured 2,000
    n_probes = len(srv.probes)
    srv.script(status=500, times=3)
    one_line_error(oip, "%%chat --model gpt-4.1\ntwo", capsys)
    assert len(srv.probes) > n_probes  # the switch was probed ...
    assert store_dump(rt.store) == before and s.context_window == 2_000 and s.model == "ref-model"  # ... and undone
    n_probes = len(srv.probes)
    out = ok(oip, "%%chat --model gpt-4.1\ntwo again", capsys)
    assert len(srv.probes) > n_probes and "1,500" in out
    assert (s.model, s.context_window) == ("gpt-4.1", 1_500)
