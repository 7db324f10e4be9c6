"""ocw/text/focus.py, the pure rules a focus (`%compact -- keep the file paths`)
steers the offline summarizer and the facts pass with: each rule at its edges.
(Through the magics: tests/conversation/test_parity.py.)"""
from __future__ import annotations

import pytest

from ocw.text import focus


def test_clean_is_one_trimmed_line():
    assert focus.clean(None) == ""
    assert focus.clean("  keep\tthe \n file   paths  ") == "keep the file paths"


@pytest.mark.parametrize("word, stem", [
    ("directories", "directory"), ("Queries", "query"), ("flies", "fly"),  # -ies → -y, from 5 letters
    ("ties", "tie"), ("lies", "lie"), ("uses", "use"), ("axes", "axe"),  # 4 letters: only the -s goes
    ("boxes", "box"), ("classes", "class"), ("matches", "match"), ("crashes", "crash"), ("quizzes", "quizz"),
    ("gases", "gas"),  # 5 letters, a sibilant before -es
    ("files", "file"), ("paths", "path"), ("Bugs", "bug"), ("URLs", "url"),  # a plain -s
    ("bus", "bus"), ("yes", "yes"), ("its", "its"),  # 3 letters: left alone
    ("class", "class"), ("status", "status"), ("analysis", "analysis"),  # not plurals
    ("statuses", "status"), ("file", "file"), ("x", "x"),
])
def test_a_plural_meets_its_singular(word, stem):
    assert focus._stem(word) == stem


def test_terms_are_the_content_words_stemmed():
    # "keep", "the", "and", "of" steer nothing; "db" is too short (2), "api" is long enough (3).
    assert focus.terms("Keep THE db api Paths and the list of directories") == {"api", "path", "directory"}
    assert focus.terms("the files") == focus.terms("file") == {"file"}
    assert focus.terms("src/app.py v2.1 42") == {"src/app.py", "v2.1"}  # a path is one word; "42" is short
    assert focus.terms(None) == set() and focus.terms("keep all of it, please") == set()


def test_kinds_are_named_by_words_in_any_case():
    assert focus.kinds("keep the FILE paths") == {"path"}
    assert focus.kinds("Errors, URLs and ticket ids") == {"error", "url", "id"}
    assert focus.kinds("numbers and column names") == {"number", "name"}
    assert focus.kinds("everything important") == set()


@pytest.mark.parametrize("ident, kind", [
    ("https://x.org/a/b", "url"), ("ftp://h", "url"),  # before "path": a URL holds slashes
    ("KeyError", "error"), ("`ValueError`", "error"), ("DeprecationWarning", "error"), ("MyException", "error"),
    ("#12", "id"), ("OPS-12", "id"), ("abcdef1", "id"), ("0123456789abcdef0123456789abcdef01234567", "id"),
    ("12345678-1234-1234-1234-123456789abc", "id"),
    ("12 ms", "number"), ("3.5", "number"),
    ("src/app.py", "path"), ("app.py", "path"), ("notes.markdown", "path"),
    ("`run_it`", "name"), ("my_var", "name"),
    ("hello", None), ("a.toolongext", None), ("A-1", None), ("ABCDEFGHIJK-1", None),
    ("abcdef12345678901234567890123456789012345", None),  # 41 hex digits: no hash
    ("abcdef", None),  # 6 hex digits: too short for one
])
def test_identifier_kinds(ident, kind):
    assert focus.identifier_kind(ident) == kind


def test_matches_counts_the_focus_terms_a_text_holds():
    assert focus.matches("the paths of the files", {"path", "file", "absent"}) == 2
    assert focus.matches("the paths of the files", set()) == 0
    assert focus.matches("Directories", focus.terms("directory")) == 1
    assert focus.matches("nothing here", {"path"}) == 0


def test_focused_first_is_a_stable_partition():
    ids = ["b.txt", "KeyError", "a.py", "https://x.org", "OSError", "c/d"]
    assert focus.focused_first(ids, "file paths") == ["b.txt", "a.py", "c/d", "KeyError", "https://x.org", "OSError"]
    assert focus.focused_first(ids, "the errors") == ["KeyError", "OSError", "b.txt", "a.py", "https://x.org", "c/d"]
    assert focus.focused_first(ids, "whatever matters") == ids
    out = focus.focused_first(ids, None)
    assert out == ids and out is not ids  # a new list: the caller may change it
