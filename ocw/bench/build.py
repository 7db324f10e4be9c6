"""Sessions for the benchmarks, built in bulk with SQL.

`build_session` writes n messages on one parent chain with one INSERT … SELECT
over a small table of message templates whose token counts were computed once,
by the same function `Session.append` uses (a sample of the stored rows is
recounted: a count that differs raises), with the Store v2 columns a real
append writes (depth, the running total `cum_tokens`, the count epoch). One
message in ten is a ~2,000-token tool output answering the assistant's tool
call just before it, each call with a unique id. 1M messages build in well
under a minute.

Node ids look like the ids ocw makes (a prefix and 12 hex digits, in no order):
sequential ids would let DuckDB's zone maps skip most of the file on a lookup by
id, which real ids never allow, and flatter every read.
"""
from __future__ import annotations

import hashlib
import json
import random

from ..render import render_blocks
from ..tokens import count_message, get_encoding

TOOL_EVERY = 10  # one message in ten is a tool output (the one before it, its call)
TOOL_TOKENS = 2000
N_CHAT, N_TOOL = 64, 16  # templates: chat messages, tool calls, tool outputs (N_TOOL each)
SYSTEM_PROMPT = "You are a careful assistant working in a Jupyter notebook."
SUMMARY_TEXT_BYTES = 2000  # the fixed summary the benchmarks' fake summarizer writes

_WORDS = (
    "the context window holds every message a model reads next turn so a long session slowly fills it "
    "compaction folds older turns into a rolling summary while the recent tail stays verbatim "
    "duckdb stores each node once and the kernel keeps counts in memory with prefix sums "
    "occupancy is one subtraction and a lookup never a recount of the whole history "
    "tool outputs are long logs tables stack traces and file listings that dominate the budget "
    "数据 上下文 压缩 会话 模型 窗口 工具 结果 摘要 分支"
).split()


def words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(n))


def summary_text() -> str:
    """A fixed ~2 KB summary (what the fake summarizer returns)."""
    base = "Summary of the earlier conversation. " + " ".join(w for w in _WORDS if w.isascii())
    text = base
    while len(text.encode()) < SUMMARY_TEXT_BYTES:
        text += " " + base
    return text.encode()[:SUMMARY_TEXT_BYTES].decode("utf-8", "ignore").rstrip()


def node_id(prefix: str, i: int) -> str:
    """The id the builder gives message i: `prefix` + 12 hex digits of md5(prefix + i)
    (the SQL below computes the same)."""
    return prefix + hashlib.md5(f"{prefix}{i}".encode()).hexdigest()[:12]


def _sql_id(expr: str) -> str:
    return f"(CAST($prefix AS VARCHAR) || substr(md5(CAST($prefix AS VARCHAR) || CAST({expr} AS VARCHAR)), 1, 12))"


def _tool_output(rng: random.Random, tokens: int, enc) -> str:
    lines: list[str] = []
    while True:
        for _ in range(40):
            lines.append(f"{rng.randrange(10**6):06d} INFO worker[{rng.randrange(64)}] {words(rng, 8)} "
                         f"status={rng.choice(['ok', 'retry', 'fail'])} t={rng.random() * 100:.3f}ms")
        ids = enc.encode_ordinary("\n".join(lines))
        if len(ids) >= tokens:
            return enc.decode(ids[:tokens])


def _templates(session, rng: random.Random) -> list[tuple[int, str, str, int]]:
    """(k, role, content JSON with @ID@ for the tool id, tokens) for chat messages, tool
    calls and tool outputs, counted exactly as `Session.append` counts: the rendered form,
    framing included. The tool id is not part of the rendered text (render_block), so
    making it unique per call never changes a count."""
    enc_name = session.encoding.name
    enc = get_encoding(enc_name)
    cap = session.tool_result_cap
    rows = []

    def add(role, blocks):
        tokens = count_message(role, render_blocks(blocks, cap, enc_name), enc_name, None)
        rows.append((len(rows), role, json.dumps(blocks, ensure_ascii=False), tokens))

    for i in range(N_CHAT):
        add("user" if i % 2 == 0 else "assistant", [{"type": "text", "text": words(rng, rng.randint(20, 120))}])
    for i in range(N_TOOL):
        add("assistant", [{"type": "text", "text": words(rng, 12)},
                          {"type": "tool_use", "id": "call_@ID@", "name": "run_shell",
                           "input": {"cmd": f"tail -n 400 /var/log/job{i}.log"}}])
    for i in range(N_TOOL):
        add("tool", [{"type": "tool_result", "tool_use_id": "call_@ID@",
                      "content": _tool_output(rng, TOOL_TOKENS, enc)}])
    return rows


def build_session(store, n: int, *, model: str = "gpt-4o", window: int = 1_000_000_000, seed: int = 7,
                  name: str | None = None, id_prefix: str = "n_b", verify: int = 24):
    """A session of `n` messages on one parent chain, HEAD and rev set, returned loaded as a
    kernel would load it. `verify` sampled rows (and one whole cycle of templates) are
    recounted; a stored count that differs raises."""
    s = store.create_session(model=model, context_window=window, name=name or f"bench-{n}",
                             system_prompt=SYSTEM_PROMPT)
    tpl = _templates(s, random.Random(seed))
    with store.db.transaction() as con:
        con.execute("CREATE TEMP TABLE IF NOT EXISTS bench_tpl (k INTEGER, role VARCHAR, content VARCHAR, tokens INTEGER)")
        con.execute("DELETE FROM bench_tpl")
        con.executemany("INSERT INTO bench_tpl VALUES (?, ?, ?, ?)", tpl)
        # Message i: a tool output when i % 10 == 9 (answering the call at i - 1, both with the
        # id call_<i - i % 10>), its call when i % 10 == 8, otherwise chat alternating user / assistant.
        con.execute(
            f"""
            INSERT INTO nodes (id, session_id, parent_id, role, name, content, tokens, encoding, depth, cum_tokens, epoch)
            SELECT {_sql_id('i')}, $sid, CASE WHEN i = 0 THEN NULL ELSE {_sql_id('i - 1')} END, t.role, NULL,
                   replace(t.content, '@ID@', CAST(i - (i % {TOOL_EVERY}) AS VARCHAR))::JSON, t.tokens, $enc,
                   i + 1, sum(t.tokens) OVER (ORDER BY i ROWS UNBOUNDED PRECEDING), 0
            FROM range($n) r(i)
            JOIN bench_tpl t ON t.k = CASE
                WHEN i % {TOOL_EVERY} = {TOOL_EVERY - 1} THEN {N_CHAT + N_TOOL} + (i // {TOOL_EVERY}) % {N_TOOL}
                WHEN i % {TOOL_EVERY} = {TOOL_EVERY - 2} THEN {N_CHAT} + (i // {TOOL_EVERY}) % {N_TOOL}
                ELSE ((i // 2) * 2 % {N_CHAT}) + (i % 2) END
            ORDER BY i
            """,
            {"prefix": id_prefix, "sid": s.id, "enc": s.encoding.name, "n": n},
        )
        con.execute("UPDATE sessions SET head_id = ?, rev = rev + 1 WHERE id = ?", [node_id(id_prefix, n - 1), s.id])
        con.execute("DROP TABLE bench_tpl")
    with store.db.connect() as con:
        con.execute("CHECKPOINT")
        sample = con.execute(
            f"SELECT role, content, tokens FROM nodes WHERE session_id = ? "
            f"USING SAMPLE reservoir({int(verify)} ROWS) REPEATABLE ({int(seed)})", [s.id]).fetchall()
        sample += con.execute(  # and one whole cycle: every template kind
            f"SELECT role, content, tokens FROM nodes WHERE session_id = ? AND seq <= (SELECT min(seq) + {TOOL_EVERY}"
            " FROM nodes WHERE session_id = ?)", [s.id, s.id]).fetchall()
    enc = s.encoding.name
    for role, content, tokens in sample:  # the precomputed counts are the real ones
        real = count_message(role, render_blocks(json.loads(content), s.tool_result_cap, enc), enc, None)
        if real != tokens:
            raise RuntimeError(f"bench build: stored count {tokens} != recount {real}")
    s.sync()
    return s


def compact_to_tail(session, tail: int, text: str | None = None) -> str:
    """Fold all but the last `tail` messages into a summary through the real persist
    path (one transaction, as a compaction writes it), without a summarizer call.
    Reads only the stretch it needs (HEAD down to the boundary). Returns its id."""
    head = session._rows.get(session.head)
    stretch = session._rows.ancestors(head.id, max(0, head.depth - tail - 1))
    boundary = stretch[-1]  # depth = HEAD's − tail: the last covered message
    return session._persist_summary(text or summary_text(), boundary.id, session.head, session.generation)
