"""Sessions for the benchmarks, built in bulk with SQL.

`build_session` writes n messages on one parent chain with one INSERT … SELECT
over a small table of message templates whose token counts were computed once,
by the same function `Session.append` uses (a sample of the stored rows is
recounted: a count that differs raises), with the Store v2 columns a real
append writes (depth, the running total `cum_tokens`, the count epoch). One
message in ten is a ~2,000-token tool output answering the assistant's tool
call just before it, each call with a unique id. 1M messages build in well
under a minute.

Node ids have the shape and order of the ids ocw makes (ocw/store/ids.py: "n_", the
time in ms, a random part): message i is i ms younger than message i − 1, and
the whole history is older than the turns appended after the build.
"""
from __future__ import annotations

import hashlib
import json
import random
import time

from ocw.context.render import render_blocks
from ocw.text.tokens import count_message, get_encoding

TOOL_EVERY = 10  # one message in ten is a tool output (the one before it, its call)
TOOL_TOKENS = 2000
N_CHAT, N_TOOL = 64, 16  # templates: chat messages, tool calls, tool outputs (N_TOOL each)
SYSTEM_PROMPT = "You are a careful assistant working in a Jupyter notebook."
SUMMARY_TEXT_BYTES = 2000  # the fixed summary the benchmarks' fake summarizer writes

WORDS = (
    "the context window holds every message a model reads next turn so a long session slowly fills it "
    "compaction folds older turns into a rolling summary while the recent tail stays verbatim "
    "duckdb stores each node once and the kernel keeps counts in memory with prefix sums "
    "occupancy is one subtraction and a lookup never a recount of the whole history "
    "tool outputs are long logs tables stack traces and file listings that dominate the budget "
    "数据 上下文 压缩 会话 模型 窗口 工具 结果 摘要 分支"
).split()


def words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def summary_text(rng: random.Random | None = None) -> str:
    """A ~2 KB summary: fixed, or of random words drawn from `rng`."""
    ascii_words = [w for w in WORDS if w.isascii()]
    text = "Summary of the earlier conversation."
    i = 0
    while len(text.encode()) < SUMMARY_TEXT_BYTES:
        text += " " + (rng.choice(ascii_words) if rng else ascii_words[i % len(ascii_words)])
        i += 1
    return text


_next_ms = 0  # builds in one process get disjoint id times (their random parts may meet)


def _id_times(n: int) -> int:
    """The ms of the first of n ids in a row: ending now, after any earlier build's."""
    global _next_ms
    start = max(int(time.time() * 1000) - n, _next_ms)
    _next_ms = start + n
    return start


def node_id(salt: str, i: int, t0: int) -> str:
    """The id the builder gives message i: "n_", 16 hex digits of ((t0 + i) ms << 20 |
    20 bits of md5(salt + i)) — ocw/store/ids.py's shape before session 18 (the SQL below
    computes the same in 64 bits), which sorts by time among today's 20-digit ids."""
    rand = int(hashlib.md5(f"{salt}{i}".encode()).hexdigest()[:5], 16)
    return f"n_{((t0 + i) << 20) | rand:016x}"


def _sql_id(expr: str) -> str:
    return (f"('n_' || lpad(printf('%x', ((CAST($t0 AS BIGINT) + ({expr})) << 20)"
            f" | CAST(('0x' || substr(md5(CAST($prefix AS VARCHAR) || CAST({expr} AS VARCHAR)), 1, 5)) AS BIGINT)), 16, '0'))")


def _tool_output(rng: random.Random, tokens: int, enc) -> str:
    lines: list[str] = []
    while True:
        for _ in range(40):
            lines.append(f"{rng.randrange(10**6):06d} INFO worker[{rng.randrange(64)}] {words(rng, 8)} "
                         f"status={rng.choice(['ok', 'retry', 'fail'])} t={rng.random() * 100:.3f}ms")
        ids = enc.encode_ordinary("\n".join(lines))
        if len(ids) >= tokens:
            return enc.decode(ids[:tokens])


def _templates(session, rng: random.Random, n: int | None = None) -> list[tuple[int, str, str, int]]:
    """(k, role, content JSON with @ID@ for the tool id, tokens) for chat messages, tool
    calls and tool outputs, counted exactly as `Session.append` counts: the rendered form,
    framing included. The tool id is not part of the rendered text (render_block), so
    making it unique per call never changes a count. With `n`: one for each of n messages
    (k = its index), in the kind and role the index gives, so no two messages are alike."""
    enc_name = session.encoding.name
    enc = get_encoding(enc_name)
    cap = session.tool_result_cap
    rows = []

    def add(role, blocks):
        tokens = count_message(role, render_blocks(blocks, cap, enc_name), enc_name, None)
        rows.append((len(rows), role, json.dumps(blocks, ensure_ascii=False), tokens))

    def call(i):
        add("assistant", [{"type": "text", "text": words(rng, 12)},
                          {"type": "tool_use", "id": "call_@ID@", "name": "run_shell",
                           "input": {"cmd": f"tail -n 400 /var/log/job{i}.log"}}])

    def output():
        add("tool", [{"type": "tool_result", "tool_use_id": "call_@ID@",
                      "content": _tool_output(rng, TOOL_TOKENS, enc)}])

    def chat(i):
        add("user" if i % 2 == 0 else "assistant", [{"type": "text", "text": words(rng, rng.randint(20, 120))}])

    if n is not None:
        for i in range(n):
            if i % TOOL_EVERY == TOOL_EVERY - 1:
                output()
            elif i % TOOL_EVERY == TOOL_EVERY - 2:
                call(i)
            else:
                chat(i)
        return rows
    for i in range(N_CHAT):
        chat(i)
    for i in range(N_TOOL):
        call(i)
    for i in range(N_TOOL):
        output()
    return rows


# Message i: a tool output when i % 10 == 9 (answering the call at i - 1, both with the id
# call_<i - i % 10>), its call when i % 10 == 8, otherwise chat alternating user / assistant.
_TEMPLATE_OF = f"""CASE
                WHEN i % {TOOL_EVERY} = {TOOL_EVERY - 1} THEN {N_CHAT + N_TOOL} + (i // {TOOL_EVERY}) % {N_TOOL}
                WHEN i % {TOOL_EVERY} = {TOOL_EVERY - 2} THEN {N_CHAT} + (i // {TOOL_EVERY}) % {N_TOOL}
                ELSE ((i // 2) * 2 % {N_CHAT}) + (i % 2) END"""


def build_session(store, n: int, *, model: str = "gpt-4o", window: int = 1_000_000_000, seed: int = 7,
                  name: str | None = None, id_salt: str = "n_b", verify: int = 24, unique: bool = False):
    """A session of `n` messages on one parent chain, HEAD and rev set, returned loaded as a
    kernel would load it (`id_salt` makes its ids differ from another built session's).
    The messages repeat N_CHAT + 2·N_TOOL templates (1M build in well under a minute), or,
    `unique`, each is written for its place (for a few thousand: what reads text line by
    line — a compaction — must not meet the same line again and again).
    `verify` sampled rows (and one whole cycle of templates) are
    recounted; a stored count that differs raises."""
    s = store.create_session(model=model, context_window=window, name=name or f"bench-{n}",
                             system_prompt=SYSTEM_PROMPT)
    tpl = _templates(s, random.Random(seed), n if unique else None)
    t0 = _id_times(n)
    with store.db.transaction() as con:
        con.execute("CREATE TEMP TABLE IF NOT EXISTS bench_tpl (k INTEGER, role VARCHAR, content VARCHAR, tokens INTEGER)")
        con.execute("DELETE FROM bench_tpl")
        con.executemany("INSERT INTO bench_tpl VALUES (?, ?, ?, ?)", tpl)
        con.execute(
            f"""
            INSERT INTO nodes (id, session_id, parent_id, role, name, content, tokens, encoding, depth, cum_tokens, epoch)
            SELECT {_sql_id('i')}, $sid, CASE WHEN i = 0 THEN NULL ELSE {_sql_id('i - 1')} END, t.role, NULL,
                   replace(t.content, '@ID@', CAST(i - (i % {TOOL_EVERY}) AS VARCHAR))::JSON, t.tokens, $enc,
                   i + 1, sum(t.tokens) OVER (ORDER BY i ROWS UNBOUNDED PRECEDING), 0
            FROM range($n) r(i)
            JOIN bench_tpl t ON t.k = {"i" if unique else _TEMPLATE_OF}
            ORDER BY i
            """,
            {"prefix": id_salt, "sid": s.id, "enc": s.encoding.name, "n": n, "t0": t0},
        )
        con.execute("UPDATE sessions SET head_id = ?, rev = rev + 1 WHERE id = ?", [node_id(id_salt, n - 1, t0), s.id])
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
