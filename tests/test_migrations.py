"""Numbered migrations: a blank file and a file made by the first schema both open,
the old one upgraded in place with its data readable."""
from __future__ import annotations

import json

import duckdb
import pytest

import ocw
from ocw import migrations
from ocw.migrations import MIGRATIONS, SCHEMA_VERSION, current_version, migrate
from ocw.store import DUCKDB_CONFIG
from ocw.tokens import FRAME_TOKENS, get_encoding, render_message


def columns(con, table):
    return {r[0] for r in con.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_name = ?", [table]).fetchall()}


def versions(path):
    con = duckdb.connect(path, config=DUCKDB_CONFIG)
    try:
        return [r[0] for r in con.execute("SELECT version FROM schema_version ORDER BY version").fetchall()]
    finally:
        con.close()


def test_blank_file_gets_every_migration(tmp_db):
    store = ocw.Store(tmp_db)
    with store.db.connect() as con:
        assert current_version(con) == SCHEMA_VERSION == len(MIGRATIONS)
        assert {"id", "name", "model", "context_window", "system_prompt", "head_id", "occupancy_generation",
                "metadata", "rev"} <= columns(con, "sessions")
        assert {"seq", "id", "session_id", "parent_id", "role", "name", "content", "tokens", "covers_ids",
                "created_at", "supersedes", "encoding"} <= columns(con, "nodes")
    store.close()
    assert versions(tmp_db) == list(range(1, SCHEMA_VERSION + 1))
    # Opening again applies nothing twice.
    ocw.Store(tmp_db).close()
    assert versions(tmp_db) == list(range(1, SCHEMA_VERSION + 1))


def make_v1_file(path):
    """A file as the first schema wrote it: only MIGRATIONS[0], schema_version 1, rows
    written the old way (no rev, no encoding, metadata without the compaction count)."""
    con = duckdb.connect(path, config=DUCKDB_CONFIG)
    con.execute("CREATE TABLE schema_version (version INTEGER)")
    MIGRATIONS[0](con)
    con.execute("INSERT INTO schema_version VALUES (1)")
    con.execute(
        "INSERT INTO sessions (id, name, provider, model, context_window, system_prompt, head_id,"
        " occupancy_generation, metadata) VALUES ('s_old', 'old-chat', 'openai', 'gpt-4o', 64000,"
        " 'Be brief.', 'n3', 1, ?)",
        [json.dumps({"context_window": {"size": 64000, "used": 900, "remaining": 63100, "source": "provider"}})],
    )
    rows = [
        ("n1", None, "user", None, [{"type": "text", "text": "你好，请总结这个日志"}], None),
        ("n2", "n1", "assistant", None, [{"type": "thinking", "thinking": "short log"},
                                         {"type": "text", "text": "It is short."}], None),
        ("sum1", "n2", "llm", "context/summary", [{"type": "text", "text": "User asked for a log summary."}],
         ["n1", "n2"]),
        ("n3", "n2", "user", None, [{"type": "text", "text": "Thanks! And now?"}], None),
    ]
    for nid, parent, role, name, content, covers in rows:
        con.execute(
            "INSERT INTO nodes (id, session_id, parent_id, role, name, content, tokens, covers_ids)"
            " VALUES (?, 's_old', ?, ?, ?, ?, 1, ?)",  # a stale token count: 1
            [nid, parent, role, name, json.dumps(content, ensure_ascii=False),
             json.dumps(covers) if covers else None],
        )
    con.close()


def test_v1_file_upgrades_in_place(tmp_db):
    make_v1_file(tmp_db)
    assert versions(tmp_db) == [1]
    store = ocw.Store(tmp_db)
    with store.db.connect() as con:
        assert current_version(con) == SCHEMA_VERSION
        assert {"rev"} <= columns(con, "sessions")
        assert {"supersedes", "encoding"} <= columns(con, "nodes")
        assert con.execute("SELECT rev FROM sessions WHERE id = 's_old'").fetchone()[0] == 0
        assert con.execute("SELECT count(*) FROM nodes").fetchone()[0] == 4

    s = store.open_session("old-chat")
    assert s.id == "s_old" and s.model == "gpt-4o" and s.context_window == 64000
    assert s.compaction_count == 0  # absent in the old metadata
    assert s.metadata["context_window"]["used"] == 900
    assert s.head == "n3" and s.branch() == ["n1", "n2", "n3"]
    assert s.generation == 1
    assert s.active_summary().id == "sum1"
    hist = s.rendered_history()
    assert [m["role"] for m in hist] == ["system", "llm", "user"]
    assert hist[1]["content"][0]["text"] == "User asked for a log summary."
    assert s.node("n1")["content"][0]["text"] == "你好，请总结这个日志"

    # Stale counts (no encoding recorded) are recounted, so occupancy is exact.
    enc = get_encoding("o200k_base")
    recount = sum(FRAME_TOKENS + len(enc.encode_ordinary(render_message(m["role"], m["content"], m.get("name"))))
                  for m in hist)
    assert s.occupancy()["total"] == recount
    # The old file's sample has no head/generation: it does not pass for a measurement.
    assert s.occupancy()["basis"] == "estimated"

    # The upgraded file takes new writes, chained under the old HEAD.
    nid = s.append("assistant", "Here is more.")
    assert s.node(nid)["parent_id"] == "n3"
    assert s.record_usage(1000) is False  # above the old baseline (900): nothing inferred
    store.close()
    assert versions(tmp_db) == list(range(1, SCHEMA_VERSION + 1))

    again = ocw.Store(tmp_db).open_session("s_old")
    assert again.branch() == ["n1", "n2", "n3", nid]
    assert again.compaction_count == 0
    again.store.close()


def test_failed_migration_leaves_previous_version(tmp_db, monkeypatch):
    make_v1_file(tmp_db)

    def m002_broken(con):
        con.execute("ALTER TABLE sessions ADD COLUMN half_done INTEGER")
        raise RuntimeError("crash in the middle of a migration")

    monkeypatch.setattr(migrations, "MIGRATIONS", [MIGRATIONS[0], m002_broken])
    con = duckdb.connect(tmp_db, config=DUCKDB_CONFIG)
    with pytest.raises(RuntimeError):
        migrate(con, target=2)
    assert current_version(con) == 1
    assert "half_done" not in columns(con, "sessions")
    con.close()
    monkeypatch.undo()
    # The real migrations still apply afterwards.
    store = ocw.Store(tmp_db)
    assert store.open_session("old-chat").compaction_count == 0
    store.close()
    assert versions(tmp_db) == list(range(1, SCHEMA_VERSION + 1))


def test_migrate_reports_starting_version(tmp_db):
    con = duckdb.connect(tmp_db, config=DUCKDB_CONFIG)
    assert migrate(con) == 0
    assert migrate(con) == SCHEMA_VERSION
    con.close()
