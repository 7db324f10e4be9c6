"""A session: one conversation's writes — appends, HEAD moves, usage samples, the
learned window and calibration, new count epochs, summaries — on top of its
branch view (ocw/conversation/branch_view.py), with its events.

The store beneath is rows in, rows out (ocw/store/duckdb/store.py); everything that decides
what to write — counts, the usage baseline, the calibration — is decided here or
in the pure rules it calls, inside the store's transaction on the row the file
holds at that moment (`change(row)`), so two kernels never act on a stale one.
"""
from __future__ import annotations

import json
import logging

from ocw.text import checks
from ocw.context import events as ev
from ocw.context import calibration as cal
from ocw.context import count as count_rules
from ocw.text.errors import InvalidArgument, OcwError, StoreError
from ocw.providers.registry import NAMES as PROVIDER_NAMES
from ocw.context.graph import SUMMARY_NAME, Node, chain_totals
from ocw.context.render import normalize_content, render_blocks
from ocw.store.ids import new_id
from ocw.conversation.branch_view import DEFAULT_TOOL_RESULT_CAP, BranchView  # noqa: F401  (re-exported)
from ocw.text.tokens import count_message, encoding_for_model

log = logging.getLogger("ocw")
ROLES = ("system", "user", "assistant", "tool", "llm")
TRIGGERS = ("manual", "auto", "reactive")


def check_metadata(values: dict, arg: str = "metadata") -> dict:
    """Metadata the store can write, with ocw's own keys in the shapes ocw reads them.
    (Every public method checks its arguments before writing: see ocw.text.checks.)"""
    checks.json_object(values, arg)
    if "context_compaction_count" in values:
        checks.integer(values["context_compaction_count"], f"{arg}['context_compaction_count']", low=0)
    if "tool_result_cap" in values:
        checks.integer(values["tool_result_cap"], f"{arg}['tool_result_cap']", low=1)
    if "pins" in values:  # the append-only pin / unpin / forget records (ocw/context/pins.py)
        raise InvalidArgument(f"{arg}['pins'] holds the pin and forget records, which are only appended",
                              hint="use %pin / %unpin / %memory --forget (ocw.conversation.pinning)")
    sample = values.get("context_window")
    if sample is not None and not (isinstance(sample, dict) and set(sample) >= {"size", "used"}):
        raise InvalidArgument(f"{arg}['context_window'] is a usage sample: None or a dict with size and used")
    return values


class Session(BranchView):
    """One conversation: its branch view, its writes, its events."""

    # -- writing ------------------------------------------------------------------
    def append(self, role: str, content, *, name: str | None = None) -> str:
        """Append a message under HEAD and move HEAD to it. Returns the node id."""
        return self.append_many([(role, content, name)])[-1]

    def usage_basis(self) -> tuple:
        """What a request built now is built on: (compactions so far, generation). A turn
        takes it when it renders its request and hands it back with the sample."""
        with self._lock:
            return count_rules.compaction_count(self._row["metadata"]), self._row["occupancy_generation"]

    def append_many(self, messages: list[tuple], *, usage: int | None = None,
                    basis: tuple | None = None) -> list[str]:
        """Append (role, content[, name]) messages as a chain under HEAD, in one
        transaction: a turn's user message and reply land together or not at all,
        with the provider's usage sample for the HEAD they produce (`usage`), measured
        on the context `basis` describes (`usage_basis()` when the request was built;
        default: the session's view now)."""
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
            text = json.dumps(blocks, ensure_ascii=False)
            why = checks.unstorable(text)
            if why:
                raise InvalidArgument(f"content of messages[{i}] contains {why}, which cannot be stored; "
                                      "remove that character")
            prepared.append({"id": new_id("n_"), "role": role, "name": name, "content": blocks, "content_json": text,
                             "tokens": self._count(role, name, blocks), "encoding": self.encoding.name})
        with self._lock:
            self._ensure_counted(self._head)
            change = self._usage_change(usage, prepared, basis) if usage is not None else None
            row, nodes = self.backend.append_nodes(self.id, prepared, change)
            for p in prepared:
                self._remember_content(p["id"], p["content"])
            parent_was_head = nodes[0].parent_id == self.head
            self._adopt(row, nodes)
            if parent_was_head and self._tail_key is not None and self._tail_key[0] == nodes[0].parent_id:
                self._tail = self._tail + nodes  # the tail grows by what was appended
                self._tail_key = (self.head,) + self._tail_key[1:]
        self._publish()
        return [n.id for n in nodes]

    def _usage_change(self, used: int, prepared: list[dict], basis: tuple | None = None):
        """The usage sample of the HEAD this append produces, decided inside its
        transaction on the row the file holds (DESIGN.md §5), with the calibration
        it implies (measured ÷ the estimate at that HEAD)."""
        parts = self.occupancy_parts()
        estimated_after = sum(parts.values()) + sum(p["tokens"] for p in prepared)
        # The context the request was built on (issue 23): a compaction since then, in
        # this kernel or any other, makes the sample describe a context that no longer
        # exists; as a baseline it would make the next ordinary turn look like a drop.
        seen = tuple(basis) if basis is not None else self.usage_basis()

        def change(row, parent):
            try:
                return decide(row)
            except Exception:  # the turn is worth more than its sample: store it without one
                log.warning("ocw: the usage sample of this turn was not saved", exc_info=True)
                return None

        def decide(row):
            if (count_rules.compaction_count(row["metadata"]), row["occupancy_generation"]) != seen:
                return None  # stale: stored without a sample (the next turn's is exact)
            window = cal.effective_window(row["context_window"], row["metadata"], row["model"])
            sample = {"size": window, "used": used, "remaining": max(0, window - used) if isinstance(used, int) else None,
                      "source": "provider", "head": prepared[-1]["id"], "generation": row["occupancy_generation"]}
            meta, _ = count_rules.apply_sample(row["metadata"], sample)
            if meta is row["metadata"]:
                return None
            if row["rev"] == self._rev and count_rules.valid_sample(used) and estimated_after:
                meta = cal.with_samples(meta, [(used, estimated_after)], row["model"])
            return {"metadata": meta}

        return change

    def _reload(self) -> None:
        """Read the row again even if its rev looks known (a cell's undo put an earlier
        row back): the whole cached view is dropped and read anew."""
        with self._lock:
            self._row, self._rev = {}, -1
            self._rows.clear()
            self._summaries = []
            self._active_key = self._tail_key = self._prune_key = None
            self._fixed_cache.clear()
            self.sync()
        self._publish()

    def _write(self, change) -> None:
        with self._lock:
            row = self.backend.update_session(self.id, change)
            self._adopt(row)

    def _move_head(self, target: Node | None) -> None:
        """Rewind or switch branch: HEAD moves, nothing is deleted, the usage baseline
        is cleared (the next sample is legitimately smaller) and the count kept."""
        self._write(lambda row: {"head_id": target.id if target else None,
                                 "metadata": count_rules.clear_baseline(row["metadata"])})
        self.events.emit(ev.HEAD_MOVED, {"head": self.head})
        self._publish()

    def _message_node(self, node_id) -> Node:
        node = self._rows.get(node_id) if isinstance(node_id, str) else None
        if node is None or node.is_summary:
            raise InvalidArgument(f"{node_id!r} is not a message of this session",
                                  hint="see %branch for the branches and their node ids")
        return node

    def rewind(self, node_id: str | None) -> None:
        """Move HEAD back to `node_id`, an ancestor on the current branch (None: before
        the first message). The next append forks a new branch there."""
        if node_id is not None and not isinstance(node_id, str):
            raise InvalidArgument(f"node_id takes a message id (str) or None, not {node_id!r:.60}")
        self.sync()
        node = self._rows.get(node_id) if isinstance(node_id, str) else None
        if node_id is not None and (node is None or not self._on_branch(node)):
            raise InvalidArgument(f"{node_id!r} is not on the current branch", hint="use %branch to switch branches")
        self._move_head(node)

    def rewind_turns(self, n: int) -> str | None:
        """HEAD back n user turns: to just before the n-th last user message."""
        checks.integer(n, "n (turns to rewind)", low=1)
        self.sync()
        seen, target = 0, None
        if isinstance(n, int) and not isinstance(n, bool) and n >= 1 and self._head is not None:
            for node in self._rows.ancestors(self._head.id):
                if node.role == "user":
                    seen += 1
                    if seen == n:
                        target = node
                        break
        if target is None:
            users = sum(1 for x in self._rows.ancestors(self.head) if x.role == "user") if self.head else 0
            raise InvalidArgument(f"cannot rewind {n} turn{'' if n == 1 else 's'}; the branch has {users}",
                           hint=f"use a number from 1 to {users}" if users else "there is nothing to rewind")
        parent = self._rows.get(target.parent_id) if target.parent_id else None
        self._move_head(parent)
        return parent.id if parent else None

    def checkout(self, node_id: str) -> None:
        """Switch HEAD to any message of the session (a branch leaf, usually)."""
        if not isinstance(node_id, str):
            raise InvalidArgument(f"node_id takes a message id (str), not {node_id!r:.60}")
        self.sync()
        self._move_head(self._message_node(node_id))

    def record_usage(self, tokens: int, *, source: str = "provider") -> bool:
        """Store a provider-reported sample: the context size after the last request
        (input + output tokens), recorded against the current HEAD and generation.
        Returns True if it implied a compaction the provider did on its own.
        A value that is not a valid sample (None, negative, not a whole number, a
        bool) changes nothing and returns False: providers do send such values, and
        the compaction-count rules (DESIGN.md §5) ignore them."""
        checks.name(source, "source")
        inferred = []
        estimated = sum(self.occupancy_parts().values())

        def change(row):
            window = cal.effective_window(row["context_window"], row["metadata"], row["model"])
            sample = {"size": window, "used": tokens,
                      "remaining": max(0, window - tokens) if isinstance(tokens, int) else None,
                      "source": source, "head": row["head_id"], "generation": row["occupancy_generation"]}
            meta, was_inferred = count_rules.apply_sample(row["metadata"], sample)
            if meta is row["metadata"]:
                return None
            inferred.append(was_inferred)
            if row["rev"] == self._rev and estimated:
                meta = cal.with_samples(meta, [(tokens, estimated)], row["model"])
            return {"metadata": meta}

        with self._lock:
            self._write(change)
        if not inferred:
            return False
        self._publish()
        return inferred[0]

    def set_metadata(self, **values) -> None:
        """Merge `values` into the session's JSON metadata (one transaction)."""
        check_metadata(values, "set_metadata()")
        if "tool_result_cap" in values:
            raise InvalidArgument("set_metadata(tool_result_cap=...) would leave the cached counts stale",
                                  hint="use set_tool_result_cap(n), which recounts")
        self._write(lambda row: {"metadata": {**row["metadata"], **values}})
        self._publish()

    def learn_window(self, tokens: int, source: str, *, reported: bool = False) -> bool:
        """Remember a window the server reported (`reported=True`: its own endpoint) or
        stated (an overflow error). Returns True when the window ocw plans with
        changed (the caller announces it once)."""
        with self._lock:
            self.sync()
            before = self.context_window
            if cal.learn_window(self._row["metadata"], self.model, tokens, source, reported=reported) is None:
                return False
            self._write(lambda row: (lambda m: {"metadata": m} if m else None)(
                cal.learn_window(row["metadata"], row["model"], tokens, source, reported=reported)))
            changed = self.context_window != before
        if changed:
            self._publish()
        return changed

    def learn_calibration(self, measured: int, estimated: int) -> None:
        """One more measured ÷ estimated sample from outside a turn's usage (the
        summarizer's own request, the prompt size an overflow error stated)."""
        if cal.positive_int(measured) and cal.positive_int(estimated):
            self._write(lambda row: {"metadata": cal.with_samples(row["metadata"], [(measured, estimated)],
                                                                   row["model"])})

    def note_usage(self, measured: int, estimated: int, *, refused: bool = False) -> None:
        """A refusal's stated prompt size (`refused`: the floor later usage is checked
        against), or an unverified usage report (counted). See calibration.py."""
        def change(row):
            meta = row["metadata"]
            new = cal.refusal_floor(meta, measured, estimated, row["model"]) if refused \
                else cal.with_unverified(meta, measured, estimated)
            return {"metadata": new} if new else None
        self._write(change)
        self._publish()

    def rename(self, new_name: str) -> None:
        """Rename the session (`%new` files the old one away under a dated name)."""
        checks.name(new_name, "new_name")
        with self._lock:
            self._adopt(self.backend.rename_session(self.id, new_name))

    def reset_context(self, model: str | None = None, context_window: int | None = None,
                      provider: str | None = None) -> None:
        """Change model (or just reset): clears the usage baseline, keeps the count.
        Another tokenizer starts a new count epoch: HEAD's branch is recounted."""
        if model is not None:
            checks.model(model)
        if context_window is not None:
            checks.window(context_window)
        if provider is not None:
            checks.choice(provider, "provider", PROVIDER_NAMES)
        with self._lock:
            self.sync()
            new_model = model if model is not None else self.model
            if encoding_for_model(new_model).name != self.encoding.name:
                self._new_epoch({"model": new_model, "context_window": context_window, "provider": provider})
            else:
                def change(row):
                    meta = count_rules.clear_baseline(row["metadata"])
                    if new_model != row["model"]:  # another model: maybe another window and calibration
                        meta.pop("learned_window", None)
                        meta.pop("calibration", None)
                    fields = {"metadata": meta, "model": new_model}
                    fields.update({k: v for k, v in (("context_window", context_window), ("provider", provider))
                                   if v is not None})
                    return fields

                self._write(change)
        self._publish()

    def set_tool_result_cap(self, cap: int) -> None:
        """Change how many tokens of one tool result the model reads. What renders
        changes without HEAD moving, so the generation goes up; a new count epoch
        recounts HEAD's branch (the file keeps every result whole)."""
        checks.integer(cap, "cap (tokens of one tool result)", low=1)
        with self._lock:
            self.sync()
            if cap == self.tool_result_cap:
                return
            self._new_epoch({"tool_result_cap": cap}, generation=True)
        self._publish()

    def _new_epoch(self, changes: dict, generation: bool = False) -> None:
        """Recount HEAD's whole branch under new counting rules (a model with another
        tokenizer, another tool result cap) and start a new count epoch with it, in
        one write. O(branch), and rare: a user's explicit change."""
        path = list(reversed(self._rows.ancestors(self.head))) if self.head else []
        summaries = list(self._summaries)
        contents = self._contents(path + summaries)
        old_row = self._row
        cap = changes.get("tool_result_cap", self.tool_result_cap)
        model = changes.get("model") or self.model
        enc = encoding_for_model(model).name
        counts = {n.id: count_message(n.role, render_blocks(contents[n.id], cap, enc), enc, n.name)
                  for n in path + summaries}
        epoch = self.epoch + 1
        chain_totals(None, path, counts, epoch)
        for s in summaries:
            s.tokens, s.epoch = counts[s.id], epoch
        rows = [(n.id, n.tokens, n.depth, n.cum, epoch, enc) for n in path]
        rows += [(s.id, s.tokens, None, None, epoch, enc) for s in summaries]

        def change(row):
            meta = count_rules.clear_baseline(row["metadata"])
            fields = {"count_epoch": epoch}
            if "tool_result_cap" in changes:
                meta["tool_result_cap"] = changes["tool_result_cap"]
            if changes.get("model") and changes["model"] != row["model"]:
                meta.pop("learned_window", None)
                meta.pop("calibration", None)
            for k in ("model", "context_window", "provider"):
                if changes.get(k) is not None:
                    fields[k] = changes[k]
            if generation:
                fields["occupancy_generation"] = row["occupancy_generation"] + 1
            fields["metadata"] = meta
            return fields

        row = self.backend.set_counts(self.id, rows, change)
        self._row, self._rev = row, row["rev"]
        self._rows.clear()
        self._rows.add(path)
        self._head = path[-1] if path else None
        self._active_key = self._tail_key = None
        self._fixed_cache.clear()
        del old_row

    def prune_tool_output(self, keep_tokens: int | None = None) -> dict | None:
        """Replace old tool results in the rendered history by one-line stubs (no LLM
        call; the store keeps them whole). See ocw.conversation.pruning. Returns {results, freed,
        before, after}, or None when nothing worth pruning was found."""
        from ocw.conversation.pruning import prune

        if keep_tokens is not None:
            checks.integer(keep_tokens, "keep_tokens", low=0, zero_means="prune every tool result")
        return prune(self, keep_tokens=keep_tokens)

    # -- compaction ---------------------------------------------------------------
    def compact(self, keep_recent_tokens: int | None = None, trigger: str = "manual", provider=None,
                focus: str | None = None, incoming: int | None = None, own_summarizer: bool = False):
        """Fold older turns into the rolling summary. See ocw.conversation.compaction. `focus`: what
        the summary should keep ("the list of file paths"), sent to the summarizer
        with the turns; the facts pass keeps identifiers of the kinds it names first."""
        from ocw.conversation.compaction import compact
        from ocw.text.focus import MAX_FOCUS_CHARS

        if focus is not None:
            checks.text(focus, "focus")
            if len(focus) > MAX_FOCUS_CHARS:
                raise InvalidArgument(f"focus is {len(focus):,} characters; at most {MAX_FOCUS_CHARS:,}",
                                      hint="say in a sentence or two what the summary must keep")
        if keep_recent_tokens is not None:
            checks.integer(keep_recent_tokens, "keep_recent_tokens", low=0, zero_means="fold everything it can")
        checks.choice(trigger, "trigger", TRIGGERS)
        if provider is not None and not callable(getattr(provider, "complete", None)):
            raise InvalidArgument(f"provider takes a model provider (ocw.providers.make_provider(...)) or None, "
                                  f"not {provider!r:.60}")

        if incoming is not None:
            checks.integer(incoming, "incoming", low=0)
        return compact(self, keep_recent_tokens=keep_recent_tokens, trigger=trigger, provider=provider, focus=focus,
                       incoming=incoming, own_summarizer=bool(own_summarizer))

    def undo_compaction(self) -> dict:
        """Undo the active compaction (nothing deleted, no request sent). See ocw.conversation.undo."""
        from ocw.conversation.undo import undo_compaction

        return undo_compaction(self)

    def _persist_summary(self, text: str | list, boundary_id: str, expected_head: str | None, expected_generation: int,
                         usage_samples=(), record: dict | None = None, summarizer_model: str | None = None) -> str:
        """Append the summary node beside the branch (its boundary: the last covered
        node), supersede the old one, bump the generation and count the compaction —
        one transaction. HEAD does not move. Refuses if the branch moved while the
        summary was being written. `usage_samples` (the summarizer's measured vs
        estimated input) refine the calibration in the same write, so a failed
        compaction changes nothing at all. `record` ({trigger, before, folded, focus})
        becomes the compaction's log entry (ocw/context/compaction_log.py) in the same
        write, with its time, what it covers and the total after it. `summarizer_model`: the
        samples are a summarizer of its own's and calibrate it, not the chat model
        (ocw/conversation/summarizer.py)."""
        import datetime as _dt

        from ocw.context import compaction_log
        from ocw.conversation import summarizer as own_rules
        # `text`: the summary's prose, or its blocks (prose, then the session memory's block).
        blocks = list(text) if isinstance(text, list) else [{"type": "text", "text": text}]
        with self._lock:
            boundary = self._rows.get(boundary_id) if isinstance(boundary_id, str) else None
            if boundary is None or not self._on_branch(boundary):
                raise StoreError("the covered messages are no longer on the branch; nothing was saved")
            old = self.active_summary()
            summary = {"id": new_id("n_"), "parent_id": boundary.id, "cover_count": boundary.depth, "content": blocks,
                       "tokens": count_message("llm", blocks, self.encoding.name, SUMMARY_NAME),
                       "encoding": self.encoding.name, "supersedes": old.id if old else None}
            parts_after = self._parts_after_summary(summary["tokens"], boundary) if record is not None else None

            def change(row):
                if row["head_id"] != expected_head or row["occupancy_generation"] != expected_generation:
                    raise StoreError("the conversation changed while compacting; nothing was saved")
                meta = count_rules.count_own_compaction(row["metadata"])
                meta = own_rules.with_samples(meta, usage_samples, summarizer_model) if summarizer_model \
                    else cal.with_samples(meta, usage_samples, row["model"])
                generation = row["occupancy_generation"] + 1
                if record is not None:
                    after = self._total_for(parts_after, row, meta, generation)
                    meta = compaction_log.with_entry(meta, {
                        "summary": summary["id"], "trigger": record.get("trigger"),
                        "at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                        "before": record.get("before"), "after": after, "folded": record.get("folded"),
                        "covers": boundary.depth, "focus": record.get("focus"), "lost": record.get("lost"),
                        "summarizer": record.get("summarizer"), "own_summarizer": record.get("own_summarizer")})
                return {"metadata": meta, "occupancy_generation": generation}

            row, node = self.backend.insert_summary(self.id, summary, change)
            self._summaries.append(node)
            self._remember_content(node.id, blocks)
            self._row, self._rev = row, row["rev"]
            self._rows.trim(boundary.seq, keep={boundary.id})
        return node.id

    def covered_ids(self, summary_id: str) -> list[str]:
        """The node ids a summary covers: the branch from the root to its boundary.
        O(that branch): for display (%summary) and tests."""
        s = next((x for x in self._summaries if x.id == summary_id), None)
        if s is None:
            raise OcwError(f"{summary_id!r} is not a summary of this session")
        return [n.id for n in reversed(self._rows.ancestors(s.parent_id))]

    def summaries(self) -> list[Node]:
        """Every summary of the session, oldest first (superseded ones too)."""
        return list(self._summaries)

    # -- branches ---------------------------------------------------------------
    def branches(self) -> list[dict]:
        """Every leaf of the DAG (summaries aside): id, depth, last role, current or not."""
        self.sync()
        return [{"id": n.id, "depth": n.depth, "role": n.role, "created_at": n.created_at,
                 "current": n.id == self.head} for n in self.backend.leaves(self.id, self.epoch)]
