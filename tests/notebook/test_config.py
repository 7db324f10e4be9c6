"""Issue 5: configuration — the `Ocw` traitlets Configurable, its environment
defaults, `%config`, and how keys reach the provider without showing anywhere."""
from __future__ import annotations

import pytest
from IPython.core.error import UsageError
from traitlets import TraitError

import ocw
import ocw.notebook.magics
from ocw.notebook.config import Ocw, SecretStr, known_context_window, parse_auto_compact
from ocw.text.errors import ConfigError, OcwError


def fresh(monkeypatch, **env) -> Ocw:
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    return Ocw()


# -- OCW_AUTO_COMPACT ------------------------------------------------------------------------


@pytest.mark.parametrize("value, expected", [
    ("off", 0.0), ("OFF", 0.0), ("0", 0.0), ("false", 0.0), ("none", 0.0), ("", 0.0),
    ("80", 0.8), ("80%", 0.8), (" 75 ", 0.75), ("0.7", 0.7), ("0.95", 0.95), ("10", 0.1), ("99", 0.99),
])
def test_auto_compact_from_the_environment(value, expected, ocw_env, monkeypatch):
    assert parse_auto_compact(value) == pytest.approx(expected)
    assert fresh(monkeypatch, OCW_AUTO_COMPACT=value).auto_compact == pytest.approx(expected)


@pytest.mark.parametrize("value", ["5", "0.05", "100", "1.0", "150", "abc", "8O", "nan", "-0.5"])
def test_a_bad_auto_compact_value_is_a_config_error_naming_it(value, ocw_env, monkeypatch):
    with pytest.raises(ConfigError) as e:
        parse_auto_compact(value)
    assert f"OCW_AUTO_COMPACT={value!r}" in e.value.user_message()
    assert "off" in e.value.user_message()
    with pytest.raises(ConfigError):
        fresh(monkeypatch, OCW_AUTO_COMPACT=value).auto_compact


def test_auto_compact_default_is_80_percent(ocw_env):
    assert Ocw().auto_compact == 0.8


def test_a_bad_environment_value_is_a_one_line_error_in_the_notebook(monkeypatch, ocw_env, ip, capsys):
    monkeypatch.setenv("OCW_AUTO_COMPACT", "abc")
    res = ip.run_cell("%%chat\nhello")
    err = capsys.readouterr().err
    assert isinstance(res.error_in_exec, UsageError)
    assert err.strip().splitlines() == [err.strip()] and "OCW_AUTO_COMPACT='abc'" in err
    # %config repairs it without a restart.
    ip.run_cell("%config Ocw.auto_compact = 0.8")
    res = ip.run_cell("%%chat\nhello")
    assert res.error_in_exec is None


# -- the other variables ---------------------------------------------------------------------


@pytest.mark.parametrize("value, expected", [("openai", "openai"), (" OpenAI ", "openai"), ("anthropic", "anthropic"),
                                             ("offline", "offline"), ("", "offline")])
def test_provider_from_the_environment(value, expected, ocw_env, monkeypatch):
    assert fresh(monkeypatch, OCW_PROVIDER=value).provider == expected


def test_an_unknown_provider_is_not_silently_offline(ocw_env, monkeypatch):
    with pytest.raises(ConfigError) as e:
        fresh(monkeypatch, OCW_PROVIDER="opneai").provider
    assert "OCW_PROVIDER='opneai'" in e.value.user_message() and "openai" in e.value.hint


@pytest.mark.parametrize("value, expected", [("", 0), ("128000", 128_000), ("128_000", 128_000), ("2,000", 2000)])
def test_context_window_from_the_environment(value, expected, ocw_env, monkeypatch):
    assert fresh(monkeypatch, OCW_CONTEXT_WINDOW=value).context_window == expected


def test_a_bad_context_window_is_a_config_error(ocw_env, monkeypatch):
    with pytest.raises(ConfigError, match="OCW_CONTEXT_WINDOW='32k'"):
        fresh(monkeypatch, OCW_CONTEXT_WINDOW="32k").context_window


def test_strings_and_flags_from_the_environment(ocw_env, monkeypatch):
    c = Ocw()
    assert (c.provider, c.model, c.base_url, c.api_key, c.lang, c.debug) == ("offline", None, None, None, "en", False)
    assert c.db == str(ocw_env)
    c = fresh(monkeypatch, OCW_MODEL="llama3.1", OCW_BASE_URL="http://localhost:11434/v1", OCW_LANG="zh_CN",
              OCW_DEBUG="1")
    assert (c.model, c.base_url, c.lang, c.debug) == ("llama3.1", "http://localhost:11434/v1", "zh", True)
    for off in ("0", "false", "no", "off", ""):
        assert fresh(monkeypatch, OCW_DEBUG=off).debug is False, off
    for lang, expected in (("en_US.UTF-8", "en"), ("zh-Hans", "zh"), ("C", "en"), ("", "en")):
        assert fresh(monkeypatch, OCW_LANG=lang).lang == expected, lang
    with pytest.raises(ConfigError, match="OCW_LANG='fr'"):  # not silently English
        fresh(monkeypatch, OCW_LANG="fr").lang


def test_traits_validate(ocw_env):
    c = Ocw()
    c.auto_compact = 0.5
    c.auto_compact = 0
    for bad in (5, 1.0, 0.05, -0.1):
        with pytest.raises(TraitError, match="between 0.1 and 0.99"):
            c.auto_compact = bad
    assert c.auto_compact == 0
    with pytest.raises(TraitError):
        c.provider = "gemini"
    with pytest.raises(TraitError):
        c.context_window = -1
    for name in ("auto_compact", "timeout", "lock_timeout"):  # traitlets would store True as 1.0
        before = getattr(c, name)
        with pytest.raises(TraitError):
            setattr(c, name, True)
        assert getattr(c, name) == before


@pytest.mark.parametrize("name, low, high", [("max_tool_steps", 1, 1000), ("max_retries", 0, 10)])
def test_a_bounded_count_takes_both_ends_and_refuses_one_past_each(name, low, high, ocw_env):
    """`%config Ocw.max_tool_steps` is 1 to 1000, `Ocw.max_retries` 0 to 10 (their help says so):
    both ends are taken, one past either is refused by name and the old value stays."""
    c = Ocw()
    before = getattr(c, name)
    for ok in (low, high):
        setattr(c, name, ok)
        assert getattr(c, name) == ok
    setattr(c, name, before)
    for bad in (low - 1, high + 1):
        with pytest.raises(TraitError, match=f"Ocw.{name} takes a whole number from {low} to {high}, not {bad}"):
            setattr(c, name, bad)
        assert getattr(c, name) == before


@pytest.mark.parametrize("name", ["model", "summary_model"])
def test_a_model_name_with_a_space_is_refused_and_none_means_the_default(name, ocw_env):
    """`%config Ocw.model = 'gpt-4o mini'` is a typo refused by name (the old value stays);
    `= None` goes back to the default (the provider's model, or the chat model's)."""
    c = Ocw()
    setattr(c, name, "gpt-4o-mini")
    with pytest.raises(TraitError, match=f"Ocw.{name} takes a model name without spaces"):
        setattr(c, name, "gpt-4o mini")
    assert getattr(c, name) == "gpt-4o-mini"
    setattr(c, name, None)
    assert getattr(c, name) is None


@pytest.mark.parametrize("bad", ["sk-abc def", "sk-abc\n", "sk-ключ", ""])
def test_a_key_no_server_would_take_is_refused_without_showing_it(bad, ocw_env):
    """A pasted key with a space, a line break or a non-ASCII letter (or nothing) is refused
    at `%config Ocw.api_key = …`, the message never shows it, and the key set before stays."""
    c = Ocw(api_key="sk-good-0123456789")
    with pytest.raises(TraitError, match="Ocw.api_key") as e:
        c.api_key = bad
    assert (bad.strip() or "sk-") not in str(e.value)
    assert c.api_key == "sk-good-0123456789"


def test_an_options_help_without_an_instance_is_the_class_default(ocw_env):
    """traitlets asks a class for one option's help without an instance (an Application's
    alias help: `class_get_trait_help(trait, helptext=…)`): the class default, not an error."""
    trait = Ocw.class_traits()["max_retries"]
    assert Ocw.class_get_trait_help(trait).splitlines()[-1].strip() == "Default: 2"
    assert "retry the server" in Ocw.class_get_trait_help(trait, helptext="retry the server")
    assert "Current: 7" in Ocw.class_get_trait_help(trait, Ocw(max_retries=7))


# -- keys ---------------------------------------------------------------------------------------


def test_the_key_is_a_real_string_with_a_hidden_repr(ocw_env):
    c = Ocw(api_key="sk-test-SECRET-abc123456")
    assert isinstance(c.api_key, SecretStr) and c.api_key == "sk-test-SECRET-abc123456"
    assert f"Bearer {c.api_key}" == "Bearer sk-test-SECRET-abc123456"
    assert "SECRET" not in repr(c.api_key) and "SECRET" not in repr(c)
    assert "SECRET" not in Ocw.class_get_help(c)
    assert "api_key=<set>" in repr(c)


def test_the_environment_key_reaches_the_provider(openai_env, dummy_key, ocw_env):
    """Regression: the `api_key` trait defaulted to '' (not None), which masked
    OPENAI_API_KEY — no request through %%chat ever carried the key."""
    from ocw.notebook.runtime import Runtime

    rt = Runtime(config=Ocw())
    try:
        s = rt.session_for()
        p = rt.provider_for(s)
        assert p._key.get() == dummy_key
    finally:
        rt.close()


def test_a_key_set_after_an_auth_error_is_used_by_the_next_cell(openai_env, monkeypatch, ip, capsys):
    srv = openai_env
    monkeypatch.delenv("OPENAI_API_KEY")
    srv.script(status=401)
    res = ip.run_cell("%%chat\nhello")
    assert isinstance(res.error_in_exec, UsageError) and not srv.requests[-1].auth
    monkeypatch.setenv("OPENAI_API_KEY", "sk-now-set-0000000000")  # what %env OPENAI_API_KEY=... does
    res = ip.run_cell("%%chat\nhello")
    assert res.error_in_exec is None and srv.requests[-1].auth


# -- the live configuration ------------------------------------------------------------------------


def test_ocw_config_is_the_live_configurable_even_after_importing_the_module(ip, capsys):
    import ocw.notebook.config  # noqa: F401  (rebound ocw.notebook.config to the module before the fix)

    cfg = ocw.config()
    assert isinstance(cfg, Ocw) and cfg in ip.configurables
    ip.run_cell("%config Ocw.lang = 'zh'")
    assert cfg.lang == "zh"
    ocw.config().lang = "en"
    assert ip.run_cell("%config Ocw.lang").result == "en"


def test_ocw_config_without_the_extension_says_what_to_do(ocw_env):
    ocw.notebook.magics._state.clear()
    with pytest.raises(OcwError) as e:
        ocw.config()
    assert "%load_ext ocw" in e.value.user_message()


# -- issue 24: OCW_BASE_URL is read per cell ---------------------------------------------------
def test_base_url_follows_the_environment_until_something_configures_it(ocw_env, monkeypatch):
    monkeypatch.setenv("OCW_BASE_URL", "http://127.0.0.1:8001/v1")
    c = Ocw()
    c.check_environment()
    assert c.base_url == "http://127.0.0.1:8001/v1"
    monkeypatch.setenv("OCW_BASE_URL", "http://127.0.0.1:8002/v1")
    assert c.base_url == "http://127.0.0.1:8001/v1"  # within a command it stays put
    c.check_environment()  # the next command reads it again
    assert c.base_url == "http://127.0.0.1:8002/v1"
    monkeypatch.delenv("OCW_BASE_URL")
    c.check_environment()
    assert c.base_url is None
    # %config wins from then on, whatever the environment says.
    c.base_url = "http://127.0.0.1:9000/v1"
    monkeypatch.setenv("OCW_BASE_URL", "http://127.0.0.1:8003/v1")
    c.check_environment()
    assert c.base_url == "http://127.0.0.1:9000/v1"
    # A value given at construction (a config file) is configured too.
    d = Ocw(base_url="http://127.0.0.1:9100/v1")
    d.check_environment()
    assert d.base_url == "http://127.0.0.1:9100/v1"
    # A bad value set later is refused by name at the next command, not ignored.
    monkeypatch.setenv("OCW_BASE_URL", "not a url")
    e = Ocw()
    with pytest.raises(ConfigError, match="OCW_BASE_URL"):
        e.check_environment()


def test_peeking_keeps_a_set_value_and_fixes_no_default(ocw_env, tmp_path, monkeypatch):
    """The warm-up's look (`peek`) before the first command: a value `%config` set stays set
    after it; a default from the environment is not fixed by it (OCW_DB changed after the
    look still counts at the first command)."""
    mine = str(tmp_path / "mine.duckdb")
    c = Ocw()
    c.db = mine
    assert c.peek("db") == mine
    assert c.db == mine  # not dropped back to OCW_DB's file
    d = Ocw()
    assert d.peek("db") == str(ocw_env)
    later = str(tmp_path / "later.duckdb")
    monkeypatch.setenv("OCW_DB", later)
    assert d.db == later


def test_env_magic_changes_the_server_of_the_next_cell(ip, openai_env, refserver, monkeypatch):
    assert ip.run_cell("%%chat\nfirst").error_in_exec is None
    first = len(refserver.requests)
    assert first >= 1
    ip.run_line_magic("env", "OCW_BASE_URL=http://127.0.0.1:9/v1")  # nothing listens on port 9
    ip.run_cell("%%chat\nsecond")
    assert len(refserver.requests) == first  # the old server got nothing: the cell used the new URL
    ip.run_line_magic("env", f"OCW_BASE_URL={refserver.openai_url}")
    assert ip.run_cell("%%chat\nthird").error_in_exec is None
    assert len(refserver.requests) > first


def test_warm_up_from_the_environment(ocw_env, monkeypatch):
    assert Ocw().warm_up is True  # on unless turned off
    for on in ("1", "true", "yes", "on", ""):
        assert fresh(monkeypatch, OCW_WARM_UP=on).warm_up is True, on
    for off in ("0", "false", "no", "off"):
        assert fresh(monkeypatch, OCW_WARM_UP=off).warm_up is False, off
    with pytest.raises(ConfigError, match="OCW_WARM_UP='maybe'"):
        fresh(monkeypatch, OCW_WARM_UP="maybe").warm_up


@pytest.mark.parametrize("model, window", [
    ("gpt-4-turbo", 128_000), ("gpt-4-turbo-2024-04-09", 128_000), ("openai/gpt-4-turbo", 128_000),
    ("GPT-4-Turbo-Preview", 128_000), ("gpt-4", 8_192), ("gpt-4-0613", 8_192), ("gpt-4o-mini", 128_000),
    ("gpt-4.1-mini", 1_047_576), ("claude-3-5-sonnet", 200_000), ("o3-mini", 200_000),
    ("gpt-3.5-turbo", 16_385), ("llama3", 8_192), (None, 8_192), ("o1-preview", 200_000), ("o4-mini", 200_000),
    ("gpt-4.5-preview", 128_000), ("gpt-5-mini", 400_000), ("ocw-offline", 8_192), ("anthropic/claude-opus-4", 200_000),
])
def test_each_model_gets_its_own_window_not_a_shorter_prefixs(model, window):
    """The table is read most specific first: gpt-4-turbo is not gpt-4's 8k."""
    assert known_context_window(model) == window


def test_the_ring_of_a_gpt_4_turbo_session_shows_its_128k_window(ip, capsys):
    ip.run_line_magic("config", "Ocw.model = 'gpt-4-turbo'")
    ip.run_line_magic("config", "Ocw.provider = 'offline'")
    assert ip.run_cell("%%chat\nhello").error_in_exec is None
    assert ocw.current_session().occupancy()["window"] == 128_000
