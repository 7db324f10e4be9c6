"""ocw.text.secrets: keys long enough to be secrets are masked whole, short dummy keys
never mask anything, and no key reaches a log line of ocw, httpx or httpcore."""
from __future__ import annotations

import logging

import pytest
from refserver import user

import ocw.text.secrets as secrets
from ocw.text.errors import ContextOverflowError
from ocw.providers import AnthropicProvider, OpenAIProvider
from ocw.providers.http import Secret as ReexportedSecret
from ocw.text.secrets import LOG_FILTER, Secret, install_log_filter, scrub_values

REAL_KEY = "sk-proj-Ab3dE6gH9jK2mN5pQ8sT1vW4yZ7"
SERVER_WORDS = "request (2076 tokens) exceeds the available context size (2048 tokens), try increasing it"


def test_the_provider_module_still_exports_secret():
    assert ReexportedSecret is Secret


@pytest.mark.parametrize("key", ["x", "e", "EMPTY", "ollama", "none", "1234567"])
def test_keys_under_8_characters_mask_nothing(key):
    assert Secret(key).scrub(SERVER_WORDS + " " + key) == SERVER_WORDS + " " + key
    assert Secret(key).get() == key and repr(Secret(key)) == "<set>"


def test_8_characters_is_a_secret_and_is_masked_wherever_it_occurs():
    s = Secret("abcd1234")
    assert s.scrub("key=abcd1234&x=1") == "key=<redacted>&x=1"
    assert s.scrub("q%3Dabcd1234%26") == "q%3D<redacted>%26"  # glued to other text: still the key
    assert s.scrub("abcd123 abcd12345") == "abcd123 <redacted>5"  # never part of it: only the whole value


def test_a_real_key_is_masked_and_the_longer_of_two_keys_first():
    assert Secret(REAL_KEY).scrub(f"Bearer {REAL_KEY} rejected") == "Bearer <redacted> rejected"
    assert scrub_values(f"a {REAL_KEY}", [REAL_KEY[:12], REAL_KEY]) == "a <redacted>"
    assert Secret(None).scrub("text") == "text" and Secret("").get() is None and not Secret("")


@pytest.mark.parametrize("key", ["x", "EMPTY", "ollama", REAL_KEY])
@pytest.mark.parametrize("cls", [OpenAIProvider, AnthropicProvider])
def test_the_servers_error_is_shown_unchanged_with_any_key(refserver, key, cls):
    refserver.like_llama_server(100)
    url = refserver.openai_url if cls is OpenAIProvider else refserver.anthropic_url
    p = cls("m", base_url=url, api_key=key)
    with pytest.raises(ContextOverflowError) as ei:
        p.stream([user("word " * 300)])
    words = "exceeds the available context size (100 tokens), try increasing it"
    assert words in str(ei.value) and words in ei.value.body and ei.value.limit == 100
    assert "<redacted>" not in str(ei.value)
    p.close()


# -- the log filter ----------------------------------------------------------------------
class Lines(logging.Handler):
    """A real handler that keeps each formatted line."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(self.format(record))


@pytest.fixture
def debug_lines():
    """httpx, httpcore and ocw at DEBUG into a real handler on the root logger."""
    handler = Lines()
    root = logging.getLogger()
    saved = {n: logging.getLogger(n).level for n in ("httpx", "httpcore", "ocw")}
    root.addHandler(handler)
    for n in saved:
        logging.getLogger(n).setLevel(logging.DEBUG)
    yield handler
    root.removeHandler(handler)
    for n, level in saved.items():
        logging.getLogger(n).setLevel(level)


def _filtered_loggers():
    return [logging.getLogger(n) for n in list(logging.Logger.manager.loggerDict)
            if secrets._in_trees(n) and isinstance(logging.getLogger(n), logging.Logger)]


@pytest.mark.parametrize("cls", [OpenAIProvider, AnthropicProvider])
def test_a_header_echoing_the_key_never_reaches_a_log_line(refserver, debug_lines, cls):
    url = refserver.openai_url if cls is OpenAIProvider else refserver.anthropic_url
    p = cls("m", base_url=url, api_key=REAL_KEY)  # building it installs the filter
    refserver.script(text="hello", echo_key_header=True)
    assert p.stream([user("hi")]).text == "hello"
    echoed = [ln for ln in debug_lines.lines if "x-echo-key" in ln]
    assert echoed, "httpcore logged the response headers"  # so the check below can see a leak
    assert all(REAL_KEY not in ln for ln in debug_lines.lines)
    assert any("<redacted>" in ln for ln in echoed)
    assert any(ln.startswith("httpx ") for ln in debug_lines.lines)
    p.close()


def test_without_the_filter_the_same_header_would_leak(refserver, debug_lines):
    """Positive control: the check above can fail."""
    p = OpenAIProvider("m", base_url=refserver.openai_url, api_key=REAL_KEY)
    loggers = _filtered_loggers()
    for lg in loggers:
        lg.removeFilter(LOG_FILTER)
    try:
        refserver.script(text="hello", echo_key_header=True)
        p.stream([user("hi")])
        assert any(REAL_KEY in ln for ln in debug_lines.lines)
    finally:
        install_log_filter()
        p.close()


def test_env_keys_and_exceptions_are_scrubbed_from_ocw_records(monkeypatch, debug_lines):
    env_key = "sk-ant-api03-ENVKEY0123456789"
    monkeypatch.setenv("ANTHROPIC_API_KEY", env_key)
    monkeypatch.setenv("OPENAI_API_KEY", "x")  # a dummy: masks nothing
    install_log_filter()
    log = logging.getLogger("ocw.providers")
    log.info("sent with %s to %s", env_key, "a box")
    try:
        raise RuntimeError(f"failed for {env_key}")
    except RuntimeError:
        log.exception("boom x")
    text = "\n".join(debug_lines.lines)
    assert env_key not in text
    assert "sent with <redacted> to a box" in text and "failed for <redacted>" in text and "boom x" in text


def test_filter_is_on_every_logger_of_the_three_trees_after_a_provider_is_built():
    for lg in _filtered_loggers():
        lg.removeFilter(LOG_FILTER)
    assert not any(LOG_FILTER in lg.filters for lg in _filtered_loggers())
    OpenAIProvider("m", base_url="http://127.0.0.1:9/v1", api_key="k")
    names = {lg.name for lg in _filtered_loggers() if LOG_FILTER in lg.filters}
    assert {"ocw", "ocw.providers", "httpx", "httpcore", "httpcore.connection", "httpcore.http11",
            "httpcore.http2"} <= names
    install_log_filter()
    assert all(lg.filters.count(LOG_FILTER) == 1 for lg in _filtered_loggers() if LOG_FILTER in lg.filters)


def test_a_dropped_provider_key_is_forgotten():
    import gc

    key = "sk-temporary-0123456789"
    s = Secret(key)
    assert key in secrets.known_values()
    del s
    gc.collect()
    assert key not in secrets.known_values()


# -- the pattern and the environment pass, at their edges ---------------------------------------------
@pytest.mark.parametrize("raw, shown", [
    ("postgresql://me:Pw0rd-xyz@db.local/ocw", "postgresql://me:<redacted>@db.local/ocw"),
    ("postgresql://:Pw0rd-xyz@db.local/ocw", "postgresql://:<redacted>@db.local/ocw"),  # no user, a password
    ("postgresql://me:@db.local/ocw", "postgresql://me:<redacted>@db.local/ocw"),  # an empty one says nothing either
    ("me:Pw0rd-xyz@db.local/ocw", "me:<redacted>@db.local/ocw"),
    ("host=db password=Pw0rd-xyz", "host=db password=<redacted>"),
    ("postgresql://db.local/ocw", "postgresql://db.local/ocw"),  # nothing to mask: unchanged
    ("mail me@example.com", "mail me@example.com"),
])
def test_mask_credentials_masks_the_password_of_every_shape_and_nothing_else(raw, shown):
    assert secrets.mask_credentials(raw) == shown
    assert secrets.has_credentials(raw) is (raw != shown)


def test_mask_credentials_passes_a_non_text_value_through():
    assert secrets.mask_credentials(None) is None and secrets.mask_credentials(42) == 42


def test_scrub_masks_a_live_key_and_a_url_password_in_one_text():
    key = Secret("sk-live-0123456789")
    out = secrets.scrub("key sk-live-0123456789 at postgresql://me:Pw0rd-xyz@h/db")
    assert out == "key <redacted> at postgresql://me:<redacted>@h/db"
    assert key  # alive through the call


@pytest.mark.parametrize("name, value, masked", [
    ("MY_SERVICE_TOKEN", "abcdefgh", True),      # 8 characters under a secret-looking name
    ("MY_SERVICE_TOKEN", "abcdefg", False),      # 7: too short to be worth masking
    ("my_db_password", "abcdefgh", True),         # the name's case does not matter
    ("BUILD_NUMBER", "abcdefgh", False),          # not a secret-looking name
])
def test_redact_replaces_secret_looking_environment_values(monkeypatch, name, value, masked):
    monkeypatch.setenv(name, value)
    text = f"the tool printed {value} twice: {value}"
    want = "the tool printed [redacted] twice: [redacted]" if masked else text
    assert secrets.redact(text) == want
    assert secrets.redact("nothing here") == "nothing here"
