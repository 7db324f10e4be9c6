"""Numbered migrations: a blank file and a file made by the first schema both open,
the old one upgraded in place with its data readable."""
from __future__ import annotations

import json

import duckdb
import pytest

import ocw
from ocw.store.duckdb import migrations
from ocw.store.duckdb.migrations import MIGRATIONS, SCHEMA_VERSION, current_version
from ocw.store.duckdb.ownership import migrate
from ocw.store.duckdb.store import DUCKDB_CONFIG
from ocw.text.tokens import FRAME_TOKENS, get_encoding, render_message


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


# -- Store v2: a file the previous schema (3) wrote, with summaries and branches ----------------
def make_v3_file(path):
    """What ocw wrote before Store v2: migrations 1–3, counts tagged with their encoding,
    summaries listing every covered id, two branches. Returns what the test needs."""
    enc = "o200k_base"
    con = duckdb.connect(path, config=DUCKDB_CONFIG)
    con.execute("CREATE TABLE schema_version (version INTEGER)")
    for i, m in enumerate(MIGRATIONS[:3], 1):
        m(con)
        con.execute("INSERT INTO schema_version VALUES (?)", [i])
    con.execute(
        "INSERT INTO sessions (id, name, provider, model, context_window, system_prompt, head_id, occupancy_generation,"
        " metadata, rev) VALUES ('s3', 'v3-chat', 'openai', 'gpt-4o', 128000, 'Be brief.', NULL, 2, ?, 40)",
        [json.dumps({"context_compaction_count": 2, "context_window": None})])
    rows, parent, main = [], None, []
    for i in range(12):  # the main branch: m0 … m11
        nid = f"m{i}"
        role = "user" if i % 2 == 0 else "assistant"
        content = [{"type": "text", "text": f"message {i}: " + "the nightly load of orders.csv " * (i + 1)}]
        rows.append((nid, parent, role, None, content, None, None))
        parent = nid
        main.append(nid)
    fork = []
    parent = "m5"
    for i in range(3):  # a fork after m5: f0 f1 f2
        nid = f"f{i}"
        rows.append((nid, parent, "user" if i % 2 == 0 else "assistant",
                     None, [{"type": "text", "text": f"fork {i}: 数据 分支 " * (i + 2)}], None, None))
        parent = nid
        fork.append(nid)
    s1 = ("sum1", "m3", "llm", "context/summary", [{"type": "text", "text": "First summary: m0–m3."}], main[:4], None)
    s2 = ("sum2", "m7", "llm", "context/summary", [{"type": "text", "text": "Second summary: m0–m7, 数据."}],
          main[:8], "sum1")
    rows[4:4] = [s1]  # written after m3, as compaction would have
    rows.append(s2)
    for nid, par, role, name, content, covers, supersedes in rows:
        n = FRAME_TOKENS + len(get_encoding(enc).encode_ordinary(render_message(role, content, name)))
        con.execute(
            "INSERT INTO nodes (id, session_id, parent_id, role, name, content, tokens, covers_ids, supersedes, encoding)"
            " VALUES (?, 's3', ?, ?, ?, ?, ?, ?, ?, ?)",
            [nid, par, role, name, json.dumps(content, ensure_ascii=False), n,
             json.dumps(covers) if covers else None, supersedes, enc])
    con.execute("UPDATE sessions SET head_id = 'm11'")
    con.close()
    tokens = {r[0]: FRAME_TOKENS + len(get_encoding(enc).encode_ordinary(render_message(r[2], r[4], r[3])))
              for r in rows}
    return {"main": main, "fork": fork, "tokens": tokens,
            "summaries": [("sum2", main[:8]), ("sum1", main[:4])]}


def old_occupancy_total(v3, branch: list[str]) -> int:
    """Occupancy as the previous schema's code computed it: system prompt + the newest
    summary whose covered ids are a prefix of the branch + the uncovered tail."""
    system = FRAME_TOKENS + len(get_encoding("o200k_base").encode_ordinary(
        render_message("system", [{"type": "text", "text": "Be brief."}])))
    for sid, covers in v3["summaries"]:  # newest first
        if branch[:len(covers)] == covers:
            return system + v3["tokens"][sid] + sum(v3["tokens"][n] for n in branch[len(covers):])
    return system + sum(v3["tokens"][n] for n in branch)


def test_a_schema_3_file_upgrades_with_the_same_occupancy(tmp_db):
    v3 = make_v3_file(tmp_db)
    main, fork = v3["main"], v3["fork"]
    store = ocw.Store(tmp_db)
    try:
        s = store.open_session("v3-chat")
        # HEAD at the main leaf: the second summary covers m0–m7.
        assert s.active_summary().id == "sum2" and s.branch() == main
        assert s.occupancy()["total"] == old_occupancy_total(v3, main)
        # The covered ranges became boundaries: the last covered node and the count.
        with store.db.connect() as con:
            got = con.execute("SELECT id, parent_id, cover_count, covers_ids FROM nodes WHERE role = 'llm'"
                              " ORDER BY id").fetchall()
            depth, cum = con.execute("SELECT depth, cum_tokens FROM nodes WHERE id = 'm11'").fetchone()
        assert got == [("sum1", "m3", 4, None), ("sum2", "m7", 8, None)]
        assert (depth, cum) == (12, sum(v3["tokens"][n] for n in main))
        assert s.covered_ids("sum2") == main[:8]
        # Rewound into the second summary's range: the first one applies, the same figure as before.
        s.rewind("m6")
        assert s.active_summary().id == "sum1"
        assert s.occupancy()["total"] == old_occupancy_total(v3, main[:7])
        # The other branch: forked after m5, it keeps sum1 (m0–m3 are its ancestors too).
        s.checkout("f2")
        assert s.branch() == main[:6] + fork and s.active_summary().id == "sum1"
        assert s.occupancy()["total"] == old_occupancy_total(v3, main[:6] + fork)
        # New writes chain under the old rows with the right running totals.
        s.checkout("m11")
        n = s.append("user", "and now?")
        assert s.occupancy()["total"] == old_occupancy_total(v3, main) + s.node(n)["tokens"]
        assert s.compaction_count == 2 and s.generation == 2
    finally:
        store.close()


def test_an_upgrade_does_not_trust_nodes_built_on_stale_parents(tmp_db):
    """A schema-3 file whose first message was counted with another encoding (and a wrong
    count): its running total is stale, so is every total built on it — the upgrade
    marks the descendants for a recount too, and the ring reads the true figure."""
    v3 = make_v3_file(tmp_db)
    main = v3["main"]
    con = duckdb.connect(tmp_db, config=DUCKDB_CONFIG)
    con.execute("UPDATE nodes SET encoding = 'cl100k_base', tokens = 1 WHERE id = 'm0'")
    con.close()
    store = ocw.Store(tmp_db)
    try:
        with store.db.connect() as c:
            epochs = dict(c.execute("SELECT id, epoch FROM nodes WHERE id IN ('m0', 'm1', 'm2')").fetchall())
        assert epochs == {"m0": -1, "m1": -1, "m2": -1}  # m1, m2 were o200k counts, but on m0's total
        s = store.open_session("v3-chat")
        s.rewind("m2")  # no summary on this stretch: the total is the branch's own
        assert s.active_summary() is None
        assert s.occupancy()["total"] == old_occupancy_total(v3, main[:3])
        s.checkout("m11")
        assert s.occupancy()["total"] == old_occupancy_total(v3, main)
    finally:
        store.close()


def test_each_step_from_the_marker_on_records_its_version(tmp_db):
    """A file stopped at schema 4 (a crash before step 5, an older ocw) says 4 in its marker,
    and what it needs; step 5 moves both on."""
    con = duckdb.connect(tmp_db, config=DUCKDB_CONFIG)
    try:
        assert migrations.upgrade(con, target=4) == 0
        meta = dict(con.execute("SELECT key, value FROM ocw_meta").fetchall())
        assert (meta["app"], meta["schema_version"], meta["needs_ocw"]) == ("ocw", "4", "0.1.0")
        assert migrations.upgrade(con) == 4
        meta = dict(con.execute("SELECT key, value FROM ocw_meta").fetchall())
        assert (meta["schema_version"], meta["needs_ocw"]) == ("5", "0.2.0")
    finally:
        con.close()
