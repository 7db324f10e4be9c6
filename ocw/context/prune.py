"""Pruning old tool output without an LLM call: pure rules.

Tool results are the bulk of a tool-heavy conversation and the first thing
that stops mattering: once the model has read a file and answered, the file's
text is rarely needed again, but *that* it read it still is. So before a
summary is needed, ocw replaces old tool results in the rendered history by a
one-line stub naming the tool, its arguments and the result's size; the store
keeps every result whole, and the tool call itself stays as it was.

The rule (one, for every turn): the newest tool results are kept whole while
they fit `keep_tokens`; the newest one that does not fit marks the prune —
it and every older tool result on the branch render as stubs. A prune is
recorded as that mark (a node on the branch), so which results render as
stubs is a fixed set as long as the mark is on HEAD's branch; it never
depends on HEAD, which is why its token saving can be cached.

Invariants: a stub is a tool_result block with the same tool_use_id (the call
and its answer still pair up for every provider); a stub is never larger than
the result it replaces (a small result is kept as it is).
"""
from __future__ import annotations

import json

from ocw.text.tokens import count_message, count_text

MIN_FREED_SHARE = 0.05  # a prune that frees less than this share of the window is not worth a generation
ARGS_CHARS = 120  # the arguments shown in a stub, at most


def _args(call: dict | None) -> str:
    if call is None:
        return "an earlier call"
    text = json.dumps(call.get("input", {}), ensure_ascii=False, sort_keys=True)
    if len(text) > ARGS_CHARS:
        text = text[: ARGS_CHARS - 1] + "…"
    return f"{call.get('name', '?')}({text})"


def stub_text(call: dict | None, result: dict, encoding: str) -> str:
    """One line for a pruned result: which tool, with which arguments, how big."""
    content = result.get("content", "")
    if isinstance(content, list):
        content = "\n".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
    size = count_text(str(content), encoding)
    status = "failed with" if result.get("is_error") else "returned"
    return (f"[old tool output pruned: {_args(call)} {status} {size:,} tokens; "
            "ocw keeps the full result, call the tool again if it is needed]")


def stub_blocks(blocks: list[dict], calls: dict[str, dict], encoding: str) -> list[dict] | None:
    """The message's blocks with every tool result replaced by its stub (None: it holds
    none). `calls` maps tool_use ids to the calls they answer."""
    if not any(b.get("type") == "tool_result" for b in blocks):
        return None
    out = []
    for b in blocks:
        if b.get("type") == "tool_result":
            stub = stub_text(calls.get(b.get("tool_use_id")), b, encoding)
            b = {"type": "tool_result", "tool_use_id": b.get("tool_use_id"), "content": stub,
                 **({"is_error": True} if b.get("is_error") else {})}
        out.append(b)
    return out


def calls_of(blocks: list[dict]) -> dict[str, dict]:
    """tool_use id → the call, for the blocks of one assistant message."""
    return {b["id"]: b for b in blocks if b.get("type") == "tool_use" and "id" in b}


def saving(role: str, name: str | None, tokens: int, stubbed: list[dict], encoding: str) -> int:
    """Tokens a stubbed message saves over its counted form (never negative)."""
    return max(0, tokens - count_message(role, stubbed, encoding, name))


def choose_mark(tool_nodes: list[tuple[str, int, int]], keep_tokens: int) -> str | None:
    """`tool_nodes`: (id, depth, tokens) of the messages holding tool results, oldest
    first. The id of the newest one that does not fit `keep_tokens` with those newer
    than it (the prune mark), or None when they all fit."""
    kept = 0
    for nid, _depth, tokens in reversed(tool_nodes):
        kept += tokens
        if kept > keep_tokens:
            return nid
    return None


def worth_it(freed: int, window: int) -> bool:
    """Is freeing `freed` tokens worth a generation change (and a line in the cell)?"""
    return freed > 0 and freed >= int(window * MIN_FREED_SHARE)
