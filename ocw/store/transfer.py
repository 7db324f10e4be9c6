"""Moving sessions between stores (a DuckDB file, a PostgreSQL database), idempotently.

What a copy keeps, exactly: every node row (id, parent, role, name, content,
tokens, encoding, depth, running total, epoch, summary boundary and count,
what it supersedes, created_at) in the source's seq order, every recount in
`node_counts`, and the session row (HEAD, generation, metadata with the
compaction count, count epoch, times). A node's seq is the destination's own,
but the order is the source's, which is all that seq means.

Invariants, and why they hold:
- Idempotent: a session already in the destination with the same rows is
  left alone (no write at all), so running a copy twice changes nothing.
- Nothing is overwritten that the source lacks: if the destination's copy has
  node rows the source does not have, or a node with the same id but other
  content, that session is refused (said in one line) and left as it is. A
  destination that is only behind gets the missing nodes appended, in order,
  and the source's session row; its rev moves on (so other kernels notice).
- All or nothing per session: each session is written in one transaction of
  the destination, and read from one snapshot of the source; then read back
  and compared, so a copy that says "copied" is equal.

The store interface (ocw/store/api.py) is rows as the sessions use them; a
copy needs the rows as stored, so each backend gets a small adapter here
that speaks its SQL (the two schemas have the same tables and columns).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

from ocw.text.errors import OcwError, StoreError

SESSION_COLUMNS = ("id", "name", "provider", "model", "context_window", "system_prompt", "head_id",
                   "occupancy_generation", "metadata", "rev", "count_epoch", "created_at", "updated_at")
NODE_COLUMNS = ("id", "parent_id", "role", "name", "content", "tokens", "encoding", "depth", "cum_tokens", "epoch",
                "cover_count", "supersedes", "created_at")
COUNT_COLUMNS = ("node_id", "epoch", "tokens", "depth", "cum_tokens", "encoding")


@dataclass
class Dump:
    """One session's rows as stored (JSON columns parsed), nodes in seq order."""

    session: dict
    nodes: list[dict] = field(default_factory=list)
    counts: list[dict] = field(default_factory=list)

    def comparable(self, with_rev: bool = True) -> dict:
        row = {k: v for k, v in self.session.items() if with_rev or k != "rev"}
        return {"session": row, "nodes": self.nodes,
                "counts": sorted(self.counts, key=lambda c: (c["node_id"], c["epoch"]))}


def _parse(value):
    return json.loads(value) if isinstance(value, str) else value


class _Adapter:
    """The rows of one backend, as stored (SQL written with `?`; PostgreSQL's is `%s`)."""

    def __init__(self, backend):
        self.backend = backend
        self.pg = backend.kind == "postgresql"

    def _sql(self, q: str) -> str:
        return q.replace("?", "%s") if self.pg else q

    def _read_cursor(self):
        if self.pg:
            return self.backend._tx()
        return self.backend.db.transaction()

    def _execute(self, cur, q: str, args=()):
        res = cur.execute(self._sql(q), list(args))
        return cur if self.pg else res

    def sessions(self) -> list[tuple[str, str]]:
        return [(r["id"], r["name"]) for r in self.backend.list_sessions()]

    def read(self, sid: str) -> Dump | None:
        meta = "metadata::text" if self.pg else "metadata"
        with self._read_cursor() as cur:
            if self.pg:
                cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")  # one snapshot
            cols = ", ".join(meta if c == "metadata" else c for c in SESSION_COLUMNS)
            row = self._execute(cur, f"SELECT {cols} FROM sessions WHERE id = ?", [sid]).fetchone()
            if row is None:
                return None
            session = dict(zip(SESSION_COLUMNS, row))
            session["metadata"] = _parse(session["metadata"]) or {}
            ncols = ", ".join(NODE_COLUMNS)
            nodes = [dict(zip(NODE_COLUMNS, r)) for r in self._execute(
                cur, f"SELECT {ncols} FROM nodes WHERE session_id = ? ORDER BY seq", [sid]).fetchall()]
            for n in nodes:
                n["content"] = _parse(n["content"])
            counts = [dict(zip(COUNT_COLUMNS, r)) for r in self._execute(
                cur, f"SELECT {', '.join(COUNT_COLUMNS)} FROM node_counts WHERE session_id = ?", [sid]).fetchall()]
        return Dump(session, nodes, counts)

    def write(self, src: Dump, have: Dump | None, missing: list[dict], counts: list[dict]) -> None:
        """One transaction: the session row (inserted, or set to the source's with the
        next rev), the missing nodes in order, the recounts."""
        s = src.session
        sid = s["id"]
        meta_cast = "?::json" if self.pg else "?"
        with (self.backend._tx() if self.pg else self.backend.db.transaction()) as cur:
            values = [json.dumps(s[c]) if c == "metadata" else s[c] for c in SESSION_COLUMNS]
            if have is None:
                marks = ", ".join(meta_cast if c == "metadata" else "?" for c in SESSION_COLUMNS)
                self._execute(cur, f"INSERT INTO sessions ({', '.join(SESSION_COLUMNS)}) VALUES ({marks})", values)
            for n in missing:
                args = [sid] + [json.dumps(n[c], ensure_ascii=False) if c == "content" else n[c] for c in NODE_COLUMNS]
                self._execute(cur, f"INSERT INTO nodes (session_id, {', '.join(NODE_COLUMNS)})"
                                   f" VALUES (?, {', '.join('?' for _ in NODE_COLUMNS)})", args)
            for c in counts:
                conflict = (" ON CONFLICT (node_id, epoch) DO UPDATE SET tokens = excluded.tokens, depth ="
                            " excluded.depth, cum_tokens = excluded.cum_tokens, encoding = excluded.encoding")
                verb = "INSERT" if self.pg else "INSERT OR REPLACE"
                self._execute(cur, f"{verb} INTO node_counts (session_id, {', '.join(COUNT_COLUMNS)})"
                                   f" VALUES (?, ?, ?, ?, ?, ?, ?){conflict if self.pg else ''}",
                              [sid] + [c[k] for k in COUNT_COLUMNS])
            if have is not None:
                cols = [c for c in SESSION_COLUMNS if c not in ("id", "rev")]
                sets = ", ".join(f"{c} = {meta_cast}" if c == "metadata" else f"{c} = ?" for c in cols)
                self._execute(cur, f"UPDATE sessions SET {sets}, rev = rev + 1 WHERE id = ?",
                              [json.dumps(s[c]) if c == "metadata" else s[c] for c in cols] + [sid])


@dataclass
class Outcome:
    name: str
    sid: str
    status: str  # "copied" | "updated" | "same" | "refused"
    detail: str = ""

    def line(self) -> str:
        return f"{self.status:<8} {self.name!r} ({self.sid}){': ' + self.detail if self.detail else ''}"


def _plan(src: Dump, have: Dump | None) -> tuple[list[dict], list[dict], str | None]:
    """(missing nodes, counts to write, why refused)."""
    if have is None:
        return src.nodes, src.counts, None
    mine = {n["id"]: n for n in src.nodes}
    extra = [n["id"] for n in have.nodes if n["id"] not in mine]
    if extra:
        return [], [], (f"the destination's copy has {len(extra)} message(s) the source lacks (written there "
                        "since); copy the other way first")
    differ = [n["id"] for n in have.nodes if n != mine[n["id"]]]
    if differ:
        return [], [], f"node {differ[0]} differs between the two copies; nothing copied"
    there = {n["id"] for n in have.nodes}
    counts = {(c["node_id"], c["epoch"]): c for c in have.counts}
    return ([n for n in src.nodes if n["id"] not in there],
            [c for c in src.counts if counts.get((c["node_id"], c["epoch"])) != c], None)


def copy_session(src, dst, sid: str) -> Outcome:
    """Copy one session from backend `src` to backend `dst` (see the module doc)."""
    a, b = _Adapter(src), _Adapter(dst)
    dump = a.read(sid)
    if dump is None:
        raise StoreError(f"no session {sid} in {src.describe()}")
    name = dump.session["name"]
    have = b.read(sid)
    if have is None:
        holder = dst.find_session(name)
        if holder is not None and holder != sid:
            return Outcome(name, sid, "refused", f"the destination has another session named {name!r} "
                                                 f"({holder}); rename one of them first")
    missing, counts, why = _plan(dump, have)
    if why:
        return Outcome(name, sid, "refused", why)
    if have is not None and not missing and not counts and \
            have.comparable(with_rev=False) == dump.comparable(with_rev=False):
        return Outcome(name, sid, "same", f"{len(dump.nodes)} nodes, already there")
    try:
        b.write(dump, have, missing, counts)
    except OcwError as e:
        return Outcome(name, sid, "refused", e.user_message())
    after = b.read(sid)
    if after is None or after.comparable(with_rev=have is None) != dump.comparable(with_rev=have is None):
        raise StoreError(f"session {name!r} reads back differently from {dst.describe()} after the copy")
    summaries = sum(1 for n in dump.nodes if n["role"] == "llm" and n["name"] == "context/summary")
    if have is None:
        return Outcome(name, sid, "copied", f"{len(dump.nodes) - summaries} messages, {summaries} summaries")
    return Outcome(name, sid, "updated", f"+{len(missing)} nodes")


def session_ids(src, names: list[str] | None = None, hint: str = "list them with %sessions") -> list[str]:
    """The ids of the named sessions (ids or names; None: all, by name) in `src`, each
    once. An unknown name is a StoreError — asked before the destination is opened,
    so a refused copy has created nothing."""
    if not names:
        return [sid for sid, _ in sorted(_Adapter(src).sessions(), key=lambda r: r[1])]
    ids = []
    for n in names:
        sid = src.find_session(n)
        if sid is None:
            raise StoreError(f"no session {n!r} in {src.describe()}", hint=hint)
        ids.append(sid)
    return list(dict.fromkeys(ids))


def copy_sessions(src, dst, names: list[str] | None = None, *, ids: list[str] | None = None) -> list[Outcome]:
    """Copy the named sessions (ids or names; None: all) from `src` to `dst`, or the
    sessions `ids` already resolved by :func:`session_ids`. An unknown name is an
    error before anything is copied."""
    if ids is None:
        ids = session_ids(src, names)
    return [copy_session(src, dst, sid) for sid in ids]


def snapshot(backend, sid: str) -> dict | None:
    """A session's rows as stored, for comparing two stores (tests, `--check`)."""
    dump = _Adapter(backend).read(sid)
    return None if dump is None else dump.comparable()
