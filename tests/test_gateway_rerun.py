"""The rerun hook of tests/litellm_proxy.py: a gateway test that failed while a LiteLLM
proxy process died under it runs once more — and nothing else does. Run in a pytest of
its own (pytester, a subprocess), with a stand-in proxy whose death each test plants."""
from __future__ import annotations

import re
from pathlib import Path

pytest_plugins = ("pytester",)

TESTS = Path(__file__).resolve().parent

CONFTEST = f"""
import sys
sys.path.insert(0, {str(TESTS)!r})
from litellm_proxy import pytest_runtest_protocol  # noqa: F401
"""

CASES = '''
from types import SimpleNamespace
import litellm_proxy

class Stand_in:
    """A SessionProxy's face: a server whose process is alive or has exited; `get`
    starts a new process when the last one has exited, as SessionProxy.get does."""
    def __init__(self):
        self.server, self.started = None, 0
        self.get()
    def get(self):
        if self.server is None or self.server.proc.returncode is not None:
            self.started += 1
            self.server = SimpleNamespace(name="LiteLLM -> stand-in", proc=SimpleNamespace(returncode=None))
    def kill(self):
        self.server.proc.returncode = -9
    def dead(self):
        return self.server.proc.returncode is not None
    def deaths(self):
        return self.started - 1 + self.dead()
    def death(self):
        return "LiteLLM -> stand-in (exit code -9); the end of its log:\\nINFO: 127.0.0.1 - POST /v1/chat/completions 200 OK"

PROXY = Stand_in()
litellm_proxy.PROXIES.append(PROXY)
RUNS = {}

def run(name, die, fail):
    RUNS[name] = RUNS.get(name, 0) + 1
    print(f"RUN {name} {RUNS[name]}")
    PROXY.get()  # each test asks for its proxy (started again if it had died)
    if die(RUNS[name]):
        PROXY.kill()
    assert not fail(RUNS[name]), "connection refused"

def test_litellm_proxy_died_then_passes():
    run("again", die=lambda k: k == 1, fail=lambda k: k == 1)

def test_litellm_proxy_alive_fails():
    run("alive", die=lambda k: False, fail=lambda k: True)

def test_litellm_proxy_died_but_passed():
    run("passed", die=lambda k: True, fail=lambda k: False)

def test_litellm_proxy_died_twice():
    run("twice", die=lambda k: True, fail=lambda k: True)

def test_litellm_first_use_of_a_proxy_that_dies():
    # The proxy is made by the test itself (a session fixture's first use): none before it.
    RUNS["late"] = RUNS.get("late", 0) + 1
    print(f"RUN late {RUNS['late']}")
    if RUNS["late"] == 1:
        late = Stand_in()
        litellm_proxy.PROXIES.append(late)
        late.kill()
        assert False, "connection refused"

def test_plain_test_when_a_proxy_died():
    run("plain", die=lambda k: True, fail=lambda k: True)
'''


def test_only_a_failure_under_a_dead_gateway_runs_once_more(pytester):
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_cases=CASES)
    result = pytester.runpytest_subprocess("-s", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=3, failed=3)
    runs = [m.split()[1:] for m in re.findall(r"RUN \w+ \d", result.stdout.str())]
    assert runs == [["again", "1"], ["again", "2"], ["alive", "1"], ["passed", "1"],
                    ["twice", "1"], ["twice", "2"], ["late", "1"], ["late", "2"], ["plain", "1"]]
    said = result.stderr.str()
    # Never silent: the first failure and the proxy's log, once for each rerun (three here).
    assert said.count("a LiteLLM proxy died during the test: LiteLLM -> stand-in (exit code -9)") == 3
    assert said.count("POST /v1/chat/completions 200 OK") == 3 and "connection refused" in said
