"""LiteLLM's proxy (the gateway many teams put in front of their models) in front of the
two real servers of tests/realservers.py, for the tests (issue 23).

The proxy lives in a virtual environment of its own (it pins many packages; it must not
touch ocw's): ``$OCW_LITELLM_VENV``, else ``<repo>/.venv-litellm``. The first test that
needs it creates that venv and installs ``litellm[proxy]==LITELLM_VERSION`` from PyPI
(about 6 minutes on this machine; ``make litellm`` does the same ahead of time). An
install that fails FAILS the test with pip's last lines — it never skips.

Each fixture starts ``litellm.proxy.proxy_cli`` on a free loopback port with one model,
``tiny``, routed to the upstream's OpenAI URL, a master key of its own (the API key
clients send) and ``LITELLM_LOCAL_MODEL_COST_MAP=True`` (offline), waits until
``/v1/models`` answers, yields a :class:`RunningServer`, and stops it by its PID.
"""
from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from realservers import REPO, RunningServer, _free_port, _wait_ready, _stop

LITELLM_VERSION = "1.108.7"
INSTALL_TIMEOUT = 1800  # seconds


def litellm_venv() -> Path:
    return Path(os.environ.get("OCW_LITELLM_VENV") or REPO / ".venv-litellm")


def litellm_python() -> Path:
    """The venv's Python with LiteLLM's proxy installed (installed here when absent)."""
    venv = litellm_venv()
    py = venv / "bin" / "python"
    probe = [str(py), "-c", "import litellm.proxy.proxy_cli"]
    if py.exists() and subprocess.run(probe, capture_output=True).returncode == 0:
        return py
    steps = ([[sys.executable, "-m", "venv", str(venv)]] if not py.exists() else []) + [
        [str(py), "-m", "pip", "install", "-q", f"litellm[proxy]=={LITELLM_VERSION}"]]
    for argv in steps:
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=INSTALL_TIMEOUT)
        except subprocess.TimeoutExpired:
            pytest.fail(f"installing LiteLLM's proxy into {venv} took over {INSTALL_TIMEOUT} s: {' '.join(argv)}")
        if done.returncode != 0:
            tail = "\n".join((done.stdout + done.stderr).splitlines()[-15:])
            pytest.fail(f"could not install LiteLLM's proxy into {venv} ({' '.join(argv)}):\n{tail}")
    return py


def start_proxy(upstream: RunningServer, tmp: Path):
    py = litellm_python()
    port = _free_port()
    key = "sk-ocw-" + secrets.token_hex(8)
    config = tmp / "litellm.yaml"
    config.write_text(
        "model_list:\n"
        f"  - model_name: {upstream.model}\n"
        "    litellm_params:\n"
        f"      model: openai/{upstream.model}\n"
        f"      api_base: {upstream.openai_url}\n"
        "      api_key: x\n")
    env = dict(os.environ, LITELLM_MASTER_KEY=key, LITELLM_LOCAL_MODEL_COST_MAP="True",
               NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost")
    log = tmp / "litellm.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([str(py), "-m", "litellm.proxy.proxy_cli", "--config", str(config),
                                 "--host", "127.0.0.1", "--port", str(port)],
                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
    server = RunningServer(f"LiteLLM → {upstream.name}", f"http://127.0.0.1:{port}", proc, log,
                           speaks_anthropic=upstream.speaks_anthropic, api_key=key)
    try:
        _wait_ready(server, headers={"Authorization": f"Bearer {key}"})
        yield server
    finally:
        _stop(server)


PROXIES: list = []  # every SessionProxy of this test session (the rerun hook below reads them)


class SessionProxy:
    """One LiteLLM proxy per upstream for the whole test session, started again when its
    process has exited. In one full run of the suite the llama-cpp-python proxy was gone
    after ~30 tests (every later request "connection refused"; alone, the same tests
    pass), and what these tests check is ocw behind a gateway, not the gateway's uptime.
    A restart is never silent: it prints the exit code and the end of the dead proxy's
    log (where a crash ocw caused would show), and `restarts` counts them."""

    def __init__(self, upstream: RunningServer, tmp: Path):
        self.upstream, self.tmp = upstream, tmp
        self.server: RunningServer | None = None
        self._run = None
        self.restarts = 0
        self._deaths, self.last_death = 0, ""
        PROXIES.append(self)

    def dead(self) -> bool:
        """Started, and its process has exited since (on its own: `close` stops it after counting)."""
        return self.server is not None and self.server.proc.poll() is not None

    def deaths(self) -> int:
        """Processes of this proxy found exited on their own, the current one included: a
        test's teardown may close the proxy (the session's last test) before anyone looks."""
        return self._deaths + self.dead()

    def log_tail(self, lines: int = 20) -> str:
        return "\n".join(self.server.log.read_text(errors="replace").splitlines()[-lines:]) if self.server else ""

    def death(self) -> str:
        """The last death: the process's name and exit code, and the end of its log."""
        if self.dead():
            return f"{self.server.name} (exit code {self.server.proc.returncode}); the end of its log:\n{self.log_tail()}"
        return self.last_death

    def get(self) -> RunningServer:
        if self.dead():
            print(f"\n{self.server.name} had exited (code {self.server.proc.returncode}); starting it again. "
                  f"The end of its log:\n{self.log_tail()}", file=sys.stderr)
            self.restarts += 1
            self.close()
        if self.server is None:
            folder = self.tmp / f"run-{self.restarts}"
            folder.mkdir(exist_ok=True)
            self._run = start_proxy(self.upstream, folder)
            self.server = next(self._run)
        return self.server

    def close(self) -> None:
        if self.dead():
            self._deaths, self.last_death = self._deaths + 1, self.death()
        if self._run is not None:
            self._run.close()  # start_proxy's finally: the process is stopped
        self._run = self.server = None


@pytest.fixture(scope="session")
def _litellm_llama_server_proxy(llama_server, tmp_path_factory):
    proxy = SessionProxy(llama_server, tmp_path_factory.mktemp("litellm-llama-server"))
    yield proxy
    proxy.close()


@pytest.fixture(scope="session")
def _litellm_llama_cpp_python_proxy(llama_cpp_python_server, tmp_path_factory):
    proxy = SessionProxy(llama_cpp_python_server, tmp_path_factory.mktemp("litellm-llama-cpp-python"))
    yield proxy
    proxy.close()


@pytest.fixture
def litellm_llama_server(_litellm_llama_server_proxy):
    """LiteLLM in front of llama-server (OpenAI wire; its /v1/messages reaches llama-server's /v1/responses)."""
    return _litellm_llama_server_proxy.get()


@pytest.fixture
def litellm_llama_cpp_python(_litellm_llama_cpp_python_proxy):
    """LiteLLM in front of llama-cpp-python (OpenAI wire only: its /v1/messages needs /v1/responses)."""
    return _litellm_llama_cpp_python_proxy.get()


def behind_gateway(item) -> bool:
    """A test that talks to a LiteLLM proxy: by a fixture, or by a parameter naming it
    (`request.getfixturevalue` of a LiteLLM fixture)."""
    return "litellm" in item.nodeid.lower() or any("litellm" in f for f in getattr(item, "fixturenames", ()))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    """A gateway test that FAILED while a LiteLLM proxy process died under it runs once
    more, on a proxy started again (SessionProxy.get). Seen in CI: the proxy in front of
    llama-cpp-python exited after the first of a test's 24 turns, its log ending on a
    200 OK, and every later request was refused. Only that case is run again — a
    failure with every proxy alive, or a second failure, is reported as it is — and
    never silently: the first attempt's failure and the end of the dead proxy's log
    are printed."""
    if not behind_gateway(item):
        return None
    from _pytest.runner import runtestprotocol

    for attempt in (1, 2):
        # By proxy (one first started by this test had none before); one found dead before
        # and started again is not a new death.
        before = {id(p): p.deaths() for p in PROXIES}
        item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
        reports = runtestprotocol(item, nextitem=nextitem, log=False)
        died = [p for p in PROXIES if p.deaths() > before.get(id(p), 0)]
        failed = [r for r in reports if r.failed]
        if attempt == 1 and died and failed:
            for p in died:
                print(f"\n{item.nodeid}: a LiteLLM proxy died during the test: {p.death()}\n"
                      f"The test runs once more. Its failure:\n{failed[0].longreprtext[-1500:]}", file=sys.stderr)
            item._initrequest()  # the second run gets its fixtures afresh
            continue
        for r in reports:
            item.ihook.pytest_runtest_logreport(report=r)
        item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
        return True
