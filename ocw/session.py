"""A session: one conversation's node DAG, its HEAD, and its occupancy.

Why the in-memory graph: occupancy must cost O(new text) per turn, not
O(history). Each node's token count is computed once, when it is appended,
and kept beside its parent id; the branch (root → HEAD) is a list with prefix
sums, so the uncovered tail's tokens are one subtraction. The cache stays true
across processes because every write bumps the session's `rev`; `sync()` reads
it (one small query) and loads only the nodes with a higher `seq`.
"""
from __future__ import annotations

import json
import threading
from . import checks
from . import events as ev
from .context import count as count_rules
from .config import PROVIDER_NAMES
from .context.occupancy import compute_breakdown, estimate_total_used
from .errors import InvalidArgument, StoreError
from .graph import SUMMARY_NAME, BranchIndex, NodeMeta
from .render import normalize_content, render_blocks, summary_message
from .store import new_id
from .tokens import count_message, count_text, encoding_for_model

ROLES = ("system", "user", "assistant", "tool", "llm")
CALIBRATION_MIN, CALIBRATION_MAX = 0.25, 8.0  # measured ÷ estimated outside this: a misreport
CALIBRATION_DEAD_ZONE = 0.03  # |ratio − 1| up to this: the estimate stands as it is
CALIBRATION_WEIGHT = 0.5  # weight of the newest sample (an exponential moving average)
MIN_LEARNED_WINDOW = 256  # a stated window below this is a misreading, not a model


def _positive_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


def blend_calibration(old: dict | None, ratio: float, model: str) -> dict | None:
    """The session's calibration after one more measured ÷ estimated sample (None:
    the sample is not plausible and changes nothing)."""
    if not (CALIBRATION_MIN <= ratio <= CALIBRATION_MAX):
        return None
    if isinstance(old, dict) and old.get("model") == model and isinstance(old.get("ratio"), (int, float)):
        ratio = (1 - CALIBRATION_WEIGHT) * old["ratio"] + CALIBRATION_WEIGHT * ratio
        samples = int(old.get("samples") or 0) + 1
    else:
        samples = 1
    return {"ratio": round(ratio, 4), "samples": samples, "model": model}
DEFAULT_TOOL_RESULT_CAP = 4000  # tokens of one tool result the model reads
TRIGGERS = ("manual", "auto", "reactive")


def check_metadata(values: dict, arg: str = "metadata") -> dict:
    """Metadata the store can write, with ocw's own keys in the shapes ocw reads them.
    (Every public method checks its arguments before writing: see ocw.checks.)"""
    checks.json_object(values, arg)
    if "context_compaction_count" in values:
        checks.integer(values["context_compaction_count"], f"{arg}['context_compaction_count']", low=0)
    if "tool_result_cap" in values:
        checks.integer(values["tool_result_cap"], f"{arg}['tool_result_cap']", low=1)
    sample = values.get("context_window")
    if sample is not None and not (isinstance(sample, dict) and set(sample) >= {"size", "used"}):
        raise InvalidArgument(f"{arg}['context_window'] is a usage sample: None or a dict with size and used")
    return values


class Session:
    def __init__(self, store, sid: str):
        self.store = store
        self.id = sid
        self.events = ev.EventBus()
        self._lock = threading.RLock()
        self._rev = -1
        self._last_seq = 0
        self._row: dict = {}
        self._graph = BranchIndex()
        self._content: dict[str, list] = {}
        self._fixed_cache: dict[tuple, int] = {}
        self.tool_definitions: list[dict] = []
        self.compaction_running = False
        self.compact_lock = threading.Lock()
        self.auto_compact_failures = 0

    # -- row fields -------------------------------------------------------------
    name = property(lambda self: self._row["name"])
    model = property(lambda self: self._row["model"])
    provider_name = property(lambda self: self._row["provider"])
    configured_window = property(lambda self: self._row["context_window"])
    system_prompt = property(lambda self: self._row["system_prompt"] or "")
    head = property(lambda self: self._row["head_id"])
    generation = property(lambda self: self._row["occupancy_generation"])
    metadata = property(lambda self: dict(self._row["metadata"]))

    @property
    def encoding(self):
        return encoding_for_model(self.model)

    # -- the window ocw plans with, and the calibration of its estimates ---------------
    @property
    def learned_window(self) -> dict | None:
        """What the server said about its window (its endpoint, or an overflow error),
        while the session keeps the model it was learned for."""
        learned = self._row["metadata"].get("learned_window")
        if isinstance(learned, dict) and learned.get("model") == self.model and _positive_int(learned.get("tokens")):
            return learned
        return None

    @property
    def context_window(self) -> int:
        """The window ocw plans with: the smallest it knows of — the configured one
        (or the model's known window) and the one the server reported or stated."""
        learned = self.learned_window
        configured = self.configured_window
        return min(configured, learned["tokens"]) if learned else configured

    @property
    def window_source(self) -> str:
        """Where `context_window` comes from: "configured", or the server's own words."""
        learned = self.learned_window
        return learned["source"] if learned and learned["tokens"] < self.configured_window else "configured"

    @property
    def calibration(self) -> float:
        """Measured ÷ estimated, learned from this session's provider samples (1.0 with
        none): a local model's tokenizer may count ~2× what the offline estimate says,
        and planning (threshold, tail, snip, summarizer sizes) must use its figures."""
        cal = self._row["metadata"].get("calibration")
        if isinstance(cal, dict) and cal.get("model") == self.model:
            ratio = cal.get("ratio")
            # Within a few percent the estimate is as good as exact: no scaling, no noise.
            if isinstance(ratio, (int, float)) and CALIBRATION_MIN <= ratio <= CALIBRATION_MAX \
                    and abs(ratio - 1.0) > CALIBRATION_DEAD_ZONE:
                return float(ratio)
        return 1.0

    @property
    def compaction_count(self) -> int:
        return count_rules.compaction_count(self._row["metadata"])

    @property
    def tool_result_cap(self) -> int:
        return int(self._row["metadata"].get("tool_result_cap") or DEFAULT_TOOL_RESULT_CAP)

    @property
    def _nodes(self) -> dict[str, NodeMeta]:
        return self._graph.nodes

    def __repr__(self) -> str:
        return f"<ocw Session {self.name!r} ({self.id}) model={self.model} window={self.context_window}>"

    # -- cache sync -------------------------------------------------------------
    def sync(self) -> None:
        """Bring the in-memory graph up to date with the file (another kernel may write)."""
        with self._lock, self.store.db.connect() as con:
            self._sync(con)

    def _sync(self, con) -> None:
        row = con.execute(
            "SELECT name, provider, model, context_window, system_prompt, head_id, occupancy_generation,"
            " metadata, rev FROM sessions WHERE id = ?",
            [self.id],
        ).fetchone()
        if row is None:
            raise StoreError(f"session {self.id} vanished from {self.store.path}")
        if row[8] == self._rev:
            return
        keys = ["name", "provider", "model", "context_window", "system_prompt", "head_id",
                "occupancy_generation", "metadata", "rev"]
        new_row = dict(zip(keys, row))
        new_row["metadata"] = json.loads(new_row["metadata"] or "{}")
        encoding_changed = bool(self._row) and encoding_for_model(new_row["model"]) != self.encoding
        cap_changed = bool(self._row) and (new_row["metadata"].get("tool_result_cap")
                                           != self._row["metadata"].get("tool_result_cap"))
        self._row = new_row
        enc = self.encoding.name
        stale: list[NodeMeta] = []  # counted with another encoding: recount from content
        for nid, seq, parent, role, name, tokens, ncov, supersedes, nenc in con.execute(
            "SELECT id, seq, parent_id, role, name, tokens, json_array_length(covers_ids), supersedes, encoding"
            " FROM nodes WHERE session_id = ? AND seq > ? ORDER BY seq",
            [self.id, self._last_seq],
        ).fetchall():
            meta = NodeMeta(nid, seq, parent, role, name, tokens or 0, int(ncov or 0), supersedes)
            if nenc != enc:
                stale.append(meta)
            self._graph.add(meta)
            self._last_seq = max(self._last_seq, seq)
        if encoding_changed or cap_changed:
            self._recount_all(con)
        elif stale:  # one content read for all of them, not one query per node
            contents = self._load_content(con, [m.id for m in stale])
            for meta in stale:
                meta.tokens = self._count_node(meta, contents[meta.id])
        self._rev = row[8]
        self._graph.move_head(self._row["head_id"])

    def _recount_all(self, con) -> None:
        """The model changed to one with another tokenizer: counts are recomputed in
        memory (the stored counts stay, tagged with the encoding they used)."""
        contents = self._load_content(con, list(self._nodes))
        for nid, meta in self._nodes.items():
            meta.tokens = self._count_node(meta, contents[nid])
        self._fixed_cache.clear()
        self._graph.clear_path()

    def _load_content(self, con, ids: list[str]) -> dict[str, list]:
        out: dict[str, list] = {}
        missing = [i for i in ids if i not in self._content]
        # Few large queries: each one scans the id column once, so 2k-id chunks made
        # reading a 100k-message history 50 scans (~2 s) where 1 takes ~0.4 s.
        for start in range(0, len(missing), 100_000):
            chunk = missing[start:start + 100_000]
            for nid, content in con.execute(
                "SELECT id, content FROM nodes WHERE id IN (SELECT unnest(?::VARCHAR[]))", [chunk]
            ).fetchall():
                out[nid] = json.loads(content)
        for i in ids:
            if i in self._content:
                out[i] = self._content[i]
        return out

    CONTENT_CACHE = 4096  # recent messages kept parsed in memory; older ones are read back

    def _remember_content(self, nid: str, blocks: list) -> None:
        """Keep what this process just wrote (the next request reads the tail), but
        bounded: a long-lived kernel must not hold every tool output it ever saw."""
        self._content[nid] = blocks
        while len(self._content) > self.CONTENT_CACHE:
            del self._content[next(iter(self._content))]

    def _count_node(self, meta: NodeMeta, blocks: list) -> int:
        return count_message(meta.role, render_blocks(blocks, self.tool_result_cap, self.encoding.name),
                             self.encoding.name, meta.name)

    def _reload(self) -> None:
        """Read the row again even if its rev looks known (a cell's undo put an earlier
        row back), recounting if the model's tokenizer changed."""
        with self._lock:
            self._rev = -1
            self.sync()
        self._publish()

    # -- writing ----------------------------------------------------------------
    def append(self, role: str, content, *, name: str | None = None) -> str:
        """Append a message under HEAD and move HEAD to it. Returns the node id."""
        return self.append_many([(role, content, name)])[-1]

    def append_many(self, messages: list[tuple]) -> list[str]:
        """Append (role, content[, name]) messages as a chain under HEAD, in one
        transaction: a turn's user message and reply land together or not at all."""
        if not isinstance(messages, (list, tuple)) or not messages:
            raise InvalidArgument(f"messages takes a non-empty list of (role, content[, name]) tuples, not {messages!r:.60}")
        prepared = []
        for i, item in enumerate(messages):
            if not isinstance(item, (list, tuple)) or len(item) not in (2, 3):
                raise InvalidArgument(f"messages[{i}] takes a (role, content[, name]) tuple, not {item!r:.60}")
            role, content, name = (tuple(item) + (None,))[:3]
            checks.choice(role, "role", ROLES)
            if name is not None:
                checks.name(name, "name")
            if role == "llm" and name == SUMMARY_NAME:
                raise InvalidArgument("summary nodes are written by compaction, not append()")
            blocks = normalize_content(content)
            why = checks.unstorable(json.dumps(blocks, ensure_ascii=False))
            if why:
                raise InvalidArgument(f"content of messages[{i}] contains {why}, which cannot be stored; "
                                      "remove that character")
            tokens = count_message(role, render_blocks(blocks, self.tool_result_cap, self.encoding.name),
                                   self.encoding.name, name)
            prepared.append((new_id("n_"), role, name, blocks, tokens))
        with self._lock:
            written = []
            with self.store.db.transaction() as con:
                self._sync(con)
                parent = self.head
                for nid, role, name, blocks, tokens in prepared:
                    (seq,) = con.execute(
                        "INSERT INTO nodes (id, session_id, parent_id, role, name, content, tokens, encoding)"
                        " VALUES (?, ?, ?, ?, ?, ?, ?, ?) RETURNING seq",
                        [nid, self.id, parent, role, name, json.dumps(blocks, ensure_ascii=False), tokens,
                         self.encoding.name],
                    ).fetchone()
                    written.append(NodeMeta(nid, seq, parent, role, name, tokens))
                    parent = nid
                self._bump(con, head=parent)
            # Adopt the write only once it is committed.
            for meta, (_, _, _, blocks, _) in zip(written, prepared):
                self._graph.add(meta)
                self._remember_content(meta.id, blocks)
                self._last_seq = max(self._last_seq, meta.seq)
            self._rev += 1
            self._row["head_id"] = parent
            self._graph.move_head(parent)
        self._publish()
        return [m.id for m in written]

    def _bump(self, con, *, head=..., metadata: dict | None = None, generation_delta: int = 0) -> None:
        sets = ["rev = rev + 1", "updated_at = current_timestamp"]
        args: list = []
        if head is not ...:
            sets.append("head_id = ?")
            args.append(head)
        if metadata is not None:
            sets.append("metadata = ?")
            args.append(json.dumps(metadata))
        if generation_delta:
            sets.append("occupancy_generation = occupancy_generation + ?")
            args.append(generation_delta)
        con.execute(f"UPDATE sessions SET {', '.join(sets)} WHERE id = ?", [*args, self.id])

    def _move_head(self, target: str | None) -> None:
        """Rewind or switch branch: HEAD moves, nothing is deleted, the usage baseline
        is cleared (the next sample is legitimately smaller) and the count kept."""
        with self._lock:
            with self.store.db.transaction() as con:
                self._sync(con)
                if target is not None and (target not in self._nodes or self._nodes[target].is_summary):
                    raise InvalidArgument(f"{target!r} is not a message of this session",
                                   hint="see %branch for the branches and their node ids")
                meta = count_rules.clear_baseline(self._row["metadata"])
                self._bump(con, head=target, metadata=meta)
            self._rev += 1
            self._row["head_id"] = target
            self._row["metadata"] = meta
            self._graph.move_head(target)
        self.events.emit(ev.HEAD_MOVED, {"head": target})
        self._publish()

    def rewind(self, node_id: str | None) -> None:
        """Move HEAD back to `node_id`, an ancestor on the current branch (None: before
        the first message). The next append forks a new branch there."""
        if node_id is not None and not isinstance(node_id, str):
            raise InvalidArgument(f"node_id takes a message id (str) or None, not {node_id!r:.60}")
        self.sync()
        if node_id is not None and node_id not in self._graph.index:
            raise InvalidArgument(f"{node_id!r} is not on the current branch", hint="use %branch to switch branches")
        self._move_head(node_id)

    def rewind_turns(self, n: int) -> str | None:
        """HEAD back n user turns: to just before the n-th last user message."""
        checks.integer(n, "n (turns to rewind)", low=1)
        self.sync()
        users = [i for i, nid in enumerate(self._graph.path) if self._nodes[nid].role == "user"]
        if n < 1 or n > len(users):
            raise InvalidArgument(f"cannot rewind {n} turns; the branch has {len(users)}",
                           hint=f"use a number from 1 to {len(users)}" if users else "there is nothing to rewind")
        idx = users[-n]
        target = self._graph.path[idx - 1] if idx > 0 else None
        self._move_head(target)
        return target

    def checkout(self, node_id: str) -> None:
        """Switch HEAD to any message of the session (a branch leaf, usually)."""
        if not isinstance(node_id, str):
            raise InvalidArgument(f"node_id takes a message id (str), not {node_id!r:.60}")
        self._move_head(node_id)

    def record_usage(self, tokens: int, *, source: str = "provider") -> bool:
        """Store a provider-reported sample: the context size after the last request
        (input + output tokens), recorded against the current HEAD and generation.
        Returns True if it implied a compaction the provider did on its own.
        A value that is not a valid sample (None, negative, not a whole number, a
        bool) changes nothing and returns False: providers do send such values, and
        the compaction-count rules (DESIGN.md §5) ignore them."""
        checks.name(source, "source")
        with self._lock:
            with self.store.db.transaction() as con:
                self._sync(con)
                window = self.context_window
                sample = {"size": window, "used": tokens, "remaining": max(0, window - tokens) if isinstance(tokens, int) else None,
                          "source": source, "head": self.head, "generation": self.generation}
                meta, inferred = count_rules.apply_sample(self._row["metadata"], sample)
                if meta is self._row["metadata"]:
                    return False
                estimated = estimate_total_used(self.occupancy_parts())
                cal = blend_calibration(meta.get("calibration"), tokens / estimated, self.model) if estimated else None
                if cal is not None:
                    meta = {**meta, "calibration": cal}
                self._bump(con, metadata=meta)
            self._rev += 1
            self._row["metadata"] = meta
        self._publish()
        return inferred

    def reset_context(self, model: str | None = None, context_window: int | None = None,
                      provider: str | None = None) -> None:
        """Change model (or just reset): clears the usage baseline, keeps the count."""
        if model is not None:
            checks.model(model)
        if context_window is not None:
            checks.window(context_window)
        if provider is not None:
            checks.choice(provider, "provider", PROVIDER_NAMES)
        with self._lock:
            with self.store.db.transaction() as con:
                self._sync(con)
                meta = count_rules.clear_baseline(self._row["metadata"])
                if model is not None and model != self.model:
                    # Another model: another tokenizer and maybe another window.
                    meta.pop("learned_window", None)
                    meta.pop("calibration", None)
                con.execute(
                    "UPDATE sessions SET model = coalesce(?, model), context_window = coalesce(?, context_window),"
                    " provider = coalesce(?, provider) WHERE id = ?", [model, context_window, provider, self.id])
                self._bump(con, metadata=meta)
            self._rev = -1  # reload the row (and recount if the tokenizer changed)
            self.sync()
        self._publish()

    def set_tool_result_cap(self, cap: int) -> None:
        """Change how many tokens of one tool result the model reads. What renders
        changes without HEAD moving, so the generation goes up; the cached counts of
        nodes holding tool results are recomputed (in memory and in the file)."""
        checks.integer(cap, "cap (tokens of one tool result)", low=1)
        with self._lock:
            with self.store.db.transaction() as con:
                self._sync(con)
                if cap == self.tool_result_cap:
                    return
                ids = [nid for nid, m in self._nodes.items() if m.role in ("tool", "user") and not m.is_summary]
                contents = self._load_content(con, ids)
                enc = self.encoding.name
                changed = []
                for nid in ids:
                    if any(b.get("type") == "tool_result" for b in contents[nid]):
                        m = self._nodes[nid]
                        n = count_message(m.role, render_blocks(contents[nid], cap, enc), enc, m.name)
                        if n != m.tokens:
                            changed.append((n, nid))
                if changed:
                    con.executemany("UPDATE nodes SET tokens = ?, encoding = ? WHERE id = ?",
                                    [(n, enc, nid) for n, nid in changed])
                meta = {**self._row["metadata"], "tool_result_cap": cap}
                self._bump(con, metadata=meta, generation_delta=1)
            self._rev += 1
            self._row["metadata"] = meta
            self._row["occupancy_generation"] += 1
            for n, nid in changed:
                self._nodes[nid].tokens = n
            self._graph.clear_path()
            self._graph.move_head(self.head)
        self._publish()

    def rename(self, new_name: str) -> None:
        """Rename the session (`%new` files the old one away under a dated name)."""
        checks.name(new_name, "new_name")
        with self._lock:
            with self.store.db.transaction() as con:
                self._sync(con)
                if con.execute("SELECT 1 FROM sessions WHERE name = ? AND id <> ?", [new_name, self.id]).fetchone():
                    raise StoreError(f"a session named {new_name!r} already exists")
                con.execute("UPDATE sessions SET name = ? WHERE id = ?", [new_name, self.id])
                self._bump(con)
            self._rev += 1
            self._row["name"] = new_name

    def set_metadata(self, **values) -> None:
        """Merge `values` into the session's JSON metadata (one transaction)."""
        check_metadata(values, "set_metadata()")
        if "tool_result_cap" in values:
            raise InvalidArgument("set_metadata(tool_result_cap=...) would leave the cached counts stale",
                                  hint="use set_tool_result_cap(n), which recounts")
        with self._lock:
            with self.store.db.transaction() as con:
                self._sync(con)
                meta = {**self._row["metadata"], **values}
                self._bump(con, metadata=meta)
            self._rev += 1
            self._row["metadata"] = meta
        self._publish()

    def learn_window(self, tokens: int, source: str, *, reported: bool = False) -> bool:
        """Remember a window the server reported (`reported=True`: its own endpoint,
        asked once per session) or stated (an overflow error). Returns True when the
        window ocw plans with changed (the caller announces it once). A report
        replaces an earlier figure (the server may have been restarted with another
        window); a stated limit only ever lowers it."""
        if not _positive_int(tokens) or tokens < MIN_LEARNED_WINDOW:
            return False
        with self._lock:
            self.sync()
            before = self.context_window
            old = self.learned_window
            if old is not None and (old["tokens"] == tokens or (not reported and tokens > old["tokens"])):
                return False
            self.set_metadata(learned_window={"tokens": tokens, "source": source, "model": self.model})
            return self.context_window != before

    def learn_calibration(self, measured: int, estimated: int) -> None:
        """One more measured ÷ estimated sample from outside a turn's usage (the
        summarizer's own request, the prompt size an overflow error stated)."""
        if not (_positive_int(measured) and _positive_int(estimated)):
            return
        cal = blend_calibration(self._row["metadata"].get("calibration"), measured / estimated, self.model)
        if cal is not None:
            self.set_metadata(calibration=cal)

    # -- reading ----------------------------------------------------------------
    def active_summary(self) -> NodeMeta | None:
        """The newest summary whose covered nodes are all ancestors of HEAD."""
        return self._graph.active_summary()

    def branch(self) -> list[str]:
        """Node ids from the root to HEAD (summaries are never on it)."""
        return list(self._graph.path)

    def node(self, node_id: str) -> dict:
        meta = self._nodes[node_id]
        with self.store.db.connect() as con:
            content = self._load_content(con, [node_id])[node_id]
        return {"id": meta.id, "parent_id": meta.parent_id, "role": meta.role, "name": meta.name,
                "content": content, "tokens": meta.tokens}

    def rendered_history(self) -> list[dict]:
        """What the model reads next turn: system prompt, the active summary, the
        uncovered tail of the branch. Tool results over the cap are cut here (the
        store keeps them whole)."""
        out: list[dict] = []
        if self.system_prompt:
            out.append({"role": "system", "content": [{"type": "text", "text": self.system_prompt}]})
        s = self.active_summary()
        start = s.cover_count if s else 0
        tail = self._graph.path[start:]
        with self.store.db.connect() as con:
            contents = self._load_content(con, ([s.id] if s else []) + tail)
        if s:
            out.append(summary_message(s.id, contents[s.id], s.tokens))
        cap, enc = self.tool_result_cap, self.encoding.name
        for nid in tail:
            m = self._nodes[nid]
            # A message within the cap as a whole cannot hold a result over it.
            blocks = render_blocks(contents[nid], cap, enc) if m.tokens > cap else contents[nid]
            msg = {"id": nid, "role": m.role, "content": blocks, "tokens": m.tokens}
            if m.name:
                msg["name"] = m.name
            out.append(msg)
        return out

    def _fixed_tokens(self, kind: str, text: str) -> int:
        key = (kind, self.encoding.name, text)
        if key not in self._fixed_cache:
            if kind == "system":
                self._fixed_cache[key] = count_message("system", [{"type": "text", "text": text}], self.encoding.name) if text else 0
            else:
                self._fixed_cache[key] = count_text(text, self.encoding.name)
        return self._fixed_cache[key]

    def occupancy_parts(self) -> dict[str, int]:
        s = self.active_summary()
        start = s.cover_count if s else 0
        tools = json.dumps(self.tool_definitions, sort_keys=True, ensure_ascii=False) if self.tool_definitions else ""
        return {
            "system": self._fixed_tokens("system", self.system_prompt),
            "tools": self._fixed_tokens("tools", tools),
            "summary": s.tokens if s else 0,
            "messages": self._graph.tokens_from(start),
        }

    reserve_ratio = 0.8  # the automatic-compaction line the panel draws; the notebook layer sets it

    def occupancy(self, reserve_ratio: float | None = None) -> dict:
        """The one occupancy metric over rendered_history (see ocw.context.occupancy)."""
        reserve_ratio = reserve_ratio if reserve_ratio is not None else self.reserve_ratio
        with self._lock:
            occ = compute_breakdown(
                self.occupancy_parts(),
                window=self.context_window,
                sample=self._row["metadata"].get("context_window"),
                head=self.head,
                generation=self.generation,
                reserve_ratio=reserve_ratio,
                calibration=self.calibration,
            )
            enc = self.encoding
            occ.update(
                encoding=enc.label,
                encoding_exact=enc.exact,
                compaction_count=self.compaction_count,
                compaction_inferred=count_rules.inferred_count(self._row["metadata"]),
                session_id=self.id,
                session_name=self.name,
                window_source=self.window_source,
            )
        return occ

    def _publish(self) -> None:
        if self.events.has_listeners():
            self.events.emit(ev.OCCUPANCY_CHANGED, self.occupancy())

    # -- compaction ---------------------------------------------------------------
    def compact(self, keep_recent_tokens: int | None = None, trigger: str = "manual", provider=None):
        """Fold older turns into the rolling summary. See ocw.context.engine.compact."""
        from .context.engine import compact

        if keep_recent_tokens is not None:
            checks.integer(keep_recent_tokens, "keep_recent_tokens", low=0, zero_means="fold everything it can")
        checks.choice(trigger, "trigger", TRIGGERS)
        if provider is not None and not callable(getattr(provider, "complete", None)):
            raise InvalidArgument(f"provider takes a model provider (ocw.providers.make_provider(...)) or None, "
                                  f"not {provider!r:.60}")

        return compact(self, keep_recent_tokens=keep_recent_tokens, trigger=trigger, provider=provider)

    def _persist_summary(self, text: str, covered: list[str], expected_head: str | None,
                         expected_generation: int, usage_samples: list[tuple[int, int]] = ()) -> str:
        """Append the summary node, supersede the old one, bump the generation and
        count the compaction — one transaction. HEAD does not move. Refuses if the
        branch moved while the summary was being written. `usage_samples` (the
        summarizer's measured vs estimated input) refine the calibration in the
        same write, so a failed compaction changes nothing at all."""
        sid = new_id("n_")
        blocks = [{"type": "text", "text": text}]
        tokens = count_message("llm", blocks, self.encoding.name, SUMMARY_NAME)
        with self._lock:
            with self.store.db.transaction() as con:
                self._sync(con)
                if self.head != expected_head or self.generation != expected_generation:
                    raise StoreError("the conversation changed while compacting; nothing was saved")
                if self._graph.path[:len(covered)] != covered:
                    raise StoreError("covered messages are no longer a prefix of the branch")
                old = self.active_summary()
                (seq,) = con.execute(
                    "INSERT INTO nodes (id, session_id, parent_id, role, name, content, tokens, encoding,"
                    " covers_ids, supersedes) VALUES (?, ?, ?, 'llm', ?, ?, ?, ?, ?, ?) RETURNING seq",
                    [sid, self.id, covered[-1], SUMMARY_NAME, json.dumps(blocks, ensure_ascii=False), tokens,
                     self.encoding.name, json.dumps(covered), old.id if old else None],
                ).fetchone()
                meta = count_rules.count_own_compaction(self._row["metadata"])
                for measured, estimated in usage_samples:
                    cal = blend_calibration(meta.get("calibration"), measured / estimated, self.model) if estimated else None
                    if cal is not None:
                        meta["calibration"] = cal
                self._bump(con, metadata=meta, generation_delta=1)
            node = NodeMeta(sid, seq, covered[-1], "llm", SUMMARY_NAME, tokens, len(covered), old.id if old else None)
            self._graph.add(node)
            self._remember_content(sid, blocks)
            self._last_seq = max(self._last_seq, seq)
            self._rev += 1
            self._row["metadata"] = meta
            self._row["occupancy_generation"] += 1
        return sid

    # -- branches ---------------------------------------------------------------
    def branches(self) -> list[dict]:
        """Every leaf of the DAG (summaries aside): id, depth, last role, current or not."""
        self.sync()
        return [{**leaf, "current": leaf["id"] == self.head} for leaf in self._graph.leaves()]
