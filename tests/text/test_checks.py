"""ocw/text/checks.py (mirror): the argument checks every entry point runs — what passes,
what is refused, and the one line a refusal says. Pure functions: called directly.
(tests/notebook/test_bad_input.py feeds the same checks through every magic and API.)"""
from __future__ import annotations

import math

import pytest

from ocw.text import checks
from ocw.text.errors import InvalidArgument, OcwError


def refused(fn, *args, **kw) -> str:
    """The one line a refusal says (an InvalidArgument: a ValueError and an OcwError)."""
    with pytest.raises(InvalidArgument) as e:
        fn(*args, **kw)
    assert isinstance(e.value, ValueError) and isinstance(e.value, OcwError)
    return str(e.value)


def test_an_integer_takes_every_whole_number_of_duckdbs_integer_and_nothing_past_it():
    assert checks.integer(1, "n") == 1
    assert checks.integer(2147483647, "n") == 2147483647  # 2**31-1: DuckDB INTEGER's largest
    assert refused(checks.integer, 2147483648, "n") == "n takes a whole number from 1 to 2**31-1, not 2147483648"
    assert refused(checks.integer, 0, "n") == "n takes a whole number from 1 to 2**31-1, not 0"


def test_an_integer_refuses_bools_floats_and_values_outside_its_own_bounds():
    assert checks.integer(5, "k", low=5, high=9) == 5 and checks.integer(9, "k", low=5, high=9) == 9
    assert refused(checks.integer, 4, "k", low=5, high=9) == "k takes a whole number from 5 to 9, not 4"
    assert refused(checks.integer, 10, "k", low=5, high=9) == "k takes a whole number from 5 to 9, not 10"
    assert refused(checks.integer, True, "k", low=0, high=9) == "k takes a whole number from 0 to 9, not True"
    assert refused(checks.integer, 3.0, "k") == "k takes a whole number from 1 to 2**31-1, not 3.0"
    assert refused(checks.integer, -1, "k", low=0, high=9, zero_means="off") == (
        "k takes a whole number from 0 to 9 (0: off), not -1")


def test_a_window_is_a_positive_count():
    assert checks.window(1) == 1
    assert refused(checks.window, 0) == "context_window takes a whole number from 1 to 2**31-1, not 0"


def test_seconds_are_a_finite_number_above_zero():
    assert checks.seconds(60, "timeout") == 60.0 and isinstance(checks.seconds(60, "timeout"), float)
    assert checks.seconds(0.5, "timeout") == 0.5
    for bad in (0, -1, math.inf, math.nan, True, "60", None):
        assert refused(checks.seconds, bad, "timeout") == (
            f"timeout takes a number of seconds above 0 (e.g. 60), not {bad!r}")


def test_text_refuses_a_non_string_and_a_lone_surrogate_and_takes_empty_text_unless_told():
    assert checks.text("", "prompt") == ""  # empty is allowed by default
    assert checks.text("a", "prompt", allow_empty=False) == "a"
    assert refused(checks.text, "  \n", "prompt", allow_empty=False) == "prompt is empty; it takes some text"
    assert refused(checks.text, 5, "prompt") == "prompt takes text (str), not 5"
    assert refused(checks.text, "ab\ud83d", "prompt").startswith(
        "prompt contains a lone surrogate (U+D83D) at character 3, which cannot be stored;")


def test_repaired_text_has_each_lone_surrogate_replaced_in_strings_lists_and_dicts():
    assert checks.repaired("a\ud800b") == "a\ufffdb"
    assert checks.repaired(["x\udfff", {"k\ud800": "v\ud801"}, 3]) == ["x\ufffd", {"k\ufffd": "v\ufffd"}, 3]
    assert checks.repaired("fine") == "fine"


def test_a_name_is_one_printable_line_that_is_not_blank():
    assert checks.name("my session", "name") == "my session"
    assert refused(checks.name, "", "name") == "name is empty; it takes some text"
    assert refused(checks.name, 7, "name") == "name takes text (str), not 7"
    assert refused(checks.name, "a\ud800", "name").startswith("name contains a lone surrogate (U+D800) at character 2")
    assert refused(checks.name, "a\nb", "name") == "name takes one line of printable text; it contains '\\n' at character 2"
    assert refused(checks.name, "a\u2028b", "name") == (
        "name takes one line of printable text; it contains LINE SEPARATOR at character 2")
    assert refused(checks.name, "ab\u202ec", "name") == (
        "name takes text without bidirectional controls; it contains RIGHT-TO-LEFT OVERRIDE at character 3")
    assert checks.name("x" * 1024, "name") == "x" * 1024
    assert refused(checks.name, "x" * 1025, "name") == "name takes at most 1,024 characters, not 1,025"
    assert refused(checks.name, " x", "name") == "name takes text without leading or trailing spaces, not ' x'"


def test_a_name_is_shown_with_controls_and_bidirectional_characters_escaped():
    assert checks.shown("plain") == "plain"
    assert checks.shown("a\u202eb") == "a\\u202eb"  # a bidi control alone is escaped
    assert checks.shown("a\tb") == "a\\tb"  # a control alone is escaped
    assert checks.shown("a\t\u2066b") == "a\\t\\u2066b"


def test_a_model_name_has_no_spaces():
    assert checks.model("gpt-4o-mini") == "gpt-4o-mini"
    assert refused(checks.model, "gpt-4o mini") == (
        "model takes a model name without spaces (e.g. gpt-4o-mini), not 'gpt-4o mini'")


def test_a_choice_is_one_of_its_options():
    assert checks.choice("md", "format", ("md", "ipynb")) == "md"
    assert refused(checks.choice, "pdf", "format", ("md", "ipynb")) == "format takes one of md, ipynb, not 'pdf'"
    assert refused(checks.choice, None, "format", ("md",)) == "format takes one of md, not None"


def test_a_url_is_http_or_https_with_a_host():
    assert checks.url("http://localhost:11434/v1") == "http://localhost:11434/v1"
    assert checks.url(" https://api.example.com/v1 ") == "https://api.example.com/v1"
    for bad in ("ftp://example.com", "http://", "localhost:11434", "http://a b", "http://x\n"):
        assert refused(checks.url, bad) == (
            f"base_url takes an http(s) URL such as http://localhost:11434/v1, not {bad!r}")
    assert refused(checks.url, 5) == "base_url takes an http(s) URL, not 5"


def test_an_api_key_is_printable_ascii_without_spaces_and_never_shown():
    assert checks.api_key("sk-abc123") == "sk-abc123"
    assert refused(checks.api_key, "") == "api_key takes the key as text (None reads it from the environment)"
    for bad in ("sk-abc 123", "sk-abc\n", "sk-äbc"):
        msg = refused(checks.api_key, bad)
        assert msg.startswith("api_key contains spaces, line breaks or non-ASCII characters") and "abc" not in msg


def test_a_json_object_is_plain_json_with_str_keys():
    assert checks.json_object({"a": [1, 2.5, None, True], "b": {"c": "d"}}, "metadata") == {
        "a": [1, 2.5, None, True], "b": {"c": "d"}}
    assert refused(checks.json_object, {1: "a"}, "metadata") == (
        "metadata must be plain JSON with str keys (tuples become lists, 1 becomes '1')")
    assert refused(checks.json_object, {"t": (1, 2)}, "metadata").startswith("metadata must be plain JSON with str keys")
    assert refused(checks.json_object, {"x": math.nan}, "metadata").startswith("metadata must be plain JSON (str keys;")
    assert refused(checks.json_object, {"x": "\ud800"}, "metadata") == (
        "metadata contains a lone surrogate (U+D800) at character 8, which cannot be stored")
    assert refused(checks.json_object, [1], "metadata") == "metadata takes a dict, not [1]"


def test_a_long_value_is_shown_cut_at_60_characters():
    assert refused(checks.choice, "y" * 58, "f", ("a",)) == f"f takes one of a, not '{'y' * 58}'"  # 60 with quotes
    assert refused(checks.choice, "y" * 59, "f", ("a",)) == f"f takes one of a, not '{'y' * 59}…"
