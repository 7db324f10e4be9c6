"""Content blocks: validation on the way in, the rendered form on the way out.

The rendered form is what the model reads and what is counted, so counting and
sending can never disagree: a tool result over the session's cap is cut here,
with a note saying how much was cut, while the store keeps it whole.
"""
from __future__ import annotations

from ocw.text.errors import InvalidArgument
from ocw.context.graph import SUMMARY_NAME
from ocw.text.tokens import count_text, truncate_to_tokens

BLOCK_TYPES = {
    "text": ("text",),
    "thinking": ("thinking",),
    "tool_use": ("id", "name", "input"),
    "tool_result": ("tool_use_id", "content"),
}


def normalize_content(content) -> list[dict]:
    """A string becomes one text block; a list must hold well-formed blocks."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list) or not content:
        raise InvalidArgument("content must be a string or a non-empty list of blocks")
    out = []
    for b in content:
        if not isinstance(b, dict) or b.get("type") not in BLOCK_TYPES:
            raise InvalidArgument(f"unknown content block {b!r}; use text, thinking, tool_use or tool_result")
        missing = [k for k in BLOCK_TYPES[b["type"]] if k not in b]
        if missing:
            raise InvalidArgument(f"{b['type']} block lacks {', '.join(missing)}")
        wrong = [k for k in BLOCK_TYPES[b["type"]] if k not in ("input", "content") and not isinstance(b[k], str)]
        if wrong or (b["type"] == "tool_use" and not isinstance(b["input"], dict)):
            raise InvalidArgument(f"{b['type']} block: {', '.join(wrong) or 'input'} must be "
                                  f"{'text (str)' if wrong else 'a dict'}")
        block = dict(b)
        if block["type"] == "tool_result" and not isinstance(block["content"], str):
            block["content"] = "\n".join(
                x.get("text", "") if isinstance(x, dict) else str(x) for x in block["content"]
            ) if isinstance(block["content"], list) else str(block["content"])
        out.append(block)
    return out


def cut_tool_result(text: str, cap: int, encoding: str) -> str:
    # A token is at least one character, so short text is under the cap uncounted.
    if len(text) <= cap:
        return text
    total = count_text(text, encoding)
    if total <= cap:
        return text
    kept = truncate_to_tokens(text, cap, encoding)
    return f"{kept}\n[… {total - cap:,} of {total:,} tokens cut from this tool result; the full result is in the ocw store]"


def render_blocks(blocks: list[dict], cap: int, encoding: str) -> list[dict]:
    """Blocks as the model reads them (tool results cut at `cap` tokens)."""
    if not any(b.get("type") == "tool_result" for b in blocks):
        return blocks
    out = []
    for b in blocks:
        if b.get("type") == "tool_result":
            b = {**b, "content": cut_tool_result(b["content"], cap, encoding)}
        out.append(b)
    return out


def summary_message(node_id: str, blocks: list[dict], tokens: int) -> dict:
    return {"id": node_id, "role": "llm", "name": SUMMARY_NAME, "content": blocks, "tokens": tokens}


def block_text(blocks: list[dict]) -> str:
    """Plain text of a message for display and for summarizer input."""
    from ocw.text.tokens import render_block

    return "\n".join(render_block(b) for b in blocks)
