"""The offline summarizer reads each line once per kernel (offline_reading.py's `_LINES` and
`_READABLE`, tokens.py's `_KEPT`): a summary written from kept readings, or after
`read_ahead`, is the summary written from nothing."""
import random

from ocw.providers import offline_reading, offline_summary as offline
from ocw.text.memo import forget_all

ENC = "cl100k_base"
WORDS = ("The loader reads src/app.py and logs/run_7.log . Please summarize. p95 latency is 741 ms and "
         "`make_batch` raised KeyError in OPS-4471 . Done. 5\n% 12\nms http://a.b/c/d [user] [assistant] - item "
         "(offline model) It is 3 tokens long and begins \n \n\n lr: 3e-4 ! ? keep the file paths").split(" ")


def texts(rng: random.Random) -> list[str]:
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 200))) for _ in range(rng.randint(1, 3))]


def test_kept_readings_write_the_summary_nothing_kept_writes():
    rng = random.Random(28)
    for k in range(120):
        t = texts(rng)
        budget, focus = rng.choice((40, 300, 2000)), rng.choice((None, "keep the file paths", "the numbers"))
        forget_all()
        cold = offline.summarize(t, budget, ENC, focus)
        assert offline.summarize(t, budget, ENC, focus) == cold, k  # every line kept from the first time
        forget_all()
        for part in t:
            offline.read_ahead(part, ENC)
        assert offline.summarize(t, budget, ENC, focus) == cold, k  # read ahead line by line


def test_a_quantity_across_a_line_break_is_read_in_the_whole_text():
    text = "The job took 12\nms in the end. It wrote out/a.csv today.\nThe job took 12\nms again."
    forget_all()
    assert "12\nms" in offline_reading.identifiers(offline_reading.readable(text))
    summary = offline.summarize([text], 200, ENC, None)
    offline.read_ahead(text, ENC)  # line by line, the read-ahead keeps only each line's own reading
    assert offline.summarize([text], 200, ENC, None) == summary
    assert "12\nms" in summary or "12 ms" in summary.replace("\n", " ")


def test_what_the_read_ahead_keeps_of_a_line():
    from ocw.text.tokens import _KEPT, KEPT_MAX_CHARS, count_text

    forget_all()
    short, long_ = ("word " * 819)[:4094] + ".", ("word " * 820)[:4095] + "."  # 4,095 and 4,096 characters
    assert (len(short), len(long_)) == (KEPT_MAX_CHARS - 1, KEPT_MAX_CHARS)
    text = f"[user] The loader reads src/app.py today.\n{short}\n{long_}"
    offline.read_ahead(text, ENC)
    lines = offline_reading._readable_lines(text)
    assert lines and all(line in offline_reading._LINES for line in lines)  # each line's reading kept
    sentence = "The loader reads src/app.py today."
    assert _KEPT[(ENC, sentence)] == count_text(sentence, ENC)  # its sentences counted ...
    assert _KEPT[(ENC, "src/app.py")] == count_text("src/app.py", ENC)  # ... and its identifiers
    assert (ENC, short) in _KEPT and (ENC, long_) not in _KEPT  # under 4 KB only
    offline.summarize([text], 30, ENC, None)
    assert (ENC, long_) not in _KEPT


def test_a_ticket_id_needs_its_number():
    assert offline_reading.identifiers("see OPS-4471 and AB-x today") == ["OPS-4471"]


def test_an_identifier_whose_pieces_are_all_in_the_sentences_but_not_it_is_listed():
    listed, _ = offline._listed(["abcde", "abcd"], "abcd xbcde", 0, 100, lambda t: 1)
    assert listed == ["abcde"]  # "abcd" and "bcde" stand in the sentences, "abcde" does not
