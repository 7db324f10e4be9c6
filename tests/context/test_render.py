"""Content blocks on the way in (ocw/context/render.py): what an append accepts, how it
is normalized, and the one-line error for each malformed shape — on a real session, so
a refused append leaves nothing stored."""
from __future__ import annotations

import pytest

from ocw.context.render import normalize_content, render_blocks
from ocw.text.errors import InvalidArgument


@pytest.mark.parametrize("content, message", [
    ([], "content must be a string or a non-empty list of blocks"),
    (None, "content must be a string or a non-empty list of blocks"),
    ({"type": "text", "text": "a dict, not a list"}, "content must be a string or a non-empty list of blocks"),
    (["plain string in a list"], "unknown content block 'plain string in a list'"),
    ([{"type": "image", "url": "x"}], "unknown content block {'type': 'image', 'url': 'x'}"),
    ([{"text": "no type"}], "unknown content block {'text': 'no type'}"),
    ([{"type": "tool_use", "id": "t1", "name": "f"}], "tool_use block lacks input"),
    ([{"type": "tool_result", "content": "x"}], "tool_result block lacks tool_use_id"),
    ([{"type": "text", "text": 5}], "text block: text must be text (str)"),
    ([{"type": "tool_use", "id": "t1", "name": "f", "input": "not a dict"}], "tool_use block: input must be a dict"),
    ([{"type": "tool_use", "id": 1, "name": "f", "input": {}}], "tool_use block: id must be text (str)"),
])
def test_malformed_content_is_one_line_and_nothing_is_stored(store, content, message):
    s = store.create_session(context_window=8_192)
    with pytest.raises(InvalidArgument) as e:
        s.append("user", content)
    assert str(e.value).splitlines()[0].startswith(message), str(e.value)
    assert s.head is None and s.backend.node_count(s.id) == 0


def test_well_formed_content_is_normalized_and_kept_in_order():
    assert normalize_content("hello") == [{"type": "text", "text": "hello"}]
    blocks = [{"type": "thinking", "thinking": "hm"},
              {"type": "tool_use", "id": "t1", "name": "f", "input": {"a": 1}},
              {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "line 1"}, "line 2"]},
              {"type": "tool_result", "tool_use_id": "t2", "content": 42},
              {"type": "tool_result", "tool_use_id": "t3", "content": "as is"},
              {"type": "text", "text": "done"}]
    out = normalize_content(blocks)
    assert [b["type"] for b in out] == ["thinking", "tool_use", "tool_result", "tool_result", "tool_result", "text"]
    assert [b["content"] for b in out[2:5]] == ["line 1\nline 2", "42", "as is"]
    assert out[1]["input"] == {"a": 1} and blocks[2]["content"][1] == "line 2"  # the caller's list untouched


def test_only_tool_results_are_cut_and_every_block_is_kept():
    long = "word " * 400
    blocks = [{"type": "text", "text": long}, {"type": "tool_result", "tool_use_id": "t", "content": long},
              {"type": "text", "text": "after"}]
    out = render_blocks(blocks, 50, "cl100k_base")
    assert [b["type"] for b in out] == ["text", "tool_result", "text"]
    assert out[0]["text"] == long and out[2]["text"] == "after"
    assert out[1]["content"].endswith("tokens cut from this tool result; the full result is in the ocw store]")
    assert blocks[1]["content"] == long
