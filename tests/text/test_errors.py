"""ocw's typed errors (ocw/text/errors.py) as a user reads them: `user_message()` is the one line
the notebook shows (the message, then " — " and what to do), and the provider errors' repr is
what a log line or a traceback under OCW_DEBUG=1 shows."""
from __future__ import annotations

from ocw.text.errors import (AuthError, ContextOverflowError, OcwError, ProviderError, RateLimitError, ServerError,
                             SessionNotFound, StoreBusy)


def test_the_line_is_the_message_then_the_class_hint():
    assert StoreBusy("database is locked").user_message() == (
        "database is locked — another process holds the database file; try again, or set OCW_DB to another file")


def test_an_explicit_hint_replaces_the_class_hint_and_an_empty_one_silences_it():
    assert StoreBusy("locked", hint="close the other notebook").user_message() == "locked — close the other notebook"
    assert StoreBusy("locked", hint="").user_message() == "locked"


def test_without_a_message_the_line_names_the_class():
    assert SessionNotFound().user_message() == (
        "SessionNotFound — list sessions with %sessions, or start one with %%chat")
    assert str(OcwError()) == "" and OcwError().user_message() == "OcwError"
    assert ProviderError().user_message() == "ProviderError — check %ocw doctor"


def test_a_localized_error_is_english_text_with_its_key_and_figures():
    err = OcwError.localized("err_not_smaller", new=900, old=800)
    assert str(err) == ("the summary (900 tokens) is not smaller than what it replaces (800 tokens); "
                        "nothing was saved")
    assert (err.key, err.params) == ("err_not_smaller", {"new": 900, "old": 800})


def test_a_provider_error_keeps_the_servers_words_status_and_request_id():
    err = ProviderError("HTTP 500: boom", status=500, request_id="req_1", body='{"error": "boom"}', hint="retry")
    assert (str(err), err.status, err.request_id, err.body, err.hint) == (
        "HTTP 500: boom", 500, "req_1", '{"error": "boom"}', "retry")
    assert repr(err) == "ProviderError('HTTP 500: boom', status=500, request_id='req_1')"


def test_a_provider_error_without_details_says_none_not_zero():
    err = ServerError("no answer")
    assert (err.status, err.request_id, err.body) == (None, None, None)
    assert repr(err) == "ServerError('no answer', status=None, request_id=None)"
    assert err.user_message() == "no answer — the provider had an internal error; run the cell again later"


def test_an_overflow_says_the_stated_window_and_prompt_or_none():
    err = ContextOverflowError("too long", limit=2048, prompt_tokens=3000, status=400)
    assert (str(err), err.limit, err.prompt_tokens, err.status) == ("too long", 2048, 3000, 400)
    assert repr(ContextOverflowError("too long")) == (
        "ContextOverflowError('too long', status=None, request_id=None, limit=None, prompt_tokens=None)")


def test_a_rate_limit_and_an_auth_error_keep_their_message_and_hint():
    rl = RateLimitError("slow down", retry_after=4.0, status=429)
    assert (str(rl), rl.retry_after, rl.status) == ("slow down", 4.0, 429)
    assert rl.user_message() == "slow down — the provider is rate limiting; wait a moment and run the cell again"
    assert str(AuthError("bad key", status=401)) == "bad key"


def test_a_message_given_by_keyword_is_the_message():
    assert str(StoreBusy(message="locked by pid 42")) == "locked by pid 42"
    assert StoreBusy(message="locked").user_message().startswith("locked — another process")
