"""The SSE decoder, fed literal byte chunks the way a network delivers them."""
from __future__ import annotations

import json

import pytest

from ocw.providers.sse import SSEDecoder, SSEEvent, iter_sse


def decode(*chunks: bytes) -> list[SSEEvent]:
    dec = SSEDecoder()
    out: list[SSEEvent] = []
    for c in chunks:
        out += dec.feed(c)
    return out + dec.close()


def test_one_event_and_name():
    assert decode(b"event: ping\ndata: {}\n\n") == [SSEEvent("ping", "{}")]
    assert decode(b"data: hi\n\n") == [SSEEvent("message", "hi")]


def test_events_are_yielded_as_soon_as_their_blank_line_arrives():
    dec = SSEDecoder()
    assert dec.feed(b"data: a\n") == []
    assert dec.feed(b"\ndata: b\n") == [SSEEvent("message", "a")]
    assert dec.feed(b"\n") == [SSEEvent("message", "b")]
    assert dec.close() == []


def test_multiline_data_joined_with_newline():
    assert decode(b"data: line1\ndata: line2\ndata:\ndata: x\n\n") == [SSEEvent("message", "line1\nline2\n\nx")]


def test_all_three_line_endings():
    expected = [SSEEvent("e", "a\nb"), SSEEvent("message", "c")]
    assert decode(b"event: e\r\ndata: a\r\ndata: b\r\n\r\ndata: c\r\n\r\n") == expected
    assert decode(b"event: e\rdata: a\rdata: b\r\rdata: c\r\r") == expected
    assert decode(b"event: e\ndata: a\ndata: b\n\ndata: c\n\n") == expected


def test_crlf_split_between_cr_and_lf_is_one_line_ending():
    # Read as "\r" + "\n" (two endings) this would dispatch "a" and "b" separately.
    assert decode(b"data: a\r", b"\ndata: b\r\n\r\n") == [SSEEvent("message", "a\nb")]
    # ...while a lone CR at the end of a chunk followed by data is a line ending.
    assert decode(b"data: a\r", b"data: b\r\r") == [SSEEvent("message", "a\nb")]


def test_utf8_character_split_across_reads():
    raw = "data: héllo 你好 🙂\n\n".encode()
    i = raw.index("你".encode()) + 1  # inside the 3-byte character
    j = raw.index("🙂".encode()) + 2  # inside the 4-byte character
    assert decode(raw[:i], raw[i:j], raw[j:]) == [SSEEvent("message", "héllo 你好 🙂")]


def test_every_split_point_gives_the_same_events():
    raw = (
        b": keep-alive\r\n"
        b"event: content_block_delta\r\n"
        b'data: {"t": "\xe4\xbd\xa0\xe5\xa5\xbd"}\r\n\r\n'
        b"id: 7\rdata: two\rdata: lines\r\r"
        b"data: last"
    )
    whole = decode(raw)
    assert [e.data for e in whole] == ['{"t": "你好"}', "two\nlines", "last"]
    for i in range(len(raw) + 1):
        for j in range(i, len(raw) + 1, 7):
            assert decode(raw[:i], raw[i:j], raw[j:]) == whole, (i, j)
    assert decode(*[raw[k : k + 1] for k in range(len(raw))]) == whole  # byte by byte


def test_comments_are_ignored():
    assert decode(b": this is a comment\n\n") == []
    assert decode(b"data: a\n: comment in the middle\ndata: b\n\n") == [SSEEvent("message", "a\nb")]


def test_field_without_colon_and_space_rules():
    assert decode(b"data\n\n") == [SSEEvent("message", "")]
    assert decode(b"event\ndata: x\n\n") == [SSEEvent("message", "x")]
    assert decode(b"data:x\n\n") == [SSEEvent("message", "x")]
    assert decode(b"data:  two spaces\n\n") == [SSEEvent("message", " two spaces")]
    assert decode(b"data: a: b\n\n") == [SSEEvent("message", "a: b")]
    assert decode(b"unknown: field\ndata: y\n\n") == [SSEEvent("message", "y")]


def test_event_without_data_is_not_dispatched_and_name_resets():
    assert decode(b"event: lonely\n\ndata: x\n\n") == [SSEEvent("message", "x")]


def test_id_persists_and_retry_is_parsed():
    evs = decode(b"id: 1\ndata: a\n\ndata: b\n\nid: bad\x00id\nretry: 3000\ndata: c\n\nretry: soon\ndata: d\n\n")
    assert [(e.data, e.id, e.retry) for e in evs] == [("a", "1", None), ("b", "1", None), ("c", "1", 3000), ("d", "1", None)]


def test_final_frame_without_blank_line_is_flushed_at_close():
    dec = SSEDecoder()
    assert dec.feed(b"data: first\n\ndata: last") == [SSEEvent("message", "first")]
    assert dec.close() == [SSEEvent("message", "last")]
    assert decode(b"data: last\r") == [SSEEvent("message", "last")]


def test_leading_bom_is_stripped_once():
    assert decode(b"\xef\xbb", b"\xbfdata: x\n\n") == [SSEEvent("message", "x")]


def test_openai_stream_with_done_sentinel():
    chunks = [
        b'data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}\n\n',
        b'data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"Hel',
        b'lo"},"finish_reason":null}]}\n\ndata: {"id":"c1","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n',
        b'\ndata: {"id":"c1","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":2}}\n\ndata: [DONE]\n\n',
    ]
    evs = list(iter_sse(chunks))
    assert [e.event for e in evs] == ["message"] * 5
    assert evs[-1].data == "[DONE]"
    assert json.loads(evs[1].data)["choices"][0]["delta"]["content"] == "Hello"
    assert json.loads(evs[3].data)["usage"] == {"prompt_tokens": 9, "completion_tokens": 2}


def test_anthropic_stream_with_error_event_mid_stream():
    raw = (
        b'event: message_start\ndata: {"type":"message_start","message":{"usage":{"input_tokens":12}}}\n\n'
        b'event: ping\ndata: {"type": "ping"}\n\n'
        b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}\n\n'
        b'event: error\ndata: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}\n\n'
    )
    evs = decode(raw[:50], raw[50:51], raw[51:200], raw[200:])
    assert [e.event for e in evs] == ["message_start", "ping", "content_block_delta", "error"]
    assert json.loads(evs[-1].data)["error"]["type"] == "overloaded_error"


@pytest.mark.parametrize("chunk", [b"", b"\n", b"\r\n\r\n"])
def test_empty_and_blank_input_produce_nothing(chunk):
    assert decode(chunk) == []


# -- edge cases (issue 13), each as literal byte chunks --------------------------------------
def test_a_bom_is_stripped_at_the_stream_start_only():
    assert decode(b"\xef\xbb\xbfdata: x\n\n") == [SSEEvent("message", "x")]
    assert decode(b"", b"\xef\xbb\xbfdata: x\n\n") == [SSEEvent("message", "x")]  # after an empty read
    assert decode(b"\xef", b"\xbb", b"\xbf", b"data: x\n\n") == [SSEEvent("message", "x")]
    # A BOM that starts a later chunk is data, not a stream start.
    assert decode(b"data: a", b"\xef\xbb\xbfb\n\n") == [SSEEvent("message", "a\ufeffb")]
    assert decode(b"data: a\n\n", b"\xef\xbb\xbfdata: b\n\ndata: c\n\n") == [SSEEvent("message", "a"),
                                                                           SSEEvent("message", "c")]
    # Only one BOM is stripped: a second one makes the first field name "\ufeffdata", ignored.
    assert decode(b"\xef\xbb\xbf\xef\xbb\xbfdata: x\n\ndata: y\n\n") == [SSEEvent("message", "y")]


def test_invalid_utf8_becomes_replacement_characters():
    assert decode(b"data: a\xffb\n\n") == [SSEEvent("message", "a\ufffdb")]
    assert decode(b"data: a\xc3", b"(b\n\n") == [SSEEvent("message", "a\ufffd(b")]


def test_a_character_cut_off_by_the_end_of_the_stream_is_not_lost_silently():
    assert decode(b"data: a\xe4\xbd") == [SSEEvent("message", "a\ufffd")]
    dec = SSEDecoder()
    assert dec.feed(b"data: \xf0\x9f\x99") == []
    assert dec.close() == [SSEEvent("message", "\ufffd")]


def test_a_lone_cr_before_a_lf_that_is_not_next_to_it():
    # "\r" then later "\n": two line endings, so "a" ends at the CR and an empty line follows the LF.
    assert decode(b"data: a\rdata: b\n\n") == [SSEEvent("message", "a\nb")]
    assert decode(b"data: a\ndata: b\r\n\r\n") == [SSEEvent("message", "a\nb")]
    assert decode(b"data: a\r\n\ndata: b\n\r\n") == [SSEEvent("message", "a"), SSEEvent("message", "b")]
    assert decode(b"data: a\n\rdata: b\r\n\n") == [SSEEvent("message", "a"), SSEEvent("message", "b")]


def test_a_cr_at_the_end_of_a_chunk_waits_for_the_next_one():
    dec = SSEDecoder()
    assert dec.feed(b"data: a\n\r") == []  # the CR may be half of a CRLF: not yet a blank line
    assert dec.feed(b"\n") == [SSEEvent("message", "a")]
    assert dec.feed(b"data: b\n\r") == []
    assert dec.feed(b"data: c\n\n") == [SSEEvent("message", "b"), SSEEvent("message", "c")]
    assert dec.close() == []


def test_comment_lines_never_set_a_field():
    assert decode(b":data: x\n\n") == []
    assert decode(b": data: x\ndata: y\n\n") == [SSEEvent("message", "y")]
    assert decode(b":\n\n") == []


def test_event_name_and_retry_reset_after_each_dispatch_but_id_persists():
    evs = decode(b"event: a\nid: 9\nretry: 10\ndata: 1\n\ndata: 2\n\n")
    assert evs == [SSEEvent("a", "1", "9", 10), SSEEvent("message", "2", "9", None)]
    # a frame with no data dispatches nothing, yet still resets the name and the retry
    evs = decode(b"event: a\nretry: 10\n\ndata: 2\n\n")
    assert evs == [SSEEvent("message", "2", None, None)]


def test_id_and_retry_field_edge_values():
    assert decode(b"id\ndata: a\n\n") == [SSEEvent("message", "a", "")]  # an empty id is an id
    assert decode(b"id: 1\nid: \x00\ndata: a\n\n") == [SSEEvent("message", "a", "1")]  # NUL: ignored
    assert decode(b"retry: 0\ndata: a\n\n") == [SSEEvent("message", "a", None, 0)]
    assert decode(b"retry: 12\xd9\xa3\ndata: a\n\n") == [SSEEvent("message", "a")]  # Arabic-Indic digit
    assert decode(b"retry: -5\ndata: a\n\n") == [SSEEvent("message", "a")]
    assert decode(b"retry:\ndata: a\n\n") == [SSEEvent("message", "a")]
    assert decode(b"retry: 1 0\ndata: a\n\n") == [SSEEvent("message", "a")]


def test_only_one_space_after_the_colon_is_dropped_and_only_there():
    assert decode(b"data:   x\n\n") == [SSEEvent("message", "  x")]
    assert decode(b"data\t: x\n\n") == []  # "data\t" is another field name
    assert decode(b"event:  spaced\ndata: x\n\n") == [SSEEvent(" spaced", "x")]
    assert decode(b"data: x \n\n") == [SSEEvent("message", "x ")]


def test_close_flushes_a_pending_line_of_each_kind():
    dec = SSEDecoder()
    assert dec.feed(b"event: e\ndata: x") == []
    assert dec.close() == [SSEEvent("e", "x")]
    dec = SSEDecoder()
    assert dec.feed(b"data: x\nevent: late") == []
    assert dec.close() == [SSEEvent("late", "x")]
    dec = SSEDecoder()
    assert dec.feed(b"data: x\n: comment") == []
    assert dec.close() == [SSEEvent("message", "x")]
    dec = SSEDecoder()
    assert dec.feed(b"data: x\r") == []
    assert dec.close() == [SSEEvent("message", "x")]
    assert SSEDecoder().close() == []


def test_iter_sse_yields_each_event_once_in_order():
    chunks = [b"data: 1\n\nda", b"ta: 2\n", b"\ndata: 3"]
    assert list(iter_sse(chunks)) == [SSEEvent("message", "1"), SSEEvent("message", "2"), SSEEvent("message", "3")]
    assert list(iter_sse([])) == []
    assert list(iter_sse(iter([b"data: only\n\n"]))) == [SSEEvent("message", "only")]
