"""The two real OpenAI-compatible servers of ../shared/realserver, for the tests.

Session-scoped fixtures start ``llama-server`` (llama.cpp, C++) and the
``llama-cpp-python`` server on free loopback ports with the tiny 2,048-token
model, wait until ``/v1/models`` answers, yield a :class:`RunningServer`, and
stop each by the PID they started (SIGTERM, then SIGKILL after 10 s).

Where the folder is (the first that exists, and the reason is printed in
pytest's header and in every skip):
1. ``$OCW_REALSERVER_DIR``;
2. ``<repo>/../shared/realserver`` — in CI the shared folder sits beside the clone;
3. ``/work/shared/realserver`` — this machine's shared folder, for git
   worktrees (``/work/wt/<name>``) that have no ``../shared`` beside them.

Invariant: nothing here skips where the folder exists. Absent folder: skip
with the paths looked at. Folder present but the llama-cpp-python package
missing from this venv: the test FAILS and says to run ``make install`` (which
installs the wheel from that folder). A server that does not come up fails
with the tail of its log.
"""
from __future__ import annotations

import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

REPO = Path(__file__).resolve().parent.parent
FALLBACK_DIR = Path("/work/shared/realserver")
MODEL_ALIAS = "tiny"
WINDOW = 2048
START_TIMEOUT = 120.0  # seconds; 2 shared cores can make a cold start slow


def realserver_dir() -> tuple[Path | None, str]:
    """(the folder, how it was found) or (None, the places looked at)."""
    env = os.environ.get("OCW_REALSERVER_DIR")
    candidates = ([(Path(env), "$OCW_REALSERVER_DIR")] if env else []) + [
        (REPO.parent / "shared" / "realserver", "<repo>/../shared/realserver"),
        (FALLBACK_DIR, "the machine's shared folder"),
    ]
    for path, how in candidates:
        if (path / "tiny.gguf").is_file():
            return path, f"{path} ({how})"
    return None, "no real-server folder at " + ", ".join(str(p) for p, _ in candidates)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class RunningServer:
    """One started server: its URLs, its PID and its log file."""

    name: str
    url: str  # http://127.0.0.1:PORT
    proc: subprocess.Popen
    log: Path
    speaks_anthropic: bool
    window: int = WINDOW
    model: str = MODEL_ALIAS
    api_key: str = "x"  # what clients send (a gateway has a key of its own)
    started_in: float = field(default=0.0)

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def openai_url(self) -> str:
        return self.url + "/v1"

    @property
    def anthropic_url(self) -> str | None:
        """Base URL for the Anthropic Messages API (``/v1/messages``), if the server has it."""
        return self.url if self.speaks_anthropic else None

    def log_tail(self, n: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "(no log)"


def _wait_ready(server: RunningServer, headers: dict | None = None) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            pytest.fail(f"{server.name} exited with {server.proc.returncode} before answering:\n{server.log_tail()}")
        try:
            if httpx.get(server.url + "/v1/models", timeout=1.0, headers=headers).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    _stop(server)
    pytest.fail(f"{server.name} did not answer /v1/models within {START_TIMEOUT:g} s:\n{server.log_tail()}")


def _stop(server: RunningServer) -> None:
    if server.proc.poll() is not None:
        return
    os.kill(server.pid, signal.SIGTERM)
    try:
        server.proc.wait(10)
    except subprocess.TimeoutExpired:
        os.kill(server.pid, signal.SIGKILL)
        server.proc.wait(10)


def _start(name: str, argv: list[str], log: Path, speaks_anthropic: bool, port: int):
    # Loopback never goes through a proxy, whatever the environment says.
    env = dict(os.environ, NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost")
    t0 = time.monotonic()
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
    server = RunningServer(name, f"http://127.0.0.1:{port}", proc, log, speaks_anthropic)
    try:
        _wait_ready(server)
        server.started_in = time.monotonic() - t0
        yield server
    finally:
        _stop(server)


def _folder() -> Path:
    path, how = realserver_dir()
    if path is None:
        pytest.skip(f"real-server tests need ../shared/realserver beside the clone: {how}")
    return path


SERVER_MODULES = ("llama_cpp", "uvicorn", "fastapi", "sse_starlette", "starlette_context", "pydantic_settings")


def require_llama_cpp_python(folder: Path) -> None:
    """FAIL (never skip) when the folder is there but its server is not installed here."""
    missing = [m for m in SERVER_MODULES if importlib.util.find_spec(m) is None]
    if missing:
        pytest.fail(f"{folder} is present but this venv lacks {', '.join(missing)} (the llama-cpp-python "
                    f"server): run `make install`, which installs {folder}/llama_cpp_python-*.whl[server]")


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory):
    """llama.cpp's llama-server: OpenAI wire at .openai_url, Anthropic wire at .anthropic_url."""
    folder = _folder()
    port = _free_port()
    argv = [str(folder / "llama-server"), "-m", str(folder / "tiny.gguf"), "-a", MODEL_ALIAS, "-c", str(WINDOW),
            "-np", "1", "-t", "1", "--host", "127.0.0.1", "--port", str(port)]
    yield from _start("llama-server", argv, tmp_path_factory.mktemp("llama-server") / "server.log", True, port)


@pytest.fixture(scope="session")
def llama_cpp_python_server(tmp_path_factory):
    """The llama-cpp-python server (OpenAI wire only), run with this venv's Python."""
    folder = _folder()
    require_llama_cpp_python(folder)
    port = _free_port()
    argv = [sys.executable, "-m", "llama_cpp.server", "--model", str(folder / "tiny.gguf"), "--model_alias",
            MODEL_ALIAS, "--n_ctx", str(WINDOW), "--host", "127.0.0.1", "--port", str(port), "--n_threads", "1",
            "--n_threads_batch", "1"]
    yield from _start("llama-cpp-python", argv, tmp_path_factory.mktemp("llama-cpp-python") / "server.log", False, port)


def pytest_report_header(config) -> str:
    path, how = realserver_dir()
    return f"ocw real servers: {how}"
