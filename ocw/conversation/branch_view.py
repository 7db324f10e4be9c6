"""A session's branch view: its row, HEAD, summaries and tail, and the occupancy.

Why it is cheap at any length: every node row carries its depth and the running
token total from the root (ocw/context/graph.py), so the uncovered tail's tokens are
`HEAD.cum − boundary.cum` — a turn costs O(new text) and opening a session costs
one row read plus its tail, never its history. The view holds in memory the
session row, HEAD's row, the summaries, and the rows of its tail (ocw/store/tail.py);
it stays true across processes because every write bumps the session's `rev`
and `sync()` reads the row (one indexed lookup) before trusting its cache.
Writes live in ocw/conversation/session.py; this module only reads.
"""
from __future__ import annotations

import threading
from collections import OrderedDict

from ocw.context import events as ev
from ocw.context import calibration as cal
from ocw.context import count as count_rules
from ocw.context import undo_log
from ocw.context.occupancy import compute_breakdown, sent_parts
from ocw.conversation.compaction import AUTO_FAILURE_LIMIT
from ocw.text.errors import OcwError, StoreError
from ocw.context.graph import Node, active_summary, chain_totals
from ocw.context.render import render_blocks, summary_message
from ocw.conversation import pinning
from ocw.conversation.pruned_view import PrunedView
from ocw.store.tail import TailRows
from ocw.text.tokens import count_message, count_text, encoding_for_model

DEFAULT_TOOL_RESULT_CAP = 4000  # tokens of one tool result the model reads
CONTENT_CACHE = 4096  # recent messages kept parsed in memory; older ones are read back


def _message(m: Node, blocks: list, tokens: int) -> dict:
    """A tail node as the model reads it: its role, its (rendered) blocks, its tokens."""
    msg = {"id": m.id, "role": m.role, "content": blocks, "tokens": tokens}
    if m.name:
        msg["name"] = m.name
    return msg


class BranchView(PrunedView):
    def __init__(self, store, backend, sid: str):
        self.store = store  # the ocw.Store that opened it (its path, its db)
        self.backend = backend
        self.id = sid
        self.events = ev.EventBus()
        self._lock = threading.RLock()
        self._row: dict = {}
        self._rev = -1
        self._rows = TailRows(backend, sid, lambda: self.epoch)
        self._head: Node | None = None
        self._summaries: list[Node] = []
        self._active_key = None
        self._active: Node | None = None
        self._tail_key = None
        self._tail: list[Node] = []
        self._content: OrderedDict[str, list] = OrderedDict()
        self._fixed_cache: dict[tuple, int] = {}
        self._prune_key = None  # (head, generation, epoch, summaries) of the cached prune mark
        self._prune_node: Node | None = None
        self._stubs: dict[tuple, tuple] = {}  # (node id, epoch) -> (stub blocks or None, tokens saved)
        self.tool_definitions: list[dict] = []
        self.compaction_running = False
        self.compact_lock = threading.Lock()
        self.auto_compact_failures = 0
        self.left_out: dict | None = None  # what the last request left out (Turn sets it; see sent_parts)
        self.reserve_ratio = 0.8  # the automatic-compaction line the panel draws; the notebook layer sets it

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

    @property
    def learned_window(self) -> dict | None:
        return cal.learned_window(self._row["metadata"], self.model)

    @property
    def context_window(self) -> int:
        """The window ocw plans with: the smallest it knows of (context/calibration.py)."""
        return cal.effective_window(self.configured_window, self._row["metadata"], self.model)

    @property
    def window_source(self) -> str:
        return cal.window_source(self.configured_window, self._row["metadata"], self.model)

    @property
    def calibration(self) -> float:
        return cal.calibration(self._row["metadata"], self.model)

    @property
    def compaction_count(self) -> int:
        return count_rules.compaction_count(self._row["metadata"])

    @property
    def tool_result_cap(self) -> int:
        return int(self._row["metadata"].get("tool_result_cap") or DEFAULT_TOOL_RESULT_CAP)

    @property
    def epoch(self) -> int:
        return self._row.get("count_epoch") or 0

    def __repr__(self) -> str:
        return f"<ocw Session {self.name!r} ({self.id}) model={self.model} window={self.context_window}>"

    # -- the cached view --------------------------------------------------------
    def sync(self) -> None:
        """Bring the cached view up to date with the store (another kernel may write):
        one indexed read of the session row; more only if its revision moved."""
        row = self.backend.session_row(self.id)
        if row is None:
            raise StoreError(f"session {self.id} vanished from {self.store.path}")
        with self._lock:
            if row["rev"] != self._rev:
                # Our own writes adopt their row at once: a revision that moved under
                # sync() is another kernel's, even one that moved it by exactly one.
                self._adopt(row, others=True)

    def adopt_created(self, row: dict) -> None:
        """Take the row of a session this store has just created: it has no node and no
        summary, so nothing is read (an opened session's first `sync` reads its row and
        its summaries — two queries, a tenth of a first turn, issue 28). A write by
        another kernel since then moves `rev` past ours, and our next write or sync
        reads what it brought, as after any other write."""
        with self._lock:
            self._row, self._rev = row, row["rev"]

    @property
    def rev(self) -> int:
        """The session row's revision as this kernel last read or wrote it."""
        return self._rev

    def _adopt(self, row: dict, new_nodes=(), others: bool = False) -> None:
        """Take a row the store returned (after our write, or another kernel's)."""
        # A write of ours moves rev by exactly one; anything else (or the first load)
        # may have brought a compaction: its summary.
        others_wrote = others or not self._row or row["rev"] != self._rev + 1
        old_epoch = self._row.get("count_epoch") if self._row else None
        # Every summary is written in the transaction that bumps the generation
        # (`Session._persist_summary`, the one caller of the store's insert_summary): a row
        # whose generation has not moved brought none — another kernel's turns only.
        compacted = not self._row or row["occupancy_generation"] != self._row.get("occupancy_generation")
        self._row, self._rev = row, row["rev"]
        if old_epoch is not None and old_epoch != self.epoch:
            # Counts of another epoch (a model switch, or a cell's undo of one): read again.
            self._rows.clear()
            self._summaries, self._active_key, self._tail_key = [], None, None
            self._fixed_cache.clear()
            others_wrote = compacted = True
        if others_wrote and old_epoch is not None:
            # Another kernel appended: rows it wrote are missing from the loaded range
            # (whose "everything from seq N on" no longer holds). Read just those.
            self._rows.catch_up()
            self._active_key = self._tail_key = None
        self._rows.add(new_nodes, complete=not others_wrote)
        if others_wrote and compacted:  # a compaction (or an undo of one) by another kernel: its summary
            last = self._summaries[-1].seq if self._summaries else 0
            self._summaries += self.backend.summaries(self.id, last, self.epoch)
        head = row["head_id"]
        self._head = self._rows.get(head) if head else None

    def _ensure_counted(self, node: Node | None) -> None:
        """Make `node`'s running total valid in the session's count epoch: recount the
        run of stale ancestors above the nearest one that is (a new tokenizer or tool
        result cap, or a file an older ocw wrote), and store the new counts."""
        if node is None or node.epoch == self.epoch:
            return
        stale = []
        n = node
        while n is not None and n.epoch != self.epoch:
            stale.append(n)
            n = self._rows.get(n.parent_id) if n.parent_id else None
            if n is None and stale[-1].parent_id is not None:
                self._rows.load_from(max(0, stale[-1].seq - 4096))
                n = self._rows.get(stale[-1].parent_id)
        stale.reverse()
        counts = self._recount(stale)
        chain_totals(n, stale, counts, self.epoch)
        enc = self.encoding.name
        row = self.backend.set_counts(self.id, [(s.id, s.tokens, s.depth, s.cum, s.epoch, enc) for s in stale])
        self._row, self._rev = row, row["rev"]

    def _recount(self, nodes: list[Node]) -> dict[str, int]:
        contents = self._contents(nodes)
        return {n.id: self._count(n.role, n.name, contents[n.id]) for n in nodes}

    def _count(self, role: str, name: str | None, blocks: list) -> int:
        enc = self.encoding.name
        return count_message(role, render_blocks(blocks, self.tool_result_cap, enc), enc, name)

    def _summary_tokens(self, s: Node) -> int:
        if s.epoch != self.epoch:  # a summary counted with another tokenizer: recount it (they are few)
            s.tokens = self._count(s.role, s.name, self._contents([s])[s.id])
            s.epoch = self.epoch
        return s.tokens

    def active_summary(self) -> Node | None:
        """The newest summary whose covered nodes are all ancestors of HEAD."""
        key = (self.head, self.generation, len(self._summaries))
        if key != self._active_key:
            head = self._head
            undone = undo_log.undone_ids(self._row["metadata"])  # an undo bumps the generation: in the key
            summaries = [s for s in self._summaries if s.id not in undone] if undone else self._summaries
            self._active = active_summary(summaries, self._is_head_ancestor, head.depth if head else 0)
            self._active_key = key
        return self._active

    def _is_head_ancestor(self, summary: Node) -> bool:
        boundary = self._rows.get(summary.parent_id)
        return boundary is not None and self._on_branch(boundary)

    def _on_branch(self, node: Node) -> bool:
        """Is `node` HEAD or one of its ancestors? A walk from HEAD down to its depth,
        over the seq range that must hold the stretch if it is."""
        head = self._head
        if head is None or node.is_summary or node.depth is None or node.depth > (head.depth or 0):
            return False
        if node.id == head.id:
            return True
        chain = self._rows.ancestors(head.id, node.depth, node.seq)
        return bool(chain) and chain[-1].parent_id == node.id

    def _boundary(self) -> Node | None:
        s = self.active_summary()
        return self._rows.get(s.parent_id) if s else None

    def tail(self) -> list[Node]:
        """The uncovered branch after the active summary's boundary, oldest first."""
        b = self._boundary()
        key = (self.head, b.id if b else None, self.epoch)
        if key != self._tail_key:
            self._tail = list(reversed(self._rows.ancestors(self.head, b.depth if b else 0, b.seq if b else 0)))
            self._tail_key = key
        return self._tail

    # -- content ------------------------------------------------------------------
    def _contents(self, nodes: list[Node]) -> dict[str, list]:
        missing = [n for n in nodes if n.id not in self._content]
        out = self.backend.content(self.id, missing) if missing else {}
        for n in nodes:
            if n.id not in out:
                out[n.id] = self._content[n.id]
        return out

    def _remember_content(self, nid: str, blocks: list) -> None:
        """Keep what this process just wrote (the next request reads the tail), but
        bounded: a long-lived kernel must not hold every tool output it ever saw."""
        self._content[nid] = blocks
        while len(self._content) > CONTENT_CACHE:  # oldest first, in O(1): a dict's first key is
            self._content.popitem(last=False)  # O(deleted) to find once many have gone (an OrderedDict's is not)

    # -- reading ------------------------------------------------------------------
    def branch(self) -> list[str]:
        """Node ids from the root to HEAD (summaries are never on it). O(branch):
        for display and tests; occupancy and requests read only the tail."""
        return [n.id for n in reversed(self._rows.ancestors(self.head))] if self.head else []

    # -- display reads (ocw/conversation/history.py): each costs what it shows, not the history --
    def page(self, before: str | None = None, limit: int | None = None) -> tuple[list[dict], bool]:
        """Messages of the branch, oldest first, ending at HEAD (or just above `before`),
        and whether older ones exist: the chat widget's tail and its "load older"."""
        from ocw.conversation import history

        return history.page(self, before, history.PAGE if limit is None else limit)

    def branch_summaries(self) -> list[dict]:
        """The summaries over the current branch (the active one with its content)."""
        from ocw.conversation import history

        return history.summaries(self)

    def branch_tree(self) -> list[dict]:
        """Every branch: length, last message's time, fork point, first differing message."""
        from ocw.conversation import history

        return history.branch_tree(self)

    def node(self, node_id: str) -> dict:
        n = self._rows.get(node_id)
        if n is None:
            raise OcwError(f"{node_id!r} is not a message of this session")
        content = self._contents([n])[node_id]
        return {"id": n.id, "parent_id": n.parent_id, "role": n.role, "name": n.name, "content": content,
                "tokens": n.tokens, "depth": n.depth, "created_at": n.created_at}

    def rendered_history(self) -> list[dict]:
        """What the model reads next turn: system prompt, the active summary, the
        uncovered tail of the branch. Tool results over the cap are cut here (the
        store keeps them whole), and old ones behind the prune mark are stubs."""
        out: list[dict] = []
        if self.system_prompt:
            out.append({"role": "system", "content": [{"type": "text", "text": self.system_prompt}]})
        with self._lock:
            self._ensure_counted(self._head)
            s = self.active_summary()
            tail = self.tail()
            contents = self._contents(([s] if s else []) + tail)
            if s:
                out.append(summary_message(s.id, *pinning.summary_read(self, s, contents[s.id])[:2]))
            pins = pinning.pins_message(self)  # their own block, never folded (context/pins.py)
            if pins is not None:
                out.append(pins)
            cap, enc = self.tool_result_cap, self.encoding.name
            mark = self.prune_mark()
            stubs = self._pruned_nodes(mark, tail, contents) if mark is not None else {}
            for m in tail:
                if m.id in stubs:
                    blocks, saved = stubs[m.id]
                    out.append(_message(m, blocks, m.tokens - saved))
                else:
                    out.append(self._rendered(m, contents[m.id], cap, enc))
        return out

    def rendered_messages(self, nodes: list[Node]) -> list[dict]:
        """Tail `nodes` as `rendered_history` gives them before a prune stubs any (the read-ahead's input)."""
        with self._lock:
            contents = self._contents(nodes)
        cap, enc = self.tool_result_cap, self.encoding.name
        return [self._rendered(m, contents[m.id], cap, enc) for m in nodes]

    @staticmethod
    def _rendered(m: Node, blocks: list, cap: int, enc: str) -> dict:
        # A message within the cap as a whole cannot hold a result over it.
        return _message(m, render_blocks(blocks, cap, enc) if m.tokens > cap else blocks, m.tokens)

    def _fixed_tokens(self, kind: str, text: str) -> int:
        key = (kind, self.encoding.name, text)
        if key not in self._fixed_cache:
            if kind == "system":
                self._fixed_cache[key] = count_message("system", [{"type": "text", "text": text}], self.encoding.name) if text else 0
            else:
                self._fixed_cache[key] = count_text(text, self.encoding.name)
        return self._fixed_cache[key]

    def occupancy_parts(self) -> dict[str, int]:
        """Estimated tokens per category of rendered_history: two stored totals and a
        subtraction for the messages, whatever the history's length."""
        import json

        with self._lock:
            self._ensure_counted(self._head)
            s = self.active_summary()
            b = self._rows.get(s.parent_id) if s else None
            tools = json.dumps(self.tool_definitions, sort_keys=True, ensure_ascii=False) if self.tool_definitions else ""
            head_cum = self._head.cum if self._head is not None else 0
            _, summary, memory = pinning.summary_read(self, s) if s else (None, 0, 0)  # forgotten items out
            return {
                "system": self._fixed_tokens("system", self.system_prompt),
                "tools": self._fixed_tokens("tools", tools),
                "summary": summary - memory,
                "memory": memory,
                "pins": pinning.pins_tokens(self),
                "messages": head_cum - (b.cum if b is not None else 0) - self.pruned()[0],
            }

    def _memory_tokens(self, s: Node) -> int:
        """Tokens of the summary node's memory block (its own row in the panel); the
        summary row keeps the rest, so the two add up to the node's count."""
        from ocw.context.memory import BLOCK_KEY

        cache = self.__dict__.setdefault("_memory_token_cache", {})
        key = (s.id, self.epoch)
        if key not in cache:
            block = next((b for b in self._contents([s])[s.id] if isinstance(b, dict) and BLOCK_KEY in b), None)
            n = count_text(block.get("text", ""), self.encoding.name) if block else 0
            cache[key] = min(n, self._summary_tokens(s))
        return cache[key]

    def _parts_after_summary(self, summary_tokens: int, boundary: Node) -> dict[str, int]:
        """occupancy_parts() as they will be once a summary of `summary_tokens` with
        this boundary is active (what a compaction's log records as its "after")."""
        parts = self.occupancy_parts()
        head_cum = self._head.cum if self._head is not None else 0
        return {**parts, "summary": summary_tokens, "memory": 0,
                "messages": head_cum - (boundary.cum or 0) - self.pruned(boundary)[0]}

    def _total_for(self, parts: dict[str, int], row: dict, metadata: dict, generation: int) -> int:
        """The total the ring will show for `parts` once `row` holds `metadata` and
        `generation` (inside a write's transaction: the figure it records)."""
        return compute_breakdown(
            parts, window=cal.effective_window(row["context_window"], metadata, row["model"]),
            sample=metadata.get("context_window"), head=row["head_id"], generation=generation,
            reserve_ratio=self.reserve_ratio, calibration=cal.calibration(metadata, row["model"]))["total"]

    def occupancy(self, reserve_ratio: float | None = None, *, as_sent: bool = True) -> dict:
        """The one occupancy metric over rendered_history (see ocw.context.occupancy).
        `as_sent=False`: the whole branch even when the last request left messages out
        (what the turn budget judges; the ring shows what was sent)."""
        reserve_ratio = reserve_ratio if reserve_ratio is not None else self.reserve_ratio
        with self._lock:
            parts, left_out = sent_parts(self.occupancy_parts(), self.left_out if as_sent else None, self.head,
                                         self.generation)
            occ = compute_breakdown(
                parts,
                window=self.context_window,
                sample=self._row["metadata"].get("context_window"),
                head=self.head,
                generation=self.generation,
                reserve_ratio=reserve_ratio,
                calibration=self.calibration,
            )
            enc = self.encoding
            occ.update(
                encoding=enc.name,
                encoding_exact=enc.exact,
                compaction_count=self.compaction_count,
                compaction_inferred=count_rules.inferred_count(self._row["metadata"]),
                session_id=self.id,
                session_name=self.name,
                window_source=self.window_source,
                calibration_samples=cal.calibration_samples(self._row["metadata"], self.model),
                left_out=left_out,  # older messages the last request left out (the figures are what it sent)
                auto_paused=self.auto_compact_failures >= AUTO_FAILURE_LIMIT,
                usage_unverified=cal.unverified_count(self._row["metadata"]),
            )
            own = getattr(self, "summarizer", None)  # a summarizer of its own, set by the notebook layer
            if own is not None:
                from ocw.conversation import summarizer

                occ["summarizer"] = summarizer.describe(self, own)
            saved, results = self.pruned()
            if results:  # in the ring's tokens: the figure a user compares with the total
                factor = occ["total"] / occ["estimated_total"] if occ["estimated_total"] else 1.0
                occ["pruned"] = {"results": results, "tokens": round(saved * factor)}
        return occ

    def _publish(self) -> None:
        if self.events.has_listeners():
            self.events.emit(ev.OCCUPANCY_CHANGED, self.occupancy())

