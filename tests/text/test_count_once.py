"""`counting_once`: a long text is counted once per encoding inside the scope, from its
lines' counts kept for the kernel's life (each line tokenized once), and a message's count
split at its "role\\n" head is exactly the whole count (tokens.py)."""
import pytest
import tiktoken

from ocw.text import tokens as T

ENCODINGS = ("cl100k_base", "o200k_base")
# Bodies that start at every kind of piece the stock patterns know, and heads that end in
# a letter or a digit; long enough (≥ MEMO_MIN_CHARS = 256) to take the split path.
BODIES = ["<previous-summary>\n(none)\n</previous-summary>\n" + "word, 12 ok. " * 30,
          "'s contraction first " * 20, "123456 digits first\n\n" * 20, "-dash. \n" * 60,
          "Ünïcødé 漢字 первый " * 20, "x" * 300 + "\n  \n\t" + "y  " * 100, "éé\r\n" * 90]
HEADS = [("user", None), ("tool", "run_sql"), ("assistant", "v2"), ("llm", "summary")]


@pytest.fixture(autouse=True)
def kept(monkeypatch):
    """A kernel that has counted no line yet."""
    from ocw.text.memo import Memo

    memo = Memo(8_000_000)
    monkeypatch.setattr(T, "_KEPT", memo)
    return memo


@pytest.fixture
def encodes(monkeypatch):
    seen = []
    orig = tiktoken.Encoding.encode_ordinary

    def spy(self, text):
        seen.append(text)
        return orig(self, text)

    monkeypatch.setattr(tiktoken.Encoding, "encode_ordinary", spy)
    return seen


@pytest.mark.parametrize("enc", ENCODINGS)
def test_split_message_count_equals_whole_count(enc):
    for body in BODIES:
        for role, name in HEADS:
            whole = T.FRAME_TOKENS + len(T.get_encoding(enc).encode_ordinary(T.render_message(role, [{"type": "text", "text": body}], name)))
            with T.counting_once():
                assert T.count_message(role, [{"type": "text", "text": body}], enc, name) == whole, (body[:20], role)


def test_each_long_text_is_tokenized_once_per_encoding_and_kept_lines_not_again(encodes):
    body = BODIES[0]
    pieces = T.line_pieces(body, "o200k_base")
    assert len(pieces) == 4 and pieces[0] == "<previous-summary>\n"
    with T.counting_once():
        with T.counting_once():  # a nested scope shares the outer memo
            assert T.count_text(body, "o200k_base") == T.count_text(body, "o200k_base")
        T.count_message("user", [{"type": "text", "text": body}], "o200k_base")
        T.count_text(body, "cl100k_base")
    # o200k once (the message's head apart), cl100k once: a few lines, each counted alone and kept
    assert encodes == pieces + ["user\n"] + pieces
    assert T._memo.get() is None  # dropped when the scope ends
    del encodes[:]
    e = T.get_encoding("o200k_base")
    with T.counting_once():  # a later compaction: only the lines not kept are tokenized
        assert T.count_text(body, "o200k_base") == len(e.encode_ordinary(body))
        assert T.count_text(body + "\nnew line", "o200k_base") == len(e.encode_ordinary(body + "\nnew line"))
        assert T.count_text("new line\n" + body, "o200k_base") == len(e.encode_ordinary("new line\n" + body))
    # (each count's whole text is this test's own check) the old last line, now ending with a
    # line break, and the new line; then the new line with its break
    assert encodes == [body, pieces[-1] + "\n", "new line", body + "\nnew line", "new line\n", "new line\n" + body]


def test_many_lines_not_kept_are_counted_in_one_call_and_not_kept(encodes):
    many = "\n".join(f"line {k} of a long transcript" for k in range(T.KEEP_AT_ONCE + 1))
    few = "\n".join(f"line {k} of a long transcript" for k in range(T.KEEP_AT_ONCE))
    with T.counting_once():
        T.count_text(many, "o200k_base")
        T.count_text(few, "o200k_base")  # no line of it was kept: each counted alone, now kept
    assert encodes[0] == many and len(encodes) == 1 + T.KEEP_AT_ONCE
    expected = len(T.get_encoding("o200k_base").encode_ordinary(many))
    del encodes[:]
    assert T.count_by_lines(many, "o200k_base") == expected
    # the two lines not kept ("line 399" ends with a break here), joined in one call
    assert encodes == ["line 399 of a long transcript\nline 400 of a long transcript"]


def test_count_kept_keeps_short_texts_only(encodes):
    short, long_ = "s" * (T.KEPT_MAX_CHARS - 1), "l" * T.KEPT_MAX_CHARS
    expected = len(T.get_encoding("o200k_base").encode_ordinary(short))
    encodes.clear()
    assert not T.is_kept(short, "o200k_base")
    for _ in range(2):
        assert T.count_kept(short, "o200k_base") == expected
        T.count_kept(long_, "o200k_base")
    assert encodes.count(short) == 1 and encodes.count(long_) == 2
    assert T.is_kept(short, "o200k_base") and not T.is_kept(short, "cl100k_base") and not T.is_kept(long_, "o200k_base")


def test_boundaries_of_the_memo(encodes):
    short, long_ = "a" * 255, "a" * 256
    with T.counting_once():
        for _ in range(2):
            T.count_text(short, "o200k_base")
            T.count_text(long_, "o200k_base")
    assert encodes.count(short) == 2 and encodes.count(long_) == 1
    T.count_text(long_, "o200k_base")  # outside any scope: counted afresh
    assert encodes.count(long_) == 2


def test_no_split_where_the_pieces_could_join(encodes):
    """A head ending in punctuation (its piece takes the newline), a body starting with
    whitespace, or a user's own pattern: the message is counted whole."""
    body = "b" * 300
    assert not T._splits_at_head("tool:x-", body, "o200k_base")
    assert not T._splits_at_head("user", " " + body, "o200k_base")
    assert not T._splits_at_head("user", "\n" + body, "cl100k_base")
    assert T._splits_at_head("user", body, "o200k_base") and T._splits_at_head("tool:a1", body, "cl100k_base")
    with T.counting_once():
        T.count_message("tool", [{"type": "text", "text": body}], "o200k_base", "x-")
    assert encodes == ["tool:x-\n", body]  # the whole text, line by line: not split at its head


LINES = ["Summary of the conversation so far:", "Points:", "- It failed.", "- 'twas /var/log/x.log: ok",
         "/usr/bin after a newline", "  indented", "\tTab", "-dash", "数字 123", "end.  ", "", "`x`\r", "Key: a, b"]


@pytest.mark.parametrize("enc", ENCODINGS)
def test_line_pieces_add_up_to_the_whole_count(enc):
    import random

    rng = random.Random(28)
    e = T.get_encoding(enc)
    for _ in range(400):
        text = "\n".join(rng.choice(LINES) for _ in range(rng.randint(1, 12)))
        pieces = T.line_pieces(text, enc)
        assert "".join(pieces) == text
        assert sum(len(e.encode_ordinary(p)) for p in pieces) == len(e.encode_ordinary(text)), repr(text)
    # cut after a newline before a letter or a dash; never before "/", a space or a newline
    assert T.line_pieces("a.\n/b\n c\n\nd\n-e", enc) == ["a.\n/b\n c\n\n", "d\n", "-e"]


def test_the_split_count_uses_the_messages_own_encoding(byte_encoding):
    # A user's encoding (here one token per byte) counts the "role\n" head too: not cl100k's count of it.
    body = BODIES[0]
    for role, name in HEADS:
        whole = T.FRAME_TOKENS + len(T.render_message(role, [{"type": "text", "text": body}], name).encode())
        with T.counting_once():
            assert T.count_message(role, [{"type": "text", "text": body}], byte_encoding, name) == whole, role


def test_count_soon_counts_on_a_thread_once_and_count_text_takes_that_count(encodes):
    import threading

    body = BODIES[0] * 40
    fresh = len(T.get_encoding("o200k_base").encode_ordinary(body))
    encodes.clear()
    with T.counting_once():
        T.count_soon(body, "o200k_base")
        pending = T._memo.get()[("o200k_base", body)]
        assert isinstance(pending, T._Counting)
        assert T.count_text(body, "o200k_base") == fresh
        assert T._memo.get()[("o200k_base", body)] == fresh  # the waited count replaces the pending one
        T.count_soon(body, "o200k_base")  # counted already: no second thread
        assert T.count_text(body, "o200k_base") == fresh
    assert encodes == [body]
    assert not [t for t in threading.enumerate() if t.name == "ocw-count"]  # the thread ended with its count


def test_count_soon_does_nothing_outside_a_scope_or_for_a_short_text(encodes, monkeypatch):
    import threading

    started = []
    monkeypatch.setattr(threading.Thread, "start", lambda self: started.append((self.name, self.daemon)))
    T.count_soon("a" * 300, "o200k_base")  # no scope: nowhere to keep the count
    with T.counting_once():
        T.count_soon("a" * 255, "o200k_base")  # below MEMO_MIN_CHARS: never kept
        T.count_soon("a" * 256, "o200k_base")
    # Started as a daemon (an exiting kernel does not wait for it), and nothing counted here.
    assert started == [("ocw-count", True)] and encodes == []


def test_an_error_of_the_threads_count_is_raised_where_the_count_is_asked(monkeypatch):
    class Broken(Exception):
        pass

    def boom(self, text):
        raise Broken("encoder failed")

    body = "z" * 400
    with T.counting_once():
        T.get_encoding("cl100k_base")
        monkeypatch.setattr(tiktoken.Encoding, "encode_ordinary", boom)
        T.count_soon(body, "cl100k_base")
        with pytest.raises(Broken, match="encoder failed"):
            T.count_text(body, "cl100k_base")


@pytest.mark.parametrize("enc", ENCODINGS)
def test_a_text_counted_from_some_kept_lines_and_the_rest_joined_counts_as_a_whole(enc):
    """`count_by_lines`: the lines not kept are joined and counted in one call — exact
    whichever lines were kept (a first line starting with whitespace or "/" included)."""
    import random

    rng = random.Random(28)
    e = T.get_encoding(enc)
    for _ in range(300):
        text = "\n".join(rng.choice(LINES) for _ in range(rng.randint(1, 12)))
        T._KEPT.clear()
        T._KEPT.size = 0
        for piece in T.line_pieces(text, enc):
            if rng.random() < 0.5:
                T.count_kept(piece, enc)
        assert T.count_by_lines(text, enc) == len(e.encode_ordinary(text)), repr(text)
