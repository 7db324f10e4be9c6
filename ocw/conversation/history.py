"""Reads for display: a page of the branch, the summaries, the branch tree.

What the chat widget and `%branch` show, read from a session's branch view
(ocw/conversation/branch_view.py) without touching what the model reads. The invariant:
each read costs what it shows, not the session's history —
- a page is `limit` messages ending at HEAD (or just above an already shown
  one), walked upward over rows loaded by seq range (ocw/store/tail.py), so loading
  older messages on demand costs one page at a time;
- the branch tree compares each leaf with HEAD from their lowest common
  ancestor up (their lengths are stored depths), so a branch costs the stretch
  where it differs, never the shared history below the fork.
Nothing here writes; each read starts with `sync()` so another kernel's writes show.
"""
from __future__ import annotations

from ocw.context import undo_log
from ocw.context.graph import Node

PAGE = 40  # messages per page of the chat widget


def _parent(view, node: Node) -> Node | None:
    """The node's parent row, loading rows below the loaded range in growing chunks
    (one range read each) rather than one lookup per node."""
    if node.parent_id is None:
        return None
    rows = view._rows
    chunk = 512
    if node.parent_id not in rows.rows and rows.loaded_from is None:
        rows.load_from(node.seq - chunk)
    while node.parent_id not in rows.rows and rows.loaded_from:
        rows.load_from(rows.loaded_from - chunk)
        chunk *= 2
    return rows.get(node.parent_id)


def _row(node: Node, content: list) -> dict:
    return {"id": node.id, "parent_id": node.parent_id, "role": node.role, "name": node.name,
            "depth": node.depth, "created_at": node.created_at, "content": content}


def page(view, before: str | None = None, limit: int = PAGE) -> tuple[list[dict], bool]:
    """Up to `limit` messages of the current branch, oldest first, ending at HEAD —
    or, with `before` (a message on the branch), ending just above it. Returns the
    messages (id, parent_id, role, name, depth, created_at, content) and whether
    older ones exist."""
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        raise ValueError(f"limit takes a whole number ≥ 1, not {limit!r}")
    view.sync()
    with view._lock:
        if before is None:
            start = view._head
        else:
            node = view._rows.get(before) if isinstance(before, str) else None
            if node is None or node.is_summary or not view._on_branch(node):
                from ocw.text.errors import InvalidArgument

                raise InvalidArgument(f"{before!r} is not a message on the current branch")
            start = _parent(view, node)
        if start is None:
            return [], False
        nodes = list(reversed(view._rows.ancestors(start.id, max(0, (start.depth or 0) - limit))))
        contents = view._contents(nodes)
        return [_row(n, contents[n.id]) for n in nodes], bool(nodes) and (nodes[0].depth or 0) > 1


def summaries(view) -> list[dict]:
    """The summaries whose covered messages are on the current branch, oldest first:
    id, cover_count (messages 1..cover_count), created_at, tokens, active (the one
    the model reads; the others are superseded), undone (%compact --undo). Content only for the active one."""
    view.sync()
    with view._lock:
        active = view.active_summary()
        undone = undo_log.undone_ids(view._row["metadata"])
        out = []
        for s in view._summaries:
            if not view._is_head_ancestor(s):
                continue
            if s.created_at is None:  # a row from an older store: read its time once
                row = view.backend.node(view.id, s.id, view.epoch)
                s.created_at = row.created_at if row is not None else None
            out.append({"id": s.id, "cover_count": s.cover_count, "created_at": s.created_at,
                        "tokens": s.tokens, "active": active is not None and s.id == active.id,
                        "undone": s.id in undone})
        if active is not None:  # as the model reads it: forgotten memory items out (conversation/pinning.py)
            from ocw.conversation.pinning import summary_read

            blocks = summary_read(view, active)[0]
            for row in out:
                if row["active"]:
                    row["content"] = blocks
        return out


def _fork(view, leaf: Node, head: Node | None) -> tuple[Node | None, Node | None]:
    """(the lowest common ancestor of `leaf` and HEAD, the first node on the leaf's side
    below it). None as ancestor: they share nothing (HEAD before the first message)."""
    a, b, first = leaf, head, None
    while a is not None and (b is None or (a.depth or 0) > (b.depth or 0)):
        first, a = a, _parent(view, a)
    while b is not None and a is not None and (b.depth or 0) > (a.depth or 0):
        b = _parent(view, b)
    while a is not None and b is not None and a.id != b.id:
        first, a, b = a, _parent(view, a), _parent(view, b)
    return a, first


def branch_tree(view) -> list[dict]:
    """Every branch of the session, oldest first: its leaf (id, length = messages from
    the root, last message's time), where it leaves HEAD's path (`fork_id`, `fork_depth`:
    the last message it shares with HEAD's path) and its first differing message
    (`first_id`, with its content), and its last question's content. The current one (`current`: its leaf is HEAD) has
    no first differing message; HEAD inside a branch (after a rewind) is an entry of
    its own, with `leaf` False."""
    view.sync()
    with view._lock:
        head = view._head
        leaves = view.backend.leaves(view.id, view.epoch)
        out, firsts = [], []
        for leaf in leaves:
            if head is not None and leaf.id == head.id:
                out.append({"id": leaf.id, "depth": leaf.depth, "role": leaf.role, "created_at": leaf.created_at,
                            "current": True, "leaf": True, "fork_id": None, "fork_depth": leaf.depth,
                            "first_id": None})
                continue
            fork, first = _fork(view, leaf, head)
            out.append({"id": leaf.id, "depth": leaf.depth, "role": leaf.role, "created_at": leaf.created_at,
                        "current": False, "leaf": True, "fork_id": fork.id if fork else None,
                        "fork_depth": fork.depth if fork else 0, "first_id": first.id if first else None})
            if first is not None:
                firsts.append(first)
            asked = _last_question(view, leaf, fork.depth if fork else 0)
            if asked is not None:  # what tells apart branches that start alike (a question asked again)
                firsts.append(asked)
            out[-1]["last_user_id"] = asked.id if asked is not None else None
            firsts.append(leaf)  # and its last message, where the question is the first one
        if head is not None and not any(b["current"] for b in out):
            out.append({"id": head.id, "depth": head.depth, "role": head.role, "created_at": head.created_at,
                        "current": True, "leaf": False, "fork_id": None, "fork_depth": head.depth,
                        "first_id": None})
        contents = view._contents(firsts) if firsts else {}
        for b in out:
            b["first_content"] = contents.get(b["first_id"]) if b["first_id"] else None
            b["last_content"] = contents.get(b.get("last_user_id")) if b.get("last_user_id") else None
            b["leaf_content"] = contents.get(b["id"]) if not b["current"] else None
        return out


def _last_question(view, leaf, fork_depth: int):
    """The branch's last user message below its fork point (a few steps up from the
    leaf: a reply, its tool steps, the question), or None."""
    node = leaf
    while node is not None and node.depth > fork_depth:
        if node.role == "user":
            return node
        node = view._rows.get(node.parent_id) if node.parent_id else None
    return None
