"""The one table of providers (ocw/providers/registry.py): the names a user types, each one's
default model, the variable its key is read from — and that those variables' values are masked
wherever they appear. `make_provider` builds from this table, so a row read wrong is a provider
built wrong (the wrong model asked, the wrong key sent)."""
from __future__ import annotations

import pytest

from ocw.providers import make_provider
from ocw.providers import registry
from ocw.text import secrets


def test_the_three_providers_in_order_with_their_default_models_keys_and_hosts():
    assert registry.NAMES == ("offline", "openai", "anthropic")
    rows = {n: (p.default_model, p.key_env, p.default_base_url) for n, p in registry.PROVIDERS.items()}
    assert rows == {
        "offline": ("ocw-offline", None, None),
        "openai": ("gpt-4o-mini", "OPENAI_API_KEY", "https://api.openai.com/v1"),
        "anthropic": ("claude-sonnet-4-5", "ANTHROPIC_API_KEY", "https://api.anthropic.com"),
    }
    assert registry.KEY_ENVS == ("OPENAI_API_KEY", "ANTHROPIC_API_KEY")


@pytest.mark.parametrize("typed, name, model", [
    ("openai", "openai", "gpt-4o-mini"), (" OpenAI ", "openai", "gpt-4o-mini"),
    ("anthropic", "anthropic", "claude-sonnet-4-5"), ("offline", "offline", "ocw-offline"),
    ("", "offline", "ocw-offline"), (None, "offline", "ocw-offline"),
])
def test_a_typed_name_finds_its_row_and_make_provider_builds_that_provider(monkeypatch, typed, name, model):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    assert registry.info(typed).name == name
    p = make_provider(typed)
    assert (p.name, p.model) == (name, model)


def test_an_unknown_name_is_one_line_naming_the_choices():
    with pytest.raises(ValueError, match="^unknown provider 'gemini'; choose one of offline, openai, anthropic$"):
        registry.info("gemini")


def test_where_the_key_comes_from_is_said_without_its_value():
    assert registry.key_env_of("openai") == "OPENAI_API_KEY"
    assert registry.key_env_of("offline") == "no key needed"
    assert registry.key_env_of("gemini") == "the provider's API key variable"
    assert registry.key_source("anthropic") == "ANTHROPIC_API_KEY"
    assert registry.key_source("anthropic", "sk-configured-123") == "%config Ocw.api_key"
    assert registry.key_source("offline") == "not needed"


def test_the_key_is_the_configured_one_else_the_variable_read_now_else_none(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env-0001")
    assert registry.resolve_key("openai") == "sk-from-env-0001"
    assert registry.resolve_key("openai", "sk-configured-0002") == "sk-configured-0002"
    monkeypatch.setenv("OPENAI_API_KEY", "")
    assert registry.resolve_key("openai") is None  # an empty variable is no key
    monkeypatch.delenv("OPENAI_API_KEY")
    assert registry.resolve_key("openai") is None
    assert registry.resolve_key("offline") is None


@pytest.mark.parametrize("env", ["OPENAI_API_KEY", "ANTHROPIC_API_KEY"])
def test_a_key_variables_value_is_masked_in_any_text_without_a_provider_built(monkeypatch, env):
    monkeypatch.setenv(env, "sk-env-only-7777")
    assert secrets.scrub("the reply quoted sk-env-only-7777") == "the reply quoted <redacted>"
