"""Where tests/realservers.py finds ../shared/realserver, and what it says when it cannot."""
from __future__ import annotations

import realservers


def _folder(path):
    path.mkdir(parents=True)
    (path / "tiny.gguf").write_bytes(b"GGUF")
    return path


def test_env_var_first_then_beside_the_clone_then_the_machines_folder(tmp_path, monkeypatch):
    repo = tmp_path / "clone"
    monkeypatch.setattr(realservers, "REPO", repo)
    monkeypatch.setattr(realservers, "FALLBACK_DIR", tmp_path / "machine" / "realserver")
    monkeypatch.delenv("OCW_REALSERVER_DIR", raising=False)
    path, how = realservers.realserver_dir()
    assert path is None and str(tmp_path / "shared" / "realserver") in how and "machine" in how
    machine = _folder(tmp_path / "machine" / "realserver")
    assert realservers.realserver_dir()[0] == machine
    beside = _folder(tmp_path / "shared" / "realserver")
    assert realservers.realserver_dir() == (beside, f"{beside} (<repo>/../shared/realserver)")
    env = _folder(tmp_path / "elsewhere")
    monkeypatch.setenv("OCW_REALSERVER_DIR", str(env))
    assert realservers.realserver_dir() == (env, f"{env} ($OCW_REALSERVER_DIR)")
    monkeypatch.setenv("OCW_REALSERVER_DIR", str(tmp_path / "missing"))
    assert realservers.realserver_dir()[0] == beside  # a wrong variable falls back, and the header says which


def test_folder_present_but_server_not_installed_fails_and_says_make_install(tmp_path, monkeypatch):
    import importlib.util

    import pytest

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "llama_cpp" else real(name, *a))
    with pytest.raises(pytest.fail.Exception, match=r"lacks llama_cpp .*run `make install`"):
        realservers.require_llama_cpp_python(tmp_path)
    monkeypatch.setattr(importlib.util, "find_spec", real)
    realservers.require_llama_cpp_python(tmp_path)  # installed here: nothing to say
